"""Reading a pool's images for an import (`cairn disk-pool import`, app/jobs/pool_import.py):
the storage host's agent lists the committed images of the pool that the master does not
know, and reads of each only what the image says about itself (docs/image-format.md,
app/formats/imagemeta.py): its first member `.cairn/image.json`, its summary member and the
location of its trailing index `.cairn/index.jsonl`, found from the image's end; then, image
by image as the master asks, the rows of that trailing index. File data is never read, so a
pool of terabytes is read in the time its metadata takes.

An image file of an advanced-disk pool is read as it is; a deduplication pool's recipe through
its storage type's reading (the same tar stream, chunk by chunk). Partial files (a backup that
has not finished or stopped) and names Cairn does not make are listed as skipped, never read.

Standard library only: this runs on storage hosts."""

import json
import os
import time

from app.agent.reindex import FileImage, StreamImage, Unreadable, parse_line
from app.errors import CairnError, Canceled, ValidationError
from app.formats import entry, imagemeta, poolfiles, tarfmt
from plugins.storage import agents

EOF_BYTES = len(tarfmt.EOF_MARKER)
USTAR_MAGIC = b"ustar\x0000"
MAGIC_AT = 257
# The end of an image is searched backwards this much at a time for its trailing index's
# header (the index is JSON text: no header magic, which holds a NUL, occurs in it).
BACK_STEP = 1 << 20
READ_STEP = 4 << 20
ROW_BATCH = 5000
IMAGE_BATCH = 100
PROGRESS_EVERY = 0.25
# Lines of a trailing index that are not valid rows, named in the result; the rest counted.
PROBLEMS_LISTED = 20


class Problem(Exception):
    """What makes one image's metadata unusable, in words."""


class _At:
    """Sequential reads of an image from a position (tarfmt.read_member_header's reader)."""

    def __init__(self, image, pos):
        self.image = image
        self.pos = pos

    def read_exact(self, n):
        data = self.image.read(self.pos, n)
        if len(data) < n:
            raise tarfmt.FormatError("the image ends inside a member: it is cut short")
        self.pos += n
        return data


def _member(image, pos, limit):
    """(name, data, end) of the member at pos whose data is at most `limit` bytes."""
    at = _At(image, pos)
    m = tarfmt.read_member_header(at.read_exact)
    if m is None:
        raise Problem(f"an end-of-archive block stands at byte {pos}")
    if m.size > limit:
        raise Problem(f"{bytes(m.name)[:100].decode('utf-8', 'replace')} at byte {pos} is "
                      f"too large ({m.size} bytes) to be Cairn's metadata")
    data = at.read_exact(m.size) if m.size else b""
    return bytes(m.name), bytes(data), pos + m.header_bytes + tarfmt.padded(m.size)


def _json(data, what):
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise Problem(f"{what} is not valid JSON ({e})") from None


def _read_meta(image):
    """(image.json as read, where the member after it starts)."""
    try:
        name, data, end = _member(image, 0, imagemeta.META_LIMIT)
    except (tarfmt.FormatError, Unreadable) as e:
        raise Problem(f"its first member, .cairn/image.json, cannot be read: "
                      f"{getattr(e, 'reason', None) or e}") from None
    if name != imagemeta.META_NAME:
        raise Problem("it does not begin with .cairn/image.json (its first member is "
                      f"{name[:100].decode('utf-8', 'replace')!r})")
    return _json(data, ".cairn/image.json"), end


def _last_header(image, lo, hi):
    """The offset of the last 512-byte aligned block in [lo, hi) whose ustar magic sits
    where a header's does, or None."""
    while hi > lo:
        start = max(lo, hi - BACK_STEP)
        start -= start % tarfmt.BLOCK
        data = image.read(start, hi - start)
        i = data.rfind(USTAR_MAGIC)
        while i >= 0:
            h = i - MAGIC_AT
            if h >= 0 and (start + h) % tarfmt.BLOCK == 0 and start + h >= lo:
                return start + h
            i = data.rfind(USTAR_MAGIC, 0, i)
        hi = start
    return None


