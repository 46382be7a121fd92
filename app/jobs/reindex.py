"""Rebuilding an image's catalog index from the image itself: `cairn images rebuild-index
IMAGE`, a job like verify. The storage host's agent reads the image member by member
(app/agent/reindex.py) and sends the rows as the backup did; the master writes them into a new
index exactly as a backup does (an incremental's unchanged entries completed from its base
image's index) beside the old one, fsyncs it and renames it over the old one only when the
rows make a faithful index. The old one is kept (IMAGE.cidx.damaged, or .replaced when it
was readable) until the image expires.

A set image of a multi-stream backup has no file of its own: its index is joined again from
its stream images' indexes, as the backup did.

What cannot be rebuilt is named in the job log, and a wrong index is never written:
  * an incremental lists its unchanged entries only in its own trailing index
    (`.cairn/index.jsonl`): when that cannot be read in full, or the base image's index is
    unreadable, the job fails and the old index stays as it was;
  * without the trailing index (a full image), rows are made from the members alone: change
    time and inode are unknown (0), so the next incremental based on this image sends those
    files again; checksums are those of the data as it is now;
  * entries whose members lie in damaged parts of the image: with the trailing index they
    keep their rows (a restore then names each as lost), without it they are not listed."""

import json
import os
import time

from app import status as st
from app.catalog_index import (IndexCorrupt, IndexReader, IndexWriter, check_index,
                                rebuild_command)
from app.errors import CairnError, Canceled, NotFound, ValidationError
from app.formats import entry as E
from app.jobs.backup_set import join_stream_indexes
from app.jobs.context import JobContext, results
from app.jobs.incremental import SOURCE, Completer
from app.jobs.storage import image_storage
from app.jobs.result import JobResult

# Paths of one kind of problem the job log names; the job's result keeps what the agent sent.
LOG_PATHS = 20
JOB_TYPE = "rebuild-index"
ASIDE_DAMAGED = "damaged"
ASIDE_REPLACED = "replaced"


def make_job(master, image_id):
    img = master.image(image_id)
    for r in master.db.all("SELECT id, params FROM jobs WHERE type=? AND state!='done'",
                           (JOB_TYPE,)):
        if _params(r).get("image") == img["id"]:
            raise ValidationError(f"the index of image {img['id']} is being rebuilt already "
                                  f"by job {r['id']}",
                                  hint=f"follow it with `cairn jobs show {r['id']}`")
    return master.jobs.create(JOB_TYPE, client=img["client"], policy=img["policy"],
                              schedule=img["schedule"], params={"image": img["id"]},
                              note=f"rebuild-index job queued for image {img['id']}")


def _params(row):
    return json.loads(row["params"] or "{}")


def _names(items, key=None):
    items = [key(x) if key else x for x in items]
    text = ", ".join(items[:LOG_PATHS])
    return text + (f" and {len(items) - LOG_PATHS} more" if len(items) > LOG_PATHS else "")


def _count(n, one, many):
    return f"{n} {one if n == 1 else many}"


def aside_path(index_path, why):
    """A free name beside the index for the one it replaces."""
    path = f"{index_path}.{why}"
    n = 1
    while os.path.lexists(path):
        n += 1
        path = f"{index_path}.{why}.{n}"
    return path


def aside_files(index_path):
    """The indexes kept aside by rebuilds of one image."""
    folder, name = os.path.split(index_path)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    prefixes = tuple(f"{name}.{why}" for why in (ASIDE_DAMAGED, ASIDE_REPLACED))
    return [os.path.join(folder, n) for n in names if n.startswith(prefixes)]


def _install(writer, index_path, old_problems):
    """Closes the writer (its file is fsync'ed and renamed over the index) with the old index
    kept aside under another name first: at every moment the index's name holds one whole
    index, the old or the new. Returns (writer's info, where the old one went or None)."""
    aside = None
    if os.path.exists(index_path):
        aside = aside_path(index_path, ASIDE_DAMAGED if old_problems else ASIDE_REPLACED)
        try:
            os.link(index_path, aside)
        except OSError:
            # a file system without hard links: a moment without an index, never a half one
            os.rename(index_path, aside)
    try:
        info = writer.close()
    except BaseException:
        if aside is not None and not os.path.exists(index_path):
            os.rename(aside, index_path)
        elif aside is not None:
            os.unlink(aside)
        raise
    return info, aside


