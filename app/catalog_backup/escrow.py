"""The passphrase of catalog backups and the escrow key pair that lets a catalog backup run
without it.

The pool keys in a catalog backup are never written in clear. They are sealed to an escrow
public key (an X25519 key pair: an ephemeral key agreement, HKDF-SHA256, AES-256-GCM), and
the escrow's private key is kept only sealed with a key derived from the administrator's
passphrase (scrypt, then AES-256-GCM). The catalog holds the public key and the sealed
private key (the settings table), never the passphrase, so that a catalog backup queued now,
run later by the dispatcher (another process: `cairn master run`) or, later still, by a
schedule, seals the keys without anyone typing the passphrase again, and a stolen catalog
backup or catalog opens no pool without it. Each archive carries the sealed private key in
its manifest: a recovery needs the archive and the passphrase, nothing else.

Each archive's manifest is authenticated too (HMAC-SHA256 with a key made with the escrow):
the key is kept in clear only in the master's private catalog (never in the catalog copy an
archive carries) and, in the escrow, sealed with the passphrase. Whoever can write to a
pool's folder but does not know the passphrase cannot make an archive that a recovery
accepts, not even one built around a genuine escrow copied from another archive.

A wrong passphrase is refused where it is given: when a catalog backup is queued (once the
escrow exists, the passphrase must open it) and when a master is recovered."""

import hashlib
import hmac
import json
import os
from types import SimpleNamespace

from app import status as st
from app.errors import CairnError, ValidationError

_CRYPTO = None


def _c():
    """cryptography's parts this module uses, imported at the first use of a key: every
    command opens the master, and importing them cost each one 25 ms."""
    global _CRYPTO
    if _CRYPTO is None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric.x25519 import (X25519PrivateKey,
                                                                      X25519PublicKey)
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
        _CRYPTO = SimpleNamespace(InvalidTag=InvalidTag, hashes=hashes,
                                  serialization=serialization,
                                  X25519PrivateKey=X25519PrivateKey,
                                  X25519PublicKey=X25519PublicKey, AESGCM=AESGCM, HKDF=HKDF)
    return _CRYPTO


FORMAT = "cairn-catalog-escrow"
VERSION = 2  # 2: the manifest key, sealed beside the private key
# scrypt's cost: 2**15 x 8 x 128 bytes = 32 MiB and some 0.1 s per try on a server, as
# RFC 7914 suggests for interactive use; kept in each escrow so that it can be raised later.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1
SCRYPT_MAXMEM = 1 << 26
SETTING = "catalog_escrow"
MAC_SETTING = "catalog_backup_mac_key"  # in clear: never copied into an archive's catalog
ESCROWED_SETTING = "catalog_backup_escrowed_keys"  # storage servers whose key an archive holds
_ESCROW_AAD = b"cairn catalog escrow private key v1"
_MAC_AAD = b"cairn catalog backup manifest key v1"
_SEAL_INFO = b"cairn catalog backup seal v1"
MIN_PASSPHRASE = 8


class WrongPassphrase(CairnError):
    status = st.AUTH_FAILED


def read_passphrase(path):
    """The passphrase in a file (its first line; the newline is not part of it)."""
    try:
        with open(path, "rb") as f:
            text = f.read().split(b"\n", 1)[0].rstrip(b"\r")
    except OSError as e:
        raise ValidationError(f"the passphrase file {path} cannot be read: {e.strerror}",
                              hint="--passphrase-file names a file whose first line is the "
                                   "passphrase") from None
    if len(text) < MIN_PASSPHRASE:
        raise ValidationError(f"the passphrase in {path} is shorter than {MIN_PASSPHRASE} "
                              "characters", hint="choose a longer passphrase and keep it "
                                                 "apart from the master (it opens the pool "
                                                 "keys of every catalog backup)")
    return text


def _derive(passphrase, kdf):
    return hashlib.scrypt(passphrase, salt=bytes.fromhex(kdf["salt"]), n=kdf["n"], r=kdf["r"],
                          p=kdf["p"], maxmem=SCRYPT_MAXMEM, dklen=32)


def _raw_public(private):
    """The raw 32 bytes of a private key's public half."""
    ser = _c().serialization
    return private.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)


def make(passphrase):
    """A new escrow: a key pair whose private half is sealed with the passphrase, and the
    manifest key, sealed likewise. Returns (escrow, manifest key)."""
    mac_key = os.urandom(32)
    return _sealed(_c().X25519PrivateKey.generate(), mac_key, passphrase), mac_key


