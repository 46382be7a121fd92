"""The catalog file index: one file per backup image (CAIRN_HOME/indexes/) from which any
directory of the image can be listed, any entry looked up and any subtree walked for a restore,
without reading the image itself.

Input is the stream of file rows of app.formats.entry, in image order. The walker emits the
direct children of a directory as one contiguous run, so the writer encodes each run as one
block as soon as the run ends and keeps only the directory table in memory. A directory whose
children arrive in several runs (overlapping selections, parents repeated for each selection)
gets its blocks merged into one when the writer closes, so a listing is always one read (the
run blocks stay behind unused; merged directories are rare). Of rows repeating a path, the
last in image order is kept, as extracting the image would.

File layout (all integers little-endian):

    header   16 bytes: b"CAIRNIDX", u16 format version, u16 flags (0), u32 reserved (0)
    blocks   one per directory: the directory's direct children, sorted by name bytes
    table    one 36-byte record per directory, sorted by directory path bytes:
             u64 key offset (in the key heap), u32 key length, u64 block offset,
             u32 block length, u32 entry count, u32 CRC-32 of the block,
             u32 CRC-32 of the record's first 32 bytes followed by its key
    keys     the directory paths (raw bytes) the table records point into
    trailer  72 bytes: b"CAIRNEND", u64 table offset, u64 directory count, u64 key heap
             offset, u64 key heap length, u64 entries, u64 rows received, u64 file size,
             u32 reserved (0), u32 CRC-32 of the trailer before this field

Each table record carries its own CRC so that a lookup verifies just the records its binary
search touches: opening a cold index reads the header, the trailer, about log2(directories)
records and one block, never the whole table.

A block holds n entries as columns, so that a whole directory decodes with a handful of C-level
calls instead of a Python loop per entry:

    u32 n, u32 name heap length, u32 link heap length, u32 reserved (0)
    i64[n] size, i64[n] mtime_ns, i64[n] offset, i64[n] length, u32[n] uid, u32[n] gid,
    u16[n] mode, n bytes kind (ASCII), n bytes has-checksum (0/1),
    32 bytes per entry: the raw SHA-256 digest, zeros for an entry without one,
    (version 2:) i64[n] ctime_ns, u64[n] inode, u16[n] source,
    names joined by NUL (raw bytes; NUL and "/" cannot occur in a name),
    links joined by NUL (raw bytes)

Version 2 added change time, inode and source: an incremental image lists the whole tree as of
its backup, and an entry it did not send again (unchanged since the image it was compared with)
keeps the offset and length of the member in the image that holds it: source 0 is the image
itself, source k the k-th image of the image's `sources` list in the catalog. Version 1 files
read with zeros in those columns.

A digest column with a slot for every entry costs 32 bytes per directory or symlink, but lets
the reader hex the whole column in one call instead of placing digests entry by entry.

The directory "/" has the key b"/". A row for "/" itself (a selection of the whole file
system) is kept as the single entry, named b"", of the pseudo-directory b"". A directory that
has children but no row of its own gets a synthesized row (mode 0o755, owner 0, length 0: no
member in the image) so that every entry can be reached by listing from "/".

Names are stored as the client's raw bytes: str paths carry undecodable bytes as surrogate
escapes, exactly as os.fsencode/os.fsdecode do.
"""

from __future__ import annotations

import gc
import os
import struct
import sys
import threading
import zlib
from array import array
from bisect import bisect_left
from collections import OrderedDict
from itertools import islice, repeat
from operator import eq, itemgetter
from typing import Iterable, Iterator, NamedTuple, Optional

from app.formats import private
from app.formats.entry import FIELDS, KINDS

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAGIC = b"CAIRNIDX"
TRAILER_MAGIC = b"CAIRNEND"

_HEADER = struct.Struct("<8sHHI")
_TRAILER = struct.Struct("<8sQQQQQQQII")
_RECORD = struct.Struct("<QIQIIII")
_RECORD_BODY = _RECORD.size - 4
_BLOCK_HEAD = struct.Struct("<IIII")
_DIGEST = 32
# Bytes per entry of the fixed-size columns: 4 x i64, 2 x u32, u16, kind, has-checksum, digest.
_FIXED_V1 = 8 * 4 + 4 * 2 + 2 + 1 + 1 + _DIGEST
# Version 2 adds ctime_ns (i64), inode (u64) and source (u16).
_FIXED_V2 = _FIXED_V1 + 8 + 8 + 2
_FIXED_PER_ENTRY = {1: _FIXED_V1, 2: _FIXED_V2}
_NO_DIGEST_HEX = "0" * (2 * _DIGEST)

