"""On-disk chunk store of the dedup pool: append-only containers plus a chunk index.

Runs in the agent on the storage host, so only the standard library is needed; `zstandard` is
used when importable, otherwise zlib level 1. Each record names its codec, so either kind of
reader can read what the other wrote, except that a zstd record needs `zstandard` to decode.

Layout under the store root:
    containers/NNNNNNNN.partial   being written by one writer (ignored by every reader)
    containers/NNNNNNNN.ctr       committed: fsync'ed, then renamed from .partial
    index/chunks.log              fingerprint -> (container, offset, stored length)
    index/lock                    fcntl lock serializing index appends and number allocation

Container file: header CONTAINER_HEADER (magic, format version, container number), then
records of RECORD_HEADER (magic, fingerprint, codec, raw length, stored length, crc32 of the
stored bytes) each followed by the stored bytes. A container holds at most `container_size`
bytes unless a single record is larger.

Index file: INDEX_MAGIC, then fixed-size INDEX_RECORD entries (fingerprint, container, offset of
the record, stored length, crc32 of the entry). It is append-only; a torn last entry (a crash
during an append) is ignored on read and cut off by the next append. When a fingerprint has
several entries (two writers stored the same chunk at once) the first one wins. The index can
always be rebuilt from the committed containers alone (rebuild_index).
"""

import errno
import fcntl
import hashlib
import os
import struct
import threading
import zlib
from collections import namedtuple

from app import status
from app.errors import CairnError, NotFound, ValidationError

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

CONTAINER_MAGIC = b"CRNDCTR\x00"
CONTAINER_VERSION = 1
CONTAINER_HEADER = struct.Struct(">8sII")  # magic, version, container number
RECORD_MAGIC = b"CHK1"
RECORD_HEADER = struct.Struct(">4s32sBIII")  # magic, fp, codec, raw len, stored len, crc32

INDEX_MAGIC = b"CRNDIDX1"
INDEX_ENTRY = struct.Struct(">32sIQI")  # fp, container, record offset, stored length
INDEX_RECORD = struct.Struct(">32sIQII")  # the entry followed by its crc32

DEFAULT_CONTAINER_SIZE = 64 * 1024 * 1024
MAX_CHUNK_SIZE = 0xFFFFFFFF
CONTAINER_DIGITS = 8

Location = namedtuple("Location", "container offset stored_length")
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


class CodecUnavailable(CairnError):
    """The chunk was written with zstd and this host lacks the `zstandard` module."""
    status = status.STORAGE_WRITE_FAILED


def container_name(number, committed=True):
    return f"{number:0{CONTAINER_DIGITS}d}" + (".ctr" if committed else ".partial")


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


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _compress(codec, data):
    if codec == CODEC_ZSTD:
        return _zstd.ZstdCompressor(level=3).compress(data)
    if codec == CODEC_ZLIB:
        return zlib.compress(data, 1)
    return bytes(data)


def _decompress(codec, stored, raw_length, where):
    """Decoded bytes; raises ChunkDamaged (via ValueError) on undecodable input."""
    if codec == CODEC_NONE:
        return stored
    if codec == CODEC_ZLIB:
        return zlib.decompress(stored)
    if codec == CODEC_ZSTD:
        if _zstd is None:
            raise CodecUnavailable(
                f"chunk at {where} was stored with zstd, and the zstandard module is not "
                f"installed here",
                hint="Install it on this host (pip install zstandard) to read this store.")
        return _zstd.ZstdDecompressor().decompress(stored, max_output_size=raw_length)
    raise ValueError(f"unknown codec {codec}")


def _decode_record(header, stored, where):
    """Checks one record; returns (fingerprint, data) or raises ValueError naming the fault."""
    magic, fp, codec, raw_length, stored_length, crc = header
    if zlib.crc32(stored) != crc:
        raise ValueError("crc32 of the stored bytes does not match")
    try:
        data = _decompress(codec, stored, raw_length, where)
    except (CodecUnavailable, ValueError):
        raise
    except Exception as e:  # zlib.error, zstd.ZstdError: the bytes do not decode
        raise ValueError(f"stored bytes do not decode ({CODEC_NAMES.get(codec, codec)}): {e}")
    if len(data) != raw_length:
        raise ValueError(f"decoded length {len(data)} differs from the recorded {raw_length}")
    if hashlib.sha256(data).digest() != fp:
        raise ValueError("sha256 of the data differs from its fingerprint")
    return fp, data


