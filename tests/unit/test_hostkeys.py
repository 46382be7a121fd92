import base64
import multiprocessing
import os
import subprocess

import paramiko
import pytest

from app.transport import hostkeys


def keygen(path, key_type="ed25519"):
    args = ["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", "t", "-f", str(path)]
    subprocess.run(args, check=True, capture_output=True)
    return path


def public_key(path):
    key_type, blob = open(f"{path}.pub").read().split()[:2]
    return paramiko.PKey.from_type_string(key_type, base64.b64decode(blob))


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    return {t: keygen(d / f"id_{t}", t) for t in ("ed25519", "ecdsa", "rsa")}


@pytest.mark.parametrize("key_type", ["ed25519", "ecdsa", "rsa"])
def test_fingerprint_matches_ssh_keygen(keys, key_type):
    path = keys[key_type]
    expected = subprocess.run(["ssh-keygen", "-lf", f"{path}.pub"], check=True,
                              capture_output=True, text=True).stdout.split()[1]
    assert hostkeys.fingerprint(public_key(path)) == expected
    assert hostkeys.fingerprint(paramiko.PKey.from_path(str(path))) == expected


def test_missing_file_holds_no_keys(tmp_path):
    assert hostkeys.load(tmp_path / "nope") == []
    assert hostkeys.lookup(tmp_path / "nope", "h", 22) == []


def test_add_lookup_remove(tmp_path, keys):
    kh = tmp_path / "sub" / "known_hosts"   # its directory does not exist yet either
    ed, ec = public_key(keys["ed25519"]), public_key(keys["ecdsa"])
    assert hostkeys.add(kh, "db1", 22, ed) is True
    assert hostkeys.add(kh, "db1", 22, ed) is False          # trusted already
    assert hostkeys.add(kh, "db1", 2222, ec) is True
    assert hostkeys.add(kh, "10.0.0.7", 22, ec) is True

    lines = kh.read_text().splitlines()
    assert lines[0] == f"db1 ssh-ed25519 {ed.get_base64()}"
    assert lines[1] == f"[db1]:2222 {ec.get_name()} {ec.get_base64()}"
    assert oct(kh.stat().st_mode & 0o777) == oct(0o600)

    assert [k.asbytes() for k in hostkeys.lookup(kh, "db1", 22)] == [ed.asbytes()]
    assert [k.asbytes() for k in hostkeys.lookup(kh, "DB1", 2222)] == [ec.asbytes()]
    assert hostkeys.lookup(kh, "db1", 2223) == []
    assert hostkeys.lookup(kh, "db", 22) == []
    assert [e.lineno for e in hostkeys.find(kh, "10.0.0.7", 22)] == [3]

    assert hostkeys.remove(kh, "db1", 22) == 1
    assert hostkeys.lookup(kh, "db1", 22) == []
    assert len(hostkeys.lookup(kh, "db1", 2222)) == 1
    assert hostkeys.remove(kh, "db1", 22) == 0
    assert sorted(os.listdir(kh.parent)) == ["known_hosts", "known_hosts.lock"]


def test_openssh_can_read_what_we_write(tmp_path, keys):
    kh = tmp_path / "known_hosts"
    hostkeys.add(kh, "127.0.0.1", 2222, public_key(keys["ed25519"]))
    out = subprocess.run(["ssh-keygen", "-F", "[127.0.0.1]:2222", "-f", str(kh)],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "ssh-ed25519" in out.stdout


def test_hashed_and_shared_lines_and_comments(tmp_path, keys):
    kh = tmp_path / "known_hosts"
    ed, rsa = public_key(keys["ed25519"]), public_key(keys["rsa"])
    kh.write_text("# kept comment\n"
                  f"alpha,beta,[gamma]:2200 ssh-ed25519 {ed.get_base64()}\n"
                  f"delta ssh-rsa {rsa.get_base64()}\n"
                  "@cert-authority *.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==\n")
    # ssh-keygen -H hashes the names in place: lookups must still find them.
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert "delta" not in kh.read_text()
    assert len(hostkeys.lookup(kh, "delta", 22)) == 1
    assert len(hostkeys.lookup(kh, "gamma", 2200)) == 1
    assert hostkeys.lookup(kh, "gamma", 22) == []

    kh.write_text("# kept comment\n"
                  f"alpha,beta ssh-ed25519 {ed.get_base64()}\n"
                  f"*.corp,!evil.corp ssh-rsa {rsa.get_base64()}\n")
    assert len(hostkeys.lookup(kh, "db.corp", 22)) == 1
    assert hostkeys.lookup(kh, "evil.corp", 22) == []
    assert hostkeys.remove(kh, "beta", 22) == 1
    text = kh.read_text()
    assert text.startswith("# kept comment\n")
    assert f"alpha ssh-ed25519 {ed.get_base64()}\n" in text
    assert len(hostkeys.lookup(kh, "alpha", 22)) == 1
    assert hostkeys.lookup(kh, "beta", 22) == []


def _writer(path, prefix, key_path, count):
    key = public_key(key_path)
    for i in range(count):
        hostkeys.add(path, f"{prefix}{i}", 22, key)


def test_concurrent_writers_merge(tmp_path, keys):
    kh = tmp_path / "known_hosts"
    kh.write_text("# someone's line\n")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(kh), p, keys["ed25519"], 40))
             for p in ("a", "b")]
    for p in procs:
        p.start()
    # A third writer in this process, at the same time.
    _writer(str(kh), "c", keys["ed25519"], 40)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = kh.read_text().splitlines()
    assert lines[0] == "# someone's line"
    assert len(lines) == 1 + 3 * 40
    for prefix in "abc":
        for i in range(40):
            assert len(hostkeys.lookup(kh, f"{prefix}{i}", 22)) == 1
    assert sorted(os.listdir(tmp_path)) == ["known_hosts", "known_hosts.lock"]


def test_existing_file_mode_is_kept(tmp_path, keys):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    kh.chmod(0o644)
    hostkeys.add(kh, "h", 22, public_key(keys["ed25519"]))
    assert kh.stat().st_mode & 0o777 == 0o644