# Paths are encoded the way os.fsencode does; the encoding is looked up once because the
# writer encodes every row and os.fsencode is a Python-level call.
_FS_ENC = sys.getfilesystemencoding()
_FS_ERR = sys.getfilesystemencodeerrors()
_BIG_ENDIAN = sys.byteorder == "big"
_KIND_SET = frozenset(KINDS)
_ROOT_KEY = b"/"
_ROOT_ROW_KEY = b""          # pseudo-directory that holds the row of "/" itself
_SYNTH_DIR_MODE = 0o755
_BLOCK_LIMIT = 0xFFFFFFFF     # block lengths and heap lengths are u32
_PROBES_BEFORE_LOAD = 256
# Listings a reader keeps for going back and forth in a browser. A listing of 100,000 entries
# is ~50 MB of Python objects, hence a bound on entries as well as on directories.
_CACHE_MAX_DIRS = 16
_CACHE_MAX_ENTRIES = 150_000

for _code, _size in (("q", 8), ("Q", 8), ("I", 4), ("H", 2)):
    if array(_code).itemsize != _size:  # pragma: no cover - exotic platforms only
        raise ImportError(f"array typecode {_code!r} is not {_size} bytes on this platform")

_tuple_new = tuple.__new__


def rebuild_command(image_id) -> str:
    """The command that rebuilds an image's index from the image itself: what a hint names."""
    return f"cairn images rebuild-index {image_id} --wait"


def rebuild_hint(image_id) -> str:
    return f"rebuild it from the image with `{rebuild_command(image_id)}`"


class IndexCorrupt(ValueError):
    """The index file is truncated, damaged or of an unknown format. The master names the
    command that rebuilds it from the image (`cairn images rebuild-index IMAGE`)."""

    def __init__(self, path, reason):
        self.path = path
        self.reason = reason
        super().__init__(f"catalog index {path} is corrupt or unreadable: {reason}")


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


# --------------------------------------------------------------------------------------------
# path helpers

def _fsencode(s: str) -> bytes:
    return s.encode(_FS_ENC, _FS_ERR)


def _fsdecode(b: bytes) -> str:
    return b.decode(_FS_ENC, _FS_ERR)


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


# --------------------------------------------------------------------------------------------
# block encoding

def _col(code: str, values) -> bytes:
    a = array(code, values)
    if _BIG_ENDIAN:  # pragma: no cover
        a.byteswap()
    return a.tobytes()


