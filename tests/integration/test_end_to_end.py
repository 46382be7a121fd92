"""Adding hosts through the CLI. From nothing to a verified restore, on the embedded default
and across a real sshd, is in the conformance suite of the storage types
(tests/storage/test_storage_backup.py), for every type."""

import pytest

from clihelp import cairn, cairn_json


@pytest.mark.ssh
def test_unknown_host_key_is_refused_with_fingerprint(tmp_path, sshd):
    home = tmp_path / "home"
    p = cairn(home, "host", "add", "client1", "--address", sshd.host, "--port", sshd.port,
              "--user", sshd.user, "--key", sshd.key_file, check=False)
    assert p.returncode == 22
    assert sshd.host_key_fingerprint in p.stderr and "--trust-host-key" in p.stderr
    hosts, _ = cairn_json(home, "host", "list")
    assert hosts["hosts"] == []
