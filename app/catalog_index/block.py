"""The block codec: one directory's children as columns, encoded in one pass over the rows
and decoded with a handful of C-level calls (the block layout is in layout.py)."""

from __future__ import annotations

import sys
from array import array
from itertools import islice
from operator import eq, itemgetter
from typing import NamedTuple, Optional

from app.catalog_index.errors import IndexCorrupt
from app.catalog_index.layout import FORMAT_VERSION, _BLOCK_HEAD, _DIGEST, _FIXED_PER_ENTRY, \
    _FS_ENC, _FS_ERR, _KIND_SET, _fsencode
from app.formats.entry import FIELDS, KINDS

_NO_DIGEST_HEX = "0" * (2 * _DIGEST)
_BIG_ENDIAN = sys.byteorder == "big"
_BLOCK_LIMIT = 0xFFFFFFFF     # block lengths and heap lengths are u32

for _code, _size in (("q", 8), ("Q", 8), ("I", 4), ("H", 2)):
    if array(_code).itemsize != _size:  # pragma: no cover - exotic platforms only
        raise ImportError(f"array typecode {_code!r} is not {_size} bytes on this platform")


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
