"""The SSH transport against a real OpenSSH server on the loopback interface (tests/sshd.py).

The server runs on this machine, so the files the transport puts "on the host" can be checked
directly on the local file system."""

import io
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile

import pytest

from app.errors import (AgentError, AuthFailed, HostKeyChanged, HostKeyUnknown,
                        HostUnreachable, NoPython)
from app.transport import bundle, hostkeys
from app.transport.local import LocalTransport
from app.transport.ssh import SSHTransport

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(60)]

ECHO_AGENT = b"""\
import sys
for line in sys.stdin.buffer:
    sys.stdout.buffer.write(b"echo " + line)
    sys.stdout.buffer.flush()
sys.stderr.write("stand-in agent done\\n")
"""

# Ignores both the end of its stdin and SIGTERM: only a kill ends it.
STUBBORN_AGENT = b"""\
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdout.write("%d\\n" % os.getpid())
sys.stdout.flush()
while True:
    time.sleep(1)
"""


def echo_bundle(tag=b""):
    return bundle.make_zipapp({"__main__.py": ECHO_AGENT + b"# " + tag + b"\n"})


@pytest.fixture
def known_hosts(tmp_path, sshd):
    path = tmp_path / "known_hosts"
    path.write_text(sshd.known_hosts_line())
    return path


@pytest.fixture
def agent_dir(tmp_path):
    return str(tmp_path / "remote-cache")


def transport(sshd, known_hosts, agent_dir=None, **kw):
    kw.setdefault("key_file", sshd.key_file)
    kw.setdefault("connect_timeout", 5.0)
    if agent_dir is not None:
        kw.setdefault("agent_dir", agent_dir)
    kw.setdefault("bundle", echo_bundle())
    return SSHTransport(sshd.host, port=sshd.port, user=sshd.user, known_hosts=known_hosts, **kw)


def roundtrip(agent, text=b"hello"):
    agent.stdin.write(text + b"\n")
    agent.stdin.flush()
    return agent.stdout.readline()


# -- host keys -------------------------------------------------------------------------------

def test_unknown_host_key_is_refused_and_nothing_is_written(sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    logins = sshd.accepted_logins()
    t = transport(sshd, kh)
    with pytest.raises(HostKeyUnknown) as info:
        t.connect()
    e = info.value
    assert e.fingerprint == sshd.host_key_fingerprint
    assert e.key_type == "ssh-ed25519"
    assert e.message == (f"host key of 127.0.0.1:{sshd.port} is not trusted "
                         f"(ssh-ed25519 {sshd.host_key_fingerprint})")
    assert "--trust-host-key" in e.hint and f"--port {sshd.port}" in e.hint
    assert hostkeys.fingerprint(e.pkey) == sshd.host_key_fingerprint
    assert not os.listdir(tmp_path)
    assert sshd.accepted_logins() == logins   # refused before logging in


def test_trusting_an_unknown_key_saves_it(sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    with transport(sshd, kh, trust_unknown_key=True) as t:
        t.connect()
    assert kh.read_text() == sshd.known_hosts_line()
    with transport(sshd, kh) as t:             # no trust needed any more
        t.connect()
    assert kh.read_text() == sshd.known_hosts_line()


def test_keys_are_trusted_per_host_name(sshd, sshd_as_localhost, known_hosts):
    # 127.0.0.1 is trusted; the same server named "localhost" is another host.
    with pytest.raises(HostKeyUnknown):
        transport(sshd_as_localhost, known_hosts).connect()
    with transport(sshd_as_localhost, known_hosts, trust_unknown_key=True) as t:
        t.connect()
        assert t.peer_address() == "127.0.0.1"
    assert sshd_as_localhost.known_hosts_line() in known_hosts.read_text()


def test_changed_host_key_is_refused(sshd, tmp_path):
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    other_line = " ".join(open(f"{other}.pub").read().split()[:2])
    other_fp = subprocess.run(["ssh-keygen", "-lf", f"{other}.pub"], capture_output=True,
                              text=True, check=True).stdout.split()[1]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"# header\n[127.0.0.1]:{sshd.port} {other_line}\n")
    before = kh.read_bytes()
    logins = sshd.accepted_logins()
    # Trusting unknown keys must not extend to changed ones.
    t = transport(sshd, kh, trust_unknown_key=True)
    with pytest.raises(HostKeyChanged) as info:
        t.connect()
    text = str(info.value)
    assert sshd.host_key_fingerprint in text and other_fp in text
    assert str(kh) in text and "line 2" in text
    assert info.value.lines == [2]
    assert kh.read_bytes() == before
    assert sshd.accepted_logins() == logins


# -- reaching the host and logging in ---------------------------------------------------

def test_wrong_key_is_auth_failed(sshd, known_hosts, tmp_path):
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    with pytest.raises(AuthFailed) as info:
        transport(sshd, known_hosts, key_file=str(wrong)).connect()
    text = str(info.value)
    assert f"{sshd.user}@127.0.0.1:{sshd.port}" in text
    assert f"publickey ({wrong})" in text


def test_unreadable_key_file_is_auth_failed(sshd, known_hosts, tmp_path):
    with pytest.raises(AuthFailed) as info:
        transport(sshd, known_hosts, key_file=str(tmp_path / "missing")).connect()
    assert str(tmp_path / "missing") in str(info.value)


def test_encrypted_key_asks_for_its_passphrase(sshd, known_hosts, tmp_path):
    key = tmp_path / "enc_key"
    shutil.copyfile(sshd.key_file, key)
    key.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "s3cret", "-f", str(key)],
                   check=True, capture_output=True)
    prompts = []

    def provider(prompt):
        prompts.append(prompt)
        return "s3cret"

    with transport(sshd, known_hosts, key_file=str(key), password_provider=provider) as t:
        t.connect()
    assert prompts == [f"Passphrase for key {key}: "]

    with pytest.raises(AuthFailed, match="passphrase"):
        transport(sshd, known_hosts, key_file=str(key)).connect()
    with pytest.raises(AuthFailed, match="wrong passphrase"):
        transport(sshd, known_hosts, key_file=str(key),
                  password_provider=lambda prompt: "nope").connect()


