"""Reading a backup image back into the rows of its catalog index, for `cairn images
rebuild-index` (app/jobs/reindex.py). The storage host's agent reads the image itself, the tar
file of an advanced-disk pool or the stream of a deduplication pool's recipe, member by member.

What an image holds about its entries (docs/image-format.md):
  * each member's headers: path, kind, mode, owner, modification time (nanoseconds in a pax
    record), link target, sparse map; where the member starts and ends in the image;
  * each regular file's data, from which its checksum is computed again as the backup did
    (tarfmt.TreeHash with the image's piece algorithm);
  * the trailing index `.cairn/index.jsonl`: the rows the backup sent the master, in image
    order, with what no header carries: change time and inode (what the next incremental
    compares) and, in an incremental, the rows of the entries it did not send again (offset
    -1: their members are in earlier images; the master completes them from the base image's
    index, exactly as it did during the backup).

The trailing index is located first (it is the image's last member), then it and the members
are read side by side, both in image order: each row of the trailing index is checked against
the member at its offset (header fields and data checksum) and sent as the backup made it; a
member the trailing index lacks (a line of it is damaged) gets a row made from its own headers
and data, with change time and inode unknown (0). Where the image cannot be read or a header
is damaged, the reading skips to the next member whose offset the trailing index gives; where
no such offset is known, to the next block that is a valid tar header.

Standard library only; a pool's storage type says how its images are read (a deduplication
pool's recipes: plugins/storage/dedup/agent.py)."""

import json
import os
import time

from app import status
from app.errors import CairnError, Canceled
from app.formats import entry, imagemeta, tarfmt

BUFSIZE = 4 << 20
ROW_BATCH = 5000
PROGRESS_EVERY = 0.25
# Problems of each kind named in the result; the rest are counted.
LIST_LIMIT = 1000
# The image's end: the trailing index member, then the end-of-archive marker.
EOF_BYTES = len(tarfmt.EOF_MARKER)
INDEX_NAME = imagemeta.INDEX_NAME
META_NAME = imagemeta.META_NAME
SUMMARY_NAME = imagemeta.SUMMARY_NAME
META_LIMIT = imagemeta.META_LIMIT
USTAR_MAGIC = b"ustar\x0000"
MAGIC_AT = 257

_KIND_OF_TYPE = {
    tarfmt.REGTYPE: entry.KIND_FILE, tarfmt.AREGTYPE: entry.KIND_FILE,
    tarfmt.CONTTYPE: entry.KIND_FILE, tarfmt.LNKTYPE: entry.KIND_HARDLINK,
    tarfmt.SYMTYPE: entry.KIND_SYMLINK, tarfmt.DIRTYPE: entry.KIND_DIR,
    tarfmt.FIFOTYPE: entry.KIND_FIFO, tarfmt.CHRTYPE: entry.KIND_CHAR,
    tarfmt.BLKTYPE: entry.KIND_BLOCK,
}
_KINDS = frozenset(entry.KINDS)
_HEX = frozenset("0123456789abcdef")
# The fields a member's headers give, compared with the trailing index's row.
_COMPARED = (entry.PATH, entry.KIND, entry.MODE, entry.UID, entry.GID, entry.SIZE,
             entry.MTIME_NS, entry.LENGTH, entry.LINK)
ROW_FIELDS = len(entry.FIELDS) + 2   # the 11 fields, change time and inode


class Unreadable(Exception):
    """Bytes [start, end) of the image cannot be read."""

    def __init__(self, start, end, reason):
        super().__init__(reason)
        self.start = start
        self.end = max(end, start + 1)
        self.reason = reason


