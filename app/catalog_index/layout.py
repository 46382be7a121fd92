"""The layout of a catalog index file (app/catalog_index/: one file per backup image) and the
constants of its format.

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
    appendix (optional) bytes the index's writer was given to keep with it, then 20 bytes:
             u64 their length, u32 their CRC-32, b"CAIRNAPX"; it ends where the table
             begins, and readers that do not look for it never see it
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

The appendix holds what a caller derives from the blocks while they are written, so that it
is not worked out again from the whole index later: a backup keeps the state the next
incremental compares with there (app/jobs/incremental.py). It is made from the blocks as
written; a writer that merged split directories keeps none.

Names are stored as the client's raw bytes: str paths carry undecodable bytes as surrogate
escapes, exactly as os.fsencode/os.fsdecode do.
"""

from __future__ import annotations

import struct
import sys

from app.formats.entry import KINDS

# Names with a leading underscore belong to this package: its modules share them; callers use
# the names app/catalog_index/__init__.py gives.

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAGIC = b"CAIRNIDX"
TRAILER_MAGIC = b"CAIRNEND"
APPENDIX_MAGIC = b"CAIRNAPX"

_HEADER = struct.Struct("<8sHHI")
_TRAILER = struct.Struct("<8sQQQQQQQII")
_RECORD = struct.Struct("<QIQIIII")
_APPENDIX_END = struct.Struct("<QI8s")
_RECORD_BODY = _RECORD.size - 4
_BLOCK_HEAD = struct.Struct("<IIII")
_DIGEST = 32
# Bytes per entry of the fixed-size columns: 4 x i64, 2 x u32, u16, kind, has-checksum, digest.
_FIXED_V1 = 8 * 4 + 4 * 2 + 2 + 1 + 1 + _DIGEST
# Version 2 adds ctime_ns (i64), inode (u64) and source (u16).
_FIXED_V2 = _FIXED_V1 + 8 + 8 + 2
_FIXED_PER_ENTRY = {1: _FIXED_V1, 2: _FIXED_V2}

# Paths are encoded the way os.fsencode does; the encoding is looked up once because the
# writer encodes every row and os.fsencode is a Python-level call.
_FS_ENC = sys.getfilesystemencoding()
_FS_ERR = sys.getfilesystemencodeerrors()
_KIND_SET = frozenset(KINDS)
_ROOT_KEY = b"/"
_ROOT_ROW_KEY = b""          # pseudo-directory that holds the row of "/" itself


def _fsencode(s: str) -> bytes:
    return s.encode(_FS_ENC, _FS_ERR)


def _fsdecode(b: bytes) -> str:
    return b.decode(_FS_ENC, _FS_ERR)
