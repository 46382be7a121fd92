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
    e = escrow.make(PASS)
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
    e = escrow.make(PASS)
    private = escrow.open_private(e, PASS)
    sealed = escrow.seal(e["public"], KEY, "pool-key:dd")
    with pytest.raises(CairnError) as x:
        escrow.unseal(private, sealed, "pool-key:other")
    assert x.value.status == st.IMAGE_DAMAGED
    bad = dict(sealed, sealed=("0" if sealed["sealed"][0] != "0" else "1") + sealed["sealed"][1:])
    with pytest.raises(CairnError):
        escrow.unseal(private, bad, "pool-key:dd")
    # another escrow's private key opens nothing of this one's
    other = escrow.open_private(escrow.make(PASS), PASS)
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
