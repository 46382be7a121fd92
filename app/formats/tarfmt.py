"""POSIX pax tar encoding and parsing shared by the backup and restore data movers.

Only the parts Cairn images use are written: ustar headers, pax extended headers ('x') with
binary-safe records, GNU sparse format 1.0 and hard links. The parser also understands what
other writers commonly produce (ustar prefix, GNU long names, base-256 numbers, global
headers) so that a stream can always be kept in sync, even when a member is refused.

The `tarfile` module is deliberately not used: it is slow per member and cannot write sparse
members. Standard library only: this module runs on client hosts.
"""

import struct
import zlib

# The checksums of the members' data, computed beside the copy: the data movers take them
# from here with the format.
from app.formats.piecehash import (CRC32_ACCELERATOR, DEFAULT_CHECKSUM, PIECE,  # noqa: F401
                                   PIECE_HASHES, HashWorker, TreeHash, crc32, piece_hash,
                                   tree_digest)

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
EOF_MARKER = bytes(2 * BLOCK)

REGTYPE = b"0"
AREGTYPE = b"\0"
LNKTYPE = b"1"
SYMTYPE = b"2"
CHRTYPE = b"3"
BLKTYPE = b"4"
DIRTYPE = b"5"
FIFOTYPE = b"6"
CONTTYPE = b"7"
XHDTYPE = b"x"
XGLTYPE = b"g"
GNU_LONGNAME = b"L"
GNU_LONGLINK = b"K"
GNU_SPARSE_OLD = b"S"

# Limits of the ustar numeric fields in plain octal (field width minus the terminator).
_MAX_OCTAL_7 = 0o7777777
_MAX_OCTAL_11 = 0o77777777777

_HEADER = struct.Struct("100s8s8s8s12s12s8s1s100s6s2s32s32s8s8s155s12s")
# name, mode, uid, gid, size, mtime, checksum placeholder, type, linkname, magic, version,
# uname, gname, devmajor, devminor (zero), prefix and padding (empty)
_FAST = (b"%s%07o\0%07o\0%07o\0%011o\0%011o\0        %s%sustar\x0000%s%s0000000\0"
         b"0000000\0" + bytes(167))


class FormatError(Exception):
    """The bytes are not a tar member header this parser can trust."""


def padding(n):
    return -n % BLOCK


def padded(n):
    return n + (-n % BLOCK)


# ---------------------------------------------------------------------------------------------
# encoding


def _number(n, width):
    """A ustar numeric field: octal when it fits, GNU base-256 otherwise (the pax record then
    carries the exact value for strict POSIX readers)."""
    if 0 <= n < 8 ** (width - 1):
        return b"%0*o\0" % (width - 1, n)
    if n < 0:
        n = 0
    # base-256: first byte 0x80 marks it, big-endian value in the remaining bytes
    if n >= 256 ** (width - 1):
        n = 256 ** (width - 1) - 1
    return b"\x80" + n.to_bytes(width - 1, "big")


def pax_record(key, value):
    """One pax record "LEN key=value\\n"; LEN counts its own digits, hence the loop."""
    body = len(key) + len(value) + 3
    n = body + len(str(body))
    while body + len(str(n)) != n:
        n = body + len(str(n))
    return b"%d %s=%s\n" % (n, key, value)


def format_mtime(mtime_ns):
    """A pax time value with nanoseconds, exact for negative times too."""
    sign = b""
    if mtime_ns < 0:
        sign = b"-"
        mtime_ns = -mtime_ns
    sec, frac = divmod(mtime_ns, 1000000000)
    if frac:
        return b"%s%d.%09d" % (sign, sec, frac)
    return b"%s%d" % (sign, sec)


def _ascii_stub(name, limit):
    """A printable stand-in for the ustar name field when the real name lives in a pax
    record: readers that honour pax never look at it, others get something harmless."""
    out = bytes(c if 32 <= c < 127 else 95 for c in name[-limit:])
    return out.lstrip(b"/") or b"_"


