"""Compressed AdvancedDisk images: the image's tar stream as a sequence of independent zstd
frames, each holding FRAME_BYTES of the stream (the last one less), followed by a seek table
in zstd's seekable format (a skippable frame that zstd and `tar -I zstd` pass over):

    frame 0 .. frame n-1 | skippable frame: [compressed size u32, tar bytes u32] * n,
                         |                  n u32, descriptor u8 (0), 0x8F92EAB1 u32

A frame ends where a member begins (its extension headers and its header first), once it
holds a quarter of FRAME_BYTES: the writer follows the tar headers in the stream it is given
(two fields of each, no Python work per byte of data), so a small file's member lies in one
frame, and only a member larger than a frame is cut inside its data, after its header.

Concatenated zstd frames decompress as one stream, so GNU tar reads the image whole
(`tar -I zstd -xf IMAGE`, or `tar -xf IMAGE`, which recognises zstd by itself). Cairn reads a
member where the catalog says it is in the tar stream: the seek table names the frame that
holds that offset, and only the frames the member spans are decompressed. Each frame carries
zstd's content checksum, so a damaged byte is found in the frame that holds it.

Writing compresses whole frames with the `zstandard` module (C code; no Python work per
byte); reading needs it too. Standard library otherwise: this runs on every storage host."""

import os
import struct
from bisect import bisect_right

from app import status
from app.errors import CairnError

try:
    import zstandard as _zstd
except ImportError:  # only compressed images need it; plain ones are read without it
    _zstd = None

MAGIC = b"\x28\xb5\x2f\xfd"          # the first bytes of a zstd frame
SKIPPABLE_MAGIC = 0x184D2A5E          # the seek table's skippable frame
SEEKABLE_MAGIC = 0x8F92EAB1           # zstd's seekable format, at the very end
FOOTER = struct.Struct("<IBI")        # frames, descriptor, SEEKABLE_MAGIC
ENTRY = struct.Struct("<II")          # compressed size, decompressed (tar) size
SKIPPABLE = struct.Struct("<II")      # magic, length of what follows
FRAME_BYTES = 4 << 20
# The most tar bytes a frame may hold when read: a table naming larger frames (a client that
# sent its own) is refused rather than decoded into that much memory.
MAX_FRAME_BYTES = 64 << 20
CODEC = "zstd"


def available():
    """Whether this host can write and read compressed images."""
    return _zstd is not None


def missing_text(path=None):
    """Why a compressed image cannot be read here."""
    what = f"image file {path} is" if path else "the image is"
    return (f"{what} compressed (zstd), and this host's Python lacks the zstandard module "
            "needed to read it")


MISSING_HINT = ("install it for the agent's python3 (pip install zstandard, or the "
                "distribution's python3-zstandard), or point the agent at it: "
                "`cairn host set HOST agent_env PYTHONPATH=DIR`")


def _damaged(message, hint=None):
    return CairnError(message, status_code=status.IMAGE_DAMAGED, hint=hint)


def is_compressed_fd(fd):
    """Whether the open image file starts with a zstd frame (a plain one with a tar header)."""
    try:
        return os.pread(fd, 4, 0) == MAGIC
    except OSError:
        return False


def is_compressed(path):
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return is_compressed_fd(fd)
    finally:
        os.close(fd)


def seek_table(frames):
    """The seek table's skippable frame for [(compressed, tar bytes)]."""
    body = b"".join(ENTRY.pack(c, d) for c, d in frames) + \
        FOOTER.pack(len(frames), 0, SEEKABLE_MAGIC)
    return SKIPPABLE.pack(SKIPPABLE_MAGIC, len(body)) + body


_EXTENSIONS = (b"x", b"g", b"L", b"K")  # headers that belong to the member after them


def _size_field(field):
    """A ustar size field: octal, or GNU base-256 (as app/formats/tarfmt.py writes it)."""
    if field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    return int(field.rstrip(b"\0 ") or b"0", 8)