def _encode_block(names: list, rows: list):
    """Encode one directory's children. Sorts by name bytes; of entries with the same name
    the last one in image order wins, as it would when the image is extracted.
    Returns (block, entry count, number of directory entries, names of directories)."""
    n = len(names)
    order = sorted(range(n), key=names.__getitem__)
    names = [names[i] for i in order]
    rows = [rows[i] for i in order]
    if n > 1 and any(map(eq, names, islice(names, 1, None))):
        keep = [i for i in range(n) if i == n - 1 or names[i] != names[i + 1]]
        names = [names[i] for i in keep]
        rows = [rows[i] for i in keep]
        n = len(names)

    kinds = "".join(map(itemgetter(1), rows))
    if len(kinds) != n or not _KIND_SET.issuperset(kinds):
        raise ValueError("kind must be one of " + ", ".join(KINDS))
    checksums = list(map(itemgetter(9), rows))
    slots = [c or _NO_DIGEST_HEX for c in checksums]
    if set(map(len, slots)) != {2 * _DIGEST}:
        raise ValueError("checksum must be 64 hex digits or empty")
    digests = bytes.fromhex("".join(slots))
    name_heap = b"\0".join(names)
    if name_heap.count(b"\0") != n - 1:
        raise ValueError("a name contains a NUL byte")
    links = list(map(itemgetter(10), rows))
    link_heap = _fsencode("\0".join(links))
    if link_heap.count(b"\0") != n - 1:
        raise ValueError("a link contains a NUL byte")
    if len(name_heap) > _BLOCK_LIMIT or len(link_heap) > _BLOCK_LIMIT:
        raise ValueError("a directory is too large for one index block")

    # Rows of 11 fields (no change time or inode known), 13 (from a client) or 14 (with the
    # source image) may meet in one index, never in one directory run.
    width = min(map(len, rows))
    zeros = bytes(8 * n)
    ctimes = _col("q", map(itemgetter(11), rows)) if width > 11 else zeros
    inodes = _col("Q", map(itemgetter(12), rows)) if width > 12 else zeros
    sources = _col("H", map(itemgetter(13), rows)) if width > 13 else bytes(2 * n)
    block = b"".join((
        _BLOCK_HEAD.pack(n, len(name_heap), len(link_heap), 0),
        _col("q", map(itemgetter(5), rows)),
        _col("q", map(itemgetter(6), rows)),
        _col("q", map(itemgetter(7), rows)),
        _col("q", map(itemgetter(8), rows)),
        _col("I", map(itemgetter(3), rows)),
        _col("I", map(itemgetter(4), rows)),
        _col("H", map(itemgetter(2), rows)),
        kinds.encode("ascii"),
        bytes(map(bool, checksums)),
        digests,
        ctimes,
        inodes,
        sources,
        name_heap,
        link_heap,
    ))
    if len(block) > _BLOCK_LIMIT:
        raise ValueError("a directory is too large for one index block")
    ndirs = kinds.count("d")
    dir_names = [nm for nm, k in zip(names, kinds) if k == "d"] if ndirs else []
    return block, n, ndirs, dir_names


def _check_row(row) -> Optional[str]:
    """Why one row cannot be indexed, or None. Only used to name the culprit after a run
    failed to encode, so it may be slow."""
    try:
        if len(row) not in (len(FIELDS), len(FIELDS) + 2, len(FIELDS) + 3):
            return f"a row has {len(row)} fields, expected {len(FIELDS)} to {len(FIELDS) + 3}"
        _fsencode(row[0])
        if row[1] not in _KIND_SET:
            return f"kind {row[1]!r} is not one of {', '.join(KINDS)}"
        for i, code in ((2, "H"), (3, "I"), (4, "I"), (5, "q"), (6, "q"), (7, "q"), (8, "q")):
            try:
                array(code, [row[i]])
            except (TypeError, OverflowError):
                return f"{FIELDS[i]} {row[i]!r} is not an integer in range"
        if row[9] and (len(row[9]) != 2 * _DIGEST or len(bytes.fromhex(row[9])) != _DIGEST):
            return f"checksum {row[9]!r} is not 64 hex digits"
        if "\0" in row[10]:
            return "link contains a NUL byte"
        for i, code in ((11, "q"), (12, "Q"), (13, "H")):
            if len(row) > i:
                try:
                    array(code, [row[i]])
                except (TypeError, OverflowError):
                    return f"field {i} {row[i]!r} is not an integer in range"
        _fsencode(row[10])
    except (TypeError, ValueError) as e:
        return str(e)
    return None


class _Block(NamedTuple):
    n: int
    name_len: int
    link_len: int
    reserved: int


def _block_head(buf, n_expected: int, where: str, path: str, version: int) -> _Block:
    if len(buf) < _BLOCK_HEAD.size:
        raise IndexCorrupt(path, f"block of {where} is truncated")
    head = _Block(*_BLOCK_HEAD.unpack_from(buf, 0))
    size = (_BLOCK_HEAD.size + _FIXED_PER_ENTRY[version] * head.n + head.name_len
            + head.link_len)
    if head.n != n_expected or size != len(buf) or head.reserved:
        raise IndexCorrupt(path, f"block of {where} has an inconsistent layout")
    return head


def _int_col(code: str, mv, start: int, n: int) -> list:
    size = _ITEMSIZE[code]
    raw = mv[start:start + n * size]
    # Owner, group and mode are often the same for a whole directory: one int object shared
    # by all entries instead of n.
    first = raw[:size].tobytes()
    if raw.tobytes() == first * n:
        return [int.from_bytes(first, "little", signed=code == "q")] * n
    if not _BIG_ENDIAN:
        return raw.cast(code).tolist()
    a = array(code)  # pragma: no cover
    a.frombytes(mv[start:start + n * size])
    a.byteswap()
    return a.tolist()