class _Rows:
    """The rows the agent sends, into the new index: an incremental's unchanged entries
    completed from its base image's index, each source numbered as in the catalog."""

    def __init__(self, writer, image, completer):
        self.writer = writer
        self.completer = completer
        self.sources = {iid: k for k, iid in enumerate(image["sources"], 1)}
        self.full = completer is None
        self.error = None
        self.count = 0
        self.orphans = []    # rows of a full that point at no member

    def add(self, rows):
        if self.error is not None:
            return
        try:
            if self.full:
                keep = [r for r in rows if len(r) != E.SHORT_ROW and r[E.OFFSET] != -1]
                if len(keep) != len(rows):
                    self.orphans.extend(r[E.PATH] for r in rows
                                        if len(r) == E.SHORT_ROW or r[E.OFFSET] == -1)
                rows = keep
            else:
                self.completer.complete(rows)
                for r in rows:
                    if r[SOURCE]:
                        holder = self.completer.sources[r[SOURCE] - 1]
                        k = self.sources.get(holder)
                        if k is None:
                            raise ValueError(f"{r[E.PATH]} is held by image {holder}, which "
                                             f"is not among the images this one reads from")
                        r[SOURCE] = k
            self.writer.add_rows(rows)
            self.count += len(rows)
        except (IndexCorrupt, ValueError) as e:
            self.error = e