def ustar_header(name, mode, uid, gid, size, mtime, typeflag, linkname=b"", uname=b"",
                 gname=b"", devmajor=0, devminor=0):
    """One 512-byte ustar header. Values that do not fit are the caller's business (it puts
    them in a pax record); here they are clamped or base-256 encoded."""
    if mtime < 0:
        mtime = 0
    if (uid <= _MAX_OCTAL_7 and gid <= _MAX_OCTAL_7 and size <= _MAX_OCTAL_11
            and mtime <= _MAX_OCTAL_11 and uid >= 0 and gid >= 0 and not devmajor
            and not devminor and len(name) <= 100 and len(linkname) <= 100
            and len(uname) <= 32 and len(gname) <= 32):
        # the common case in one formatting step: this runs once or twice per file
        hdr = _FAST % (name.ljust(100, b"\0"), mode & 0o7777777, uid, gid, size, mtime,
                       typeflag, linkname.ljust(100, b"\0"), uname.ljust(32, b"\0"),
                       gname.ljust(32, b"\0"))
    else:
        hdr = _HEADER.pack(
            name, b"%07o\0" % (mode & 0o7777777), _number(uid, 8), _number(gid, 8),
            _number(size, 12), _number(mtime, 12), b"        ", typeflag, linkname,
            b"ustar\0", b"00", uname, gname, _number(devmajor, 8), _number(devminor, 8), b"",
            b"")
    chk = block_sum(hdr)
    return b"%s%06o\0 %s" % (hdr[:148], chk, hdr[156:])


def block_sum(block):
    """The sum of a 512-byte header block's bytes, as its checksum needs. Two Adler-32s
    give it exactly (a half's sum, at most 256 * 255, stays below their modulus 65521),
    in C instead of a Python loop over 512 integers."""
    return (zlib.adler32(block[:256]) & 0xFFFF) + (zlib.adler32(block[256:BLOCK]) & 0xFFFF) - 2


def header_sum(block):
    """A header block's checksum as written: its bytes summed with the checksum field taken
    as eight spaces."""
    return block_sum(block) - sum(block[148:156]) + 256


def _is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


_xheaders = {}
_ZERO_PAD = bytes(BLOCK)


def member_header(name, typeflag, mode, uid, gid, size, mtime_ns, linkname=b"", uname=b"",
                  gname=b"", devmajor=0, devminor=0, xattrs=None, sparse_realsize=None,
                  fflags=None):
    """The header blocks of one member: a pax 'x' header when anything needs one, then the
    ustar header. `name`, `linkname`, `uname`, `gname` are bytes; `xattrs` is a list of
    (name bytes, value bytes); `size` is the size of the data area that follows; `fflags`,
    the inode flags as SCHILY.fflags names (app/formats/fflags.py).

    With `sparse_realsize` set, the member is written in GNU sparse format 1.0: the data area
    starts with the map (see sparse_map_bytes) and the ustar name is a GNUSparseFile stand-in
    so that a tar without sparse support does not extract the map as the file's content.
    """
    if (not xattrs and not fflags and not linkname and sparse_realsize is None
            and not devmajor and not devminor and len(name) <= 100 and 0 <= uid <= _MAX_OCTAL_7
            and 0 <= gid <= _MAX_OCTAL_7 and 0 <= size <= _MAX_OCTAL_11 and len(uname) < 32
            and len(gname) < 32 and 0 <= mtime_ns <= _MAX_MTIME_NS and name.isascii()
            and uname.isascii() and gname.isascii()):
        # the common member (a file or directory with a plain name and owners), whose only
        # pax record, if any, is its time in nanoseconds: in one step, byte for byte as
        # _member_header writes it (this runs once per entry of a backup)
        sec, frac = divmod(mtime_ns, 1000000000)
        hdr = _FAST % (name.ljust(100, b"\0"), mode & 0o7777777, uid, gid, size, sec,
                       typeflag, bytes(100), uname.ljust(32, b"\0"), gname.ljust(32, b"\0"))
        main = b"%s%06o\0 %s" % (hdr[:148], block_sum(hdr), hdr[156:])
        if not frac:
            return main
        data = _mtime_record(b"%d.%09d" % (sec, frac))
        n = len(data)
        xhdr = _xheaders.get(n)
        if xhdr is None:
            return _with_pax_header(data, main)
        return b"".join((xhdr, data, _ZERO_PAD[:-n % BLOCK], main))
    return _member_header(name, typeflag, mode, uid, gid, size, mtime_ns, linkname, uname,
                          gname, devmajor, devminor, xattrs, sparse_realsize, fflags)