_ITEMSIZE = {"q": 8, "Q": 8, "I": 4, "H": 2}


def _decode_block(buf: bytes, n: int, where: str, path: str, version: int = FORMAT_VERSION):
    """All columns of a block: names, kinds, mode, uid, gid, size, mtime_ns, offset, length,
    checksum, link (names and links as str), ctime_ns, inode, source."""
    head = _block_head(buf, n, where, path, version)
    mv = memoryview(buf)
    o = _BLOCK_HEAD.size
    sizes = _int_col("q", mv, o, n)
    o += 8 * n
    mtimes = _int_col("q", mv, o, n)
    o += 8 * n
    offsets = _int_col("q", mv, o, n)
    o += 8 * n
    lengths = _int_col("q", mv, o, n)
    o += 8 * n
    uids = _int_col("I", mv, o, n)
    o += 4 * n
    gids = _int_col("I", mv, o, n)
    o += 4 * n
    modes = _int_col("H", mv, o, n)
    o += 2 * n
    try:
        kinds = str(mv[o:o + n], "ascii")
    except UnicodeDecodeError:
        raise IndexCorrupt(path, f"block of {where} has a bad kind column") from None
    o += n
    flags = mv[o:o + n]
    o += n
    # Hex the digest column in one call, one field per entry, then blank the few entries
    # without a digest.
    flags = flags.tobytes()
    absent = n - flags.count(1)
    if absent == n:
        checksums = [""] * n
    else:
        checksums = mv[o:o + _DIGEST * n].hex("\n", _DIGEST).split("\n")
        if absent * 8 <= n:
            i = flags.find(0)
            while i >= 0:
                checksums[i] = ""
                i = flags.find(0, i + 1)
        elif absent:
            checksums = [d if f else "" for d, f in zip(checksums, flags)]
    o += _DIGEST * n
    if version >= 2:
        ctimes = _int_col("q", mv, o, n)
        o += 8 * n
        inodes = _int_col("Q", mv, o, n)
        o += 8 * n
        sources = _int_col("H", mv, o, n)
        o += 2 * n
    else:
        ctimes = inodes = sources = [0] * n
    # One decode and one split per heap. NUL is ASCII, so decoding the joined heap gives
    # the same strings as decoding each name on its own.
    names = str(mv[o:o + head.name_len], _FS_ENC, _FS_ERR).split("\0")
    o += head.name_len
    if head.link_len == n - 1:          # no entry has a link: the heap is only separators
        links = [""] * n
    else:
        links = str(mv[o:o + head.link_len], _FS_ENC, _FS_ERR).split("\0")
    if len(names) != n or len(links) != n:
        raise IndexCorrupt(path, f"block of {where} has a bad name or link table")
    return (names, kinds, modes, uids, gids, sizes, mtimes, offsets, lengths, checksums, links,
            ctimes, inodes, sources)


# --------------------------------------------------------------------------------------------
# writer