class FrameWriter:
    """Compresses a tar stream into frames for `write` (the image file's or the data
    connection's): write(data) as the archiver writes, finish() for the last frame and the
    seek table. tar_bytes and stored_bytes count what went in and what came out.

    Frames end at member starts where they can (see the module's docstring): the stream's
    headers are followed as they arrive; a stream that stops looking like tar (it never
    should) is cut by size from there on, which changes nothing but where frames end."""

    def __init__(self, write, level, frame_bytes=FRAME_BYTES):
        if _zstd is None:
            raise CairnError("compressing the image needs the zstandard module, which this "
                             "host's Python lacks", status_code=status.AGENT_FAILED,
                             hint=MISSING_HINT)
        self._write = write
        self.level = level
        self._cctx = _zstd.ZstdCompressor(level=level, write_checksum=True,
                                          write_content_size=True)
        self.frame_bytes = frame_bytes
        self.min_frame = frame_bytes // 4
        self._buf = bytearray()
        self._at = 0          # tar offset of _buf[0]
        self._next = 0        # tar offset of the next header to look at (None: not tar)
        self._in_ext = False  # the last header was an extension of the member after it
        self._starts = []     # member starts after _at, in order
        self.frames = []
        self.tar_bytes = 0
        self.stored_bytes = 0

    def write(self, data):
        buf = self._buf
        buf += data
        if self._next is not None:
            self._follow()
        while len(buf) >= self.frame_bytes:
            cut = self._cut()
            # the frame compressed from the buffer itself, not from a copy of it
            with memoryview(buf) as view, view[:cut] as part:
                self._frame(part)
            del buf[:cut]
            self._at += cut
            del self._starts[:bisect_right(self._starts, self._at)]

    def _follow(self):
        """Notes where members begin in what is buffered, header by header."""
        buf, at = self._buf, self._at
        try:
            while True:
                i = self._next - at
                if i + 512 > len(buf):
                    return
                hdr = bytes(buf[i:i + 512])
                if hdr[257:262] != b"ustar":
                    self._next = None  # the end-of-archive marker, or not tar
                    return
                if not self._in_ext:
                    self._starts.append(self._next)
                self._in_ext = hdr[156:157] in _EXTENSIONS
                size = _size_field(hdr[124:136])
                self._next += 512 + ((size + 511) & ~511)
        except (ValueError, IndexError):
            self._next = None

    def _cut(self):
        """Where the frame being filled ends: the last member start in its first FRAME_BYTES
        past a quarter of them, else FRAME_BYTES (inside a member whose header lies before
        that)."""
        starts = self._starts
        k = bisect_right(starts, self._at + self.frame_bytes) - 1
        if k >= 0 and starts[k] > self._at + self.min_frame:
            return starts[k] - self._at
        return self.frame_bytes

    def _frame(self, data):
        z = self._cctx.compress(data)
        self._write(z)
        self.frames.append((len(z), len(data)))
        self.tar_bytes += len(data)
        self.stored_bytes += len(z)

    def finish(self):
        if self._buf:
            self._frame(self._buf)
            self._at += len(self._buf)
            del self._buf[:]
        table = seek_table(self.frames)
        self._write(table)
        self.stored_bytes += len(table)

    def report(self):
        """What the catalog and the job log say of the image's compression."""
        return {"codec": CODEC, "level": self.level, "frames": len(self.frames),
                "tar_bytes": self.tar_bytes, "stored_bytes": self.stored_bytes}


def read_table(fd, size, path):
    """([compressed offset], [tar offset], [tar bytes]) of each frame of a compressed image,
    from its seek table; a damaged or missing table is a CairnError naming the file."""
    def bad(why):
        return _damaged(f"the frame table at the end of compressed image file {path} is "
                        f"damaged: {why}",
                        hint="its frames are read without it; `cairn images verify IMAGE` "
                             "names it, and a copy of the image in another pool gets a new "
                             "one")
    if size < SKIPPABLE.size + FOOTER.size:
        raise bad("the file is too short to hold one")
    n, desc, magic = FOOTER.unpack(os.pread(fd, FOOTER.size, size - FOOTER.size))
    if magic != SEEKABLE_MAGIC:
        raise bad("the file does not end with it (it may be cut short)")
    esize = ENTRY.size + (4 if desc & 0x80 else 0)
    body = n * esize + FOOTER.size
    start = size - body - SKIPPABLE.size
    if desc & 0x7C or start < 0:
        raise bad(f"it says {n} frames, more than the file holds")
    head = os.pread(fd, SKIPPABLE.size + body - FOOTER.size, start)
    smagic, length = SKIPPABLE.unpack_from(head)
    if smagic != SKIPPABLE_MAGIC or length != body:
        raise bad("its header does not match its footer")
    coffs, toffs, tlens = [], [], []
    c = t = 0
    for i in range(n):
        clen, tlen = ENTRY.unpack_from(head, SKIPPABLE.size + i * esize)
        if tlen > MAX_FRAME_BYTES:
            raise bad(f"frame {i} would hold {tlen} bytes of tar stream, more than "
                      f"{MAX_FRAME_BYTES >> 20} MiB")
        coffs.append(c)
        toffs.append(t)
        tlens.append(tlen)
        c += clen
        t += tlen
    if c != start:
        raise bad(f"its frames end at byte {c}, where the table begins at byte {start}")
    coffs.append(c)
    return coffs, toffs, tlens


