"""On-disk chunk store of the dedup pool: append-only containers plus a chunk index.

Runs in the agent on the storage host, so only the standard library is needed; `zstandard` is
used when importable, otherwise zlib level 1. Each record names its codec, so either kind of
reader can read what the other wrote, except that a zstd record needs `zstandard` to decode.
An encrypted store (AES-256-GCM) needs `cryptography`, imported only when a key is given.

Layout under the store root:
    pool.json                     format version, encrypted flag, key check value (never the key)
    containers/NNNNNNNN.partial   being written by one writer (ignored by every reader)
    containers/NNNNNNNN.ctr       committed: fsync'ed, then renamed from .partial
    index/chunks.log              fingerprint -> (container, offset, stored length)
    index/lock                    fcntl lock serializing index appends and number allocation
    index/pool.lock               fcntl lock: shared by every session (backup, restore, verify),
                                  exclusive for space reclaim
    index/damaged.log             chunks set aside as damaged (see set_aside)
    index/loosened.log            what was found open to other users and made private again
                                  when the pool was opened, until a verify reports it

Everything is private to the user the agent runs as (folders 0700, files 0600, whatever the
umask; app/formats/private.py): a pool without encryption holds the backed-up data as it is.

Container file: header CONTAINER_HEADER (magic, format version, container number), then
records of RECORD_HEADER (magic, fingerprint, codec byte, raw length, stored length, crc32 of
the stored bytes) each followed by the stored bytes. A container holds at most
`container_size` bytes unless a single record is larger. The codec byte's high bit
(CODEC_ENCRYPTED) marks an encrypted record: its stored bytes are a 12-byte nonce followed by
the AES-GCM ciphertext and tag of the compressed chunk, with the fingerprint and the codec
byte as associated data. The crc32 is always over the stored bytes, so torn or rotted records
are found without the key.

Index file: INDEX_HEADER (magic, generation), then fixed-size INDEX_RECORD entries
(fingerprint, container, offset of the record, stored length, crc32 of the entry). It is
append-only between rewrites; a torn last entry (a crash during an append) is ignored on read
and cut off by the next append. When a fingerprint has several entries (two writers stored the
same chunk at once) the first one wins. Space reclaim and rebuild_index replace the whole file
(new file, fsync, rename) with the next generation, which tells every open store to read it
again from the start. The index can always be rebuilt from the committed containers alone.

See docs/dedup-pool.md for the format and the key handling.
"""

import errno
import fcntl
import hashlib
import hmac
import json
import os
import queue
import struct
import threading
import time
import zlib
from collections import namedtuple

from app import status
from app.errors import CairnError, NotFound, ValidationError
from app.formats import private
from app.formats.directio import Appender
from app.formats.tarfmt import crc32 as _crc32  # zlib's CRC-32, from isal where present
from app.formats.writeback import start_writeback

try:
    import zstandard as _zstd
except ImportError:  # zlib is always there; zstd is only faster and smaller
    _zstd = None

FINGERPRINT_SIZE = 32

CODEC_NONE = 0  # compression did not help; kept as is
CODEC_ZLIB = 1
CODEC_ZSTD = 2
CODEC_NAMES = {CODEC_NONE: "none", CODEC_ZLIB: "zlib", CODEC_ZSTD: "zstd"}
CODECS = {name: code for code, name in CODEC_NAMES.items()}
CODEC_ENCRYPTED = 0x80  # flag on the codec byte: the stored bytes are nonce + AES-GCM output

CONTAINER_MAGIC = b"CRNDCTR\x00"
CONTAINER_VERSION = 1
CONTAINER_HEADER = struct.Struct(">8sII")  # magic, version, container number
RECORD_MAGIC = b"CHK1"
RECORD_HEADER = struct.Struct(">4s32sBIII")  # magic, fp, codec, raw len, stored len, crc32

INDEX_MAGIC = b"CRNDIDX2"
INDEX_HEADER = struct.Struct(">8sQ")  # magic, generation (changes on every rewrite)
INDEX_ENTRY = struct.Struct(">32sIQI")  # fp, container, record offset, stored length
INDEX_RECORD = struct.Struct(">32sIQII")  # the entry followed by its crc32

DEFAULT_CONTAINER_SIZE = 64 * 1024 * 1024
MAX_CONTAINER_SIZE = 1 << 39
# How often a lookup that misses reads the index entries other writers appended (seconds).
HAS_REFRESH = 0.25
# A writer gathers records into writes of about this size: one system call per few chunks.
WRITE_BUFFER = 4 << 20
# Writes (and seals) a writer with background=True may have queued for its writing thread.
BACKGROUND_WRITES = 4
ZSTD_LEVEL = 1
MAX_CHUNK_SIZE = 0xFFFFFFFF
CONTAINER_DIGITS = 8

POOL_FILE = "pool.json"
POOL_FORMAT = 1
KEY_SIZE = 32
NONCE_SIZE = 12
KEY_CHECK_LABEL = b"cairn pool key check"
KEY_HINT = "The master passes the pool's key; see docs/dedup-pool.md."

DEFAULT_SESSION_TIMEOUT = 60.0
# Chunks set aside as damaged (index/damaged.log): one JSON object per line.
DAMAGED_LOG = "damaged.log"
# Folders and files found open to other users when the pool was opened, made private again
# then: one JSON object per line, reported (and then forgotten) by the next verify.
LOOSENED_LOG = "loosened.log"
# reclaim makes its work durable (index rewrite, old containers deleted) after this many new
# containers, so a nearly full pool gets space back before the compaction needs much more
RECLAIM_BATCH_CONTAINERS = 16

Location = namedtuple("Location", "container offset stored_length")

# The in-memory index keeps a location as one int (container << 72 | offset << 32 | stored
# length): about half the memory of a Location per chunk, which is what bounds a pool's size
# on its storage host.
_OFFSET_BITS, _LENGTH_BITS = 40, 32
_LENGTH_MASK = (1 << _LENGTH_BITS) - 1
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1
_CONTAINER_SHIFT = _OFFSET_BITS + _LENGTH_BITS


def _pack_location(number, offset, length):
    return (number << _CONTAINER_SHIFT) | (offset << _LENGTH_BITS) | length


def _location(packed):
    return Location(packed >> _CONTAINER_SHIFT, (packed >> _LENGTH_BITS) & _OFFSET_MASK,
                    packed & _LENGTH_MASK)


Damage = namedtuple("Damage", "fingerprint container offset reason")


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


def generate_key():
    """A new random key for an encrypted store (32 raw bytes)."""
    return os.urandom(KEY_SIZE)


def key_check_value(key):
    """What pool.json records to recognise the key: HMAC-SHA256(key, label), as hex."""
    return hmac.new(key, KEY_CHECK_LABEL, hashlib.sha256).hexdigest()


def container_name(number, committed=True):
    return f"{number:0{CONTAINER_DIGITS}d}" + (".ctr" if committed else ".partial")


def _container_header(number):
    return CONTAINER_HEADER.pack(CONTAINER_MAGIC, CONTAINER_VERSION, number)


def _container_number(name):
    stem, dot, ext = name.partition(".")
    if dot and ext in ("ctr", "partial") and len(stem) == CONTAINER_DIGITS and stem.isdigit():
        return int(stem)
    return None


def _check_fingerprint(fp):
    if not isinstance(fp, (bytes, bytearray, memoryview)) or len(fp) != FINGERPRINT_SIZE:
        raise ValidationError(
            f"a chunk fingerprint must be {FINGERPRINT_SIZE} bytes, not {fp!r:.80}",
            hint="Pass the raw SHA-256 digest (hashlib.sha256(data).digest()), not its hex.")
    return bytes(fp)