class FileImage:
    """An advanced-disk image file."""

    def __init__(self, path):
        try:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise CairnError(f"the image file {path} is missing",
                               status_code=status.IMAGE_DAMAGED) from None
        except OSError as e:
            raise CairnError(f"cannot open the image file {path}: {e.strerror}",
                               status_code=status.IMAGE_DAMAGED) from None
        self.path = path
        self.size = os.fstat(self.fd).st_size

    def read(self, pos, n):
        n = max(0, min(n, self.size - pos))
        parts = []
        got = 0
        while got < n:
            try:
                b = os.pread(self.fd, n - got, pos + got)
            except OSError as e:
                if got:
                    break  # what was read so far; the next read meets the error again
                # The extent of a bad spot is unknown: one page at a time.
                raise Unreadable(pos, pos + 4096 - pos % 4096,
                                 f"read error: {e.strerror or e}") from None
            if not b:
                break
            parts.append(b)
            got += len(b)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class StreamImage:
    """An image read through preadinto(buf, pos): a deduplication pool's recipe stream (its
    source, with the `recipe` it reads; plugins/storage/dedup/agent.py). A damaged or missing
    chunk makes the bytes it holds unreadable, nothing else."""

    def __init__(self, stream):
        self.stream = stream
        self.size = stream.size
        self.path = getattr(getattr(stream, "recipe", None), "path", None)

    def _chunk_span(self, offset, pos, n):
        recipe = getattr(self.stream, "recipe", None)
        if offset is None or recipe is None:
            return pos, pos + n
        try:
            e = recipe.entry(recipe.index_at(offset))
        except (ValueError, IndexError):
            return pos, pos + n
        return e.stream_offset, e.stream_offset + e.length

    def read(self, pos, n):
        n = max(0, min(n, self.size - pos))
        buf = bytearray(n)
        try:
            got = self.stream.preadinto(buf, pos)
        except (CairnError, OSError) as e:
            start, end = self._chunk_span(getattr(e, "stream_offset", None), pos, n)
            if pos < start < pos + n:
                return self.read(pos, start - pos)
            reason = getattr(e, "message", None) or getattr(e, "strerror", None) or str(e)
            raise Unreadable(max(start, pos), end, reason) from None
        del buf[got:]
        return bytes(buf)

    def close(self):
        pass


class _Cursor:
    """Sequential reading of an image through a large buffer: headers are cut out of it,
    file data is handed to the checksum as views of it."""

    def __init__(self, image, bufsize=BUFSIZE):
        self.image = image
        self.size = image.size
        self.bufsize = bufsize
        self.buf = b""
        self.start = 0
        self.pos = 0

    def _fill(self, need):
        off = self.pos - self.start
        if 0 <= off and off + need <= len(self.buf):
            return need
        self.buf = b""  # a failed read must not leave the old bytes looking current
        self.buf = self.image.read(self.pos, max(need, self.bufsize))
        self.start = self.pos
        return min(need, len(self.buf))

    def read_exact(self, n):
        if n > self.bufsize:
            data = self.image.read(self.pos, n)
        else:
            k = self._fill(n)
            off = self.pos - self.start
            data = self.buf[off:off + k]
        if len(data) < n:
            if self.pos + len(data) >= self.size:
                raise tarfmt.FormatError("the image ends inside a member: it is truncated")
            raise Unreadable(self.pos + len(data), self.pos + n, "short read")
        self.pos += n
        return data

    def views(self, end):
        """memoryviews of the bytes from the current position to `end`."""
        while self.pos < end:
            k = self._fill(min(end - self.pos, self.bufsize))
            if not k:
                if self.pos >= self.size:
                    raise tarfmt.FormatError("the image ends inside a member: it is truncated")
                raise Unreadable(self.pos, end, "short read")
            off = self.pos - self.start
            yield memoryview(self.buf)[off:off + k]
            self.pos += k


def _run(jobs):
    """A TreeHash's jobs, here and now (the backup hands them to hash threads)."""
    for h, mv, done in jobs:
        if mv is not None:
            h.update(mv)
        if done is not None:
            done(h)