# zstd block types (a block header's bits 1-2): an RLE block holds one byte, 3 is reserved
_BLOCK_RLE, _BLOCK_RESERVED = 1, 3


def scan_frames(fd, size):
    """The frames of a compressed image found without its seek table: each frame's header and
    block headers read in turn from the start of the file, nothing decompressed.
    ([compressed offset], [tar offset], [tar bytes], why): why is None when the frames reach
    the seek table or the end of the file, else what stopped the walk (the frames before it
    are listed; the offsets after it are not known)."""
    coffs, toffs, tlens = [], [], []
    c = t = 0
    why = None
    while c < size:
        head = os.pread(fd, 18, c)
        if len(head) >= 4 and (struct.unpack_from("<I", head)[0] & ~0xF) == \
                (SKIPPABLE_MAGIC & ~0xF):
            break  # the seek table (or another skippable frame): the frames end here
        try:
            if head[:4] != MAGIC:
                raise ValueError("no zstd frame begins there")
            params = _zstd.get_frame_parameters(head)
            tlen = params.content_size
            if tlen in (_zstd.CONTENTSIZE_UNKNOWN, _zstd.CONTENTSIZE_ERROR) \
                    or tlen > MAX_FRAME_BYTES:
                raise ValueError("its header does not say how many bytes it holds")
            end = c + _zstd.frame_header_size(head)
            while True:
                block = os.pread(fd, 3, end)
                if len(block) < 3:
                    raise ValueError("the file ends inside it")
                word = int.from_bytes(block, "little")
                kind, n = (word >> 1) & 3, word >> 3
                if kind == _BLOCK_RESERVED:
                    raise ValueError("a block header in it is damaged")
                end += 3 + (1 if kind == _BLOCK_RLE else n)
                if word & 1:
                    break
            end += 4 if params.has_checksum else 0
            if end > size:
                raise ValueError("the file ends inside it")
        except (ValueError, _zstd.ZstdError) as e:
            why = f"frame {len(tlens)} at byte {c} of the file cannot be followed: {e}"
            break
        coffs.append(c)
        toffs.append(t)
        tlens.append(tlen)
        c, t = end, t + tlen
    coffs.append(c)
    return coffs, toffs, tlens, why