class ChunkStore:
    """One store directory. Safe to share between threads; several processes (each with its
    own ChunkStore) may write at once."""

    def __init__(self, root, *, codec=None, container_size=DEFAULT_CONTAINER_SIZE):
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
        self.root = os.path.abspath(root)
        self.codec = CODECS[codec]
        self.container_size = container_size
        self.containers_dir = os.path.join(self.root, "containers")
        self.index_dir = os.path.join(self.root, "index")
        self.index_path = os.path.join(self.index_dir, "chunks.log")
        self._lock_path = os.path.join(self.index_dir, "lock")
        for d in (self.root, self.containers_dir, self.index_dir):
            os.makedirs(d, exist_ok=True)
        self._mutex = threading.RLock()
        self._index = {}
        self._index_pos = 0
        self._index_ino = None
        with self._mutex:
            self._refresh()

    # ------------------------------------------------------------------ locking and index log

    def _locked(self):
        return _FileLock(self._lock_path, self._mutex)

    def _refresh(self):
        """Reads index entries appended since the last read (by any process). A replaced log
        (rebuild_index) is read again from the start."""
        try:
            f = open(self.index_path, "rb")
        except FileNotFoundError:
            self._index, self._index_pos, self._index_ino = {}, 0, None
            return
        with f:
            st = os.fstat(f.fileno())
            if st.st_ino != self._index_ino:
                self._index, self._index_pos, self._index_ino = {}, 0, st.st_ino
            if self._index_pos == 0:
                if f.read(len(INDEX_MAGIC)) != INDEX_MAGIC:
                    return  # empty or not yet initialised: nothing to read
                self._index_pos = len(INDEX_MAGIC)
            f.seek(self._index_pos)
            size = INDEX_RECORD.size
            # only whole entries: a torn tail stays unread until it is completed or cut off
            blob = f.read(((st.st_size - self._index_pos) // size) * size)
        for at in range(0, len(blob) - size + 1, size):
            fp, number, offset, length, crc = INDEX_RECORD.unpack_from(blob, at)
            if zlib.crc32(blob[at:at + INDEX_ENTRY.size]) != crc:
                continue  # a damaged entry only loses a lookup; rebuild_index restores it
            self._index.setdefault(fp, Location(number, offset, length))
        self._index_pos += len(blob)

    def _append_index(self, entries):
        """Appends (fp, Location) entries durably; call with the lock held. Returns how many
        were new (a concurrent writer may have indexed the same chunk first)."""
        self._refresh()
        fresh = [(fp, loc) for fp, loc in entries if fp not in self._index]
        if not fresh:
            return 0
        fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size < len(INDEX_MAGIC):
                os.ftruncate(fd, 0)
                os.pwrite(fd, INDEX_MAGIC, 0)
                size = len(INDEX_MAGIC)
            whole = len(INDEX_MAGIC) + ((size - len(INDEX_MAGIC)) // INDEX_RECORD.size) \
                * INDEX_RECORD.size
            if whole != size:
                os.ftruncate(fd, whole)  # a torn entry from a crashed append
            out = bytearray()
            for fp, loc in fresh:
                entry = INDEX_ENTRY.pack(fp, *loc)
                out += entry + struct.pack(">I", zlib.crc32(entry))
            os.pwrite(fd, bytes(out), whole)
            os.fsync(fd)
        finally:
            os.close(fd)
        if size == len(INDEX_MAGIC):
            _fsync_dir(self.index_dir)  # the log may have just been created
        self._refresh()
        return len(fresh)

    # ------------------------------------------------------------------ reading

    def has(self, fp):
        fp = _check_fingerprint(fp)
        with self._mutex:
            if fp not in self._index:
                self._refresh()
            return fp in self._index

    def locate(self, fp):
        fp = _check_fingerprint(fp)
        with self._mutex:
            loc = self._index.get(fp)
            if loc is None:
                self._refresh()
                loc = self._index.get(fp)
        if loc is None:
            raise ChunkNotFound(f"no chunk {fp.hex()} in the store at {self.root}",
                                hint="It was never committed, or the index lost it: "
                                     "rebuild_index() rescans the containers.")
        return loc

    def __len__(self):
        with self._mutex:
            self._refresh()
            return len(self._index)

    def fingerprints(self):
        with self._mutex:
            self._refresh()
            return dict(self._index)

    def container_path(self, number, committed=True):
        return os.path.join(self.containers_dir, container_name(number, committed))

    def get(self, fp):
        """The chunk's data, checked against its crc32 and its fingerprint."""
        fp = _check_fingerprint(fp)
        number, offset, stored_length = self.locate(fp)
        path = self.container_path(number)
        where = f"{path} offset {offset}"

        def damaged(reason):
            return ChunkDamaged(f"chunk {fp.hex()} is damaged in {where}: {reason}",
                                container=path, offset=offset, fingerprint=fp, reason=reason,
                                hint="Run the store verification; the chunk must be stored "
                                     "again from a source that still has it.")
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                raw = f.read(RECORD_HEADER.size + stored_length)
        except FileNotFoundError:
            raise damaged("the container is missing") from None
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
            return _decode_record(header, raw[RECORD_HEADER.size:], where)[1]
        except ValueError as e:
            raise damaged(str(e)) from None

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
        records after it cannot be found. With `decode`, each record's data is checked too."""
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
                if header[0] != RECORD_MAGIC or header[2] not in CODEC_NAMES:
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
                        _decode_record(header, stored, f"{path} offset {offset}")
                    except ValueError as e:
                        error = str(e)
                elif zlib.crc32(stored) != header[5]:
                    error = "crc32 of the stored bytes does not match"
                yield offset, header, error
                offset += RECORD_HEADER.size + stored_length

    def rebuild_index(self):
        """Replaces the index with one made from the committed containers alone. Records that
        fail their crc32 are left out (so the chunk can be stored again); a container's torn
        end is skipped. Returns counts."""
        counts = {"containers": 0, "chunks": 0, "duplicates": 0, "damaged": 0, "torn": 0}
        with self._locked():
            entries = {}
            for number in self.committed_containers():
                counts["containers"] += 1
                for offset, header, error in self._scan(number, decode=False):
                    if header is None or "torn" in (error or ""):
                        counts["torn"] += 1
                    elif error:
                        counts["damaged"] += 1
                    elif header[1] in entries:
                        counts["duplicates"] += 1
                    else:
                        entries[header[1]] = Location(number, offset, header[4])
            counts["chunks"] = len(entries)
            tmp = self.index_path + ".rebuild"
            with open(tmp, "wb") as f:
                out = bytearray(INDEX_MAGIC)
                for fp, loc in entries.items():
                    entry = INDEX_ENTRY.pack(fp, *loc)
                    out += entry + struct.pack(">I", zlib.crc32(entry))
                f.write(out)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.index_path)
            _fsync_dir(self.index_dir)
            self._refresh()
        return counts

    def verify(self):
        """Yields a Damage(fingerprint, container, offset, reason) for every record of every
        committed container that does not read back intact (crc32, decoding, length, sha256)
        and for every cut or unreadable container structure (fingerprint None when unknown)."""
        for number in self.committed_containers():
            path = self.container_path(number)
            for offset, header, error in self._scan(number, decode=True):
                if error:
                    yield Damage(header[1] if header else None, path, offset, error)

    def remove_stale_partials(self):
        """Deletes .partial containers whose writer has died (it no longer holds its lock);
        returns their paths. Live writers in any process are left alone."""
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
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    continue
                os.close(fd)
                raise
            try:
                os.unlink(path)
                removed.append(path)
            finally:
                os.close(fd)
        return removed

    # ------------------------------------------------------------------ writing

    def writer(self):
        return Writer(self)

    def _new_container(self):
        """Claims the next container number; the fd is returned locked for this writer."""
        with self._locked():
            used = [_container_number(n) for n in os.listdir(self.containers_dir)]
            number = max([n for n in used if n is not None], default=0) + 1
            while True:
                path = self.container_path(number, committed=False)
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    number += 1
                    continue
                if os.path.exists(self.container_path(number)):
                    os.close(fd)
                    os.unlink(path)
                    number += 1
                    continue
                break
        # held until commit or abort, so remove_stale_partials can tell a live writer
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, CONTAINER_HEADER.pack(CONTAINER_MAGIC, CONTAINER_VERSION, number))
        return number, fd


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
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            if self.fd is not None:
                os.close(self.fd)
            self.mutex.release()
            raise
        return self

    def __exit__(self, *exc):
        try:
            os.close(self.fd)  # closing drops the flock
        finally:
            self.fd = None
            self.mutex.release()
        return False


class Writer:
    """Adds chunks to new containers of one store. One writer per thread; use several writers
    for parallel writing. Index entries are published when a container is sealed: when it is
    full, and at commit()."""

    def __init__(self, store):
        self.store = store
        self._fd = None
        self._number = None
        self._size = 0
        self._pending = []  # (fp, Location) in the open container
        self._added = set()
        self._closed = False
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
        codec = self.store.codec
        stored = _compress(codec, data)
        if len(stored) >= len(data):
            codec, stored = CODEC_NONE, bytes(data)
        record_size = RECORD_HEADER.size + len(stored)
        if self._fd is not None and self._size + record_size > self.store.container_size:
            self._seal()
        if self._fd is None:
            self._number, self._fd = self.store._new_container()
            self._size = CONTAINER_HEADER.size
        header = RECORD_HEADER.pack(RECORD_MAGIC, fp, codec, len(data), len(stored),
                                    zlib.crc32(stored))
        offset = self._size
        os.write(self._fd, header)
        self._write_all(stored)
        self._size += record_size
        self._pending.append((fp, Location(self._number, offset, len(stored))))
        self._added.add(fp)
        self.stored_chunks += 1
        self.stored_bytes += len(stored)
        return True

    def _write_all(self, data):
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def _seal(self):
        """Makes the open container durable and committed, then indexes its chunks."""
        fd, number = self._fd, self._number
        os.fsync(fd)
        os.rename(self.store.container_path(number, committed=False),
                  self.store.container_path(number))
        _fsync_dir(self.store.containers_dir)
        os.close(fd)
        self._fd = self._number = None
        with self.store._locked():
            self.store._append_index(self._pending)
        self._pending = []

    def commit(self):
        """Seals the open container and makes its chunks' index entries durable."""
        if self._closed:
            return
        if self._fd is not None:
            self._seal()
        self._closed = True

    def abort(self):
        """Drops the open container. Containers already sealed because they were full stay
        (their chunks are indexed and valid)."""
        if self._closed:
            return
        self._closed = True
        if self._fd is not None:
            path = self.store.container_path(self._number, committed=False)
            try:
                os.unlink(path)
            finally:
                os.close(self._fd)
                self._fd = self._number = None
                self._pending = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False