def _sealed(private, mac_key, passphrase):
    """The escrow of a private key and a manifest key, sealed with the passphrase."""
    ser = _c().serialization
    raw = private.private_bytes(ser.Encoding.Raw, ser.PrivateFormat.Raw, ser.NoEncryption())
    kdf = {"name": "scrypt", "salt": os.urandom(16).hex(), "n": SCRYPT_N, "r": SCRYPT_R,
           "p": SCRYPT_P}
    key = _derive(passphrase, kdf)
    nonce, mac_nonce = os.urandom(12), os.urandom(12)
    return {"format": FORMAT, "version": VERSION, "public": _raw_public(private).hex(),
            "kdf": kdf, "nonce": nonce.hex(),
            "sealed_private": _c().AESGCM(key).encrypt(nonce, raw, _ESCROW_AAD).hex(),
            "mac_nonce": mac_nonce.hex(),
            "sealed_mac": _c().AESGCM(key).encrypt(mac_nonce, mac_key, _MAC_AAD).hex()}


def check(escrow):
    """Refuses an escrow this Cairn cannot read (a damaged or newer one, or one of the first
    version, which had no manifest key)."""
    try:
        ok = escrow["format"] == FORMAT and escrow["kdf"]["name"] == "scrypt" \
            and len(bytes.fromhex(escrow["public"])) == 32
        version = escrow["version"]
    except (KeyError, TypeError, ValueError):
        ok = version = False
    if ok and version == 1:
        raise CairnError("the catalog backup key is of the first version, which does not "
                         "authenticate its archives",
                         hint="queue a catalog backup with the passphrase (cairn catalog "
                              "backup --storage-unit STU --passphrase-file F): that renews it",
                         status_code=st.INVALID_REQUEST)
    if not ok or version != VERSION or not isinstance(escrow.get("sealed_mac"), str):
        raise CairnError("the catalog backup escrow is damaged or of a newer Cairn",
                         status_code=st.IMAGE_DAMAGED)
    return escrow


def _open(escrow, passphrase):
    """(private key, manifest key) of an escrow, unsealed with the passphrase."""
    key = _derive(passphrase, escrow["kdf"])
    try:
        raw = _c().AESGCM(key).decrypt(bytes.fromhex(escrow["nonce"]),
                                       bytes.fromhex(escrow["sealed_private"]), _ESCROW_AAD)
    except (_c().InvalidTag, ValueError):
        raise WrongPassphrase(
            "the passphrase does not open the catalog backup key",
            hint="give the passphrase the first catalog backup was made with; it is stored "
                 "nowhere, so it cannot be looked up") from None
    try:
        mac_key = _c().AESGCM(key).decrypt(bytes.fromhex(escrow["mac_nonce"]),
                                           bytes.fromhex(escrow["sealed_mac"]), _MAC_AAD)
    except (_c().InvalidTag, KeyError, ValueError):
        raise CairnError("the catalog backup escrow is damaged: its manifest key does not "
                         "open", status_code=st.IMAGE_DAMAGED) from None
    private = _c().X25519PrivateKey.from_private_bytes(raw)
    if _raw_public(private).hex() != escrow["public"] or len(mac_key) != 32:
        raise CairnError("the catalog backup escrow is damaged: its keys do not match",
                         status_code=st.IMAGE_DAMAGED)
    return private, mac_key


def open_private(escrow, passphrase):
    """The escrow's private key, unsealed with the passphrase; WrongPassphrase if it does not
    open it."""
    return _open(check(escrow), passphrase)[0]


def open_keys(escrow, passphrase):
    """(private key, manifest key), unsealed with the passphrase."""
    return _open(check(escrow), passphrase)


def manifest_mac(mac_key, body):
    """The authentication code of a manifest's exact bytes."""
    return hmac.new(mac_key, b"cairn catalog backup manifest\0" + body,
                    hashlib.sha256).hexdigest()


def mac_matches(mac_key, body, mac):
    return isinstance(mac, str) and hmac.compare_digest(manifest_mac(mac_key, body), mac)


def _seal_key(shared, ephemeral_public, public):
    return _c().HKDF(algorithm=_c().hashes.SHA256(), length=32, salt=None,
                info=_SEAL_INFO + ephemeral_public + public).derive(shared)


def seal(public_hex, plaintext, label):
    """`plaintext` sealed to the escrow's public key; `label` (what it is, e.g. the storage
    server a key belongs to) is bound to it, so that a sealed key cannot be passed off as
    another's."""
    public = bytes.fromhex(public_hex)
    ephemeral = _c().X25519PrivateKey.generate()
    eph_pub = _raw_public(ephemeral)
    key = _seal_key(ephemeral.exchange(_c().X25519PublicKey.from_public_bytes(public)), eph_pub,
                    public)
    nonce = os.urandom(12)
    return {"ephemeral": eph_pub.hex(), "nonce": nonce.hex(),
            "sealed": _c().AESGCM(key).encrypt(nonce, plaintext, label.encode()).hex()}