def describe(path):
    """{"codec", "frames", "tar_bytes", "stored_bytes"} of a compressed image file, from its
    seek table alone (no zstandard needed), or None for a plain one."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        if not is_compressed_fd(fd):
            return None
        size = os.fstat(fd).st_size
        _, _, tlens = read_table(fd, size, path)
    finally:
        os.close(fd)
    return {"codec": CODEC, "frames": len(tlens), "tar_bytes": sum(tlens), "stored_bytes": size}


class ZstdImage:
    """A compressed image file read by position in its tar stream (an image source, see
    app/agent/extents.py): `size` (the tar stream's length), preadinto(mv, pos),
    preadinto_frame(mv, pos) (no further than the end of the frame that holds pos), close(),
    and `damage`. A tolerant one (a restore's) reads a frame that does not decode as zeros and
    notes it in `damage`: (tar offset, length, what), so that only the files there are lost;
    otherwise that frame is a CairnError naming it.

    A damaged seek table (or one whose sizes do not match the frames) costs nothing while the
    frames are sound: they are found from their own headers (scan_frames), and `table_damage`
    says what was wrong with the table, for a verify to report. Past a frame that cannot be
    followed, a tolerant reader reads zeros, noted in `damage`; another one fails there."""

    def __init__(self, path, tolerant=False, fd=None):
        self.path = path
        self.tolerant = tolerant
        self.damage = []
        self.table_damage = None
        self._lost_after = None   # past the frames found without a table: what stopped them
        self._own = fd is None
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError as e:
                raise _damaged(f"the backup image {path} cannot be opened: "
                               f"{(e.strerror or str(e)).lower()}") from None
        self.fd = fd
        try:
            if _zstd is None:  # the image is sound: this host's agent cannot read it
                raise CairnError(missing_text(path), status_code=status.AGENT_FAILED,
                                 hint=MISSING_HINT)
            self.file_size = os.fstat(fd).st_size
            try:
                self._coffs, self._toffs, self._tlens = read_table(fd, self.file_size, path)
            except CairnError as e:
                self.table_damage = e.message
                self._coffs, self._toffs, self._tlens, self._lost_after = scan_frames(
                    fd, self.file_size)
        except BaseException:
            self.close()
            raise
        self.frames = len(self._tlens)
        self.size = (self._toffs[-1] + self._tlens[-1]) if self._tlens else 0
        self._dctx = _zstd.ZstdDecompressor()
        self._cached = (-1, b"")
        self.read_bytes = 0  # compressed bytes read from the file

    def sequential(self):
        try:
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except (OSError, AttributeError):
            pass

    def frame_span(self, i):
        """(tar offset, tar bytes) of frame i."""
        return self._toffs[i], self._tlens[i]

    def frame_of(self, pos):
        return bisect_right(self._toffs, pos) - 1

    def _frame(self, i):
        if self._cached[0] == i:
            return self._cached[1]
        c0, c1 = self._coffs[i], self._coffs[i + 1]
        t0, tlen = self._toffs[i], self._tlens[i]
        try:
            z = os.pread(self.fd, c1 - c0, c0)
            self.read_bytes += len(z)
            if len(z) != c1 - c0:
                raise ValueError("the file ends inside it (it is cut short)")
            data = self._dctx.decompress(z, max_output_size=tlen)
            if len(data) != tlen:
                raise ValueError(f"it holds {len(data)} bytes where the frame table says "
                                 f"{tlen}")
        except (OSError, ValueError, _zstd.ZstdError) as e:
            if self._table_lies():
                return None
            what = (f"frame {i} of {self.path} (bytes {t0}..{t0 + tlen} of its tar stream, "
                    f"at byte {c0} of the file) does not decode: "
                    f"{getattr(e, 'strerror', None) or e}")
            if not self.tolerant:
                raise _damaged(what, hint="verify the image (`cairn images verify IMAGE`); "
                                          "restore from another copy") from None
            if not any(d[0] == t0 for d in self.damage):
                self.damage.append((t0, tlen, what))
            data = bytes(tlen)
        self._cached = (i, data)
        return data

    def _table_lies(self):
        """After a frame did not decode as its table entry says: whether the frames, found
        from their own headers, disagree with the table; the reader then follows them."""
        if self.table_damage is not None:
            return False   # the frames were found without the table already
        found = scan_frames(self.fd, self.file_size)
        if found[:3] == (self._coffs, self._toffs, self._tlens):
            self.table_damage = ""   # it was the frame, not the table: not scanned again
            return False
        self.table_damage = (f"the frame table at the end of compressed image file "
                             f"{self.path} does not match its frames")
        self._coffs, self._toffs, self._tlens, self._lost_after = found
        self.frames = len(self._tlens)
        self.size = (self._toffs[-1] + self._tlens[-1]) if self._tlens else 0
        self._cached = (-1, b"")
        return True

    def preadinto_frame(self, mv, pos):
        if pos >= self.size and self._lost_after is not None and len(mv):
            # the catalog knows members past the frames that could be followed
            what = (f"{self.path}: its frame table is damaged and the frames cannot be "
                    f"followed past byte {self.size} of its tar stream ({self._lost_after})")
            if not self.tolerant:
                raise _damaged(what, hint="verify the image (`cairn images verify IMAGE`); "
                                          "restore from another copy")
            mv[:] = bytes(len(mv))
            if not any(d[2] == what for d in self.damage):
                self.damage.append((self.size, 1 << 62, what))
            return len(mv)
        if pos >= self.size or not len(mv):
            return 0
        i = self.frame_of(pos)
        data = self._frame(i)
        if data is None:  # the table lied: the frames it was replaced with are read instead
            return self.preadinto_frame(mv, pos)
        off = pos - self._toffs[i]
        k = min(len(mv), len(data) - off)
        mv[:k] = memoryview(data)[off:off + k]
        return k

    def preadinto(self, mv, pos):
        mv = memoryview(mv)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        total = 0
        while total < len(mv):
            n = self.preadinto_frame(mv[total:], pos + total)
            if not n:
                break
            total += n
        return total

    def close(self):
        if self.fd is not None and self._own:
            os.close(self.fd)
        self.fd = None
        self._cached = (-1, b"")


def open_source(path, tolerant=False):
    """A compressed image as a source of its tar stream, or None for a plain tar file (read as
    the file it is)."""
    if not is_compressed(path):
        return None
    return ZstdImage(path, tolerant)