def _valid_row(r):
    """Whether a parsed line of the trailing index is a row as the backup writes them."""
    if type(r) is not list:
        return False
    if len(r) == entry.SHORT_ROW:  # an incremental's unchanged entry
        return type(r[0]) is str and r[0].startswith("/") and r[1] == entry.UNCHANGED \
            and type(r[1]) is int
    if len(r) not in (len(entry.FIELDS), ROW_FIELDS):
        return False
    path, kind, checksum, link = r[entry.PATH], r[entry.KIND], r[entry.CHECKSUM], r[entry.LINK]
    if type(path) is not str or not path.startswith("/") or kind not in _KINDS:
        return False
    if type(checksum) is not str or type(link) is not str:
        return False
    if checksum and (len(checksum) != 64 or not _HEX.issuperset(checksum)):
        return False
    ints = r[entry.MODE:entry.CHECKSUM] + r[len(entry.FIELDS):]
    if any(type(v) is not int for v in ints):
        return False
    return r[entry.OFFSET] >= -1 and r[entry.LENGTH] >= 0


class _Member:
    __slots__ = ("offset", "end", "name", "row", "problem")


class ImageIndexer:
    """Reads one image and emits its index rows in batches ("rows" events), with "totals"
    and "progress" as it goes. run() returns what it found (see the `index_image` op)."""

    def __init__(self, image, *, checksum, emit, is_cancelled, trailing=None):
        tarfmt.piece_hash(checksum)  # ValueError for an unknown algorithm
        self.image = image
        # A second reader of the same image for the trailing index, read beside the members
        # (a recipe stream reads ahead for one position only).
        self.trailing = trailing or image
        self.size = image.size
        self.algorithm = checksum
        self.emit = emit
        self.is_cancelled = is_cancelled
        self.cur = _Cursor(image)
        self.batch = []
        self.rows = 0
        self.members = 0
        self.read_bytes = 0
        self.last_progress = 0.0
        self.meta = None
        self.meta_problem = None
        self.index_at = None            # offset of the trailing index member's header
        self.index_data = None          # (start, length) of its data
        self.index_problem = None
        self.trailing_rows = 0
        self.trailing_bad = 0           # lines that cannot be read or are no valid row
        self.unchanged = 0              # rows of entries held by earlier images
        self.since_bad = False          # a bad line was met since the last matched row
        self.damage = []                # [start, end, reason] of the image
        self.lost = []                  # rows kept whose member cannot be read
        self.lost_count = 0
        self.mismatch = []              # checksum of the data differs from the recorded one
        self.mismatch_count = 0
        self.differ = []                # header fields differ from the trailing index's row
        self.differ_count = 0
        self.from_members = []          # rows made from members alone
        self.from_members_count = 0
        self.dropped = []               # trailing index rows matching no member
        self.dropped_count = 0

    # -- output ----------------------------------------------------------------------------

    def _send(self, row):
        if entry.SHORT_ROW < len(row) < ROW_FIELDS:
            row = row + [0] * (ROW_FIELDS - len(row))
        self.batch.append(row)
        if len(self.batch) >= ROW_BATCH:
            self._flush_rows()

    def _flush_rows(self):
        if self.batch:
            self.rows += len(self.batch)
            self.emit("rows", {"rows": self.batch})
            self.batch = []

    def _tick(self, path=""):
        if self.is_cancelled():
            raise Canceled()
        now = time.monotonic()
        if now - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = now
            self.emit("progress", {"files": self.rows + len(self.batch),
                                   "bytes": self.read_bytes, "path": path})

    @staticmethod
    def _note(lst, count, item):
        if count < LIST_LIMIT:
            lst.append(item)
        return count + 1

    def _damaged(self, start, end, reason):
        if self.damage and self.damage[-1][1] >= start and self.damage[-1][2] == reason:
            self.damage[-1][1] = max(self.damage[-1][1], end)
        elif len(self.damage) < LIST_LIMIT:
            self.damage.append([start, end, reason])

    def _in_damage(self, offset):
        return any(a <= offset < b for a, b, _ in self.damage)

    # -- members ---------------------------------------------------------------------------

    def _member(self, pos):
        """The member at pos: a _Member, or None at an end-of-archive block. FormatError or
        Unreadable when its headers cannot be read."""
        cur = self.cur
        cur.pos = pos
        m = tarfmt.read_member_header(cur.read_exact)
        if m is None:
            return None
        data = pos + m.header_bytes
        end = data + tarfmt.padded(m.size)
        if end > self.size:
            raise tarfmt.FormatError("the member runs past the end of the image: it is "
                                     "truncated")
        out = _Member()
        out.offset = pos
        out.end = end
        out.name = bytes(m.name)
        out.problem = None
        kind = _KIND_OF_TYPE.get(m.type)
        if kind is None:
            out.row = None
            out.problem = f"a member of unknown type {m.type!r}"
            return out
        path = os.fsdecode(b"/" + out.name.strip(b"/")) if out.name.strip(b"/") else "/"
        size = 0
        checksum = ""
        link = ""
        if kind == entry.KIND_FILE:
            size = m.realsize if m.sparse else m.size
            checksum = self._checksum(data, m)
            if checksum is None:
                out.problem = "its data cannot be read"
        elif kind == entry.KIND_SYMLINK:
            link = os.fsdecode(bytes(m.linkname))
        elif kind == entry.KIND_HARDLINK:
            link = os.fsdecode(b"/" + bytes(m.linkname).lstrip(b"/"))
        out.row = [path, kind, m.mode & 0o7777, m.uid, m.gid, size, m.mtime_ns, pos,
                   end - pos, checksum, link, 0, 0]
        return out

    def _checksum(self, data, m):
        """The file's checksum as the backup computed it: its stored data (for a sparse file
        the data regions after the map) through TreeHash. None when the data cannot be read."""
        cur = self.cur
        cur.pos = data
        end = data + m.size
        try:
            if m.sparse and m.size:
                _segments, used = tarfmt.read_sparse_map(cur.read_exact, m.size)
                cur.pos = data + used
            left = end - cur.pos
            views = cur.views(end)
            first = next(views, b"")
            if len(first) == left:
                # the whole data in one view: most files, in one call
                return tarfmt.tree_digest(first, self.algorithm)
            h = tarfmt.TreeHash(self.algorithm)
            _run(h.jobs(first))
            for mv in views:
                _run(h.jobs(mv))
            got = []
            _run(h.close(got.append))
        except Unreadable as e:
            self._damaged(e.start, e.end, e.reason)
            return None
        except tarfmt.FormatError as e:
            self._damaged(data, end, str(e))
            return None
        return got[0]

    def _next_header(self, pos, limit):
        """The offset of the next block in [pos, limit) that is a valid tar header, or limit.
        Only used where the trailing index gives no offset to go on from."""
        pos += -pos % tarfmt.BLOCK
        while pos < limit:
            self._tick()
            n = min(BUFSIZE, limit - pos)
            try:
                data = self.image.read(pos, n)
            except Unreadable as e:
                self._damaged(e.start, e.end, e.reason)
                pos = e.end + (-e.end % tarfmt.BLOCK)
                continue
            if not data:
                break
            i = data.find(USTAR_MAGIC, MAGIC_AT)
            while i >= 0:
                at = i - MAGIC_AT
                if at % tarfmt.BLOCK == 0:
                    try:
                        tarfmt.parse_ustar(data[at:at + tarfmt.BLOCK])
                        return pos + at
                    except tarfmt.FormatError:
                        pass
                i = data.find(USTAR_MAGIC, i + 1)
            pos += len(data) - len(data) % tarfmt.BLOCK or tarfmt.BLOCK
        return limit

    def _resume(self, pos, limit, reason):
        """After damage at pos: where to read the next member, before `limit` (the next
        offset the trailing index gives, or the trailing index itself)."""
        if self.index_data is not None and not self.since_bad:
            nxt = limit   # every member before limit is in the trailing index: none is lost
        else:
            nxt = self._next_header(pos + tarfmt.BLOCK, limit)
        self._damaged(pos, nxt, reason)
        return nxt

    def _members_until(self, pos, limit):
        """Read the members in [pos, limit) that the trailing index does not list: each
        becomes a row of its own. Returns where reading stopped: `limit`."""
        while pos < limit:
            self._tick()
            try:
                m = self._member(pos)
            except (tarfmt.FormatError, Unreadable) as e:
                pos = self._resume(pos, limit, _reason(e, "a damaged member header"))
                continue
            if m is None:
                if self.index_data is None:
                    # The end of the archive, unless a member follows (a zeroed header)
                    nxt = self._next_header(pos + tarfmt.BLOCK, limit)
                    if nxt >= limit:
                        return limit
                    self._damaged(pos, nxt, "an end-of-archive block where a member should "
                                            "be")
                    pos = nxt
                    continue
                pos = self._resume(pos, limit, "an end-of-archive block where a member "
                                               "should be")
                continue
            self.members += 1
            self.read_bytes = m.end
            if m.end > limit:
                # disagrees with the trailing index about where members start
                self._damaged(pos, limit, "a member runs past the next one the image's "
                                          "index knows")
                return limit
            if pos == 0 and m.name == META_NAME:
                pass
            elif m.name == INDEX_NAME and m.end == self.size - EOF_BYTES:
                pass  # the trailing index itself, found only by reading forward
            elif m.name == SUMMARY_NAME and self._is_summary(m):
                pass  # the summary the backup wrote before its index (format 2)
            elif m.row is None:
                self._damaged(pos, m.end, m.problem)
            else:
                if m.problem:
                    # no checksum was recorded for it and none can be computed
                    m.row[entry.CHECKSUM] = ""
                    self.lost_count = self._note(self.lost, self.lost_count,
                                                 [m.row[0], pos, m.problem])
                self.from_members_count = self._note(self.from_members,
                                                     self.from_members_count, m.row[0])
                self._send(m.row)
            pos = m.end
        return pos

    def _is_summary(self, m):
        """Whether a member named .cairn/summary.json is the image's summary (format 2): it
        ends where the trailing index starts, or, without a trailing index, it holds the
        summary's counters (a backed-up file of that name does not)."""
        if self.index_at is not None:
            return m.end == self.index_at
        if m.end - m.offset > imagemeta.SUMMARY_LIMIT + 2048:
            return False
        try:
            self.cur.pos = m.offset
            h = tarfmt.read_member_header(self.cur.read_exact)
            summary = json.loads(bytes(self.cur.read_exact(h.size)).decode("utf-8"))
        except (tarfmt.FormatError, Unreadable, ValueError, AttributeError):
            return False
        return isinstance(summary, dict) and imagemeta.summary_problem(summary) is None \
            and all(k in summary for k in imagemeta.SUMMARY_COUNTS)

    def _check(self, r, off):
        """The member a row of the trailing index names: check it, send the row. Returns
        where the next member starts."""
        path = r[entry.PATH]
        self._tick(path)
        nxt = off + r[entry.LENGTH]
        try:
            m = self._member(off)
        except (tarfmt.FormatError, Unreadable) as e:
            m, why = None, _reason(e, "its header is damaged")
        else:
            why = "an end-of-archive block is where its header should be"
        if m is None or m.row is None:
            if m is not None:
                why = m.problem
            self._damaged(off, max(nxt, off + tarfmt.BLOCK), why)
            self.lost_count = self._note(self.lost, self.lost_count, [path, off, why])
            self._send(r)
            return max(nxt, off + tarfmt.BLOCK)
        self.members += 1
        self.read_bytes = m.end
        row = m.row
        if m.problem:   # its data cannot be read; the row keeps the recorded checksum
            self.lost_count = self._note(self.lost, self.lost_count, [path, off, m.problem])
        elif r[entry.KIND] == entry.KIND_FILE and row[entry.CHECKSUM] != r[entry.CHECKSUM]:
            self.mismatch_count = self._note(self.mismatch, self.mismatch_count, path)
        fields = [entry.FIELDS[i] for i in _COMPARED if row[i] != r[i]]
        if not fields:
            self._send(r)
            return nxt
        # A header that fails its checksum is never used, and one line of the trailing index
        # has none: where both are readable but disagree, the header is taken (it is what a
        # restore reads), with the recorded checksum, change time and inode.
        self.differ_count = self._note(self.differ, self.differ_count, [path, fields])
        if row[entry.KIND] == r[entry.KIND] == entry.KIND_FILE:
            row[entry.CHECKSUM] = r[entry.CHECKSUM]
        elif m.problem:
            row[entry.CHECKSUM] = ""
        row[len(entry.FIELDS):] = r[len(entry.FIELDS):] or [0, 0]
        self._send(row)
        return m.end

    # -- the trailing index ----------------------------------------------------------------

    def _read_meta(self):
        """`.cairn/image.json`, the image's first member: which image this is."""
        try:
            self.cur.pos = 0
            m = tarfmt.read_member_header(self.cur.read_exact)
            if m is None or bytes(m.name) != META_NAME:
                self.meta_problem = "the image does not begin with .cairn/image.json"
                return
            if m.size > META_LIMIT:
                self.meta_problem = ".cairn/image.json is too large"
                return
            data = self.cur.read_exact(m.size) if m.size else b""
            meta = json.loads(bytes(data).decode("utf-8"))
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
            self.meta = meta
        except (tarfmt.FormatError, Unreadable, ValueError) as e:
            self.meta_problem = f".cairn/image.json cannot be read: {_reason(e, 'damaged')}"

    def _readable(self, lo, hi):
        """[(offset, bytes)] of what can be read of [lo, hi), unreadable stretches left out
        (and noted as damage)."""
        out = []
        pos = lo
        while pos < hi:
            try:
                data = self.image.read(pos, hi - pos)
            except Unreadable as e:
                self._damaged(e.start, e.end, e.reason)
                pos = max(e.end, pos + 1)
                continue
            if not data:
                break
            out.append((pos, data))
            pos += len(data)
        return out

    def _last_header(self, hi):
        """(offset, 512-byte block) of the last block before `hi` whose ustar magic sits
        where a header's does, or None; from the end, BUFSIZE at a time."""
        while hi > 0:
            self._tick()
            lo = max(0, hi - BUFSIZE)
            for at, data in reversed(self._readable(lo, hi)):
                i = data.rfind(USTAR_MAGIC)
                while i >= 0:
                    h = i - MAGIC_AT
                    if h >= 0 and (at + h) % tarfmt.BLOCK == 0 \
                            and h + tarfmt.BLOCK <= len(data):
                        return at + h, data[h:h + tarfmt.BLOCK]
                    i = data.rfind(USTAR_MAGIC, 0, i)
            hi = lo
        return None

    def _find_trailing_index(self):
        """Locate the trailing index: its header is the last header of the image, found from
        the end (its data is JSON text, in which the ustar magic, holding a NUL, cannot
        occur), and it ends where the end-of-archive marker begins."""
        end_at = self.size - EOF_BYTES
        if end_at < tarfmt.BLOCK:
            self.index_problem = "the image is too short to hold its own index"
            return
        found = self._last_header(end_at - end_at % tarfmt.BLOCK)
        if found is None:
            self.index_problem = "the image's own index (.cairn/index.jsonl) was not found"
            return
        at, block = found
        try:
            h = tarfmt.parse_ustar(block)
        except tarfmt.FormatError as e:
            self.index_problem = f"the header of the image's own index is damaged ({e})"
            return
        if (h.get("name") != INDEX_NAME or h["type"] not in (tarfmt.REGTYPE, tarfmt.AREGTYPE)
                or at + tarfmt.BLOCK + tarfmt.padded(h["size"]) != end_at):
            self.index_problem = ("the image's last member is not its own index "
                                  "(.cairn/index.jsonl): the end of the image is damaged")
            return
        self.index_at = at
        self.index_data = (at + tarfmt.BLOCK, h["size"])

    def _trailing_lines(self):
        """The rows of the trailing index in order; None for each line (or unreadable
        stretch) that gives no valid row."""
        start, length = self.index_data
        pos, end = start, start + length
        tail = b""
        skip_partial = False
        while pos < end:
            self._tick()
            try:
                data = self.trailing.read(pos, min(BUFSIZE, end - pos))
            except Unreadable as e:
                self._damaged(e.start, e.end, e.reason)
                tail = b""
                skip_partial = True
                yield None
                pos = max(e.end, pos + 1)
                continue
            if not data:
                break
            pos += len(data)
            if skip_partial:
                cut = data.find(b"\n")
                if cut < 0:
                    continue
                data = data[cut + 1:]
                skip_partial = False
            lines = (tail + data).split(b"\n")
            tail = lines.pop()
            for line in lines:
                yield parse_line(line)
        if tail:
            yield None  # the last line lacks its end: cut short

    def _with_trailing_index(self):
        pos = 0
        for r in self._trailing_lines():
            if r is None:
                self.trailing_bad += 1
                self.since_bad = True
                continue
            self.trailing_rows += 1
            off = entry.UNCHANGED if len(r) == entry.SHORT_ROW else r[entry.OFFSET]
            if off == -1:
                self.unchanged += 1
                self._send(r)
                continue
            if off >= self.index_at or off < pos and not self._in_damage(off):
                self.dropped_count = self._note(self.dropped, self.dropped_count,
                                                [r[entry.PATH], off])
                continue
            if pos < off:
                pos = self._members_until(pos, off)
            if pos == off:
                pos = self._check(r, off)
                self.since_bad = False
            elif self._in_damage(off):
                # its member lies in a stretch that cannot be read: the row stays, a restore
                # names the file as lost
                self.lost_count = self._note(self.lost, self.lost_count,
                                             [r[entry.PATH], off, "it lies in a damaged part "
                                                                  "of the image"])
                self._send(r)
            else:
                self.dropped_count = self._note(self.dropped, self.dropped_count,
                                                [r[entry.PATH], off])
        self._members_until(pos, self.index_at)

    # -- the whole -------------------------------------------------------------------------

    def run(self):
        self.emit("totals", {"bytes": self.size})
        self._read_meta()
        self._find_trailing_index()
        if self.index_data is not None:
            self._with_trailing_index()
        else:
            self._members_until(0, self.size)
        self._flush_rows()
        self.read_bytes = self.size
        self.emit("progress", {"files": self.rows, "bytes": self.size, "path": ""})
        return {
            "bytes": self.size, "rows": self.rows, "members": self.members,
            "meta": self.meta, "meta_problem": self.meta_problem,
            "trailing_index": {"found": self.index_data is not None,
                               "problem": self.index_problem,
                               "rows": self.trailing_rows, "bad_lines": self.trailing_bad,
                               "unchanged": self.unchanged},
            "damage": [{"offset": a, "length": b - a, "reason": why}
                       for a, b, why in self.damage],
            "lost": [{"path": p, "offset": o, "reason": why} for p, o, why in self.lost],
            "lost_count": self.lost_count,
            "checksum_mismatch": self.mismatch, "checksum_mismatch_count": self.mismatch_count,
            "differ": [{"path": p, "fields": f} for p, f in self.differ],
            "differ_count": self.differ_count,
            "from_members": self.from_members, "from_members_count": self.from_members_count,
            "dropped": [{"path": p, "offset": o} for p, o in self.dropped],
            "dropped_count": self.dropped_count,
        }


def parse_line(line):
    """A line of a trailing index as a row, or None when it is no row a backup writes."""
    try:
        r = json.loads(line)
    except ValueError:
        return None
    return r if _valid_row(r) else None


def _reason(e, default):
    if isinstance(e, Unreadable):
        return e.reason
    return str(e) or default


def index_image(image, *, checksum, emit, is_cancelled, trailing=None):
    """Read `image` (FileImage or StreamImage) and emit its index rows; see ImageIndexer."""
    return ImageIndexer(image, checksum=checksum, emit=emit, is_cancelled=is_cancelled,
                        trailing=trailing).run()


