"""Reading an index: listings, lookups and walks from a few small reads (layout.py says
why), with recent listings kept for a browser going back and forth."""

from __future__ import annotations

import gc
import os
import struct
import threading
import zlib
from bisect import bisect_left
from collections import OrderedDict
from itertools import repeat
from typing import Iterator, NamedTuple, Optional

from app.catalog_index.block import _block_head, _decode_block
from app.catalog_index.errors import IndexCorrupt
from app.catalog_index.layout import APPENDIX_MAGIC, FORMAT_VERSION, MAGIC, READABLE_VERSIONS, \
    TRAILER_MAGIC, _APPENDIX_END, _BLOCK_HEAD, _DIGEST, _FIXED_PER_ENTRY, _FS_ENC, _FS_ERR, \
    _HEADER, _KIND_SET, _RECORD, _RECORD_BODY, _ROOT_KEY, _ROOT_ROW_KEY, _TRAILER, _fsdecode, \
    _fsencode

_PROBES_BEFORE_LOAD = 256
# Listings a reader keeps for going back and forth in a browser. A listing of 100,000 entries
# is ~50 MB of Python objects, hence a bound on entries as well as on directories.
_CACHE_MAX_DIRS = 16
_CACHE_MAX_ENTRIES = 150_000

_tuple_new = tuple.__new__


class Entry(NamedTuple):
    """One file or directory of an image."""
    path: str
    name: str
    kind: str
    mode: int
    uid: int
    gid: int
    size: int
    mtime_ns: int
    offset: int
    length: int
    checksum: str
    link: str
    ctime_ns: int = 0
    ino: int = 0
    src: int = 0

    def to_row(self) -> list:
        """The 11-field row of app.formats.entry."""
        return [self[0], *self[2:12]]

    def to_full_row(self) -> list:
        """The 14-field row: the 11 fields, ctime_ns, inode and source."""
        return [self[0], *self[2:]]

    def to_dict(self) -> dict:
        return dict(zip(self._fields, self))


def tree_order(entries):
    """A directory's entries as a file tree shows them: directories first, then by name
    regardless of case. The index gives them sorted by name bytes; the sort below uses only
    C-level keys, so that 100,000 entries take milliseconds."""
    names = [e.name for e in entries]
    lowers = list(map(str.lower, names))
    if lowers == names:     # no capitals: name-byte order already is the order shown
        ordered = entries
    else:
        ordered = list(map(entries.__getitem__, sorted(range(len(entries)),
                                                        key=lowers.__getitem__)))
    dirs = [e for e in ordered if e.kind == "d"]
    if dirs:
        ordered = dirs + [e for e in ordered if e.kind != "d"]
    return ordered


def _canonical_key(path) -> bytes:
    """The table key of a path given by a caller: absolute, no repeated or trailing slash.
    A relative path is taken from "/", as a browser that strips the leading slash expects."""
    if isinstance(path, str):
        path = _fsencode(path)
    elif not isinstance(path, (bytes, bytearray)):
        raise TypeError(f"path must be str or bytes, not {type(path).__name__}")
    parts = [p for p in bytes(path).split(b"/") if p and p != b"."]
    return b"/" + b"/".join(parts)


def _child_prefix(key: bytes) -> str:
    if key == _ROOT_KEY:
        return "/"
    return _fsdecode(key) + "/"


