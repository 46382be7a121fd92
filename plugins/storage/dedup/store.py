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

The ChunkStore here opens a store (pool.json, keys, modes) and reads, encodes and verifies
chunks; its parts live beside it: encoding.py (codecs, encryption, records), containers.py
(container files, scanning, numbering), chunk_index.py (the index log and damaged chunks),
locks.py (the locks, pool sessions and what a forked child lets go), writer.py (Writer),
reclaim.py (space reclaim) and errors.py.

See docs/dedup-pool.md for the format and the key handling.
"""

import fcntl
import hmac
import json
import os
import threading
import time

from app.errors import ValidationError
from app.formats import private
from plugins.storage.dedup import encoding
from plugins.storage.dedup.claims import claims_of
from plugins.storage.dedup.chunk_index import (DAMAGED_LOG, INDEX_HEADER, INDEX_RECORD,
                                               _LENGTH_MASK, ChunkIndex, Damage, Location)
from plugins.storage.dedup.containers import (CONTAINER_HEADER, Containers, _container_number,
                                              container_name, fsync_dir)
from plugins.storage.dedup.encoding import (CODEC_ENCRYPTED, CODEC_NONE, CODEC_ZSTD, CODECS,
                                            KEY_SIZE, NONCE_SIZE, RECORD_HEADER, RECORD_MAGIC,
                                            ZSTD_LEVEL, _check_fingerprint, _Cipher,
                                            _compress, _decode_record, _record, _smaller,
                                            _zstd_compressor, generate_key, key_check_value)
from plugins.storage.dedup.errors import (ChunkDamaged, ChunkNotFound, ChunkSetAside,
                                          CodecUnavailable, EncryptionKeyRequired,
                                          EncryptionUnavailable, PoolBusy, StoreDamaged,
                                          StoreWriteFailed, WrongEncryptionKey)
from plugins.storage.dedup.locks import PoolLocks, PoolSession, _is_busy, _register_lock_file
from plugins.storage.dedup.reclaim import _Reclaim
from plugins.storage.dedup.writer import Writer

# What the store's users take from here; the parts live in the modules named above.
__all__ = ["ChunkStore", "PoolSession", "Writer", "Damage", "Location", "ChunkDamaged",
           "ChunkNotFound", "ChunkSetAside", "CodecUnavailable", "EncryptionUnavailable",
           "EncryptionKeyRequired", "WrongEncryptionKey", "StoreWriteFailed", "PoolBusy",
           "StoreDamaged", "generate_key", "key_check_value", "container_name", "fsync_dir",
           "RECORD_HEADER", "CONTAINER_HEADER", "INDEX_HEADER", "INDEX_RECORD", "CODECS",
           "CODEC_NONE", "CODEC_ZSTD", "CODEC_ENCRYPTED", "NONCE_SIZE", "ZSTD_LEVEL",
           "POOL_FILE", "DEFAULT_CONTAINER_SIZE", "MAX_CONTAINER_SIZE"]

DEFAULT_CONTAINER_SIZE = 64 * 1024 * 1024
MAX_CONTAINER_SIZE = 1 << 39

POOL_FILE = "pool.json"
POOL_FORMAT = 1
KEY_HINT = "The master passes the pool's key; see docs/dedup-pool.md."

# Folders and files found open to other users when the pool was opened, made private again
# then: one JSON object per line, reported (and then forgotten) by the next verify.
LOOSENED_LOG = "loosened.log"


class ChunkStore(ChunkIndex, Containers, PoolLocks):
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
            codec = "zstd" if encoding._zstd is not None else "zlib"
        if codec not in CODECS:
            raise ValidationError(f"unknown chunk codec {codec!r}",
                                  hint=f"Use one of: {', '.join(sorted(CODECS))}.")
        if codec == "zstd" and encoding._zstd is None:
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
                _register_lock_file(fd, self._lock_path)
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
        # chunks this process's writers are storing and have not indexed yet (claims.py)
        self.claims = claims_of(os.path.abspath(self.root))
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
        raw = self._record_bytes(number, path, offset, RECORD_HEADER.size + stored_length,
                                 files)
        if raw is None:
            raise damaged("the container is missing")
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

    def _record_bytes(self, number, path, offset, length, files):
        """`length` bytes of a committed container from `offset`; None when the container is
        nowhere (a container not in the folder is first asked for elsewhere: read_missing,
        fetch_container)."""
        try:
            fd, own = self._container_fd(number, path, files)
        except FileNotFoundError:
            raw = self.read_missing(number, offset, length)
            if raw is not None:
                return raw
            if not self.fetch_container(number):
                return None
            try:
                fd, own = self._container_fd(number, path, files)
            except FileNotFoundError:
                return None
        try:
            return os.pread(fd, length, offset)
        finally:
            if own:
                os.close(fd)

    @staticmethod
    def _container_fd(number, path, files):
        fd = files.fd(number, path) if files is not None else None
        if fd is not None:
            return fd, False
        return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)), True

    def stats(self):
        """chunks and stored_bytes from the index; containers and container_bytes (file
        sizes) from the committed containers; whether the store is encrypted."""
        with self._mutex:
            self._refresh()
            chunks = len(self._index)
            stored = sum(packed & _LENGTH_MASK for packed in self._index.values())
        containers = size = 0
        for number in self.committed_containers():
            got = self.container_bytes(number)
            if got is None:
                continue  # deleted by a reclaim since the listing
            size += got
            containers += 1
        return {"chunks": chunks, "stored_bytes": stored, "containers": containers,
                "container_bytes": size, "encrypted": self.encrypted}
    def verify(self, pace=None):
        """Yields a Damage(fingerprint, container, offset, reason) for every record of every
        committed container that does not read back intact (crc32, decryption, decoding,
        length, sha256) and for every cut or unreadable container structure (fingerprint None
        when unknown). pace(bytes read so far) is called after each record."""
        done = 0
        for number in self.committed_containers():
            path = self.container_path(number)
            try:
                for offset, header, error in self._scan(number, decode=True):
                    if error:
                        yield Damage(header[1] if header else None, path, offset, error)
                    if pace is not None and header:
                        done += header[4]  # the record's stored bytes
                        pace(done)
            except FileNotFoundError:
                continue  # reclaimed since the listing (a verify outside a session)
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

    def encode(self, fp, data, codec=None, level=None):
        """(codec byte, stored bytes) of one chunk: compressed when that helps, then
        encrypted in an encrypted store. Safe to call from several threads at once. The
        stored bytes may be `data` itself (any bytes-like object) when it stays as it is.
        codec, level: an ingest's own (CODEC_NONE: not compressed); by default the store's
        codec at ZSTD_LEVEL."""
        codec = self.codec if codec is None else codec
        if codec == CODEC_NONE:
            stored = data
        else:
            codec, stored = _smaller(codec, data, _compress(codec, data, level))
        return self.seal(fp, codec, stored)

    def seal(self, fp, codec, stored):
        """(codec byte, stored bytes) of a chunk already compressed (or not) as `codec`
        says: encrypted in an encrypted store, else as it is."""
        if self._cipher is not None:
            codec |= CODEC_ENCRYPTED
            return codec, self._cipher.seal(fp, codec, stored)
        return codec, stored

    def encode_record(self, fp, data, codec=None, level=None):
        """(record header, stored bytes) of one chunk, ready for Writer.add_encoded: the
        encoding and its crc32 done in the calling thread, which may be one of several."""
        codec, stored = self.encode(fp, data, codec, level)
        return _record(fp, codec, len(data), stored)

    def compressed_record(self, fp, codec, raw_length, stored):
        """The record of a chunk a client compressed (checked against its fingerprint by
        the caller), stored as it came: encrypted in an encrypted store."""
        codec, stored = self.seal(fp, codec, stored)
        return _record(fp, codec, raw_length, stored)

    def encode_records(self, fps, datas, codec=None, level=None):
        """encode_record of several chunks, the same records: for a plain zstd store, all
        compressed in one call, which gives the interpreter lock up once rather than once
        per chunk (with several encoder threads, each hand-over of the lock costs about as
        much as compressing a few KiB)."""
        packed = None
        codec = self.codec if codec is None else codec
        if codec != self.codec or codec != CODEC_ZSTD:
            return [self.encode_record(fp, d, codec, level) for fp, d in zip(fps, datas)]
        if self._cipher is None:
            batch = getattr(_zstd_compressor(level), "multi_compress_to_buffer", None)
            try:
                packed = batch and batch(list(datas), threads=1)
            except NotImplementedError:  # python-zstandard's CFFI backend lacks it
                pass
        if not packed:
            return [self.encode_record(fp, d, codec, level) for fp, d in zip(fps, datas)]
        out = []
        for fp, data, frame in zip(fps, datas, packed):
            # the memoryview of a frame keeps the whole buffer of frames alive, as it must
            codec, stored = _smaller(CODEC_ZSTD, data, memoryview(frame))
            out.append(_record(fp, codec, len(data), stored))
        return out