def _find_index(image, data_start):
    """(header offset, data offset, length) of the trailing index, the image's last member."""
    end_at = image.size - EOF_BYTES
    if end_at < data_start + tarfmt.BLOCK:
        raise Problem("it is too short to hold its own index: it is cut short")
    try:
        at = _last_header(image, data_start, end_at - end_at % tarfmt.BLOCK)
        if at is None:
            raise Problem("its own index (.cairn/index.jsonl) was not found: the end of the "
                          "image is damaged or cut short")
        h = tarfmt.parse_ustar(image.read(at, tarfmt.BLOCK))
    except Unreadable as e:
        raise Problem(f"the end of the image cannot be read: {e.reason}") from None
    except tarfmt.FormatError as e:
        raise Problem(f"the header of its own index is damaged ({e})") from None
    if (h.get("name") != imagemeta.INDEX_NAME
            or h["type"] not in (tarfmt.REGTYPE, tarfmt.AREGTYPE)
            or at + tarfmt.BLOCK + tarfmt.padded(h["size"]) != end_at):
        raise Problem("its last member is not its own index (.cairn/index.jsonl): the end "
                      "of the image is damaged or cut short")
    return at, at + tarfmt.BLOCK, h["size"]


def _read_summary(image, data_start, index_at):
    """(summary, where it starts) of a format 2 image: the member just before its index."""
    try:
        at = _last_header(image, max(data_start, index_at - imagemeta.SUMMARY_LIMIT - 1024),
                          index_at)
        if at is None:
            raise Problem("no .cairn/summary.json before its own index")
        name, data, end = _member(image, at, imagemeta.SUMMARY_LIMIT)
    except (tarfmt.FormatError, Unreadable) as e:
        raise Problem(f"its .cairn/summary.json cannot be read: "
                      f"{getattr(e, 'reason', None) or e}") from None
    if name != imagemeta.SUMMARY_NAME or end != index_at:
        raise Problem("no .cairn/summary.json before its own index")
    return _json(data, ".cairn/summary.json"), at


def describe_image(image):
    """What an image says about itself: {"meta", "data_start", "data_end", "index": {"at",
    "offset", "length"}, "summary", "summary_problem"}; Problem when its metadata or its own
    index cannot be used."""
    meta, data_start = _read_meta(image)
    if not isinstance(meta, dict):
        raise Problem("its .cairn/image.json is not a JSON object")
    index_at, index_data, length = _find_index(image, data_start)
    out = {"meta": meta, "data_start": data_start, "data_end": index_at,
           "index": {"at": index_at, "offset": index_data, "length": length},
           "summary": None, "summary_problem": None}
    version = meta.get("format_version")
    if type(version) is int and version >= 2:
        try:
            out["summary"], out["data_end"] = _read_summary(image, data_start, index_at)
        except Problem as e:
            out["summary_problem"] = str(e)
    return out


def _open(half, storage, path):
    """The image at path as the reader of reindex reads it, and the reading behind it."""
    reading = half.reading(storage)
    try:
        opener = reading.opener()
        source = opener(path) if opener is not None else None
        image = FileImage(path) if source is None else StreamImage(source)
    except BaseException:
        reading.close()
        raise
    return image, reading


def _close(image, reading):
    try:
        image.close()
    finally:
        reading.close_streams()
        reading.close()


def _describe(half, storage, f, client):
    d = {"id": f["image"], "path": f["path"], "client": client, "bytes": f["size"],
         "problem": None}
    try:
        d["store"] = half.image_info(storage, f["path"])
        image, reading = _open(half, storage, f["path"])
        try:
            d.update(describe_image(image))
        finally:
            _close(image, reading)
    except Problem as e:
        d["problem"] = str(e)
    except CairnError as e:
        d["problem"] = e.message
    except OSError as e:
        d["problem"] = f"it cannot be read: {e.strerror or e}"
    return d


def list_images(req, storage, volumes, image_dir, skip):
    """The committed images of a pool (volumes, image folder) whose ids are not in `skip`,
    described one by one ("images" events of up to IMAGE_BATCH). Returns {"count", "known":
    [{"id", "path"}] of those skipped, "skipped": [{"path", "why"}], "errors": [folders that
    could not be listed]}."""
    half = agents.get(storage)
    half.prepare_import(storage)
    listing = poolfiles.list_files(volumes, image_dir)
    skip = set(skip)
    todo, known, skipped = [], [], []
    for f in listing["files"]:
        name = os.path.basename(f["path"])
        if f["partial"]:
            skipped.append({"path": f["path"], "why": "a partial image: its backup has not "
                            "finished, or stopped before its commit"})
        elif f["image"] is None or not name.endswith(half.image_suffix) \
                or not imagemeta.valid_id(f["image"]):
            skipped.append({"path": f["path"], "why": "not the name of an image file of "
                            "this pool"})
        elif f["image"] in skip:
            known.append({"id": f["image"], "path": f["path"]})
        else:
            todo.append(f)
    req.emit("totals", {"files": len(todo), "bytes": sum(f["size"] for f in todo)})
    if todo:
        # the pool opens (and an encrypted one checks its key) before any image is read
        half.reading(storage).close()
    batch, last, done = [], 0.0, 0
    for f in todo:
        if req.is_cancelled():
            raise Canceled()
        batch.append(_describe(half, storage, f, os.path.basename(os.path.dirname(f["path"]))))
        done += 1
        now = time.monotonic()
        if len(batch) >= IMAGE_BATCH or now - last >= PROGRESS_EVERY:
            last = now
            req.emit("images", {"images": batch})
            req.emit("progress", {"files": done, "bytes": 0, "path": f["path"]})
            batch = []
    if batch:
        req.emit("images", {"images": batch})
    return {"count": len(todo), "known": known, "skipped": skipped,
            "errors": listing["errors"]}