class IndexWriter:
    """Writes one image's index to `path + ".tmp"` and moves it into place on close(), so an
    interrupted indexing never leaves a partial index under the real name.

    After an error in add_rows() the writer refuses further rows; abort() it (the context
    manager does)."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        self.tmp_path = self.path + ".tmp"
        parent = os.path.dirname(os.path.abspath(self.path))
        os.close(private.makedirs(parent))
        # private, like the state directory it lives in: it lists every file of a client
        self._f = os.fdopen(private.create(self.tmp_path, os.O_RDWR | os.O_TRUNC), "w+b",
                            buffering=1 << 20)
        self._f.write(_HEADER.pack(MAGIC, FORMAT_VERSION, 0, 0))
        self._pos = _HEADER.size
        # key -> [[offset, length, entries, crc, directory entries, synthesized], ...], one
        # block per run
        self._table: dict[bytes, list] = {}
        self._dirs_seen: set[bytes] = set()
        self._head = None          # raw parent bytes of the current run (b"" for "/")
        self._names: list = []
        self._run: list = []
        self._root_row = None
        self._rows = 0
        self._state = "open"       # open | failed | closed | aborted

    # -- rows --------------------------------------------------------------------------------

    def add_rows(self, rows: Iterable[list]) -> None:
        if self._state != "open":
            raise ValueError(f"index writer for {self.path} is {self._state}; "
                             f"it accepts no more rows")
        enc, err = _FS_ENC, _FS_ERR
        head_now, names, run = self._head, self._names, self._run
        row = None
        try:
            for row in rows:
                head, sep, name = row[0].encode(enc, err).rpartition(b"/")
                if head != head_now or not name or not sep:
                    if not sep or (not name and head):
                        raise ValueError(f"row path {row[0]!r} is not a canonical absolute "
                                         f"path")
                    if not name:
                        self._root_row = row
                        self._rows += 1
                        continue
                    if head and (head[:1] != b"/" or head[-1:] == b"/" or b"//" in head):
                        raise ValueError(f"row path {row[0]!r} is not a canonical absolute "
                                         f"path")
                    self._end_run()
                    head_now = self._head = head
                    names = self._names = []
                    run = self._run = []
                names.append(name)
                run.append(row)
        except (AttributeError, TypeError, IndexError, UnicodeEncodeError) as e:
            self._state = "failed"
            raise ValueError(f"cannot index row {row!r:.200}: {e}") from None
        except BaseException:
            self._state = "failed"
            raise

    def _end_run(self):
        run = self._run
        if not run:
            return
        key = self._head or _ROOT_KEY
        try:
            self._write_block(key, self._names, run)
        except (TypeError, ValueError, OverflowError, IndexError) as e:
            reason, culprit = str(e), None
            for row in run:
                why = _check_row(row)
                if why:
                    reason, culprit = why, row
                    break
            where = f" (row {culprit[0]!r})" if culprit is not None and isinstance(
                culprit[0], str) else ""
            raise ValueError(f"cannot index the children of {_fsdecode(key)!r}{where}: "
                             f"{reason}") from None
        self._rows += len(run)
        self._names = []
        self._run = []

    def _write_block(self, key: bytes, names: list, rows: list, synthesized=False):
        block, n, ndirs, dir_names = _encode_block(names, rows)
        if dir_names:
            prefix = key + b"/" if key != _ROOT_KEY else b"/"
            self._dirs_seen.update(prefix + nm for nm in dir_names)
        self._f.write(block)
        self._table.setdefault(key, []).append(
            [self._pos, len(block), n, zlib.crc32(block), ndirs, synthesized])
        self._pos += len(block)

    # -- finishing ---------------------------------------------------------------------------

    def _add_missing_parents(self):
        """Synthesize rows for directories that have children but no row of their own."""
        missing: dict[bytes, list] = {}
        seen = self._dirs_seen
        for key in list(self._table):
            k = key
            while k != _ROOT_KEY and k not in seen:
                seen.add(k)
                parent, _, name = k.rpartition(b"/")
                missing.setdefault(parent or _ROOT_KEY, []).append(name)
                k = parent or _ROOT_KEY
        for parent, names in missing.items():
            rows = [["", "d", _SYNTH_DIR_MODE, 0, 0, 0, 0, 0, 0, "", "", 0, 0, 0]
                    for _ in names]
            self._write_block(parent, names, rows, synthesized=True)

    def _merge_split_dirs(self):
        split = [k for k, blocks in self._table.items() if len(blocks) > 1]
        if not split:
            return
        self._f.flush()
        fd = self._f.fileno()
        for key in split:
            names, rows = [], []
            # Synthesized parent rows go first so that a real row of the same name wins.
            blocks = sorted(self._table.pop(key), key=lambda b: not b[5])
            for off, length, n, crc, _, _ in blocks:
                buf = os.pread(fd, length, off)
                cols = _decode_block(buf, n, repr(_fsdecode(key)), self.tmp_path)
                names.extend(_fsencode(nm) for nm in cols[0])
                rows.extend(zip(repeat(""), *cols[1:]))
            self._write_block(key, names, rows)

    def close(self) -> dict:
        """Finish the file and move it into place. Returns {"files": entries, "dirs":
        directory entries, "bytes": file size, "rows": rows received}."""
        if self._state != "open":
            raise ValueError(f"index writer for {self.path} is {self._state}")
        try:
            self._end_run()
            self._add_missing_parents()
            if self._root_row is not None:
                self._write_block(_ROOT_ROW_KEY, [b""], [self._root_row])
            self._merge_split_dirs()

            keys = sorted(self._table)
            heap_len, records = 0, []
            entries = ndirs = 0
            for key in keys:
                off, length, n, crc, nd, _ = self._table[key][0]
                rec = _RECORD.pack(heap_len, len(key), off, length, n, crc, 0)
                rec = rec[:_RECORD_BODY] + struct.pack(
                    "<I", zlib.crc32(key, zlib.crc32(rec[:_RECORD_BODY])))
                records.append(rec)
                heap_len += len(key)
                entries += n
                ndirs += nd
            table = b"".join(records)
            heap = b"".join(keys)
            table_off = self._pos
            keys_off = table_off + len(table)
            file_size = keys_off + len(heap) + _TRAILER.size
            trailer = _TRAILER.pack(TRAILER_MAGIC, table_off, len(keys), keys_off, len(heap),
                                    entries, self._rows, file_size, 0, 0)
            trailer = trailer[:-4] + struct.pack("<I", zlib.crc32(trailer[:-4]))
            self._f.write(table)
            self._f.write(heap)
            self._f.write(trailer)
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            os.replace(self.tmp_path, self.path)
            _fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except BaseException:
            self._state = "failed"
            self.abort()
            raise
        self._state = "closed"
        self._table = {}
        self._dirs_seen = set()
        return {"files": entries, "dirs": ndirs, "bytes": file_size, "rows": self._rows}

    def abort(self) -> None:
        """Drop the unfinished index. Safe to call more than once."""
        if self._state == "closed":
            return
        self._state = "aborted"
        try:
            self._f.close()
        except OSError:
            pass
        try:
            os.unlink(self.tmp_path)
        except FileNotFoundError:
            pass
        self._table = {}
        self._names = self._run = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def _fsync_dir(path: str):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def build_index(path, rows_iterable) -> dict:
    """Index all rows into `path`; returns what IndexWriter.close() returns."""
    w = IndexWriter(path)
    try:
        w.add_rows(rows_iterable)
    except BaseException:
        w.abort()
        raise
    return w.close()


# --------------------------------------------------------------------------------------------
# reader

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


# --------------------------------------------------------------------------------------------
# checking

def check_index(path, limit: int = 20) -> list:
    """What is wrong with an index file, as sentences; [] when all of it reads back: header,
    trailer, every directory record and every block (checked against their CRCs and
    decoded). Never raises for a damaged, foreign or missing file; stops after `limit`
    problems. Reads the whole file: for `cairn catalog check` and `images rebuild-index`,
    not for browsing."""
    try:
        reader = IndexReader(path)
    except FileNotFoundError:
        return [f"catalog index {path} is missing"]
    except IndexCorrupt as e:
        return [e.reason]
    except OSError as e:
        return [f"catalog index {path} cannot be read: {e.strerror or e}"]
    problems = []
    with reader:
        entries, previous = 0, None
        for i in range(reader._ndirs):
            try:
                key, bo, bl, n, crc = reader._record(i)
                where = repr(_fsdecode(key))
                if previous is not None and key <= previous:
                    raise IndexCorrupt(path, f"directory table is out of order at {where}")
                previous = key
                if bo < _HEADER.size or bo + bl > reader._table_off or n == 0:
                    raise IndexCorrupt(path, f"table record of {where} is out of bounds")
                buf = reader._read(bo, bl)
                if zlib.crc32(buf) != crc:
                    raise IndexCorrupt(path, f"block of {where} checksum mismatch")
                _decode_block(buf, n, where, path, reader._version)
                entries += n
            except IndexCorrupt as e:
                problems.append(e.reason)
            except (ValueError, struct.error, OSError) as e:
                problems.append(f"directory table record {i}: {e}")
            if len(problems) >= limit:
                return problems
        if not problems and entries != reader.count():
            problems.append(f"the blocks hold {entries} entries, the trailer says "
                            f"{reader.count()}")
    return problems