def test_closed_port_is_unreachable_quickly(sshd, known_hosts):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]           # nothing listens there once closed
    started = time.monotonic()
    t = SSHTransport("127.0.0.1", port=port, known_hosts=known_hosts, key_file=sshd.key_file,
                     connect_timeout=5.0)
    with pytest.raises(HostUnreachable) as info:
        t.connect()
    assert time.monotonic() - started < 2
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "refused" in str(info.value)


def test_unknown_name_is_unreachable(known_hosts):
    t = SSHTransport("no-such-host.invalid", known_hosts=known_hosts, connect_timeout=2.0)
    with pytest.raises(HostUnreachable, match="no-such-host.invalid:22.*cannot be resolved"):
        t.connect()


def test_port_without_ssh_is_unreachable(known_hosts):
    # A listener that never sends an SSH banner.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        t = SSHTransport("127.0.0.1", port=srv.getsockname()[1], known_hosts=known_hosts,
                         connect_timeout=1.0)
        started = time.monotonic()
        with pytest.raises(HostUnreachable, match="handshake"):
            t.connect()
        assert time.monotonic() - started < 5


def test_host_without_python_is_no_python(sshd, known_hosts, agent_dir):
    t = transport(sshd, known_hosts, agent_dir, python="cairn-no-such-python3")
    with pytest.raises(NoPython) as info:
        t.start_agent()
    assert "cairn-no-such-python3" in str(info.value)
    assert "install python3" in str(info.value)
    assert not os.path.exists(agent_dir)
    t.close()


def test_host_python_version_is_reported(sshd, known_hosts):
    with transport(sshd, known_hosts) as t:
        major, minor = (int(x) for x in t.check_python().split(".")[:2])
    assert (major, minor) >= (3, 9)


# -- the agent ---------------------------------------------------------------------------

def test_stand_in_agent_round_trips_a_line(sshd, known_hosts, agent_dir):
    with transport(sshd, known_hosts, agent_dir) as t:
        agent = t.start_agent()
        assert agent.is_alive()
        assert roundtrip(agent, b"hello") == b"echo hello\n"
        assert roundtrip(agent, b"\xff binary \x00") == b"echo \xff binary \x00\n"
        agent.close()
        assert not agent.is_alive()
        assert agent.exit_status() == 0
        assert "stand-in agent done" in agent.stderr_text()