def _lines(image, start, length, is_cancelled):
    """The lines of the trailing index in [start, start+length)."""
    pos, end, tail = start, start + length, b""
    while pos < end:
        if is_cancelled():
            raise Canceled()
        try:
            data = image.read(pos, min(READ_STEP, end - pos))
        except Unreadable as e:
            raise Problem(f"its own index cannot be read at byte {e.start}: "
                          f"{e.reason}") from None
        if not data:
            raise Problem("its own index is cut short")
        pos += len(data)
        lines = (tail + data).split(b"\n")
        tail = lines.pop()
        yield from lines
    if tail:
        yield tail


class _Rows:
    """The rows of a trailing index, checked as an import needs them: each a row the backup
    writes, paths without `.` or `..`, members in image order inside the entries' part of the
    image."""

    def __init__(self, emit, data_start, data_end):
        self.emit = emit
        self.hi = data_end
        self.prev_end = data_start
        self.batch = []
        self.out = {"rows": 0, "unchanged": 0, "files": 0, "bytes": 0, "bad_lines": 0,
                    "problems": []}

    def bad(self, n, why):
        self.out["bad_lines"] += 1
        if len(self.out["problems"]) < PROBLEMS_LISTED:
            self.out["problems"].append(f"line {n}: {why}")

    def add(self, n, line):
        r = parse_line(line)
        if r is None:
            return self.bad(n, "not a row of a file index")
        why = imagemeta.row_problem(r)
        if why:
            return self.bad(n, why)
        if len(r) == entry.SHORT_ROW:
            off, ln = entry.UNCHANGED, 0
        else:
            off, ln = r[entry.OFFSET], r[entry.LENGTH]
        if off == -1:
            self.out["unchanged"] += 1
        elif off < self.prev_end or off + ln > self.hi or ln < tarfmt.BLOCK:
            return self.bad(n, f"{r[entry.PATH]!r:.200}: its member at byte {off} is not "
                               "where the image holds its entries, in order")
        else:
            self.prev_end = off + ln
            if r[entry.KIND] != entry.KIND_DIR:
                self.out["files"] += 1
            if r[entry.KIND] == entry.KIND_FILE:
                self.out["bytes"] += r[entry.SIZE]
        self.batch.append(r)
        if len(self.batch) >= ROW_BATCH:
            self.flush()

    def flush(self):
        if self.batch:
            self.out["rows"] += len(self.batch)
            self.emit("rows", {"rows": self.batch})
            self.batch = []


def image_rows(req, storage, path, index, data_start, data_end):
    """Sends the rows of an image's trailing index ("rows" events), as the backup wrote
    them; index: {"offset", "length"} of its data, data_start and data_end: where the image's
    entries lie (describe_image). Returns {"rows", "unchanged" (rows of entries held by
    earlier images), "files" and "bytes" (of the entries the image holds), "bad_lines",
    "problems"}. Rows are sent as they are read; the caller drops them all when bad_lines is
    not 0."""
    for k, v in (("offset", index.get("offset")), ("length", index.get("length")),
                 ("data_start", data_start), ("data_end", data_end)):
        if type(v) is not int or v < 0:
            raise ValidationError(f"image_rows: {k} must be a byte offset, not {v!r}")
    half = agents.get(storage)
    image, reading = _open(half, storage, path)
    try:
        if index["offset"] + index["length"] > image.size:
            raise CairnError(f"the image {path} is shorter than when it was listed")
        rows = _Rows(req.emit, data_start, data_end)
        try:
            for n, line in enumerate(_lines(image, index["offset"], index["length"],
                                            req.is_cancelled), 1):
                rows.add(n, line)
        except Problem as e:
            rows.bad(0, str(e))
        rows.flush()
        return rows.out
    finally:
        _close(image, reading)
