"""Cutting an image stream into the chunks of a deduplication pool, member by member.

An image is a pax tar stream (docs/image-format.md). Plain content-defined chunking of such a
stream resynchronises after a change, but a chunk that straddles a member border holds the end
of one member and the start of the next: when a member changes (its data, or only its header,
say a new mtime), the first chunk of the member after it is stored again as well, up to
max_size bytes of it. The segmenter follows the member structure of the stream and forces
boundaries at member borders (before a member's first header block: its pax or GNU extension
header when it has one), where the content-defined chunker starts afresh:
  - before and after every large member (member_min bytes or more, headers and padding
    included), so that an unchanged large file keeps all its chunks whatever changed around
    it (the image's first member, its metadata, differs in every image);
  - before any other member when the chunk being built holds member_min bytes already: small
    members share chunks of about member_min bytes instead of each making a tiny one.

So the boundary after one at B is the smaller of
  - B + the FastCDC chunk length of the stream from B (plugins/storage/dedup/chunker.py), and
  - the first member start M after B that either is a large member's start or end, or lies
    member_min bytes or more after B,
which depends on the stream's bytes only: any split of it into feed() calls gives the same
pieces, and both chunker implementations give the same pieces.

When the bytes stop looking like tar (a header whose checksum fails, a bad size field), or
after the end-of-archive marker, the rest of the stream is cut by FastCDC alone; a damaged or
foreign stream is never an error here.

Speed: the content-defined cuts come from the chunker's implementation over large views of
the stream, the member structure costs a header check per member, and each piece's bytes are
copied once, out of the caller's buffer when it is large (see feed()), or not at all when
the caller hands its large buffers over (views=True).

Standard library only (the agent on a client runs this); pyfastcdc is used when present.
"""

from collections import deque, namedtuple
from collections.abc import Mapping

from plugins.storage.dedup.chunker import Params, _implementation, reference_cut
from app.errors import ValidationError
from app.formats import tarfmt

KiB = 1024
MiB = 1024 * KiB

MEMBER_MIN = 16 * KiB

# Buffers at least this large are cut in place; smaller ones are gathered first, so that the
# last, not yet certain chunk of each buffer (cut again with the next bytes) stays a small
# share of the work. Memory: up to about twice this plus max_size.
GATHER = 8 * MiB

# The first bytes of a large buffer copied to settle the held tail's chunks; more (up to the
# window) only when they need more.
SETTLE_FIRST = 256 * KiB

Piece = namedtuple("Piece", "offset length data")

_BLOCK = tarfmt.BLOCK
_ZERO_BLOCK = tarfmt.ZERO_BLOCK
_EXTENSIONS = frozenset(tarfmt.XHDTYPE + tarfmt.XGLTYPE + tarfmt.GNU_LONGNAME
                        + tarfmt.GNU_LONGLINK)
_PAX_LOCAL = tarfmt.XHDTYPE[0]
# Types whose size field does not announce data (Python's tarfile and GNU tar skip nothing
# after them); Cairn writes them with size 0 anyway.
_NO_DATA = frozenset(tarfmt.LNKTYPE + tarfmt.SYMTYPE + tarfmt.CHRTYPE + tarfmt.BLKTYPE
                     + tarfmt.DIRTYPE + tarfmt.FIFOTYPE)
_MAX_EXTENSION = 1 << 26  # as tarfmt.read_member_header
_HIGH = bytes(range(128, 256))
_NEVER = 1 << 63  # "no unknown member start before the end of the stream"

_TAR, _END, _LOST = "tar", "end", "lost"


def header_type_and_size(block):
    """(type byte, size field) of a 512-byte tar header, or None when it is not one: the
    checksum (unsigned, or signed as some old writers summed) or the size field is invalid.
    Only what the segmenter needs, so that a member costs a few microseconds."""
    field = block[148:156]
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if not digits:
        return None
    try:
        stored = int(digits, 8)
    except ValueError:
        return None
    chk = tarfmt.header_sum(block)
    if stored != chk:
        high = (len(block) - len(block.translate(None, _HIGH))) \
            - (len(field) - len(field.translate(None, _HIGH)))
        if stored != chk - 256 * high:
            return None
    size_field = block[124:136]
    if size_field[0] & 0x80:
        if size_field[0] != 0x80:
            return None  # base-256 negative
        size = int.from_bytes(size_field[1:], "big")
    else:
        digits = size_field.split(b"\0", 1)[0].strip(b" ")
        try:
            size = int(digits, 8) if digits else 0
        except ValueError:
            return None
        if size < 0:
            return None
    return block[156], size


def _pax_size(data):
    """The size record of a pax header (None without one); ValueError when it is invalid."""
    if b" size=" not in data:
        return None  # the common case (mtime, path, xattrs): no need to parse
    try:
        records = tarfmt.parse_pax(data)
    except tarfmt.FormatError as e:
        raise ValueError(str(e))
    size = None
    for key, value in records:
        if key == b"size":
            size = int(value)
            if size < 0:
                raise ValueError("negative pax size")
    return size


