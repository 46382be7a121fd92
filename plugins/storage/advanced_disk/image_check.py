"""Reading AdvancedDisk images back to find damage before a restore needs the data (the verify
job of an image or a pool).

The master sends, per image file, the members the catalog knows in it: offset, length, kind,
checksum and path (the catalog index's own rows). Each member is read where the catalog says
it is, so one damaged header costs only that member: the next one is found by its offset,
not by walking past the damage. Every header must parse (its checksum matches), name the
catalog's path with the catalog's kind, and span exactly the catalog's length; every regular
file's data must give the checksum recorded at backup (the tree digest of tarfmt.TreeHash).
For a file checked whole, the members between and after the catalog's (the image's own
metadata, .cairn/image.json and .cairn/index.jsonl) and the end-of-archive marker are read
too.

The file is read front to back in large reads and hashed with hashlib or CRC-32 over large
views: no Python work per byte. A compressed image (zframes.py) is read the same way through
its tar stream, one frame at a time: a frame that does not decode is the damage of the
members it holds, each named, and the check goes on with the next frame. Standard library
only (zstandard for compressed images): this runs on storage servers."""

import errno
import hashlib
import os
import time

from app.errors import Canceled, CairnError, ValidationError
from app.formats import private, tarfmt
from plugins.storage.advanced_disk import zframes

READ_BYTES = 8 << 20
PROGRESS_EVERY = 0.5
# The reason of a member whose header is intact and whose data is not.
DATA_MISMATCH = "its data does not match the checksum recorded at backup"

# The tar types a member of each catalog kind may have (app/formats/entry.py).
_TYPES = {"f": (tarfmt.REGTYPE, tarfmt.AREGTYPE, tarfmt.CONTTYPE), "d": (tarfmt.DIRTYPE,),
          "l": (tarfmt.SYMTYPE,), "h": (tarfmt.LNKTYPE,), "p": (tarfmt.FIFOTYPE,),
          "c": (tarfmt.CHRTYPE,), "b": (tarfmt.BLKTYPE,)}
_KIND_NAMES = {"f": "regular file", "d": "directory", "l": "symbolic link", "h": "hard link",
               "p": "fifo", "c": "character device", "b": "block device"}


class _Short(Exception):
    """The file ended before the bytes asked for."""


def _pread(fd):
    return lambda mv, pos: os.preadv(fd, [mv], pos)


class _Reader:
    """One image file read by position through a large buffer: neighbouring members cost no
    more system calls than one sequential read of the file. pread(mv, pos): the file's bytes,
    or a compressed image's tar stream up to the end of a frame."""

    def __init__(self, pread, tick=None):
        self.pread = pread
        self.tick = tick  # called before each read: progress, and a cancel inside a big file
        self.buf = bytearray(READ_BYTES)
        self.mv = memoryview(self.buf)
        self.base = 0   # file offset of buf[0]
        self.lo = 0     # next byte to hand out
        self.hi = 0     # bytes valid in buf
        self.read_bytes = 0

    def tell(self):
        return self.base + self.lo

    def seek(self, pos):
        if self.base <= pos <= self.base + self.hi:
            self.lo = pos - self.base
        else:
            self.base, self.lo, self.hi = pos, 0, 0

    def _fill(self):
        """Reads more after the buffered bytes (keeping those not handed out yet); False at
        the end of the file."""
        left = self.hi - self.lo
        if self.lo:
            if left:
                self.mv[:left] = bytes(self.mv[self.lo:self.hi])  # a header's few bytes
            self.base += self.lo
            self.lo, self.hi = 0, left
        if self.tick is not None:
            self.tick(self)
        n = self.pread(self.mv[self.hi:], self.base + self.hi)
        self.hi += n
        self.read_bytes += n
        return n > 0

    def read_exact(self, n):
        if n > len(self.buf) // 2:  # a large pax header or sparse map: gathered
            out = bytearray()
            self.feed(n, out.extend)
            return bytes(out)
        while self.hi - self.lo < n:
            if not self._fill():
                raise _Short()
        out = bytes(self.mv[self.lo:self.lo + n])
        self.lo += n
        return out

    def feed(self, n, update):
        """Hands the next n bytes to update() as views of the buffer."""
        while n:
            if self.lo == self.hi:
                self.base += self.hi
                self.lo = self.hi = 0
                if not self._fill():
                    raise _Short()
            k = min(n, self.hi - self.lo)
            update(self.mv[self.lo:self.lo + k])
            self.lo += k
            n -= k


