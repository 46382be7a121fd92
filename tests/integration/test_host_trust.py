"""Trusting a registered host's SSH key later, and after the host was reinstalled."""

import paramiko

from app.transport import hostkeys
from clihelp import cairn, cairn_json


def test_trust_later_and_after_a_key_change(tmp_path, sshd):
    home = tmp_path / "home"
    cairn(home, "host", "add", "client1", "--address", sshd.host, "--port", sshd.port,
          "--user", sshd.user, "--key", sshd.key_file, "--no-check")
    p = cairn(home, "host", "probe", "client1", check=False)
    assert p.returncode == 22
    assert f"cairn host trust client1 --fingerprint {sshd.host_key_fingerprint}" in p.stderr

    wrong = "SHA256:" + "A" * 43
    p = cairn(home, "host", "trust", "client1", "--fingerprint", wrong, check=False)
    assert p.returncode == 10 and "nothing was trusted" in p.stderr
    assert hostkeys.find(str(home / "known_hosts"), sshd.host, sshd.port) == []

    doc, _ = cairn_json(home, "host", "trust", "client1", "--fingerprint",
                        sshd.host_key_fingerprint)
    assert doc["trusted"] and doc["fingerprint"] == sshd.host_key_fingerprint
    probe, _ = cairn_json(home, "host", "probe", "client1")
    assert probe["python"]

    # the host "was reinstalled": another key is on record than the one it presents
    kh = str(home / "known_hosts")
    hostkeys.remove(kh, sshd.host, sshd.port)
    hostkeys.add(kh, sshd.host, sshd.port, paramiko.ECDSAKey.generate())
    p = cairn(home, "host", "probe", "client1", check=False)
    assert p.returncode == 23 and "CHANGED" in p.stderr and "--replace" in p.stderr
    p = cairn(home, "host", "trust", "client1", check=False)
    assert p.returncode == 23, "a changed key must not be trusted without --replace"
    cairn(home, "host", "trust", "client1", "--replace", "--fingerprint",
          sshd.host_key_fingerprint)
    probe, _ = cairn_json(home, "host", "probe", "client1")
    assert probe["python"]