def test_bundle_is_uploaded_once_and_again_when_it_changes(sshd, known_hosts, agent_dir):
    data, version = echo_bundle(b"one")
    remote = os.path.join(agent_dir, f"agent-{version}.pyz")
    with transport(sshd, known_hosts, agent_dir, bundle=(data, version)) as t:
        with t.start_agent() as agent:
            assert roundtrip(agent) == b"echo hello\n"
        first = os.stat(remote)
        assert open(remote, "rb").read() == data
        assert first.st_mode & 0o777 == 0o600
        assert os.stat(agent_dir).st_mode & 0o777 == 0o700
        with t.start_agent() as agent:       # same connection
            assert roundtrip(agent) == b"echo hello\n"
    with transport(sshd, known_hosts, agent_dir, bundle=(data, version)) as t:
        with t.start_agent() as agent:       # a new connection
            assert roundtrip(agent) == b"echo hello\n"
    again = os.stat(remote)
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)

    # A damaged copy (another size) is replaced.
    with open(remote, "r+b") as f:
        f.truncate(10)
    with transport(sshd, known_hosts, agent_dir, bundle=(data, version)) as t:
        with t.start_agent() as agent:
            assert roundtrip(agent) == b"echo hello\n"
    assert open(remote, "rb").read() == data

    data2, version2 = echo_bundle(b"two")
    assert version2 != version
    with transport(sshd, known_hosts, agent_dir, bundle=(data2, version2)) as t:
        with t.start_agent() as agent:
            assert roundtrip(agent) == b"echo hello\n"
    assert open(os.path.join(agent_dir, f"agent-{version2}.pyz"), "rb").read() == data2
    assert sorted(os.listdir(agent_dir)) == sorted([f"agent-{version}.pyz",
                                                    f"agent-{version2}.pyz"])


def test_an_agent_copy_left_open_to_others_is_made_private(sshd, known_hosts, agent_dir):
    """An older Cairn (or a hand) left the host's agent folder 0755 and the agent 0644:
    others could read it, and the folder lists which versions ran. The next start makes
    both private; a folder that is a link the user made is never changed through it."""
    data, version = echo_bundle(b"open")
    remote = os.path.join(agent_dir, f"agent-{version}.pyz")
    os.makedirs(agent_dir)
    with open(remote, "wb") as f:
        f.write(data)
    os.chmod(agent_dir, 0o755)
    os.chmod(remote, 0o644)
    with transport(sshd, known_hosts, agent_dir, bundle=(data, version)) as t:
        t.install_agent()
    assert os.stat(agent_dir).st_mode & 0o777 == 0o700
    assert os.stat(remote).st_mode & 0o777 == 0o600

    elsewhere = os.path.join(os.path.dirname(agent_dir), "elsewhere")
    os.makedirs(elsewhere, mode=0o755)
    os.chmod(elsewhere, 0o755)
    linked = os.path.join(os.path.dirname(agent_dir), "linked-cache")
    os.symlink(elsewhere, linked)
    with transport(sshd, known_hosts, linked, bundle=(data, version)) as t:
        t.install_agent()
    assert os.stat(elsewhere).st_mode & 0o777 == 0o755


def test_old_agent_versions_are_pruned(sshd, known_hosts, agent_dir):
    versions = []
    for i in range(5):
        data, version = echo_bundle(b"v%d" % i)
        versions.append(version)
        with transport(sshd, known_hosts, agent_dir, bundle=(data, version)) as t:
            t.install_agent()
        # Distinct modification times, which decide what is old.
        path = os.path.join(agent_dir, f"agent-{version}.pyz")
        os.utime(path, (1000 + i, 1000 + i))
    assert sorted(os.listdir(agent_dir)) == sorted(f"agent-{v}.pyz" for v in versions[-3:])


def test_an_agent_uploaded_within_the_hour_is_not_pruned(sshd, known_hosts, agent_dir):
    """Another master, of another version, may be about to start the agent it just put
    there: only agents older than an hour are pruned."""
    versions = []
    for i in range(5):
        data, version = echo_bundle(b"w%d" % i)
        versions.append(version)
        with transport(sshd, known_hosts, agent_dir, bundle=(data, version)) as t:
            t.install_agent()
    assert sorted(os.listdir(agent_dir)) == sorted(f"agent-{v}.pyz" for v in versions)


def test_one_connection_serves_every_agent(sshd, known_hosts, agent_dir):
    logins = sshd.accepted_logins()
    with transport(sshd, known_hosts, agent_dir) as t:
        a, b = t.start_agent(), t.start_agent()
        # Interleaved, so both sessions are open at the same time.
        assert roundtrip(a, b"a") == b"echo a\n"
        assert roundtrip(b, b"b") == b"echo b\n"
        assert roundtrip(a, b"a2") == b"echo a2\n"
        t.sftp().stat(agent_dir)
        assert t.local_address() == "127.0.0.1"
        assert t.peer_address() == "127.0.0.1"
        a.close()
        b.close()
    assert sshd.accepted_logins() == logins + 1