class RebuildIndexJob:
    """A rebuild-index job (app/jobs/kinds.py): prepare() finds the image, what is wrong with
    its current index and, for the set of a multi-stream backup, its stream images (whose
    indexes must read back), else its storage host and storage spec; run() rebuilds the
    index."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"], work="indexing")
        self.img = self.index_path = self.old_problems = None
        self.parts = self.storage_host = self.storage = None

    def prepare(self):
        master = self.master
        img = self.img = master.image(self.job["params"]["image"])
        self.index_path = master.home.index_path(img["id"])
        self.old_problems = check_index(self.index_path)
        parts = [r[0] for r in master.db.all("SELECT id FROM images WHERE part_of=?",
                                             (img["id"],))]
        if not img["path"] and parts:
            self.parts = _stream_images(master, img, parts)
        else:
            self.storage_host = master.config.host(img["storage_host"])
            self.storage = image_storage(master, img)

    def run(self):
        ctx, img = self.ctx, self.img
        if self.old_problems:
            ctx.log(f"the current index of image {img['id']}: " + "; ".join(self.old_problems))
        else:
            ctx.log(f"the index of image {img['id']} reads back without error; it is rebuilt "
                    "all the same")
        if self.parts is not None:
            return _run_set(self.master, ctx, img, self.parts, self.index_path,
                            self.old_problems)
        return _run_image(self.master, ctx, img, self.storage_host, self.storage,
                          self.index_path, self.old_problems)


def _open_base(master, img):
    """(base image, its open index) of an incremental; refuses when it cannot be read."""
    try:
        base = master.image(img["base_image"])
    except NotFound:
        raise CairnError(f"image {img['id']} is an incremental based on image "
                         f"{img['base_image']}, which is no longer in the catalog: its "
                         f"unchanged entries cannot be located; the old index is left as it "
                         f"was", status_code=st.IMAGE_DAMAGED) from None
    path = master.home.index_path(base["id"])
    problems = check_index(path)
    if problems:
        raise CairnError(f"image {img['id']} is an incremental: its unchanged entries are "
                         f"completed from the index of its base image {base['id']}, which is "
                         f"damaged ({problems[0]})", status_code=st.IMAGE_DAMAGED,
                         hint=f"rebuild that one first: `{rebuild_command(base['id'])}`, then "
                              f"this one again")
    return base, IndexReader(path)


def _run_image(master, ctx, img, storage_host, storage, index_path, old_problems):
    incremental = bool(img.get("base_image"))
    ctx.log(f"reading image {img['id']} ({img['schedule_type']}) back on "
            f"{storage_host['name']} ({img['path']}): every member is read and checked "
            f"against the image's own index, every file's {img['checksum']} checksum "
            "computed again")
    ctx.flush()
    base = base_index = None
    completer = None
    if incremental:
        base, base_index = _open_base(master, img)
        completer = Completer(base, base_index, 0)
        ctx.log(f"{img['schedule_type']} incremental: its unchanged entries are completed "
                f"from the index of image {base['id']}, as the backup did")
    writer = IndexWriter(index_path)
    rows = _Rows(writer, img, completer)

    def on_event(event, data):
        if event == "rows":
            rows.add(data["rows"])
        else:
            ctx.on_event(event, data)

    try:
        conn = master.hosts.connect(storage_host)
        call = conn.start("index_image", {"image_path": img["path"],
                                          "checksum": img["checksum"], "storage": storage},
                          on_event=on_event)
        ctx.supervise([call])
        found = results([call])[0]
        if ctx.cancelled:
            raise Canceled()
        refusal = _refusal(img, found, rows)
        if refusal:
            raise CairnError(refusal + "; the old index is left as it was",
                             status_code=st.IMAGE_DAMAGED)
        if not master.db.one("SELECT 1 FROM images WHERE id=?", (img["id"],)):
            raise CairnError(f"image {img['id']} was expired while its index was rebuilt; "
                             "the new index is dropped")
        info, aside = _install(writer, index_path, old_problems)
        writer = None
    finally:
        if writer is not None:
            writer.abort()
        if base_index is not None:
            base_index.close()
    master.jobs.set_result(ctx.id, found)
    return _report(ctx, img, found, rows, info, aside)


def _refusal(img, found, rows):
    """Why the rows cannot make a faithful index, or None."""
    meta = found.get("meta") or {}
    if meta.get("image_id") and meta["image_id"] != img["id"]:
        return (f"the file {img['path']} holds image {meta['image_id']}, not image "
                f"{img['id']}")
    if rows.error is not None:
        return f"the rows read from the image cannot be indexed: {rows.error}"
    trailing = found["trailing_index"]
    if img.get("base_image"):
        if not trailing["found"]:
            return (f"image {img['id']} is an incremental: it holds only the entries that "
                    f"changed since image {img['base_image']}, and only its own index "
                    f"(.cairn/index.jsonl) lists the unchanged ones, which cannot be read "
                    f"({trailing['problem']})")
        if trailing["bad_lines"] or found["dropped_count"]:
            n = trailing["bad_lines"] + found["dropped_count"]
            return (f"image {img['id']} is an incremental: {n} line(s) of its own index "
                    f"(.cairn/index.jsonl) cannot be read or match no member, and any of "
                    f"them may list an unchanged entry that no member of the image holds")
    if not rows.count:
        return f"no entry of image {img['id']} could be read"
    return None


def _report(ctx, img, found, rows, info, aside):
    trailing = found["trailing_index"]
    meta_problem = found.get("meta_problem")
    if meta_problem:
        ctx.log(f"{meta_problem}: the image could not be checked to be {img['id']}", "warning")
    ctx.log(f"read {found['bytes']} bytes, {found['members']} members; the image's own index "
            + (f"gave {trailing['rows']} rows" + (f" ({trailing['unchanged']} of entries held "
                                                  f"by earlier images)"
                                                  if trailing["unchanged"] else "")
               if trailing["found"] else f"could not be used: {trailing['problem']}"))
    code, msg = st.OK, None
    if found["from_members_count"]:
        ctx.log(f"{found['from_members_count']} row(s) made from the members alone (their "
                "lines of the image's own index are missing): their change time and inode "
                "are unknown, so the next incremental based on this image sends them again; "
                "their checksums are those of the data as it is now: "
                + _names(found["from_members"]), "warning")
        code, msg = st.PARTIAL, (f"index rebuilt; {found['from_members_count']} entries "
                                 "rebuilt from the members alone: see the log")
    for what, n, items, key in (
            ("entries disagree with the image's own index (the member's header was taken)",
             found["differ_count"], found["differ"],
             lambda d: f"{d['path']} ({', '.join(d['fields'])})"),
            ("lines of the image's own index match no member and were left out",
             found["dropped_count"], found["dropped"], lambda d: d["path"])):
        if n:
            ctx.log(f"{n} {what}: {_names(items, key)}", "warning")
            if code == st.OK:
                code, msg = st.PARTIAL, f"index rebuilt; {n} {what.split(' (')[0]}: see the log"
    if rows.orphans:
        ctx.log(f"{len(rows.orphans)} row(s) of the image's own index name no member in "
                f"this full image and were left out: {_names(rows.orphans)}", "warning")
        if code == st.OK:
            code, msg = st.PARTIAL, "index rebuilt; some rows were left out: see the log"
    if found["checksum_mismatch_count"]:
        ctx.log(f"{found['checksum_mismatch_count']} file(s) whose data no longer matches "
                "the checksum recorded at backup (the index keeps the recorded one, so a "
                "restore refuses the damaged data): " + _names(found["checksum_mismatch"]),
                "error")
        code, msg = st.CHECKSUM_MISMATCH, (f"index rebuilt; {found['checksum_mismatch_count']} "
                                           "file(s) of the image are damaged: see the log")
    if found["damage"] or found["lost_count"]:
        for d in found["damage"][:LOG_PATHS]:
            ctx.log(f"damaged: bytes {d['offset']}..{d['offset'] + d['length']} of the image: "
                    f"{d['reason']}", "error")
        if found["lost_count"]:
            ctx.log(f"{_count(found['lost_count'], 'entry', 'entries')} whose members cannot "
                    "be read stay listed (a restore names each as lost): "
                    + _names(found["lost"], lambda d: f"{d['path']} ({d['reason']})"), "error")
        if not trailing["found"]:
            ctx.log("without the image's own index, entries whose headers lie in the damaged "
                    "parts above are not in the rebuilt index", "error")
        code, msg = st.IMAGE_DAMAGED, ("index rebuilt from what could be read; the image is "
                                       "damaged: see the log")
    ctx.files = rows.count
    ctx.bytes = found["bytes"]
    _log_installed(ctx, img, info, aside)
    ctx.flush(sample=True)
    return JobResult(code, message=msg, bytes=ctx.bytes, files=ctx.files)


def _log_installed(ctx, img, info, aside):
    ctx.log(f"index of image {img['id']} rebuilt: {info['files']} entries, {info['dirs']} "
            f"directories, {info['bytes']} bytes"
            + (f"; the old index is kept as {aside}" if aside else ""))


# ---- set images -----------------------------------------------------------------------------

def _stream_images(master, img, parts):
    """The stream images of a set, in the order of its sources; refuses when the index of
    one does not read back."""
    order = {iid: k for k, iid in enumerate(img["sources"])}
    images = sorted((master.image(p) for p in parts),
                    key=lambda i: (order.get(i["id"], len(order)), i["created"], i["id"]))
    for part in images:
        problems = check_index(master.home.index_path(part["id"]))
        if problems:
            raise CairnError(f"the index of stream image {part['id']} of set {img['id']} is "
                             f"damaged ({problems[0]})", status_code=st.IMAGE_DAMAGED,
                             hint=f"rebuild that one first: `{rebuild_command(part['id'])}`, "
                                  "then this one again")
    return images


def _run_set(master, ctx, img, images, index_path, old_problems):
    ctx.log(f"image {img['id']} is the set of a multi-stream backup: its index is joined "
            f"again from its {len(images)} stream images' indexes "
            f"({', '.join(i['id'] for i in images)})")
    ctx.flush()
    started = time.monotonic()
    writer = IndexWriter(index_path)
    try:
        join_stream_indexes(master, writer, images, sources=img["sources"])
        info, aside = _install(writer, index_path, old_problems)
    except (IndexCorrupt, ValueError) as e:
        writer.abort()
        raise CairnError(f"the index of set {img['id']} cannot be joined again: {e}; the old "
                         "index is left as it was", status_code=st.IMAGE_DAMAGED) from None
    except BaseException:
        writer.abort()
        raise
    ctx.files = info["files"]
    _log_installed(ctx, img, info, aside)
    ctx.log(f"joined in {time.monotonic() - started:.1f} s")
    ctx.flush(sample=True)
    return JobResult(bytes=0, files=ctx.files)