def _params(params):
    if params is None:
        return Params()
    if isinstance(params, Params):
        return params
    if isinstance(params, Mapping):
        return Params(**params)
    raise ValidationError(f"chunker parameters must be a Params or a mapping, not "
                          f"{type(params).__name__}",
                          hint="Pass plugins.storage.dedup.chunker.Params(...) or a dict with "
                               "min_size, avg_size, max_size, normalization.")


class Segmenter:
    """Streaming, member-aware chunker of an image stream: feed buffers of any size, get the
    pieces that are complete as Piece(offset, length, data) with data a bytes copy, or a
    view with views=True (the caller hashes and stores it). finish() returns the rest.
    Concatenating all pieces gives the stream back.

    Attributes: `params` (chunker.Params), `member_min`, `implementation` ("pyfastcdc" or
    "reference"), `members` (members whose headers were read), `lost_at` (stream offset where
    the bytes stopped looking like tar, None while they do or after an end-of-archive
    marker).
    """

    def __init__(self, params=None, *, member_min=MEMBER_MIN, implementation=None,
                 views=False):
        """views: pieces cut in place out of a buffer of GATHER bytes or more are read-only
        views of that buffer instead of copies; the caller then leaves each such buffer
        unchanged for as long as its pieces are in use (bytes gathered from smaller buffers
        are still copied)."""
        self.params = _params(params)
        self._views = views
        if isinstance(member_min, bool) or not isinstance(member_min, int) or member_min < 0:
            raise ValidationError(f"member_min must be a whole number of bytes >= 0, not "
                                  f"{member_min!r}",
                                  hint=f"The default is {MEMBER_MIN} (16 KiB); 0 cuts before "
                                       f"every member.")
        self.member_min = member_min
        impl = _implementation(self.params, implementation)
        self.implementation = impl.name
        self._lengths = self._lazy_lengths(impl)
        self._min_gap = max(member_min, 1)
        # Enough bytes after a held tail to settle every chunk that starts in it.
        self._window = self.params.max_size + 1 + 2 * _BLOCK
        self._pending = bytearray()
        self._offset = 0   # stream offset of the first byte not yet in a piece
        self._end = 0      # stream bytes fed so far
        self._finished = False
        # member structure
        self._mode = _TAR
        self._hpos = 0          # next header block to read
        self._mstart = None     # start of the member whose header blocks are being read
        self._pax_size = None   # size record of that member's pax header
        self._large_end = None  # where the last member ended, when it was a large one
        # (start, forced) of the members not yet passed by the cutting; forced: a boundary
        # however small the chunk being built (a large member begins or ends there)
        self._starts = deque()
        self.members = 0
        self.lost_at = None

    @staticmethod
    def _lazy_lengths(impl):
        """view -> iterator of the chunk lengths of the view taken as a whole stream, computed
        one at a time so that a caller that stops early does not pay for the rest."""
        if impl.name == "pyfastcdc":
            cdc = impl._cdc

            def lengths(view):
                return (c.length for c in cdc.cut_buf(view))
        else:
            params = impl.params

            def lengths(view):
                n = len(view)
                pos = 0
                while pos < n:
                    length = reference_cut(params, view, pos, n)
                    yield length
                    pos += length
        return lengths

    @property
    def offset(self):
        """Stream offset up to which pieces have been returned."""
        return self._offset

    @property
    def held(self):
        """Bytes fed but not yet returned in a piece."""
        return self._end - self._offset

    # ------------------------------------------------------------------ streaming

    def feed(self, buffer):
        """Adds the next bytes of the stream; returns the pieces now complete, in order. The
        caller may reuse its buffer afterwards. Buffers of GATHER bytes or more are cut in
        place (one copy per piece); smaller ones are gathered into one buffer first."""
        if self._finished:
            raise RuntimeError("Segmenter.feed() after finish()")
        full = memoryview(buffer)
        if full.format != "B" or full.ndim != 1:
            full = full.cast("B")
        n = len(full)
        if not n:
            return []
        out = []
        start = self._end
        self._end += n
        if self._pending or n < GATHER:
            if n < GATHER or len(self._pending) > self._window:
                self._pending += full
                if len(self._pending) >= GATHER:
                    self._cut_pending(False, out)
                return out
            # Settle the chunks that start in the held tail on a copy of the tail plus as
            # many first bytes of the buffer as they need (at most the window; small chunks,
            # as of small files, need few), then cut the rest of the buffer in place.
            took = 0
            while self._offset < start and took < self._window:
                more = min(self._window, max(SETTLE_FIRST, 4 * took)) - took
                self._pending += full[took:took + more]
                took += more
                self._cut_pending(False, out, stop=start)
            if self._offset < start:  # not settled (a huge pax header): take it all
                self._pending += full[took:]
                self._cut_pending(False, out)
                return out
            self._pending = bytearray()
        view = full[self._offset - start:]
        if self._views:
            view = view.toreadonly()
        self._parse(view, self._offset)
        self._cut(view, self._offset, False, out, owned=self._views)
        self._pending = bytearray(full[self._offset - start:])
        return out

    def finish(self):
        """Ends the stream; returns its last pieces (none when all were returned)."""
        if self._finished:
            return []
        self._finished = True
        out = []
        if self._pending:
            self._cut_pending(True, out)
        self._pending = bytearray()
        return out

    def _cut_pending(self, final, out, stop=None):
        base = self._offset
        with memoryview(self._pending) as view:
            self._parse(view, base)
            self._cut(view, base, final, out, stop)
        del self._pending[:self._offset - base]

    # ------------------------------------------------------------------ member structure

    def _lose(self, where):
        self._mode = _LOST
        self.lost_at = where

    def _parse(self, view, base):
        """Follows the member headers present in view (stream offset base), recording each
        member's start once its last header block is read (its length is known then). Stops
        at the first header not entirely present."""
        if self._mode != _TAR:
            return
        end = base + len(view)
        starts = self._starts
        large = self.member_min
        while True:
            pos = self._hpos
            at = pos - base
            if pos + _BLOCK > end:
                return
            block = bytes(view[at:at + _BLOCK])
            if block == _ZERO_BLOCK:
                self._mode = _END  # end-of-archive marker; what follows is no member
                return
            info = header_type_and_size(block)
            if info is None:
                self._lose(pos)
                return
            kind, size = info
            if self._mstart is None:
                self._mstart = pos
            if kind in _EXTENSIONS:
                if size > _MAX_EXTENSION:
                    self._lose(pos)
                    return
                if kind == _PAX_LOCAL:
                    if pos + _BLOCK + size > end:
                        return  # read again when the whole pax header is here
                    try:
                        pax_size = _pax_size(bytes(view[at + _BLOCK:at + _BLOCK + size]))
                    except ValueError:
                        self._lose(pos)
                        return
                    if pax_size is not None:
                        self._pax_size = pax_size
                self._hpos = pos + _BLOCK + tarfmt.padded(size)
                continue
            if self._pax_size is not None:
                size = self._pax_size
                self._pax_size = None
            if kind in _NO_DATA:
                size = 0
            # GNU sparse 1.0: the size field already counts the map and the data.
            start = self._mstart
            self._hpos = pos + _BLOCK + tarfmt.padded(size)
            self._mstart = None
            is_large = self._hpos - start >= large
            starts.append((start, is_large or self._large_end == start))
            self._large_end = self._hpos if is_large else None
            self.members += 1

    # ------------------------------------------------------------------ cutting

    def _cut(self, view, base, final, out, stop=None, owned=False):
        """Appends the pieces from self._offset that are certain with the bytes of view
        (stream offset base, reaching the end of the stream when final); with stop, returns
        once the pieces reach it. owned: the pieces may be views of view."""
        take = (lambda v: v) if owned else bytes
        end = base + len(view)
        b = self._offset
        starts = self._starts
        gap = self._min_gap
        min_size = self.params.min_size
        max_size = self.params.max_size
        # Member starts before `known` are all in `starts`; one after it may still appear.
        if final or self._mode != _TAR:
            known = _NEVER
        else:
            known = self._hpos if self._mstart is None else self._mstart
        lengths = self._lengths
        append = out.append
        while b < end and (stop is None or b < stop):
            # the first start that cuts: forced, or member_min away (the others never will)
            while starts and (starts[0][0] <= b or (starts[0][0] < b + gap
                                                    and not starts[0][1])):
                starts.popleft()
            m, forced = starts[0] if starts else (None, False)
            if m is not None and m - b <= min_size:
                # FastCDC cuts nothing shorter than min_size: the member start decides.
                append(Piece(b, m - b, take(view[b - base:m - base])))
                b = m
                continue
            # One byte past m: FastCDC looks at the byte after a cut, and a cut found inside
            # a truncated view is a cut of the whole stream.
            w = end if m is None else min(end, m + 1)
            s = b
            it = lengths(view[b - base:w - base])
            try:
                for length in it:
                    e = s + length
                    if m is not None and e >= m:
                        if forced or m - s >= gap:
                            append(Piece(s, m - s, take(view[s - base:m - base])))
                            s = m
                        break  # else m no longer qualifies from s: look again
                    if e > known:
                        break  # an unseen member start may come before e
                    if length == w - s and length < max_size and not final:
                        break  # ran into the end of the bytes: may move with more
                    append(Piece(s, length, take(view[s - base:e - base])))
                    s = e
                    if stop is not None and s >= stop:
                        break
            finally:
                it.close()
            if s == b:
                break
            b = s
        self._offset = b