def _write_failed(path, e):
    """The StoreWriteFailed for an OSError met writing a container."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreWriteFailed(f"the file system holding the deduplication pool is full "
                                f"(writing {path})",
                                hint="free space there or run a space reclaim of the pool; "
                                     "the backup stored nothing half")
    return StoreWriteFailed(f"writing {path} failed: {e.strerror}")


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_busy(e):
    return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def _flock_holders(path):
    """[(mode, pid)] of the flocks held on `path` ("READ" or "WRITE"), from /proc/locks;
    None where the system does not list them. Only for messages: never a correctness input."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.readlines()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = []
    for line in lines:
        fields = line.split()
        # waiting requests are listed as "N: -> FLOCK ..."; they hold nothing yet
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == want:
            holders.append((fields[3], int(fields[4]) if fields[4].isdigit() else None))
    return holders


_local = threading.local()


def _zstd_compressor():
    # One compressor per thread: making one per chunk costs as much as a small chunk's
    # compression, and a compressor must not be shared between threads.
    c = getattr(_local, "zstd", None)
    if c is None:
        c = _local.zstd = _zstd.ZstdCompressor(level=ZSTD_LEVEL)
    return c


def _compress(codec, data):
    if codec == CODEC_ZSTD:
        return _zstd_compressor().compress(data)
    if codec == CODEC_ZLIB:
        return zlib.compress(data, 1)
    return data


def _smaller(codec, data, stored):
    """(codec, stored bytes): the compressed form where it is smaller, else the data as is."""
    if len(stored) < len(data):
        return codec, stored
    return CODEC_NONE, data


def _record(fp, codec, raw_length, stored):
    """(record header, stored bytes) as a container holds them."""
    return (RECORD_HEADER.pack(RECORD_MAGIC, fp, codec, raw_length, len(stored),
                               _crc32(stored)), stored)


def _decompress(codec, stored, raw_length, where):
    """Decoded bytes; raises ChunkDamaged (via ValueError) on undecodable input."""
    if codec == CODEC_NONE:
        return bytes(stored)
    if codec == CODEC_ZLIB:
        return zlib.decompress(stored)
    if codec == CODEC_ZSTD:
        if _zstd is None:
            raise CodecUnavailable(
                f"chunk at {where} was stored with zstd, and the zstandard module is not "
                f"installed here",
                hint="Install it on this host (pip install zstandard) to read this store.")
        # One decompressor per thread, as with compression: making one per chunk holds the
        # GIL while its context is set up.
        d = getattr(_local, "unzstd", None)
        if d is None:
            d = _local.unzstd = _zstd.ZstdDecompressor()
        return d.decompress(stored, max_output_size=raw_length)
    raise ValueError(f"unknown codec {codec}")


def _valid_codec_byte(code):
    return (code & ~CODEC_ENCRYPTED) in CODEC_NAMES


class _Cipher:
    """AES-256-GCM of one store's key. `cryptography` is imported here only, so stores
    without a key never need it."""

    def __init__(self, key):
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            raise EncryptionUnavailable(
                "the deduplication pool is encrypted, and the cryptography module is not "
                "installed on this host",
                hint="Install it on the storage host (pip install cryptography, or the "
                     "distribution's python3-cryptography package).") from None
        self._aead = AESGCM(key)
        self._invalid_tag = InvalidTag

    def seal(self, fp, codec_byte, data):
        nonce = os.urandom(NONCE_SIZE)
        return nonce + self._aead.encrypt(nonce, data, fp + bytes((codec_byte,)))

    def open(self, fp, codec_byte, stored):
        if len(stored) < NONCE_SIZE + 16:
            raise ValueError("the encrypted record is shorter than its nonce and tag")
        view = memoryview(stored)
        try:
            return self._aead.decrypt(view[:NONCE_SIZE], view[NONCE_SIZE:],
                                      fp + bytes((codec_byte,)))
        except self._invalid_tag:
            raise ValueError("decryption failed: the record was altered or written with "
                             "another key") from None


def _decode_record(header, stored, where, encrypted=False, cipher=None, check_fingerprint=True):
    """Checks one record; returns (fingerprint, data) or raises ValueError naming the fault.
    For an encrypted store opened without its key (cipher None) only the crc32 can be
    checked, and data is None."""
    magic, fp, codec_byte, raw_length, stored_length, crc = header
    if _crc32(stored) != crc:
        raise ValueError("crc32 of the stored bytes does not match")
    codec = codec_byte & ~CODEC_ENCRYPTED
    if codec_byte & CODEC_ENCRYPTED:
        if not encrypted:
            raise ValueError("the record is encrypted, but the store is not")
        if cipher is None:
            return fp, None
        stored = cipher.open(fp, codec_byte, stored)
    elif encrypted:
        # an encrypted store holds no plaintext record: one here was put there by someone else
        raise ValueError("the record is not encrypted, but the store is")
    try:
        data = _decompress(codec, stored, raw_length, where)
    except (CodecUnavailable, ValueError):
        raise
    except Exception as e:  # zlib.error, zstd.ZstdError: the bytes do not decode
        raise ValueError(f"stored bytes do not decode ({CODEC_NAMES.get(codec, codec)}): {e}")
    if len(data) != raw_length:
        raise ValueError(f"decoded length {len(data)} differs from the recorded {raw_length}")
    if check_fingerprint and hashlib.sha256(data).digest() != fp:
        raise ValueError("sha256 of the data differs from its fingerprint")
    return fp, data


def _pack_entries(entries):
    out = bytearray()
    for fp, loc in entries:
        entry = INDEX_ENTRY.pack(fp, *loc)
        out += entry + struct.pack(">I", _crc32(entry))
    return out