class _TreeDigest:
    """tarfmt.TreeHash computed in the calling thread: the data cut into 1 MiB pieces, each
    checked with the image's piece algorithm, the SHA-256 of the piece digests."""

    def __init__(self, algorithm):
        self.piece = tarfmt.piece_hash(algorithm)
        self.cur = self.piece()
        self.n = 0
        self.digests = []

    def update(self, mv):
        while len(mv):
            k = min(len(mv), tarfmt.PIECE - self.n)
            self.cur.update(mv[:k])
            self.n += k
            mv = mv[k:]
            if self.n == tarfmt.PIECE:
                self.digests.append(self.cur.digest())
                self.cur, self.n = self.piece(), 0

    def hexdigest(self):
        if self.n or not self.digests:
            self.digests.append(self.cur.digest())
        return hashlib.sha256(b"".join(self.digests)).hexdigest()


def _member_shape(m):
    return (isinstance(m, list) and len(m) == 5 and type(m[0]) is int and type(m[1]) is int
            and m[0] >= 0 and m[1] > 0 and isinstance(m[2], str) and isinstance(m[3], str)
            and isinstance(m[4], str) and m[4].startswith("/"))


def _why(e):
    return (e.strerror or str(e)).lower()


def _member(r, offset, length, kind, checksum, path, algorithm):
    """None when the member is intact, else what is wrong with it."""
    r.seek(offset)
    try:
        m = tarfmt.read_member_header(r.read_exact)
    except tarfmt.FormatError as e:
        return f"its tar header is damaged ({e})"
    if m is None:
        return "an end-of-archive marker stands where its tar header should be"
    if m.name.rstrip(b"/") != os.fsencode(path).lstrip(b"/"):
        return f"its tar header names another member ({bytes(m.name[:200])!r})"
    if m.type not in _TYPES.get(kind, ()):
        return (f"its tar header is of type {m.type.decode('latin-1')!r}, not a "
                f"{_KIND_NAMES.get(kind, kind)}")
    span = m.header_bytes + tarfmt.padded(m.size)
    if span != length:
        return f"its member is {span} bytes long where the catalog says {length}"
    if kind != "f":
        return None
    if m.sparse is None:
        return "its member uses a sparse format Cairn does not write"
    h = _TreeDigest(algorithm)
    data = m.size
    if m.sparse:
        try:
            segments, used = tarfmt.read_sparse_map(r.read_exact, m.size)
        except tarfmt.FormatError as e:
            return f"its sparse map is damaged ({e})"
        data = m.size - used
        if sum(ln for _, ln in segments) != data:
            return "its sparse map does not match the member"
    r.feed(data, h.update)
    if checksum and h.hexdigest() != checksum:
        return DATA_MISMATCH
    return None


def _metadata(r, start, end, damage):
    """The members between catalog members (the image's own metadata) from `start` up to
    `end` (None: up to the end-of-archive marker, which must follow)."""
    pos = start
    while end is None or pos < end:
        r.seek(pos)
        try:
            m = tarfmt.read_member_header(r.read_exact)
            if m is None:
                if end is not None:
                    damage.append({"offset": pos, "reason": "an end-of-archive marker stands "
                                   "before members the catalog lists"})
                elif not tarfmt.is_zero_block(r.read_exact(tarfmt.BLOCK)):
                    damage.append({"offset": pos, "reason": "the end-of-archive marker is "
                                   "damaged"})
                return
            r.feed(m.size, len)  # read, so that an unreadable or missing end is found
        except tarfmt.FormatError as e:
            damage.append({"offset": pos, "reason": f"a tar header of the image's own "
                           f"metadata is damaged ({e})"})
            return
        except _Short:
            damage.append({"offset": pos, "reason": "the image ends early: it is cut short"
                           + ("" if end is not None else " (no end-of-archive marker)")})
            return
        except OSError as e:
            damage.append({"offset": pos, "reason": f"reading the image failed: {_why(e)}"})
            return
        except CairnError as e:  # a frame of a compressed image that does not decode
            damage.append({"offset": pos, "reason": f"reading the image failed: {e.message}"})
            return
        pos += m.header_bytes + tarfmt.padded(m.size)
    if pos != end:
        damage.append({"offset": start, "reason": "the image's own metadata members do not "
                       "end where the next file's member begins"})