@pytest.fixture
def short_grace(monkeypatch):
    from app.transport import local, ssh
    for module in (local, ssh):
        monkeypatch.setattr(module, "EXIT_GRACE", 0.3)
    monkeypatch.setattr(ssh, "SIGNAL_GRACE", 0.5)
    monkeypatch.setattr(local, "TERM_GRACE", 0.3)


def test_close_kills_an_agent_that_does_not_leave(sshd, known_hosts, agent_dir, short_grace):
    stubborn = bundle.make_zipapp({"__main__.py": STUBBORN_AGENT})
    with transport(sshd, known_hosts, agent_dir, bundle=stubborn) as t:
        agent = t.start_agent()
        pid = int(agent.stdout.readline())
        os.kill(pid, 0)                      # it runs on this machine
        started = time.monotonic()
        agent.close()
        assert time.monotonic() - started < 10
        assert not agent.is_alive()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the agent (pid {pid}) still runs after close()")


def test_agent_that_fails_reports_its_stderr(sshd, known_hosts, agent_dir):
    broken = bundle.make_zipapp({"__main__.py": b"import no_such_module_here\n"})
    with transport(sshd, known_hosts, agent_dir, bundle=broken) as t:
        agent = t.start_agent()
        assert agent.stdout.readline() == b""
        agent.close()
        assert agent.exit_status() == 1
        assert "no_such_module_here" in agent.stderr_text()


def test_connection_is_reopened_after_it_broke(sshd, known_hosts, agent_dir):
    with transport(sshd, known_hosts, agent_dir) as t:
        t.connect().close()                  # as if the network had dropped it
        with t.start_agent() as agent:
            assert roundtrip(agent) == b"echo hello\n"


def test_real_agent_bundle_starts_on_the_host(sshd, known_hosts, agent_dir):
    """The first start unpacks the bundle beside itself into a private folder, where python
    keeps its byte code; later starts run from there without unpacking again."""
    data, version = bundle.agent_bundle()
    unpacked = os.path.join(agent_dir, f"agent-{version}.d")
    with transport(sshd, known_hosts, agent_dir, bundle=(data, version)) as t:
        agent = t.start_agent()
        time.sleep(0.3)
        assert agent.is_alive(), agent.stderr_text()
        agent.close()                        # closes its stdin: it must leave by itself
        assert agent.exit_status() == 0, agent.stderr_text()
        first = os.stat(unpacked)
        assert first.st_mode & 0o777 == 0o700
        assert os.listdir(os.path.join(unpacked, "app", "agent", "__pycache__"))
        with t.start_agent() as agent:
            assert agent.is_alive(), agent.stderr_text()
        assert os.stat(unpacked).st_ino == first.st_ino
        assert not [n for n in os.listdir(agent_dir) if n.endswith(".unpack")]


def test_an_unpacked_agent_copy_not_private_is_not_used(sshd, known_hosts, agent_dir, tmp_path):
    """A copy that is a link elsewhere or open to others is neither used nor changed: the
    agent runs from its bundle; a pruned version's copy goes when another version unpacks."""
    data, version = bundle.agent_bundle()
    os.makedirs(agent_dir, mode=0o700)
    planted = tmp_path / "planted"
    (planted / "app").mkdir(parents=True)
    (planted / "app" / "__init__.py").write_text("raise SystemExit('planted code ran')\n")
    os.symlink(planted, os.path.join(agent_dir, f"agent-{version}.d"))
    old = os.path.join(agent_dir, "agent-0000000000000000.d")
    os.makedirs(old, mode=0o700)
    os.utime(old, (1000, 1000))
    with transport(sshd, known_hosts, agent_dir, bundle=(data, version)) as t:
        with t.start_agent() as agent:
            time.sleep(0.3)
            assert agent.is_alive(), agent.stderr_text()
    assert sorted(os.listdir(planted / "app")) == ["__init__.py"]
    assert os.path.isdir(old)  # nothing was unpacked, so nothing was pruned
    os.remove(os.path.join(agent_dir, f"agent-{version}.d"))
    with transport(sshd, known_hosts, agent_dir, bundle=(data, version)) as t:
        with t.start_agent() as agent:
            time.sleep(0.3)
            assert agent.is_alive(), agent.stderr_text()
    assert os.path.isdir(os.path.join(agent_dir, f"agent-{version}.d"))
    assert not os.path.exists(old)


