import sys
from pathlib import Path

import pytest

# ---- SSH server fixtures (tests/sshd.py) -------------------------------------------------
# A real OpenSSH server on 127.0.0.1 for the whole session. Without sshd these tests fail
# rather than skip: a green run must mean SSH was tested.

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from memkeyring import MemoryKeyring  # noqa: E402
from sshd import ServerView, SSHDMissing, SSHServer  # noqa: E402


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """The loopback sshd: .host, .port, .user, .key_file, .host_key_fingerprint,
    .host_public_key_line, .known_hosts_line(), .accepted_logins(), .log_text()."""
    try:
        server = SSHServer(tmp_path_factory.mktemp("sshd"))
    except SSHDMissing as e:
        pytest.fail(str(e), pytrace=False)
    try:
        server.start()
    except RuntimeError as e:
        pytest.fail(f"the test sshd did not start: {e}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sshd_as_localhost(sshd):
    """The same server reached as "localhost": another host name, so another known_hosts
    entry, as a second host would have."""
    return ServerView(sshd, "localhost")


@pytest.fixture
def netbed(tmp_path):
    """Several hosts on this machine, each in its own network namespace with its own address
    and sshd (tests/netbed.py): netbed.add_host(name, rate_mbit=None) returns one. Removed
    after the test."""
    from netbed import NetBed, NetBedUnavailable
    try:
        bed = NetBed(tmp_path / "netbed")
    except NetBedUnavailable as e:
        pytest.fail(f"the multi-host test bed cannot be made: {e}", pytrace=False)
    yield bed
    bed.cleanup()

# ---- end of SSH server fixtures -----------------------------------------------------------


# ---- S3 server fixtures (tests/s3server.py) -----------------------------------------------
# A real S3 server (scripts/s3-test-server.sh) on 127.0.0.1 for the whole session. Without Go
# to build it, these tests fail rather than skip.

@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The loopback S3 server: .endpoint, .bucket, .access_key, .secret_key, .client(),
    .new_bucket(), .stop(), .kill(), .start(), .restart(), .stopped(), .throttled()."""
    from s3server import S3Server, S3ServerError
    server = S3Server(tmp_path_factory.mktemp("s3"))
    try:
        server.start()
    except S3ServerError as e:
        pytest.fail(str(e), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server):
    """A fresh, empty bucket of the session's S3 server, for one test."""
    return s3_server.new_bucket()

# ---- end of S3 server fixtures ------------------------------------------------------------


# ---- a small file system to fill ----------------------------------------------------------

@pytest.fixture
def small_tmpfs(tmp_path):
    """small_tmpfs(size) mounts a new tmpfs of `size` ("1m") under tmp_path and returns its
    path; it is unmounted after the test. Skips where mounting needs root."""
    import os
    import subprocess
    mounted = []

    def mount(size="1m"):
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        path = tmp_path / f"tmpfs-{len(mounted)}"
        path.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"cannot mount a tmpfs of {size}: {r.stderr}"
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", str(path)], capture_output=True)


@pytest.fixture
def memory_keyring():
    """The OS keyring, for one test, a MemoryKeyring."""
    import keyring
    before = keyring.get_keyring()
    kr = MemoryKeyring()
    keyring.set_keyring(kr)
    yield kr
    keyring.set_keyring(before)
