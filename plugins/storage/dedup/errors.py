"""The chunk store's errors (plugins/storage/dedup/store.py): each names what is wrong and,
where there is one, the fix."""

import errno

from app import status
from app.errors import CairnError, NotFound, ValidationError


class ChunkDamaged(CairnError):
    """A stored chunk does not read back as written (checksum, hash or structure)."""
    status = status.CHECKSUM_MISMATCH

    def __init__(self, message, *, container, offset, fingerprint=None, reason=None, hint=None):
        super().__init__(message, hint=hint)
        self.container = container
        self.offset = offset
        self.fingerprint = fingerprint
        self.reason = reason


class ChunkNotFound(NotFound, KeyError):
    """No committed chunk has this fingerprint. A KeyError too, like a missing dict key."""

    def __str__(self):
        return CairnError.__str__(self)


class ChunkSetAside(ChunkNotFound):
    """The chunk was found damaged and taken out of the index (ChunkStore.set_aside), and no
    backup has stored it again since."""


class CodecUnavailable(CairnError):
    """The chunk was written with zstd and this host lacks the `zstandard` module."""
    status = status.STORAGE_WRITE_FAILED


class EncryptionUnavailable(CairnError):
    """A key was given and this host lacks the `cryptography` module."""
    status = status.STORAGE_WRITE_FAILED


class EncryptionKeyRequired(ValidationError):
    """The store is encrypted and no key was given (or it was opened keyless and the
    operation needs the plaintext)."""


class WrongEncryptionKey(ValidationError):
    """The key given is not the store's key (its key check value differs)."""


class StoreWriteFailed(CairnError):
    """A container could not be written (a full file system, an I/O error)."""
    status = status.STORAGE_WRITE_FAILED


class PoolBusy(CairnError):
    """Space reclaim and sessions (backup, restore, verify) exclude each other."""
    status = status.POOL_BUSY

    def __init__(self, message, *, sessions=None, pids=(), hint=None):
        super().__init__(message, hint=hint)
        self.sessions = sessions  # holders of a session; None when the system cannot tell
        self.pids = list(pids)


class StoreDamaged(CairnError):
    """A file of the store's own structure (pool.json, the index header) is not valid."""
    status = status.IMAGE_DAMAGED


def _write_failed(path, e):
    """The StoreWriteFailed for an OSError met writing a container."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreWriteFailed(f"the file system holding the deduplication pool is full "
                                f"(writing {path})",
                                hint="free space there or run a space reclaim of the pool; "
                                     "the backup stored nothing half")
    return StoreWriteFailed(f"writing {path} failed: {e.strerror}")
