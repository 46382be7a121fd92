"""The encryption keys of encrypted deduplication pools, kept by the master.

A key never lives in the pool it protects: the master holds it in its state directory
(CAIRN_HOME/keys/SERVER.key, 64 hex digits, mode 0600) and hands it to the storage server's
agent with each request that reads or writes chunks, over the SSH channel. Whoever restores
the master must restore this file too: without it the pool's data cannot be read
(docs/dedup-pool.md). A catalog backup (app/jobs/catalog_backup.py) holds it, sealed, and
`cairn catalog recover` writes it back as create() does."""

import os

from app.errors import CairnError, ValidationError
from app.formats import private

KEY_BYTES = 32


class KeyMissing(CairnError):
    pass


def create(home, storage_server):
    """Makes and stores a new random key for a storage server; refuses to replace one."""
    os.close(private.makedirs(home.keys))
    path = home.key_path(storage_server)
    key = os.urandom(KEY_BYTES)
    try:
        fd = private.create(path, os.O_WRONLY | os.O_EXCL)
    except FileExistsError:
        raise ValidationError(f"an encryption key for storage server {storage_server!r} "
                              f"exists already ({path})",
                              hint="move the old key away only if no pool needs it") from None
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    return key


def load(home, storage_server):
    path = home.key_path(storage_server)
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        raise KeyMissing(f"the encryption key of dedup storage server {storage_server!r} is "
                         f"missing ({path})",
                         hint="restore the key file from your key backup; without it the "
                              "pool's data cannot be read") from None
    except OSError as e:
        raise KeyMissing(f"the encryption key {path} cannot be read: {e.strerror}") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise KeyMissing(f"the encryption key file {path} is damaged (expected 64 hex digits)",
                         hint="restore the key file from your key backup")
    return key


def read_file(path):
    """The key in a key file (64 hex digits, as the master keeps them), given to an import of
    a pool whose key the master does not have."""
    try:
        with open(path) as f:
            text = f.read(4096).strip()
    except FileNotFoundError:
        raise ValidationError(f"the key file {path} does not exist",
                              hint="give the file that holds the pool's key") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValidationError(f"the key file {path} cannot be read: "
                              f"{getattr(e, 'strerror', None) or e}") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise ValidationError(f"the key file {path} does not hold a pool key",
                              hint="a pool key file holds 64 hex digits, as "
                                   "CAIRN_HOME/keys/SERVER.key did")
    return key


def adopt(home, storage_server, key):
    """Keeps `key` as the storage server's key, once it opened the pool: written where the
    master keeps it, a different key there set aside first (SERVER.key.replaced, .2, ...).
    Returns what was done, in words, or None when the master had that key already."""
    path = home.key_path(storage_server)
    try:
        old = load(home, storage_server)
    except KeyMissing:
        old = None
    if old == key:
        return None
    os.close(private.makedirs(home.keys))
    tmp = path + ".new"
    fd = private.create(tmp, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    aside = None
    if os.path.lexists(path):
        aside, n = path + ".replaced", 1
        while os.path.lexists(aside):
            n += 1
            aside = f"{path}.replaced.{n}"
        os.link(path, aside)
    os.rename(tmp, path)
    if aside:
        return (f"the key given opened the pool; it is the master's key of storage server "
                f"{storage_server} now ({path}); the key it had, which does not open the "
                f"pool, is kept as {aside}")
    return (f"the key given opened the pool; the master keeps it as the key of storage "
            f"server {storage_server} ({path}): back it up")


def remove(home, storage_server):
    try:
        os.unlink(home.key_path(storage_server))
    except FileNotFoundError:
        pass