# -- the bundle --------------------------------------------------------------------------

def test_agent_bundle_is_reproducible_and_complete():
    data, version = bundle.agent_bundle()
    assert bundle.agent_bundle() is bundle.agent_bundle()      # built once per process
    assert len(version) == 16 and int(version, 16) >= 0
    files = bundle.agent_files()
    shuffled = dict(reversed(list(files.items())))
    assert bundle.make_zipapp(files) == bundle.make_zipapp(shuffled)

    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        infos = zf.infolist()
        main = zf.read("__main__.py").decode()
    assert names == sorted(names)
    assert {"__main__.py", "app/__init__.py", "app/status.py", "app/agent/__init__.py",
            "plugins/__init__.py", "plugins/filesystems/__init__.py"} <= set(names)
    assert "from app.agent.server import main" in main
    assert not [n for n in names if "__pycache__" in n or not n.endswith(".py")
                or "/tests/" in n or n.split("/")[-1].startswith("test_")]
    # the agent, the formats it shares with the master and the agent halves of the storage
    # types (a deduplication pool's chunk store runs in the storage server's agent), and
    # nothing else of the master: not the storage types' master halves, nor the keys of
    # encrypted pools
    assert {"app/errors.py", "app/formats/tarfmt.py", "plugins/storage/agents.py",
            "plugins/storage/dedup/store.py", "plugins/storage/dedup/ingest.py",
            "plugins/storage/advanced_disk/agent.py"} <= set(names)
    assert not [n for n in names if n.startswith("app/")
                and not n.startswith(("app/agent/", "app/formats/"))
                and n not in ("app/__init__.py", "app/status.py", "app/errors.py",
                              "app/liveness.py")]
    assert not [n for n in names if n.startswith("plugins/storage/")
                and (n.endswith(("/master.py", "/keys.py", "/registry.py", "/base.py")))]
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}


def test_agent_bundle_version_follows_the_code(tmp_path):
    root = tmp_path / "src"
    for package in bundle.AGENT_PACKAGES:
        shutil.copytree(bundle.source_root() / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in bundle.AGENT_FILES:
        shutil.copyfile(bundle.source_root() / name, root / name)
    _, v1 = bundle.make_zipapp(bundle.agent_files(root))
    (root / "app" / "agent" / "__pycache__").mkdir(exist_ok=True)
    (root / "app" / "agent" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    os.utime(root / "app" / "status.py", (0, 0))
    _, v2 = bundle.make_zipapp(bundle.agent_files(root))
    assert v2 == v1                          # neither byte code nor times count
    with open(root / "app" / "agent" / "__init__.py", "a") as f:
        f.write("# changed\n")
    _, v3 = bundle.make_zipapp(bundle.agent_files(root))
    assert v3 != v1


def test_missing_agent_sources_are_a_clear_error(tmp_path):
    with pytest.raises(AgentError, match="agent's source"):
        bundle.agent_files(tmp_path)


# -- the local transport shares the contract ----------------------------------------------

def test_local_transport_round_trips_a_line():
    code = ECHO_AGENT.decode()
    t = LocalTransport(command=[sys.executable, "-c", code])
    assert t.local_address() is None and t.peer_address() == "127.0.0.1"
    agent = t.start_agent()
    assert roundtrip(agent) == b"echo hello\n"
    agent.close()
    assert not agent.is_alive() and agent.exit_status() == 0
    assert "stand-in agent done" in agent.stderr_text()


def test_local_transport_kills_an_agent_that_does_not_leave(short_grace):
    t = LocalTransport(command=[sys.executable, "-c", STUBBORN_AGENT.decode()])
    agent = t.start_agent()
    assert int(agent.stdout.readline()) == agent.pid
    agent.close()
    assert not agent.is_alive() and agent.exit_status() == -9


def test_local_transport_starts_the_real_agent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)              # it must not depend on the working directory
    agent = LocalTransport().start_agent()
    time.sleep(0.3)
    assert agent.is_alive(), agent.stderr_text()
    agent.close()
    assert agent.exit_status() == 0, agent.stderr_text()


@pytest.fixture(autouse=True)
def _no_paramiko_noise(caplog):
    caplog.set_level("CRITICAL", logger="paramiko")
    yield