def _member_header(name, typeflag, mode, uid, gid, size, mtime_ns, linkname, uname, gname,
                   devmajor, devminor, xattrs, sparse_realsize, fflags):
    """member_header for any member."""
    recs = []
    binary = False
    ustar_name = name
    if sparse_realsize is not None:
        head, _, base = name.rpartition(b"/")
        stub = (head + b"/" if head else b"") + b"GNUSparseFile.0/" + base
        if len(stub) > 100 or not stub.isascii():
            stub = b"GNUSparseFile.0/" + _ascii_stub(base, 80)
        ustar_name = stub
        recs.append(pax_record(b"GNU.sparse.major", b"1"))
        recs.append(pax_record(b"GNU.sparse.minor", b"0"))
        recs.append(pax_record(b"GNU.sparse.name", name))
        recs.append(pax_record(b"GNU.sparse.realsize", b"%d" % sparse_realsize))
        if not _is_utf8(name):
            binary = True
    elif len(name) > 100 or not name.isascii():
        recs.append(pax_record(b"path", name))
        ustar_name = _ascii_stub(name, 100)
        if not _is_utf8(name):
            binary = True
    ustar_link = linkname
    if linkname and (len(linkname) > 100 or not linkname.isascii()):
        recs.append(pax_record(b"linkpath", linkname))
        ustar_link = _ascii_stub(linkname, 100)
        if not _is_utf8(linkname):
            binary = True
    if size > _MAX_OCTAL_11:
        recs.append(pax_record(b"size", b"%d" % size))
    if uid > _MAX_OCTAL_7 or uid < 0:
        recs.append(pax_record(b"uid", b"%d" % uid))
    if gid > _MAX_OCTAL_7 or gid < 0:
        recs.append(pax_record(b"gid", b"%d" % gid))
    if uname and (len(uname) > 31 or not uname.isascii()):
        recs.append(pax_record(b"uname", uname))
        uname = b""
    if gname and (len(gname) > 31 or not gname.isascii()):
        recs.append(pax_record(b"gname", gname))
        gname = b""
    mtime = mtime_ns // 1000000000
    if mtime_ns % 1000000000 or mtime < 0 or mtime > _MAX_OCTAL_11:
        recs.append(pax_record(b"mtime", format_mtime(mtime_ns)))
    if xattrs:
        for k, v in xattrs:
            recs.append(pax_record(b"SCHILY.xattr." + k, v))
    if fflags:
        recs.append(pax_record(b"SCHILY.fflags", fflags))
    main = ustar_header(ustar_name, mode, uid, gid, size, min(mtime, _MAX_OCTAL_11), typeflag,
                        ustar_link, uname, gname, devmajor, devminor)
    if not recs:
        return main
    if binary:
        # POSIX: values of path-like records are raw bytes, not UTF-8, for this member
        recs.insert(0, pax_record(b"hdrcharset", b"BINARY"))
    return _with_pax_header(b"".join(recs), main)


_MAX_MTIME_NS = _MAX_OCTAL_11 * 1000000000 + 999999999


def _mtime_record(value):
    """pax_record(b"mtime", value) for the values of member_header's common path."""
    body = len(value) + 8
    if body <= 97:  # the length then has two digits
        return b"%d mtime=%s\n" % (body + 2, value)
    return pax_record(b"mtime", value)


def _with_pax_header(data, main):
    """The pax 'x' header of the records `data`, the records, their padding and `main`."""
    n = len(data)
    xhdr = _xheaders.get(n)
    if xhdr is None:
        # one fixed name, as Python's tarfile writes: a tar without pax support then leaves
        # a single stray file instead of a directory tree of them
        xhdr = ustar_header(b"././@PaxHeader", 0o644, 0, 0, n, 0, XHDTYPE)
        if len(_xheaders) < 4096:
            _xheaders[n] = xhdr
    return b"".join((xhdr, data, _ZERO_PAD[:-n % BLOCK], main))


def sparse_map_bytes(segments, realsize):
    """The GNU sparse 1.0 map that opens the data area: the number of entries, then offset and
    length of each, one decimal number per line, padded to a block. A file that ends in a hole
    gets a final zero-length entry at its size, which is how GNU tar learns to extend it."""
    entries = list(segments)
    if not entries or entries[-1][0] + entries[-1][1] < realsize:
        entries.append((realsize, 0))
    lines = [b"%d" % len(entries)]
    for off, ln in entries:
        lines.append(b"%d" % off)
        lines.append(b"%d" % ln)
    text = b"\n".join(lines) + b"\n"
    return text + bytes(padding(len(text)))