class ChunkStore:
    """One store directory. Safe to share between threads; several processes (each with its
    own ChunkStore) may write at once.

    `key`: 32 raw bytes for an encrypted store. A new store is created encrypted when a key
    is given, plain otherwise, and stays so. `keyless=True` opens an encrypted store without
    its key for upkeep that never needs the plaintext: reclaim, rebuild_index, stats and a
    verify of crc32 and structure; reading and writing chunks then raise
    EncryptionKeyRequired."""

    def __init__(self, root, *, codec=None, container_size=DEFAULT_CONTAINER_SIZE, key=None,
                 keyless=False):
        if codec is None:
            codec = "zstd" if _zstd is not None else "zlib"
        if codec not in CODECS:
            raise ValidationError(f"unknown chunk codec {codec!r}",
                                  hint=f"Use one of: {', '.join(sorted(CODECS))}.")
        if codec == "zstd" and _zstd is None:
            raise ValidationError("codec zstd needs the zstandard module, which is not "
                                  "installed", hint="pip install zstandard, or use codec zlib.")
        if not isinstance(container_size, int) or container_size < 4096:
            raise ValidationError(f"container_size {container_size!r} is too small",
                                  hint="Use at least 4096 bytes; the default is 64 MiB.")
        if container_size > MAX_CONTAINER_SIZE:
            # a record may start near the end and be up to 4 GiB: offsets stay in 40 bits
            raise ValidationError(f"container_size {container_size} is too large",
                                  hint="Use at most 512 GiB; the default is 64 MiB.")
        if key is not None and (not isinstance(key, (bytes, bytearray))
                                or len(key) != KEY_SIZE):
            raise ValidationError(
                f"a pool key must be {KEY_SIZE} raw bytes, not {type(key).__name__} of "
                f"length {len(key) if hasattr(key, '__len__') else '?'}",
                hint="Use generate_key() for a new pool; pass the key file's bytes, not hex "
                     "or base64 text.")
        self.root = os.path.abspath(root)
        self.codec = CODECS[codec]
        self.container_size = container_size
        self.containers_dir = os.path.join(self.root, "containers")
        self.index_dir = os.path.join(self.root, "index")
        self.index_path = os.path.join(self.index_dir, "chunks.log")
        self.damaged_path = os.path.join(self.index_dir, DAMAGED_LOG)
        self.config_path = os.path.join(self.root, POOL_FILE)
        self._lock_path = os.path.join(self.index_dir, "lock")
        self._pool_lock_path = os.path.join(self.index_dir, "pool.lock")
        self.loosened_path = os.path.join(self.index_dir, LOOSENED_LOG)
        existed = os.path.isdir(self.containers_dir) or os.path.isdir(self.index_dir)
        # what an earlier Cairn (or a hand) left open to other users: noted for verify
        self.note_loosened(self.make_private())
        try:  # known before any lock is taken: see _close_inherited_locks
            fd = private.create(self._lock_path, os.O_RDWR)
        except OSError:
            pass  # a pool this host may not lock: whatever locks it fails on its own
        else:
            try:
                _register_lock_file(fd)
            finally:
                os.close(fd)
        config = self._load_config(key, existed)
        self.encrypted = bool(config["encrypted"])
        self._cipher = None
        if self.encrypted:
            if key is None and not keyless:
                raise EncryptionKeyRequired(
                    f"the deduplication pool at {self.root} is encrypted, and no key was given",
                    hint=KEY_HINT)
            if key is not None:
                if not hmac.compare_digest(key_check_value(bytes(key)),
                                           str(config.get("key_check", ""))):
                    raise WrongEncryptionKey(
                        f"the key given does not open the encrypted deduplication pool at "
                        f"{self.root} (its key check value differs)",
                        hint="Use the key the pool was created with (the master keeps it as "
                             "CAIRN_HOME/keys/SERVER.key); see docs/dedup-pool.md.")
                self._cipher = _Cipher(bytes(key))
        elif key is not None:
            raise ValidationError(
                f"the deduplication pool at {self.root} is not encrypted, but a key was given",
                hint="A pool is encrypted from its creation or never: open this one without a "
                     "key, or create a new, empty pool with the key.")
        self._mutex = threading.RLock()
        self._index = {}
        self._index_pos = 0
        self._index_id = None  # (inode, generation) of the log the dict was read from
        self._refreshed = 0.0
        with self._mutex:
            self._refresh()

    # ------------------------------------------------------------------ modes

    def make_private(self):
        """Makes the store's folders (made when missing) and its few fixed files private,
        as every open does: cheap, a handful of descriptors. Containers are many and are
        made private by verify (pool.check_modes); they cannot be reached while their
        folder is private anyway. Returns what was open to other users (private.tighten)."""
        changed = []
        fd = private.makedirs(self.root, changed=changed, top=True)
        try:
            for d in (self.containers_dir, self.index_dir):
                os.close(private.private_dir(os.path.basename(d), dir_fd=fd, changed=changed,
                                             path=d))
            private.private_file(POOL_FILE, dir_fd=fd, changed=changed, path=self.config_path)
        finally:
            os.close(fd)
        for path in (self.index_path, self._lock_path, self._pool_lock_path,
                     self.damaged_path, self.loosened_path):
            private.private_file(path, changed=changed)
        return changed

    def note_loosened(self, changed):
        """Keeps what was found open to other users for the next verify to report."""
        if not changed:
            return
        now = int(time.time())
        data = b"".join(json.dumps(dict(c, time=now), sort_keys=True).encode() + b"\n"
                        for c in changed)
        try:
            fd = private.create(self.loosened_path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError:
            pass  # a pool this host may only read (a copy, mounted read-only) is still read

    def take_loosened(self):
        """What opens of the pool found open to other users since the last call (see
        note_loosened), forgotten once taken: [{"path", "mode", "error", "time"}]."""
        taken = f"{self.loosened_path}.{os.getpid()}.{threading.get_ident()}"
        try:
            os.rename(self.loosened_path, taken)  # what later opens note goes to a new file
            with open(taken, "rb") as f:
                lines = f.read().splitlines()
            os.unlink(taken)
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                n = json.loads(line)
                if isinstance(n, dict) and isinstance(n.get("path"), str):
                    out.append(n)
            except ValueError:
                continue  # a torn last line
        return out

    # ------------------------------------------------------------------ pool.json

    def _load_config(self, key, existed):
        """Reads pool.json, creating it for a new store (and for a store made before it
        existed, which is plain)."""
        config = self._read_config()
        if config is not None:
            return config
        legacy = existed and (os.path.exists(self.index_path)
                              or any(_container_number(n) is not None
                                     for n in os.listdir(self.containers_dir)))
        config = {"format": POOL_FORMAT, "encrypted": key is not None and not legacy}
        if config["encrypted"]:
            config["cipher"] = "AES-256-GCM"
            config["key_check"] = key_check_value(bytes(key))
        tmp = f"{self.config_path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with os.fdopen(private.create(tmp, os.O_WRONLY | os.O_TRUNC), "w") as f:
            json.dump(config, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            # link, not rename: when two processes create the store at once, the first wins
            # and the other reads its choice
            os.link(tmp, self.config_path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        fsync_dir(self.root)
        return self._read_config()

    def _read_config(self):
        try:
            with open(self.config_path) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        try:
            config = json.loads(text)
            if not isinstance(config, dict) or not isinstance(config.get("encrypted"), bool):
                raise ValueError("no encrypted flag")
        except ValueError as e:
            raise StoreDamaged(f"{self.config_path} is not a valid pool description: {e}",
                               hint="Restore it from a copy of the pool; it holds the format "
                                    "and whether the pool is encrypted (never the key).") from None
        if config.get("format") != POOL_FORMAT:
            raise StoreDamaged(
                f"{self.config_path} has format {config.get('format')!r}; this Cairn reads "
                f"format {POOL_FORMAT}",
                hint="Update Cairn on this storage host to the master's version.")
        return config

    def _require_key(self):
        if self.encrypted and self._cipher is None:
            raise EncryptionKeyRequired(
                f"the deduplication pool at {self.root} is encrypted and was opened without "
                f"its key, which reading and writing chunks need", hint=KEY_HINT)

    # ------------------------------------------------------------------ locking and index log

    def _locked(self):
        return _FileLock(self._lock_path, self._mutex)

    def _refresh(self):
        """Reads index entries appended since the last read (by any process). A rewritten log
        (reclaim, rebuild_index: another inode or generation) is read again from the start,
        so no stale location survives it."""
        self._refreshed = time.monotonic()
        try:
            f = open(self.index_path, "rb")
        except FileNotFoundError:
            self._index, self._index_pos, self._index_id = {}, 0, None
            return
        with f:
            st = os.fstat(f.fileno())
            head = f.read(INDEX_HEADER.size)
            if len(head) < INDEX_HEADER.size or head[:len(INDEX_MAGIC)] != INDEX_MAGIC:
                # empty, being created, or not an index (the next append says so)
                self._index, self._index_pos, self._index_id = {}, 0, None
                return
            ident = (st.st_ino, INDEX_HEADER.unpack(head)[1])
            if ident != self._index_id:
                self._index, self._index_pos, self._index_id = {}, INDEX_HEADER.size, ident
            f.seek(self._index_pos)
            size = INDEX_RECORD.size
            # only whole entries: a torn tail stays unread until it is completed or cut off
            blob = f.read(((st.st_size - self._index_pos) // size) * size)
        for at in range(0, len(blob) - size + 1, size):
            fp, number, offset, length, crc = INDEX_RECORD.unpack_from(blob, at)
            if _crc32(blob[at:at + INDEX_ENTRY.size]) != crc:
                continue  # a damaged entry only loses a lookup; rebuild_index restores it
            self._index.setdefault(fp, _pack_location(number, offset, length))
        self._index_pos += len(blob)

    def _index_generation(self):
        """The current log's generation, or None when there is no valid log."""
        try:
            with open(self.index_path, "rb") as f:
                head = f.read(INDEX_HEADER.size)
        except FileNotFoundError:
            return None
        if len(head) == INDEX_HEADER.size and head[:len(INDEX_MAGIC)] == INDEX_MAGIC:
            return INDEX_HEADER.unpack(head)[1]
        return None

    @staticmethod
    def _next_generation(current):
        if current is None:
            # a fresh start: random, so it cannot repeat a generation an open store has seen
            return int.from_bytes(os.urandom(8), "big") >> 1
        return (current + 1) & 0xFFFFFFFFFFFFFFFF

    def _append_index(self, entries):
        """Appends (fp, Location) entries durably; call with the lock held. Returns how many
        were new (a concurrent writer may have indexed the same chunk first)."""
        self._refresh()
        fresh = [(fp, loc) for fp, loc in entries if fp not in self._index]
        if not fresh:
            return 0
        fd = private.create(self.index_path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            created = size < INDEX_HEADER.size
            if created:
                os.ftruncate(fd, 0)
                os.pwrite(fd, INDEX_HEADER.pack(INDEX_MAGIC, self._next_generation(None)), 0)
                size = INDEX_HEADER.size
            elif os.pread(fd, len(INDEX_MAGIC), 0) != INDEX_MAGIC:
                raise StoreDamaged(
                    f"{self.index_path} is not a chunk index of this format",
                    hint="Rebuild it from the containers (ChunkStore.rebuild_index()).")
            whole = INDEX_HEADER.size + ((size - INDEX_HEADER.size) // INDEX_RECORD.size) \
                * INDEX_RECORD.size
            if whole != size:
                os.ftruncate(fd, whole)  # a torn entry from a crashed append
            os.pwrite(fd, bytes(_pack_entries(fresh)), whole)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.index_dir)  # the log may have just been created
        self._refresh()
        return len(fresh)

    def _write_index(self, entries):
        """Replaces the log with `entries` as the next generation: new file, fsync, rename,
        fsync of the directory. Call with the lock held."""
        tmp = self.index_path + ".rewrite"
        generation = self._next_generation(self._index_generation())
        with os.fdopen(private.create(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as f:
            f.write(INDEX_HEADER.pack(INDEX_MAGIC, generation) + _pack_entries(entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.index_path)
        fsync_dir(self.index_dir)
        self._refresh()

    # ------------------------------------------------------------------ sessions

    def session(self, timeout=DEFAULT_SESSION_TIMEOUT, *, poll=0.05, clock=time.monotonic,
                sleep=time.sleep):
        """A PoolSession: a shared hold on the pool that keeps space reclaim out until it is
        closed. Backups, restores and verifications hold one for their whole run (a backup
        from before its first has() until its recipe is committed). Waits up to `timeout`
        seconds (None: without end) while a reclaim runs, then raises PoolBusy. `clock` and
        `sleep` are there for tests."""
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValidationError(f"session timeout {timeout!r} is not a number of seconds",
                                  hint="Use 0 or more seconds, or None to wait without end.")
        return PoolSession(self, timeout, poll, clock, sleep)

    def _open_pool_lock(self):
        return private.create(self._pool_lock_path, os.O_RDWR)

    def _reclaim_running(self, waited):
        holders = _flock_holders(self._pool_lock_path) or []
        pids = [pid for mode, pid in holders if mode == "WRITE" and pid]
        by = f" (process {', '.join(map(str, pids))})" if pids else ""
        return PoolBusy(
            f"space reclaim is running on the deduplication pool at {self.root}{by}; waited "
            f"{waited:g} s for it to finish",
            pids=pids,
            hint="Reclaim keeps backups, restores and verifications out while it frees "
                 "space; run this again when it is done, or wait longer.")

    def _sessions_present(self):
        holders = _flock_holders(self._pool_lock_path)
        if holders is None:
            count, pids = None, []
            who = "backups/restores are"
        else:
            readers = [pid for mode, pid in holders if mode == "READ"]
            count, pids = len(readers), sorted({p for p in readers if p})
            who = "1 backup/restore is" if count == 1 else f"{count} backups/restores are"
            if count == 0:
                who = "backups/restores are"  # released between our try and our look
        return PoolBusy(
            f"space reclaim cannot start: {who} using the deduplication pool at {self.root}; "
            f"try again when they are done",
            sessions=count, pids=pids,
            hint="Reclaim needs the pool to itself; schedule it when no backups, restores or "
                 "verifications run on this pool.")

    # ------------------------------------------------------------------ reading

    def has(self, fp):
        """Whether the store holds the chunk. Reads what other writers published since (and
        a rewritten index) at most every HAS_REFRESH seconds: a chunk another job stored a
        moment ago is at worst stored twice (the index keeps one), and one set aside as
        damaged a moment ago may still be referenced once more."""
        fp = _check_fingerprint(fp)
        with self._mutex:
            if time.monotonic() - self._refreshed >= HAS_REFRESH:
                self._refresh()
            return fp in self._index

    def _lookup(self, fp):
        """The Location the index holds for fp, or None; call with the mutex held."""
        packed = self._index.get(fp)
        return None if packed is None else _location(packed)

    def locate(self, fp):
        fp = _check_fingerprint(fp)
        with self._mutex:
            loc = self._lookup(fp)
            if loc is None:
                self._refresh()
                loc = self._lookup(fp)
        if loc is not None:
            return loc
        note = self.damage_notes().get(fp)
        if note is not None:
            raise ChunkSetAside(
                f"chunk {fp.hex()} was found damaged ({note['reason']}; {note['container']} "
                f"at byte {note['offset']}) and set aside, and no backup has stored it again "
                f"since",
                hint="The next backup of the same data stores it again, which makes the images "
                     "that use it whole; until then those files cannot be restored from this "
                     "pool.")
        raise ChunkNotFound(f"no chunk {fp.hex()} in the store at {self.root}",
                            hint="It was never committed, or the index lost it: "
                                 "rebuild_index() rescans the containers.")

    def _locations(self):
        """(fingerprint, Location) of every indexed chunk; call with the mutex held."""
        for fp, packed in self._index.items():
            yield fp, _location(packed)

    def __len__(self):
        with self._mutex:
            self._refresh()
            return len(self._index)

    def fingerprints(self):
        with self._mutex:
            self._refresh()
            return dict(self._locations())

    def container_path(self, number, committed=True):
        return os.path.join(self.containers_dir, container_name(number, committed))

    def get(self, fp, files=None, check_fingerprint=True):
        """The chunk's data, checked against its crc32 and its fingerprint (decrypted first
        in an encrypted store). `files`: a session's open containers (PoolSession.get).
        check_fingerprint=False leaves out the SHA-256 of the data, for readers that check
        what they make of it themselves (a restore checks every file against its checksum);
        the crc32 of the stored bytes, the decoded length and an encrypted record's
        authentication tag are checked all the same."""
        fp = _check_fingerprint(fp)
        self._require_key()
        loc = self.locate(fp)
        try:
            return self._read(fp, loc, files, check_fingerprint)
        except ChunkDamaged:
            # a reclaim elsewhere may have moved the chunk since our copy of the index was
            # read; only a location that is still current is damage
            with self._mutex:
                self._refresh()
                fresh = self._lookup(fp)
            if fresh == loc:
                raise
            if fresh is None:
                raise ChunkNotFound(f"no chunk {fp.hex()} in the store at {self.root}: the "
                                    f"index was rewritten without it (space reclaim or index "
                                    f"rebuild)",
                                    hint="Space reclaim removes chunks no image references; "
                                         "an index rebuild leaves out damaged records.") from None
            return self._read(fp, fresh, files, check_fingerprint)

    def _read(self, fp, loc, files=None, check_fingerprint=True):
        number, offset, stored_length = loc
        path = self.container_path(number)
        where = f"{path} offset {offset}"

        def damaged(reason):
            return ChunkDamaged(f"chunk {fp.hex()} is damaged in {where}: {reason}",
                                container=path, offset=offset, fingerprint=fp, reason=reason,
                                hint="Run the store verification; the chunk must be stored "
                                     "again from a source that still has it.")
        try:
            fd = files.fd(number, path) if files is not None else None
            own = fd is None
            if own:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise damaged("the container is missing") from None
        try:
            raw = os.pread(fd, RECORD_HEADER.size + stored_length, offset)
        finally:
            if own:
                os.close(fd)
        if len(raw) < RECORD_HEADER.size:
            raise damaged("the record is cut short")
        header = RECORD_HEADER.unpack_from(raw)
        if header[0] != RECORD_MAGIC:
            raise damaged("no record starts here")
        if header[1] != fp:
            raise damaged("the record holds another fingerprint")
        if header[4] != stored_length or len(raw) != RECORD_HEADER.size + stored_length:
            raise damaged("the stored length differs from the index or the record is cut")
        try:
            return _decode_record(header, memoryview(raw)[RECORD_HEADER.size:], where,
                                  self.encrypted, self._cipher, check_fingerprint)[1]
        except ValueError as e:
            raise damaged(str(e)) from None

    def stats(self):
        """chunks and stored_bytes from the index; containers and container_bytes (file
        sizes) from the committed containers; whether the store is encrypted."""
        with self._mutex:
            self._refresh()
            chunks = len(self._index)
            stored = sum(packed & _LENGTH_MASK for packed in self._index.values())
        containers = size = 0
        for number in self.committed_containers():
            try:
                size += os.stat(self.container_path(number)).st_size
            except FileNotFoundError:
                continue  # deleted by a reclaim since the listing
            containers += 1
        return {"chunks": chunks, "stored_bytes": stored, "containers": containers,
                "container_bytes": size, "encrypted": self.encrypted}

    # ------------------------------------------------------------------ scanning

    def committed_containers(self):
        numbers = []
        for name in os.listdir(self.containers_dir):
            n = _container_number(name)
            if n is not None and name.endswith(".ctr"):
                numbers.append(n)
        return sorted(numbers)

    def _scan(self, number, decode):
        """Yields (offset, header or None, error or None) for each record of a committed
        container; ends after the first record that is cut short or unreadable, since the
        records after it cannot be found. With `decode`, each record's data is checked too
        (for an encrypted store opened keyless: its crc32 only)."""
        path = self.container_path(number)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(CONTAINER_HEADER.size)
            if len(head) < CONTAINER_HEADER.size:
                yield 0, None, "container header is cut short"
                return
            magic, version, stored_number = CONTAINER_HEADER.unpack(head)
            if magic != CONTAINER_MAGIC or version != CONTAINER_VERSION \
                    or stored_number != number:
                yield 0, None, "container header is not valid for this container"
                return
            offset = CONTAINER_HEADER.size
            while offset < size:
                raw = f.read(RECORD_HEADER.size)
                if len(raw) < RECORD_HEADER.size:
                    yield offset, None, "record header is cut short (torn end)"
                    return
                header = RECORD_HEADER.unpack(raw)
                if header[0] != RECORD_MAGIC or not _valid_codec_byte(header[2]):
                    yield offset, None, "no valid record header here"
                    return
                stored_length = header[4]
                if offset + RECORD_HEADER.size + stored_length > size:
                    yield offset, header, "stored bytes are cut short (torn end)"
                    return
                stored = f.read(stored_length)
                error = None
                if decode:
                    try:
                        _decode_record(header, stored, f"{path} offset {offset}",
                                       self.encrypted, self._cipher)
                    except ValueError as e:
                        error = str(e)
                elif _crc32(stored) != header[5]:
                    error = "crc32 of the stored bytes does not match"
                yield offset, header, error
                offset += RECORD_HEADER.size + stored_length

    def rebuild_index(self):
        """Replaces the index with one made from the committed containers alone. Records that
        fail their crc32 or were set aside as damaged are left out (so the chunk can be stored
        again); a container's torn end is skipped. Returns counts."""
        counts = {"containers": 0, "chunks": 0, "duplicates": 0, "damaged": 0, "torn": 0}
        with self._locked():
            # a record a verification set aside may pass its crc32 (damage found by decoding
            # or SHA-256): it stays out
            aside = {(n["container"], n["offset"], fp) for fp, n in self.damage_notes().items()}
            entries = {}
            for number in self.committed_containers():
                counts["containers"] += 1
                name = container_name(number)
                for offset, header, error in self._scan(number, decode=False):
                    if header is None or "torn" in (error or ""):
                        counts["torn"] += 1
                    elif error or (name, offset, header[1]) in aside:
                        counts["damaged"] += 1
                    elif header[1] in entries:
                        counts["duplicates"] += 1
                    else:
                        entries[header[1]] = Location(number, offset, header[4])
            counts["chunks"] = len(entries)
            self._write_index(entries.items())
        return counts

    def verify(self):
        """Yields a Damage(fingerprint, container, offset, reason) for every record of every
        committed container that does not read back intact (crc32, decryption, decoding,
        length, sha256) and for every cut or unreadable container structure (fingerprint None
        when unknown)."""
        for number in self.committed_containers():
            path = self.container_path(number)
            try:
                for offset, header, error in self._scan(number, decode=True):
                    if error:
                        yield Damage(header[1] if header else None, path, offset, error)
            except FileNotFoundError:
                continue  # reclaimed since the listing (a verify outside a session)

    # ------------------------------------------------------------------ damaged chunks

    def set_aside(self, damage):
        """Takes chunks found damaged out of the index, so that the next backup that meets
        their data stores them afresh (its files cache does not vouch for them either), which
        makes whole again every image that references them. `damage`: Damage tuples; an entry
        is taken out only while it still points at the damaged record (a chunk stored again
        elsewhere stays). Each is noted in index/damaged.log first, so that messages can say
        what happened, reclaim knows it need not look for the chunk, and an index rebuild does
        not bring the record back. Returns the fingerprints taken out."""
        found = {d.fingerprint: d for d in damage if d.fingerprint is not None}
        if not found:
            return []
        with self._locked():
            self._refresh()
            out = []
            for fp, d in found.items():
                loc = self._lookup(fp)
                if loc is not None and loc.offset == d.offset \
                        and self.container_path(loc.container) == d.container:
                    out.append(fp)
            if out:
                now = int(time.time())
                self._append_notes(
                    {"fingerprint": fp.hex(), "container": os.path.basename(found[fp].container),
                     "offset": found[fp].offset, "reason": found[fp].reason, "time": now}
                    for fp in out)
                gone = set(out)
                self._write_index([(fp, loc) for fp, loc in self._locations()
                                   if fp not in gone])
        return out

    def damage_notes(self):
        """{fingerprint: {"container", "offset", "reason", "time"}} of the chunks set aside as
        damaged that are still needed (the newest note of each)."""
        try:
            with open(self.damaged_path, "rb") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return {}
        notes = {}
        for line in lines:
            try:
                n = json.loads(line)
                fp = bytes.fromhex(n["fingerprint"])
                if len(fp) != FINGERPRINT_SIZE or not isinstance(n.get("offset"), int):
                    continue
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a torn last line of a crashed append
            notes[fp] = {k: n.get(k) for k in ("container", "offset", "reason", "time")}
        return notes

    @staticmethod
    def _note_lines(notes):
        return b"".join(json.dumps(n, sort_keys=True).encode() + b"\n" for n in notes)

    def _append_notes(self, notes):
        data = self._note_lines(notes)
        fd = private.create(self.damaged_path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _prune_notes(self, keep):
        """Rewrites damaged.log with the notes whose fingerprint `keep(fp)` wants; call with
        the lock held."""
        notes = self.damage_notes()
        kept = {fp: n for fp, n in notes.items() if keep(fp)}
        if len(kept) == len(notes):
            return
        if not kept:
            os.unlink(self.damaged_path)
        else:
            tmp = self.damaged_path + ".rewrite"
            with os.fdopen(private.create(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as f:
                f.write(self._note_lines(dict(n, fingerprint=fp.hex()) for fp, n in kept.items()))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.damaged_path)
        fsync_dir(self.index_dir)

    def remove_stale_partials(self):
        """Deletes .partial containers whose writer has died (it no longer holds its lock);
        returns their paths. Live writers in any process are left alone."""
        return [path for path, size in self._remove_stale_partials()]

    def _remove_stale_partials(self):
        removed = []
        for name in sorted(os.listdir(self.containers_dir)):
            if not name.endswith(".partial") or _container_number(name) is None:
                continue
            path = os.path.join(self.containers_dir, name)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if _is_busy(e):
                    continue
                raise
            try:
                size = os.fstat(fd).st_size
                os.unlink(path)
                removed.append((path, size))
            finally:
                os.close(fd)
        return removed

    # ------------------------------------------------------------------ space reclaim

    def reclaim(self, live_fn, *, compact_below=0.5, is_cancelled=None, progress=None,
                _checkpoint=None):
        """Frees the space of chunks no image references any more. Needs the pool to itself:
        raises PoolBusy at once while any session is open, and keeps new sessions waiting
        while it runs. `live_fn()` is called once the pool is held and returns the set of
        fingerprints still referenced. Containers without live chunks are deleted; those
        whose live bytes are below `compact_below` of their size have their live records
        copied as stored into new containers, then the index is replaced, then the old
        containers are deleted. `is_cancelled()` is asked between containers; the work done
        so far is kept. `progress(done, total)` follows the containers. `_checkpoint(step)`
        is called after "sealed", "indexed" and "deleted" of each batch (crash tests).
        Returns counts; freed_bytes is the file space given back."""
        if isinstance(compact_below, bool) or not isinstance(compact_below, (int, float)) \
                or not 0 <= compact_below <= 1:
            raise ValidationError(f"compact_below {compact_below!r} is not a fraction",
                                  hint="Use a number from 0 (never compact, only delete empty "
                                       "containers) to 1; the default is 0.5.")
        started = time.monotonic()
        fd = self._open_pool_lock()
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if _is_busy(e):
                    raise self._sessions_present() from None
                raise
            run = _Reclaim(self, compact_below, is_cancelled, progress, _checkpoint)
            result = run.run(live_fn)
        finally:
            os.close(fd)
        result["seconds"] = round(time.monotonic() - started, 3)
        return result

    # ------------------------------------------------------------------ writing

    def writer(self, background=False):
        """A Writer; background=True: see Writer."""
        self._require_key()
        return Writer(self, background=background)

    def encode(self, fp, data):
        """(codec byte, stored bytes) of one chunk: compressed when that helps, then
        encrypted in an encrypted store. Safe to call from several threads at once. The
        stored bytes may be `data` itself (any bytes-like object) when it stays as it is."""
        codec, stored = _smaller(self.codec, data, _compress(self.codec, data))
        if self._cipher is not None:
            codec |= CODEC_ENCRYPTED
            return codec, self._cipher.seal(fp, codec, stored)
        return codec, stored

    def encode_record(self, fp, data):
        """(record header, stored bytes) of one chunk, ready for Writer.add_encoded: the
        encoding and its crc32 done in the calling thread, which may be one of several."""
        codec, stored = self.encode(fp, data)
        return _record(fp, codec, len(data), stored)

    def encode_records(self, fps, datas):
        """encode_record of several chunks, the same records: for a plain zstd store, all
        compressed in one call, which gives the interpreter lock up once rather than once
        per chunk (with several encoder threads, each hand-over of the lock costs about as
        much as compressing a few KiB)."""
        packed = None
        if self.codec == CODEC_ZSTD and self._cipher is None:
            batch = getattr(_zstd_compressor(), "multi_compress_to_buffer", None)
            try:
                packed = batch and batch(list(datas), threads=1)
            except NotImplementedError:  # python-zstandard's CFFI backend lacks it
                pass
        if not packed:
            return [self.encode_record(fp, d) for fp, d in zip(fps, datas)]
        out = []
        for fp, data, frame in zip(fps, datas, packed):
            # the memoryview of a frame keeps the whole buffer of frames alive, as it must
            codec, stored = _smaller(CODEC_ZSTD, data, memoryview(frame))
            out.append(_record(fp, codec, len(data), stored))
        return out

    def _new_container(self):
        """Claims the next container number; the fd is returned locked for this writer."""
        with self._locked():
            used = [_container_number(n) for n in os.listdir(self.containers_dir)]
            number = max([n for n in used if n is not None], default=0) + 1
            while True:
                path = self.container_path(number, committed=False)
                try:
                    fd = private.create(path, os.O_WRONLY | os.O_EXCL)
                except FileExistsError:
                    number += 1
                    continue
                except OSError as e:
                    raise _write_failed(path, e) from None
                if os.path.exists(self.container_path(number)):
                    os.close(fd)
                    os.unlink(path)
                    number += 1
                    continue
                break
        # held until commit or abort, so remove_stale_partials can tell a live writer
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            os.write(fd, _container_header(number))
        except OSError as e:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise _write_failed(path, e) from None
        return number, fd


class PoolSession:
    """A shared hold on the pool's usage lock (index/pool.lock) until close(). Each session
    has its own open file, so sessions of one process and of many coexist, and a reclaim in
    this process is kept out too. A forked child inherits the hold until it exits."""

    def __init__(self, store, timeout, poll, clock, sleep):
        self.store = store
        self._fd = store._open_pool_lock()
        started = clock()
        try:
            while True:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if not _is_busy(e):
                        raise
                waited = clock() - started
                if timeout is not None and waited >= timeout:
                    raise store._reclaim_running(round(waited, 1))
                sleep(poll)
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise
        # a reclaim may have rewritten the index since this store last read it: drop what
        # it knew, or has() could still answer yes for a chunk that is gone
        with store._mutex:
            store._refresh()
        self._files = _OpenContainers()

    def get(self, fp, check_fingerprint=True):
        """store.get, reading through containers kept open for the session: no open and close
        per chunk, and the kernel's read-ahead follows a restore through each container.
        Safe because no container is deleted or renumbered while a session holds the pool."""
        if self._fd is None:
            raise ValidationError("this pool session is closed")
        return self.store.get(fp, self._files, check_fingerprint)

    def forked(self):
        """In a child forked from this process, which reads through this session: the
        store's lock and the open containers' are made anew, as another thread may have
        held them at the fork. The containers are opened again as they are read."""
        self.store._mutex = threading.RLock()
        self._files = _OpenContainers()

    @property
    def closed(self):
        return self._fd is None

    def close(self):
        fd, self._fd = self._fd, None
        if fd is not None:
            files = getattr(self, "_files", None)
            if files is not None:
                files.close()
            os.close(fd)  # drops the flock

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass  # interpreter shutdown: the process's exit drops the flock anyway


class _OpenContainers:
    """Container files a session reads, each opened once (up to LIMIT; beyond, fd() returns
    None and the read opens and closes its own)."""

    LIMIT = 64

    def __init__(self):
        self._fds = {}
        self._lock = threading.Lock()
        self._closed = False

    def fd(self, number, path):
        with self._lock:
            fd = self._fds.get(number)
            if fd is not None:
                return fd
            if self._closed or len(self._fds) >= self.LIMIT:
                return None
            fd = self._fds[number] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            return fd

    def close(self):
        with self._lock:
            self._closed = True
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


class _Reclaim:
    """One space reclaim, run with the pool lock held exclusively. Work is made durable in
    batches, each in the order that keeps every live chunk readable at every instant: new
    containers sealed, then the index replaced, then the old containers deleted."""

    def __init__(self, store, compact_below, is_cancelled, progress, checkpoint):
        self.store = store
        self.compact_below = compact_below
        self.is_cancelled = is_cancelled or (lambda: False)
        self.progress = progress
        self.checkpoint = checkpoint or (lambda step: None)
        self.result = {"live_chunks": 0, "removed_chunks": 0, "freed_bytes": 0,
                       "containers_deleted": 0, "containers_compacted": 0,
                       "containers_written": 0, "damaged_chunks": 0, "missing_chunks": 0,
                       "partials_removed": 0, "index_rebuilt": False, "cancelled": False}
        self.writer = None
        self.done = []  # (container number, size, compacted) handled in the open batch
        self.moved = {}  # fp -> new Location, in the open batch
        self.dropped = {}  # live fp -> (container name, offset) of its damaged record

    def run(self, live_fn):
        store, result = self.store, self.result
        for path, size in store._remove_stale_partials():
            result["partials_removed"] += 1
            result["freed_bytes"] += size
        numbers = store.committed_containers()
        live = live_fn()
        if not isinstance(live, (set, frozenset)):
            live = set(live)
        with store._mutex:
            store._refresh()
            index = dict(store._index)
        aside = store.damage_notes()
        if any(fp not in index and fp not in aside for fp in live):
            # a referenced chunk the index lacks may still sit in a container; deleting that
            # container would lose it for good, so the index is made whole first (chunks set
            # aside as damaged are known to be stored nowhere usable)
            store.rebuild_index()
            result["index_rebuilt"] = True
            numbers = store.committed_containers()
            with store._mutex:
                index = dict(store._index)
        missing = sum(1 for fp in live if fp not in index)
        result["missing_chunks"] = missing
        result["live_chunks"] = len(live) - missing

        per_container = {n: [] for n in numbers}
        for fp, packed in index.items():
            entries = per_container.get(packed >> _CONTAINER_SHIFT)
            if entries is not None:
                entries.append((fp, packed))
        empty, sparse = [], []
        for number in numbers:
            try:
                size = os.stat(store.container_path(number)).st_size
            except FileNotFoundError:
                continue
            live_bytes = sum(RECORD_HEADER.size + (packed & _LENGTH_MASK)
                             for fp, packed in per_container[number] if fp in live)
            if live_bytes == 0:
                empty.append((number, size))
            # the header counts as live: a container without garbage is never compacted
            elif live_bytes + CONTAINER_HEADER.size < self.compact_below * size:
                sparse.append((live_bytes / size, number, size))
        sparse.sort()
        total, done = len(empty) + len(sparse), 0
        try:
            # empty containers first: they free space without needing any
            for number, size in empty:
                if self.is_cancelled():
                    result["cancelled"] = True
                    break
                self.done.append((number, size, False))
                done += 1
                self._progress(done, total)
            if self.done:
                self._commit()
            for ratio, number, size in ([] if result["cancelled"] else sparse):
                if self.is_cancelled():
                    result["cancelled"] = True
                    break
                self._copy_live(number, per_container[number], live)
                self.done.append((number, size, True))
                done += 1
                self._progress(done, total)
                if self.writer is not None and \
                        len(self.writer.sealed) >= RECLAIM_BATCH_CONTAINERS:
                    self._commit()
            if self.done:
                self._commit()
        except BaseException:
            self._discard()
            raise
        result["live_chunks"] -= len(self.dropped)
        self._tidy_notes(live)
        return result

    def _tidy_notes(self, live):
        """Notes the live chunks this reclaim found damaged and dropped, and forgets the notes
        of chunks stored again since or no longer referenced."""
        store = self.store
        with store._locked():
            store._refresh()
            if self.dropped:
                store._append_notes({"fingerprint": fp.hex(), "container": container,
                                     "offset": offset, "time": int(time.time()),
                                     "reason": "damaged record found by space reclaim"}
                                    for fp, (container, offset) in self.dropped.items())
            index = store._index
            store._prune_notes(lambda fp: fp in live and fp not in index)

    def _progress(self, done, total):
        if self.progress is not None:
            self.progress(done, total)

    def _copy_live(self, number, entries, live):
        store = self.store
        path = store.container_path(number)
        with open(path, "rb") as f:
            for fp, loc in sorted(((fp, _location(packed)) for fp, packed in entries
                                   if fp in live), key=lambda e: e[1].offset):
                f.seek(loc.offset)
                raw = f.read(RECORD_HEADER.size + loc.stored_length)
                ok = len(raw) == RECORD_HEADER.size + loc.stored_length
                if ok:
                    magic, rfp, codec, raw_len, stored_len, crc = RECORD_HEADER.unpack_from(raw)
                    ok = magic == RECORD_MAGIC and rfp == fp and stored_len == loc.stored_length \
                        and _valid_codec_byte(codec) \
                        and _crc32(memoryview(raw)[RECORD_HEADER.size:]) == crc
                if not ok:
                    # copying it would spread the damage; left out of the index, the next
                    # backup that meets the chunk stores it afresh
                    self.dropped[fp] = (container_name(number), loc.offset)
                    self.result["damaged_chunks"] += 1
                    continue
                if self.writer is None:
                    self.writer = Writer(store, publish=False)
                self.moved[fp] = self.writer._put_record(fp, raw)

    def _commit(self):
        """Makes the open batch durable: seal the new containers, replace the index, delete
        the old containers."""
        store, result = self.store, self.result
        written = []
        if self.writer is not None:
            self.writer.commit()
            written = self.writer.sealed
            self.writer = None
        self.checkpoint("sealed")
        gone = {number for number, size, compacted in self.done}
        with store._locked():
            store._refresh()  # entries appended meanwhile by writers without a session
            entries = []
            for fp, loc in store._locations():
                if loc.container not in gone:
                    entries.append((fp, loc))
                elif fp in self.moved:
                    entries.append((fp, self.moved[fp]))
                elif fp not in self.dropped:
                    result["removed_chunks"] += 1
            store._write_index(entries)
        self.moved = {}
        self.checkpoint("indexed")
        for number, size, compacted in self.done:
            try:
                os.unlink(store.container_path(number))
            except FileNotFoundError:
                continue
            result["freed_bytes"] += size
            result["containers_compacted" if compacted else "containers_deleted"] += 1
        self.done = []
        fsync_dir(store.containers_dir)
        for number, size in written:
            result["freed_bytes"] -= size
        result["containers_written"] += len(written)
        self.checkpoint("deleted")

    def _discard(self):
        """After a failure before the batch's index was replaced: its new containers are
        unindexed copies, so removing them loses nothing."""
        if self.writer is None:
            return
        writer, self.writer = self.writer, None
        try:
            writer.abort()
            for number, size in writer.sealed:
                os.unlink(self.store.container_path(number))
        except OSError:
            pass  # garbage that the next reclaim removes


# A process forked from this one (a restore's streams) gets a copy of every open file, and a
# flock lasts while any copy of its open file is open. The thread that took a store lock is
# not in the child and never releases it there, so the lock would stay taken, for every
# process using the pool, until the child ends. The child therefore closes at once every
# descriptor of a store's lock file: all are known by inode, registered before the first
# lock is taken (a fork may come between another thread's open and its lock).
_lock_files = set()  # (st_dev, st_ino) of the store lock files this process opened
_held_locks = set()  # the _FileLocks held now, whose fd the child forgets
_lock_files_mutex = threading.Lock()


def _register_lock_file(fd):
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) not in _lock_files:
        with _lock_files_mutex:
            _lock_files.add((st.st_dev, st.st_ino))


def _close_inherited_locks():
    global _lock_files_mutex
    _lock_files_mutex = threading.Lock()  # another thread may have held it at the fork
    for lock in list(_held_locks):
        lock.fd = None
    _held_locks.clear()
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(3, 1024)  # no /proc: the descriptors most processes stay below
    for fd in fds:
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in _lock_files:
            try:
                os.close(fd)
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited_locks)


class _FileLock:
    """The store's thread mutex plus an exclusive flock on the lock file, opened anew each time
    because flock does not exclude holders of the same open file."""

    def __init__(self, path, mutex):
        self.path = path
        self.mutex = mutex
        self.fd = None

    def __enter__(self):
        self.mutex.acquire()
        try:
            _held_locks.add(self)
            self.fd = private.create(self.path, os.O_RDWR)
            _register_lock_file(self.fd)  # the lock file may have been made anew
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            self._close()
            self.mutex.release()
            raise
        return self

    def __exit__(self, *exc):
        try:
            self._close()  # closing drops the flock
        finally:
            self.mutex.release()

    def _close(self):
        _held_locks.discard(self)
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
        return False


class Writer:
    """Adds chunks to new containers of one store. One writer per thread; use several writers
    for parallel writing. Index entries are published when a container is sealed: when it is
    full, and at commit(). With publish=False (space reclaim) nothing is indexed; the caller
    takes the locations from the records it puts and the sealed containers.

    background=True: the writes, and the sealing of full containers (fsync, rename, index),
    run on a thread of the writer's own, in order, so that the caller goes on encoding while
    the device works (direct writes wait for it, and a busy device would stall a backup's
    whole pipeline). A failure there is raised by the next call that adds a chunk, or by
    commit(); after it nothing more is written, and abort() removes what was not sealed."""

    def __init__(self, store, publish=True, background=False):
        self.store = store
        self._publish = publish
        self._fd = None
        self._out = None  # the Appender of the open container
        self._bufs = []  # headers and stored bytes not yet written to the open container
        self._buffered = 0
        self._written = 0  # bytes of the open container written (and their writeback started)
        self._number = None
        self._size = 0
        self._pending = []  # (fp, Location) in the open container
        self._added = set()
        self._closed = False
        # containers opened and not sealed yet: number -> (fd, Appender)
        self._unsealed = {}
        self._background = background
        self._io_queue = None
        self._io_thread = None
        self._io_error = None
        self._dropping = False  # abort(): queued writes are skipped
        self.sealed = []  # (container number, size) of the containers this writer committed
        self.stored_chunks = 0
        self.stored_bytes = 0

    def add(self, fp, data):
        """Stores one chunk unless the store or this writer already has it. Returns True when
        it was stored."""
        if self._closed:
            raise ValidationError("this chunk store writer is already committed or aborted",
                                  hint="Open a new writer with store.writer().")
        fp = _check_fingerprint(fp)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValidationError(f"chunk data must be bytes, not {type(data).__name__}")
        if len(data) > MAX_CHUNK_SIZE:
            raise ValidationError(f"a chunk of {len(data)} bytes is too large",
                                  hint="Chunks come from the chunker (at most 16 MiB).")
        if fp in self._added or self.store.has(fp):
            return False
        header, stored = self.store.encode_record(fp, data)
        self._put(fp, header, stored)
        self.stored_chunks += 1
        self.stored_bytes += len(stored)
        return True

    def wanted(self, fp):
        """Whether a chunk is new to the store and to this writer (then encode it with
        store.encode_record, which may run in other threads, and give it to add_encoded)."""
        return fp not in self._added and not self.store.has(fp)

    def add_encoded(self, fp, raw_length, encoded):
        """Stores a chunk encoded by store.encode_record(fp, data) unless it was stored
        meanwhile. Returns True when it was stored."""
        if self._closed:
            raise ValidationError("this chunk store writer is already committed or aborted",
                                  hint="Open a new writer with store.writer().")
        fp = _check_fingerprint(fp)
        if fp in self._added:
            return False
        header, stored = encoded
        self._put(fp, header, stored)
        self.stored_chunks += 1
        self.stored_bytes += len(stored)
        return True

    def _put_record(self, fp, record):
        """Appends a whole record (header and stored bytes) as it is; returns its Location."""
        return self._put(fp, record, b"")

    def _put(self, fp, header, stored):
        if self._io_error is not None:
            raise self._io_error
        record_size = len(header) + len(stored)
        if self._fd is not None and self._size + record_size > self.store.container_size:
            self._seal()
        if self._fd is None:
            self._number, self._fd = self.store._new_container()
            self._size = self._written = CONTAINER_HEADER.size
            try:
                # containers are written once and read rarely: past the page cache where
                # possible
                self._out = Appender(self.store.container_path(self._number, committed=False),
                                     self._fd, _container_header(self._number))
            finally:
                self._unsealed[self._number] = (self._fd, self._out)
        offset = self._size
        self._bufs.append(header)
        if stored:
            self._bufs.append(stored)
        self._buffered += record_size
        if self._buffered >= WRITE_BUFFER:
            self._flush()
        self._size += record_size
        loc = Location(self._number, offset, record_size - RECORD_HEADER.size)
        self._pending.append((fp, loc))
        self._added.add(fp)
        return loc

    def _flush(self):
        """Writes the buffered records (direct I/O: whole blocks, the rest stays staged; else
        with as few system calls as there are IOV_MAX-long runs of them, then starting their
        writeback, so that sealing the container waits for little)."""
        if not self._bufs:
            return
        bufs, n = self._bufs, self._buffered
        self._bufs, self._buffered = [], 0
        self._io(self._write_out, self._number, self._fd, self._out, bufs, self._written, n)
        self._written += n

    def _write_out(self, number, fd, out, bufs, offset, n):
        self._writing(number, out.write, bufs)
        if not out.direct:
            start_writeback(fd, offset, n)

    def _writing(self, number, write, *args):
        try:
            write(*args)
        except OSError as e:
            raise _write_failed(self.store.container_path(number, committed=False),
                                e) from None

    def _seal(self):
        """Makes the open container durable and committed, then indexes its chunks."""
        self._flush()
        args = (self._number, self._fd, self._out, self._size, self._pending)
        self._out = self._fd = self._number = None
        self._pending = []
        self._io(self._seal_container, *args)

    def _seal_container(self, number, fd, out, size, pending):
        self._writing(number, out.finish)
        self._writing(number, os.fsync, fd)
        os.rename(self.store.container_path(number, committed=False),
                  self.store.container_path(number))
        fsync_dir(self.store.containers_dir)
        del self._unsealed[number]
        os.close(fd)
        self.sealed.append((number, size))
        if self._publish:
            with self.store._locked():
                self.store._append_index(pending)

    # ---- the writing thread (background=True) -----------------------------------------------
    def _io(self, fn, *args):
        if self._io_error is not None:
            raise self._io_error
        if not self._background:
            fn(*args)
            return
        if self._io_thread is None:
            self._io_queue = queue.Queue(BACKGROUND_WRITES)
            self._io_thread = threading.Thread(target=self._io_loop, name="dedup-write",
                                               daemon=True)
            self._io_thread.start()
        # the thread takes every item until the end (after a failure it skips them), so a
        # full queue always drains
        self._io_queue.put((fn, args))

    def _io_loop(self):
        get = self._io_queue.get
        while True:
            item = get()
            if item is None:
                return
            if self._io_error is not None or self._dropping:
                continue  # after a failure, or once aborted, nothing more is written
            fn, args = item
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - raised by the caller's next call
                self._io_error = e

    def _stop_io(self):
        """Waits for everything queued; raises what failed there."""
        thread, self._io_thread = self._io_thread, None
        if thread is not None:
            self._io_queue.put(None)
            thread.join()
        if self._io_error is not None:
            raise self._io_error

    def commit(self):
        """Seals the open container and makes its chunks' index entries durable."""
        if self._closed:
            return
        if self._fd is not None:
            self._seal()
        self._stop_io()
        self._closed = True

    def abort(self):
        """Drops the containers not sealed yet. Containers already sealed because they were
        full stay (their chunks are indexed and valid)."""
        if self._closed:
            return
        self._closed = True
        self._bufs, self._buffered = [], 0
        self._dropping = True
        try:
            self._stop_io()
        except BaseException:  # noqa: BLE001 - the failure being cleaned up after
            pass
        unsealed, self._unsealed = self._unsealed, {}
        self._fd = self._number = self._out = None
        self._pending = []
        for number, (fd, out) in sorted(unsealed.items()):
            path = self.store.container_path(number, committed=False)
            try:
                if out is not None:
                    out.close()
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            finally:
                os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False