def check_file(spec, *, progress=None, is_cancelled=None, pace=None):
    """Checks one image file. spec: {"path", "checksum" (the piece algorithm), "whole" (the
    metadata and end marker too), "members": [[offset, length, kind, checksum, path], ...]}.
    Returns {"path", "error" (the file cannot be read at all), "damage": [{"path", "offset",
    "reason"}], "structure": [{"offset", "reason"}], "modes": [private.tighten's changes],
    "bytes", "members"}. progress(bytes read, members checked) is called as it goes;
    pace(bytes read) holds the reading back to a rate."""
    path = spec["path"]
    out = {"path": path, "error": None, "damage": [], "structure": [], "modes": [],
           "bytes": 0, "members": 0}
    algorithm = spec.get("checksum") or tarfmt.DEFAULT_CHECKSUM
    try:
        tarfmt.piece_hash(algorithm)
    except ValueError as e:
        raise ValidationError(str(e)) from None
    members = spec.get("members") or []
    if not isinstance(members, list) or not all(_member_shape(m) for m in members):
        raise ValidationError(f"the members to check in {path} must each be [offset, length, "
                             "kind, checksum, path]")
    members = sorted(members, key=lambda m: m[0])
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        why = ("a symbolic link stands in its place" if e.errno == errno.ELOOP
               else _why(e))
        out["error"] = f"the image file {path} cannot be opened: {why}"
        return out
    try:
        private.tighten(fd, path, out["modes"])
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except (OSError, AttributeError):
            pass
        last = [0.0]

        def tick(reader):
            if is_cancelled is not None and is_cancelled():
                raise Canceled()
            if pace is not None:
                pace(reader.read_bytes)
            if progress is not None and time.monotonic() - last[0] > PROGRESS_EVERY:
                last[0] = time.monotonic()
                progress(reader.read_bytes, out["members"])

        pread = _pread(fd)
        frames = None
        if zframes.is_compressed_fd(fd):
            try:
                frames = zframes.ZstdImage(path, fd=fd)
            except CairnError as e:  # zstandard is missing
                out["error"] = e.message
                return out
            pread = frames.preadinto_frame
        r = _Reader(pread, tick)
        pos = 0
        for offset, length, kind, checksum, mpath in members:
            if offset < pos:
                reason = "the catalog puts it inside the member before it"
            else:
                if spec.get("whole") and offset > pos:
                    _metadata(r, pos, offset, out["structure"])
                try:
                    reason = _member(r, offset, length, kind, checksum, mpath, algorithm)
                except _Short:
                    reason = "the image ends inside its member: the image is cut short"
                except OSError as e:
                    reason = f"reading its member failed: {_why(e)}"
                except CairnError as e:  # a frame of a compressed image that does not decode
                    reason = f"reading its member failed: {e.message}"
                pos = offset + length
            if reason:
                out["damage"].append({"path": mpath, "offset": offset, "reason": reason})
            out["members"] += 1
        if spec.get("whole"):
            _metadata(r, pos, None, out["structure"])
        if frames is not None and frames.table_damage:
            # the members were read through the frames found without it
            out["structure"].append({"offset": frames.file_size, "reason": frames.table_damage})
        out["bytes"] = r.read_bytes
        if pace is not None:
            pace(r.read_bytes)  # the last read too: reads are large
    finally:
        os.close(fd)
    return out