# ---------------------------------------------------------------------------------------------
# parsing


def _parse_number(field):
    if field[:1] in (b"\x80", b"\xff"):
        n = int.from_bytes(field[1:], "big")
        if field[0] == 0xFF:
            n -= 256 ** (len(field) - 1)
        return n
    field = field.split(b"\0", 1)[0].strip(b" ")
    if not field:
        return 0
    try:
        return int(field, 8)
    except ValueError:
        raise FormatError("bad numeric field %r" % field[:12])


def _cstr(field):
    return field.split(b"\0", 1)[0]


def is_zero_block(block):
    return block == ZERO_BLOCK


_EXTENSION_TYPES = (XHDTYPE, XGLTYPE, GNU_LONGNAME, GNU_LONGLINK)


def parse_ustar(block):
    """The fields of one 512-byte header as a dict; raises FormatError when the checksum does
    not match (the stream is out of sync or damaged)."""
    if len(block) != BLOCK:
        raise FormatError("short header block")
    f = _HEADER.unpack(block)
    stored = f[6].split(b"\0", 1)[0].strip(b" ")
    try:
        stored = int(stored, 8)
    except ValueError:
        raise FormatError("bad header checksum field")
    chk = header_sum(block)
    if stored != chk:
        # some old writers summed signed chars
        signed = chk - 256 * sum(1 for c in block[:148] + block[156:] if c > 127)
        if stored != signed:
            raise FormatError("header checksum mismatch")
    if f[7] in _EXTENSION_TYPES:
        # only the size matters for the headers that precede a member
        return {"type": f[7], "size": _parse_number(f[4])}
    name = _cstr(f[0])
    magic = f[9]
    if magic[:5] == b"ustar" and f[10] in (b"00", b"\0\0"):
        prefix = _cstr(f[15])
        if prefix:
            name = prefix + b"/" + name
    return {
        "name": name,
        "mode": _parse_number(f[1]),
        "uid": _parse_number(f[2]),
        "gid": _parse_number(f[3]),
        "size": _parse_number(f[4]),
        "mtime_ns": _parse_number(f[5]) * 1000000000,
        "type": f[7],
        "linkname": _cstr(f[8]),
        "uname": _cstr(f[11]),
        "gname": _cstr(f[12]),
        "devmajor": _parse_number(f[13]) if f[13].strip(b"\0 ") else 0,
        "devminor": _parse_number(f[14]) if f[14].strip(b"\0 ") else 0,
    }


def parse_pax(data):
    """The records of a pax header as a list of (key bytes, value bytes); values are raw
    bytes (binary xattr values and hdrcharset=BINARY names stay exact)."""
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        if data[pos] == 0:
            break  # padding written by some encoders
        sp = data.find(b" ", pos, pos + 24)
        if sp < 0:
            raise FormatError("bad pax record")
        try:
            length = int(data[pos:sp])
        except ValueError:
            raise FormatError("bad pax record length")
        end = pos + length
        if length < 5 or end > n or data[end - 1] != 10:
            raise FormatError("bad pax record")
        eq = data.find(b"=", sp + 1, end)
        if eq < 0:
            raise FormatError("bad pax record")
        out.append((data[sp + 1:eq], data[eq + 1:end - 1]))
        pos = end
    return out


def parse_pax_time(value):
    """Nanoseconds from a pax time value such as 1700000000.123456789 or -1.5."""
    v = value.decode("ascii")
    neg = v.startswith("-")
    if neg:
        v = v[1:]
    sec, _, frac = v.partition(".")
    ns = int(sec or "0") * 1000000000 + int((frac + "000000000")[:9] or "0")
    return -ns if neg else ns


def read_sparse_map(read_exact, size):
    """parse_sparse_map over the data area of a member of `size` bytes, read with
    read_exact(n): never past the member, so that a damaged map cannot take the next
    member's bytes. Returns (segments, bytes used)."""
    budget = [size]

    def block():
        if budget[0] < BLOCK:
            raise FormatError("the sparse map runs past the member")
        budget[0] -= BLOCK
        return read_exact(BLOCK)
    return parse_sparse_map(block(), block)


