"""The escrow of catalog backups (app/catalog_backup/escrow.py): the passphrase opens the
escrow's private key and nothing else does; a key sealed to the escrow opens only with that
private key and under the name it was sealed for; the escrow and the seals hold neither the
passphrase nor the key in clear."""

import json

import pytest

from app import status as st
from app.catalog_backup import escrow
from app.errors import CairnError

PASS = b"a long enough passphrase"
KEY = bytes(range(32)).hex().encode()


def test_the_passphrase_opens_the_escrow_and_a_wrong_one_is_refused():
    e = escrow.make(PASS)[0]
    text = json.dumps(e).encode()
    assert PASS not in text and PASS.hex().encode() not in text
    private = escrow.open_private(e, PASS)
    with pytest.raises(escrow.WrongPassphrase) as w:
        escrow.open_private(e, PASS + b"!")
    assert w.value.status == st.AUTH_FAILED and "passphrase" in w.value.message
    sealed = escrow.seal(e["public"], KEY, "pool-key:dd")
    assert KEY not in json.dumps(sealed).encode()
    assert escrow.unseal(private, sealed, "pool-key:dd") == KEY


def test_a_sealed_key_opens_under_its_own_name_only_and_not_when_altered():
    e = escrow.make(PASS)[0]
    private = escrow.open_private(e, PASS)
    sealed = escrow.seal(e["public"], KEY, "pool-key:dd")
    with pytest.raises(CairnError) as x:
        escrow.unseal(private, sealed, "pool-key:other")
    assert x.value.status == st.IMAGE_DAMAGED
    bad = dict(sealed, sealed=("0" if sealed["sealed"][0] != "0" else "1") + sealed["sealed"][1:])
    with pytest.raises(CairnError):
        escrow.unseal(private, bad, "pool-key:dd")
    # another escrow's private key opens nothing of this one's
    other = escrow.open_private(escrow.make(PASS)[0], PASS)
    with pytest.raises(CairnError):
        escrow.unseal(other, sealed, "pool-key:dd")


def test_a_short_or_missing_passphrase_file_is_refused(tmp_path):
    short = tmp_path / "short"
    short.write_bytes(b"abc\n")
    with pytest.raises(CairnError) as x:
        escrow.read_passphrase(str(short))
    assert "shorter" in x.value.message
    with pytest.raises(CairnError) as x:
        escrow.read_passphrase(str(tmp_path / "none"))
    assert "cannot be read" in x.value.message
    good = tmp_path / "good"
    good.write_bytes(PASS + b"\nsecond line\n")
    assert escrow.read_passphrase(str(good)) == PASS


def test_the_manifest_key_opens_with_the_passphrase_and_codes_only_its_bytes():
    e, key = escrow.make(PASS)
    assert key.hex() not in json.dumps(e)
    assert escrow.open_keys(e, PASS)[1] == key
    body = b'{"format": "cairn-catalog-backup"}'
    mac = escrow.manifest_mac(key, body)
    assert escrow.mac_matches(key, body, mac)
    assert not escrow.mac_matches(key, body + b" ", mac)
    assert not escrow.mac_matches(escrow.make(PASS)[1], body, mac)


def test_an_escrow_of_the_first_version_is_renewed_with_the_same_passphrase(tmp_path):
    """The first version had no manifest key: the next catalog backup queued with the
    passphrase replaces it; a wrong passphrase does not."""
    from app.master import Master
    m = Master(str(tmp_path / "home"))
    try:
        first = escrow.make(PASS)[0]
        first = {k: v for k, v in first.items() if k not in ("mac_nonce", "sealed_mac")}
        first["version"] = 1
        with m.db.tx() as c:
            c.execute("INSERT INTO settings(key, value) VALUES (?,?)",
                      (escrow.SETTING, json.dumps(first)))
        with pytest.raises(CairnError) as x:
            escrow.load(m.db)  # a job would say what to do
        assert "first version" in x.value.message and "passphrase" in x.value.hint
        with pytest.raises(escrow.WrongPassphrase):
            escrow.ensure(m.db, PASS + b"?")
        renewed = escrow.ensure(m.db, PASS)
        assert renewed["version"] == escrow.VERSION and renewed["public"] != first["public"]
        assert escrow.mac_key(m.db) == escrow.open_keys(renewed, PASS)[1]
        assert escrow.ensure(m.db, PASS) == renewed  # from now on, kept
    finally:
        m.close()