class IndexReader:
    """Opening reads only the header and the trailer. A listing is a binary search over the
    directory table (a few small reads, or the table in memory once a reader has done many)
    and one read of one block."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            self._open()
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise

    def _read(self, offset: int, length: int) -> bytes:
        buf = os.pread(self._fd, length, offset)
        while len(buf) < length:  # short reads only happen at the end of the file
            more = os.pread(self._fd, length - len(buf), offset + len(buf))
            if not more:
                raise IndexCorrupt(self.path, "file ends inside a block: truncated")
            buf += more
        return buf

    def _open(self):
        size = os.fstat(self._fd).st_size
        if size < _HEADER.size + _TRAILER.size:
            raise IndexCorrupt(self.path, f"file is {size} bytes, too short for an index")
        magic, version, _flags, _ = _HEADER.unpack(self._read(0, _HEADER.size))
        if magic != MAGIC:
            raise IndexCorrupt(self.path, "not a Cairn catalog index (bad magic)")
        if version not in READABLE_VERSIONS:
            raise IndexCorrupt(self.path, f"format version {version} is not supported by this "
                                          f"Cairn (it reads versions 1 to {FORMAT_VERSION})")
        self._version = version
        t = self._read(size - _TRAILER.size, _TRAILER.size)
        fields = _TRAILER.unpack(t)
        if fields[0] != TRAILER_MAGIC:
            raise IndexCorrupt(self.path, "trailer missing: the file is truncated or was not "
                                          "finished")
        if fields[-1] != zlib.crc32(t[:-4]):
            raise IndexCorrupt(self.path, "trailer checksum mismatch")
        (_, self._table_off, self._ndirs, self._keys_off, self._keys_len, self._n_entries,
         self._rows, file_size, _, _) = fields
        if file_size != size:
            raise IndexCorrupt(self.path, f"file is {size} bytes, its trailer says "
                                          f"{file_size}: truncated or appended to")
        if (self._table_off < _HEADER.size
                or self._keys_off != self._table_off + _RECORD.size * self._ndirs
                or self._keys_off + self._keys_len + _TRAILER.size != size):
            raise IndexCorrupt(self.path, "directory table is out of bounds")
        self._table = None
        self._probes = 0
        self._cache: OrderedDict = OrderedDict()   # key -> tuple of entries
        self._cached = 0
        self._lock = threading.Lock()

    # -- table -------------------------------------------------------------------------------

    def _record(self, i: int):
        """Table record i as (key, block offset, block length, entries, block crc)."""
        table = self._table
        if table is None:
            self._probes += 1
            if self._probes > _PROBES_BEFORE_LOAD:
                # Many lookups on one reader (a walk, a browsing session): one read of the
                # whole table is cheaper than two small reads per probe from here on.
                table = self._table = self._read(
                    self._table_off, self._keys_off + self._keys_len - self._table_off)
        if table is None:
            raw = self._read(self._table_off + i * _RECORD.size, _RECORD.size)
            ko, kl, bo, bl, n, crc, rcrc = _RECORD.unpack(raw)
            if ko + kl > self._keys_len:
                raise IndexCorrupt(self.path, f"directory table record {i} is out of bounds")
            key = self._read(self._keys_off + ko, kl)
        else:
            ko, kl, bo, bl, n, crc, rcrc = _RECORD.unpack_from(table, i * _RECORD.size)
            raw = table[i * _RECORD.size:(i + 1) * _RECORD.size]
            k0 = self._keys_off - self._table_off + ko
            if ko + kl > self._keys_len:
                raise IndexCorrupt(self.path, f"directory table record {i} is out of bounds")
            key = table[k0:k0 + kl]
        if zlib.crc32(key, zlib.crc32(raw[:_RECORD_BODY])) != rcrc:
            raise IndexCorrupt(self.path, f"directory table record {i} checksum mismatch")
        return key, bo, bl, n, crc

    def _find(self, key: bytes):
        """(block offset, block length, entries, crc) of a directory key, or None."""
        if self._fd is None:
            raise ValueError(f"catalog index {self.path} is closed")
        lo, hi = 0, self._ndirs
        while lo < hi:
            mid = (lo + hi) >> 1
            k, bo, bl, n, crc = self._record(mid)
            if k < key:
                lo = mid + 1
            elif k > key:
                hi = mid
            else:
                if bo < _HEADER.size or bo + bl > self._table_off or n == 0:
                    raise IndexCorrupt(self.path, f"table record of {_fsdecode(key)!r} is "
                                                  f"out of bounds")
                return bo, bl, n, crc
        return None

    def _block(self, key: bytes):
        """(raw block, entries) of a directory, or None if it has no listing."""
        found = self._find(key)
        if found is None:
            return None
        bo, bl, n, crc = found
        buf = self._read(bo, bl)
        if zlib.crc32(buf) != crc:
            raise IndexCorrupt(self.path, f"block of {_fsdecode(key)!r} checksum mismatch")
        return buf, n

    def _entries(self, key: bytes) -> Optional[list]:
        got = self._block(key)
        if got is None:
            return None
        buf, n = got
        # The cyclic garbage collector would otherwise run every few hundred new tuples and,
        # for a large directory, rescan the growing result many times over (it tripled the time
        # of listing 100,000 entries). Nothing built here can form a cycle.
        reenable = gc.isenabled()
        gc.disable()
        try:
            cols = _decode_block(buf, n, repr(_fsdecode(key)), self.path, self._version)
            paths = list(map(_child_prefix(key).__add__, cols[0]))
            return list(map(_tuple_new, repeat(Entry, n), zip(paths, *cols)))
        finally:
            if reenable:
                gc.enable()

    # -- API ---------------------------------------------------------------------------------

    def list_dir(self, path: str) -> list:
        """The direct children of a directory, sorted by name bytes. [] for an empty directory
        or a path that is not a directory; KeyError if the path is not in the image.
        Recent listings are kept, so listing a directory again costs a list copy."""
        key = _canonical_key(path)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return list(hit)
        entries = self._entries(key)
        if entries is not None:
            self._remember(key, entries)
            return entries
        if key == _ROOT_KEY or self._lookup_key(key) is not None:
            return []
        raise KeyError(path)

    def _remember(self, key: bytes, entries: list):
        if len(entries) > _CACHE_MAX_ENTRIES:
            return
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = tuple(entries)
            self._cached += len(entries)
            while (len(self._cache) > _CACHE_MAX_DIRS
                   or self._cached > _CACHE_MAX_ENTRIES):
                self._cached -= len(self._cache.popitem(last=False)[1])

    def lookup(self, path: str) -> Optional[Entry]:
        return self._lookup_key(_canonical_key(path))

    def _lookup_key(self, key: bytes) -> Optional[Entry]:
        if key == _ROOT_KEY:
            got = self._entries(_ROOT_ROW_KEY)
            return got[0] if got else None
        parent, _, name = key.rpartition(b"/")
        parent = parent or _ROOT_KEY
        got = self._block(parent)
        if got is None:
            return None
        buf, n = got
        where = repr(_fsdecode(parent))
        head = _block_head(buf, n, where, self.path, self._version)
        o_names = _BLOCK_HEAD.size + _FIXED_PER_ENTRY[self._version] * n
        names = buf[o_names:o_names + head.name_len].split(b"\0")
        if len(names) != n:
            raise IndexCorrupt(self.path, f"block of {where} has a bad name table")
        i = bisect_left(names, name)
        if i == n or names[i] != name:
            return None
        o = _BLOCK_HEAD.size
        size, mtime, offset, length = (struct.unpack_from("<q", buf, o + (8 * n) * j + 8 * i)[0]
                                       for j in range(4))
        o += 32 * n
        uid, = struct.unpack_from("<I", buf, o + 4 * i)
        gid, = struct.unpack_from("<I", buf, o + 4 * n + 4 * i)
        o += 8 * n
        mode, = struct.unpack_from("<H", buf, o + 2 * i)
        o += 2 * n
        kind = chr(buf[o + i])
        checksum = ""
        if buf[o + n + i]:
            at = o + 2 * n + _DIGEST * i
            checksum = buf[at:at + _DIGEST].hex()
        o_links = o_names + head.name_len
        link = _fsdecode(buf[o_links:o_links + head.link_len].split(b"\0")[i])
        if kind not in _KIND_SET:
            raise IndexCorrupt(self.path, f"block of {where} has a bad kind column")
        ctime = ino = src = 0
        if self._version >= 2:
            o = o + 2 * n + _DIGEST * n
            ctime, = struct.unpack_from("<q", buf, o + 8 * i)
            ino, = struct.unpack_from("<Q", buf, o + 8 * n + 8 * i)
            src, = struct.unpack_from("<H", buf, o + 16 * n + 2 * i)
        return Entry(_fsdecode(key), _fsdecode(name), kind, mode, uid, gid, size, mtime, offset,
                     length, checksum, link, ctime, ino, src)

    def __del__(self):
        self.close()

    def is_dir(self, path: str) -> bool:
        key = _canonical_key(path)
        if key == _ROOT_KEY or self._find(key) is not None:
            return True
        e = self._lookup_key(key)
        return e is not None and e.kind == "d"

    def walk(self, path: str = "/") -> Iterator[Entry]:
        """The entry itself (unless it is "/") and everything below it, depth first, each
        directory's children in name order. KeyError (raised at once, not on first next()) if
        the path is not in the image."""
        key = _canonical_key(path)
        me = None
        if key != _ROOT_KEY:
            me = self._lookup_key(key)
            if me is None and self._find(key) is None:
                raise KeyError(path)
        return self._walk(key, me)

    def _walk(self, key: bytes, me: Optional[Entry]) -> Iterator[Entry]:
        if me is not None:
            yield me
            if me.kind != "d":
                return
        stack = [iter(self._entries(key) or ())]
        while stack:
            for e in stack[-1]:
                yield e
                if e.kind == "d":
                    below = self._entries(_fsencode(e.path))
                    if below:
                        stack.append(iter(below))
                        break
            else:
                stack.pop()

    def directories(self) -> Iterator[tuple]:
        """(directory path bytes, its entries) for every directory with children, in path
        byte order: the whole index with one read per block, for a full pass."""
        for i in range(self._ndirs):
            key = self._record(i)[0]
            if key == _ROOT_ROW_KEY:
                continue
            entries = self._entries(key)
            if entries:
                yield key, entries

    def directory_names(self) -> Iterator[tuple]:
        """(directory path, child names) for every directory with children, in path byte
        order, decoding only the name heap of each block: the cheap full pass of a search."""
        for i in range(self._ndirs):
            key, bo, bl, n, crc = self._record(i)
            if key == _ROOT_ROW_KEY:
                continue            # the row of "/" itself, not a directory's children
            buf = self._read(bo, bl)
            where = repr(_fsdecode(key))
            if zlib.crc32(buf) != crc:
                raise IndexCorrupt(self.path, f"block of {where} checksum mismatch")
            head = _block_head(buf, n, where, self.path, self._version)
            o = _BLOCK_HEAD.size + _FIXED_PER_ENTRY[self._version] * n
            names = str(buf[o:o + head.name_len], _FS_ENC, _FS_ERR).split("\0")
            if len(names) != n:
                raise IndexCorrupt(self.path, f"block of {where} has a bad name table")
            yield _fsdecode(key), names

    def appendix(self) -> Optional[bytes]:
        """The bytes the index's writer kept in its appendix (layout.py), or None when it has
        none or they do not match their checksum."""
        end = self._table_off - _APPENDIX_END.size
        if end < _HEADER.size:
            return None
        length, crc, magic = _APPENDIX_END.unpack(self._read(end, _APPENDIX_END.size))
        if magic != APPENDIX_MAGIC or length > end - _HEADER.size:
            return None
        data = self._read(end - length, length)
        return data if zlib.crc32(data) == crc else None

    def count(self) -> int:
        """Entries in the index (each path once; rows repeating a path are merged)."""
        return self._n_entries

    def close(self):
        fd, self._fd = getattr(self, "_fd", None), None
        self._table = None
        self._cache = OrderedDict()
        self._cached = 0
        if fd is not None:
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False