def parse_sparse_map(first_block, read_block):
    """The GNU sparse 1.0 map at the start of a member's data area. `first_block` is the
    first 512 bytes, `read_block()` returns the next ones. Returns (segments, bytes used)."""
    text = first_block
    used = BLOCK
    numbers = []
    pos = 0
    count = None
    while True:
        nl = text.find(b"\n", pos)
        if nl < 0:
            if used > 1 << 24:
                raise FormatError("sparse map too large")
            text = text[pos:] + read_block()
            used += BLOCK
            pos = 0
            continue
        try:
            numbers.append(int(text[pos:nl]))
        except ValueError:
            raise FormatError("bad sparse map")
        pos = nl + 1
        if count is None:
            count = numbers.pop()
            if count < 0:
                raise FormatError("bad sparse map")
        if len(numbers) == 2 * count:
            break
    segs = [(numbers[i], numbers[i + 1]) for i in range(0, len(numbers), 2)]
    for off, ln in segs:
        if off < 0 or ln < 0:
            raise FormatError("bad sparse map")
    return segs, used


class Member:
    """A parsed member: what its header blocks say and how much data follows."""

    __slots__ = ("name", "type", "mode", "uid", "gid", "size", "mtime_ns", "linkname",
                 "uname", "gname", "devmajor", "devminor", "xattrs", "sparse", "realsize",
                 "pax", "header_bytes")

    def __repr__(self):
        return "Member(%r, %r, size=%d)" % (self.name, self.type, self.size)


def read_member_header(read_exact):
    """Read the header blocks of the next member with `read_exact(n) -> bytes`.

    Returns a Member whose `size` is the number of data bytes that follow (before padding),
    or None at the end-of-archive marker. The sparse map, if any, is not read here (it is
    part of the data area: see Member.sparse, which is True for a GNU sparse 1.0 member).
    """
    pax = []
    longname = None
    longlink = None
    used = 0
    while True:
        block = read_exact(BLOCK)
        used += BLOCK
        if is_zero_block(block):
            return None
        h = parse_ustar(block)
        t = h["type"]
        if t in _EXTENSION_TYPES:
            if h["size"] > 1 << 26:
                raise FormatError("extended header too large")
            data = read_exact(padded(h["size"]))[:h["size"]]
            used += padded(h["size"])
            if t == XHDTYPE:
                pax.extend(parse_pax(data))
            elif t == GNU_LONGNAME:
                longname = data.split(b"\0", 1)[0]
            elif t == GNU_LONGLINK:
                longlink = data.split(b"\0", 1)[0]
            continue  # global headers only carry defaults Cairn does not use
        break
    m = Member()
    m.name = h["name"]
    m.type = t
    m.mode = h["mode"]
    m.uid = h["uid"]
    m.gid = h["gid"]
    m.size = h["size"]
    m.mtime_ns = h["mtime_ns"]
    m.linkname = h["linkname"]
    m.uname = h["uname"]
    m.gname = h["gname"]
    m.devmajor = h["devmajor"]
    m.devminor = h["devminor"]
    m.xattrs = []
    m.sparse = False
    m.realsize = None
    m.header_bytes = used
    if longname is not None:
        m.name = longname
    if longlink is not None:
        m.linkname = longlink
    d = {}
    for k, v in pax:
        if k.startswith(b"SCHILY.xattr."):
            m.xattrs.append((k[13:], v))
        else:
            d[k] = v
    m.pax = d
    try:
        if b"path" in d:
            m.name = d[b"path"]
        if b"linkpath" in d:
            m.linkname = d[b"linkpath"]
        if b"size" in d:
            m.size = int(d[b"size"])
        if b"uid" in d:
            m.uid = int(d[b"uid"])
        if b"gid" in d:
            m.gid = int(d[b"gid"])
        if b"uname" in d:
            m.uname = d[b"uname"]
        if b"gname" in d:
            m.gname = d[b"gname"]
        if b"mtime" in d:
            m.mtime_ns = parse_pax_time(d[b"mtime"])
        if b"GNU.sparse.major" in d or b"GNU.sparse.map" in d or b"GNU.sparse.offset" in d:
            if d.get(b"GNU.sparse.major") == b"1" and d.get(b"GNU.sparse.minor") == b"0":
                m.sparse = True
                m.realsize = int(d[b"GNU.sparse.realsize"])
                if b"GNU.sparse.name" in d:
                    m.name = d[b"GNU.sparse.name"]
            else:
                m.sparse = None  # a GNU sparse flavour this reader does not restore
    except (ValueError, KeyError, UnicodeDecodeError):
        raise FormatError("bad pax record value")
    if m.size < 0:
        raise FormatError("negative member size")
    return m