def unseal(private, sealed, label):
    """What seal() sealed, with the escrow's private key; a damaged seal is refused."""
    try:
        eph_pub = bytes.fromhex(sealed["ephemeral"])
        key = _seal_key(private.exchange(_c().X25519PublicKey.from_public_bytes(eph_pub)), eph_pub,
                        _raw_public(private))
        return _c().AESGCM(key).decrypt(bytes.fromhex(sealed["nonce"]),
                                        bytes.fromhex(sealed["sealed"]), label.encode())
    except (_c().InvalidTag, KeyError, TypeError, ValueError):
        raise CairnError(f"the sealed key of {label!r} in the catalog backup is damaged",
                         status_code=st.IMAGE_DAMAGED) from None


# ---- the escrow in the catalog -------------------------------------------------------------

def load(db):
    """The catalog's escrow, or None before the first catalog backup."""
    row = db.one("SELECT value FROM settings WHERE key=?", (SETTING,))
    return check(json.loads(row[0])) if row else None


def mac_key(db):
    """The manifest key in the catalog, or None (an escrow of the first version)."""
    row = db.one("SELECT value FROM settings WHERE key=?", (MAC_SETTING,))
    return bytes.fromhex(row[0]) if row else None


def _stored(db):
    row = db.one("SELECT value FROM settings WHERE key=?", (SETTING,))
    return json.loads(row[0]) if row else None


def _first_version_opens(escrow, passphrase):
    """Whether the passphrase opens an escrow of the first version (no manifest key)."""
    try:
        _c().AESGCM(_derive(passphrase, escrow["kdf"])).decrypt(
            bytes.fromhex(escrow["nonce"]), bytes.fromhex(escrow["sealed_private"]),
            _ESCROW_AAD)
        return True
    except (_c().InvalidTag, KeyError, TypeError, ValueError):
        return False


def store(db, escrow, key, replace=False):
    """Keeps an escrow and its manifest key in the catalog; without `replace`, the first one
    stored wins (two first backups queued at once)."""
    with db.tx() as c:
        if replace:
            c.execute("DELETE FROM settings WHERE key IN (?,?)", (SETTING, MAC_SETTING))
        c.execute("INSERT INTO settings(key, value) VALUES (?,?) ON CONFLICT(key) DO NOTHING",
                  (SETTING, json.dumps(escrow)))
        if json.loads(c.execute("SELECT value FROM settings WHERE key=?",
                                (SETTING,)).fetchone()[0]) == escrow:
            c.execute("INSERT INTO settings(key, value) VALUES (?,?) "
                      "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                      (MAC_SETTING, key.hex()))


def change_passphrase(db, old, new):
    """Seals the catalog's escrow with a new passphrase (the same keys: archives written
    before still open with the old one, as they carry the escrow of their day). Returns the
    new escrow."""
    escrow = load(db)
    if escrow is None:
        raise ValidationError("there is no catalog backup passphrase yet",
                              hint="the first `cairn catalog backup` (or catalog schedule) "
                                   "sets it")
    if old == new:
        raise ValidationError("the new passphrase is the old one")
    private, mac_key = open_keys(escrow, old)
    renewed = _sealed(private, mac_key, new)
    with db.tx() as c:
        c.execute("UPDATE settings SET value=? WHERE key=?", (json.dumps(renewed), SETTING))
    return renewed


def ensure(db, passphrase):
    """The catalog's escrow: made with the passphrase on first use (kept in the settings
    table); afterwards the passphrase must open it (WrongPassphrase). An escrow of the first
    version is replaced by a new one with the same passphrase (its archives are not read any
    more: their manifests are not authenticated). A manifest key missing from the catalog is
    put back from the escrow."""
    stored = _stored(db)
    if isinstance(stored, dict) and stored.get("version") == 1 \
            and stored.get("format") == FORMAT:
        if not _first_version_opens(stored, passphrase):
            raise WrongPassphrase("the passphrase does not open the catalog backup key",
                                  hint="give the passphrase the first catalog backup was made "
                                       "with; it is stored nowhere, so it cannot be looked up")
        store(db, *make(passphrase), replace=True)
    escrow = load(db)
    if escrow is None:
        store(db, *make(passphrase))
        escrow = load(db)
    key = open_keys(escrow, passphrase)[1]
    if mac_key(db) != key:
        store(db, escrow, key)
    return escrow


def escrowed(db):
    """The storage servers whose pool key a catalog backup that ended well holds."""
    row = db.one("SELECT value FROM settings WHERE key=?", (ESCROWED_SETTING,))
    try:
        return set(json.loads(row[0])) if row else set()
    except ValueError:
        return set()


def record_escrowed(db, servers):
    """Adds `servers` to those whose key a committed catalog backup holds."""
    with db.tx() as c:
        row = c.execute("SELECT value FROM settings WHERE key=?", (ESCROWED_SETTING,)).fetchone()
        try:
            known = set(json.loads(row[0])) if row else set()
        except ValueError:
            known = set()
        c.execute("INSERT INTO settings(key, value) VALUES (?,?) "
                  "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                  (ESCROWED_SETTING, json.dumps(sorted(known | set(servers)))))
