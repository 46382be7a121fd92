"""Multiple data streams: the parent job of a multi-stream backup. Its child jobs (one per
stream) each write an image of their own selections, in parallel as the limits allow; when
the last one has ended (retries included), the parent records one set image whose catalog
index joins the streams' indexes, so that the backup is browsed and restored as one point in
time. The stream images belong to the set (images.part_of) and expire with it.

Streams come from the policy's selections: one per selection, or, when the list holds
NEW_STREAM markers, one per group of selections between markers."""

import json
import time

from app import status as st
from app.catalog_index import IndexReader, IndexWriter
from app.errors import CairnError, Canceled
from app.jobs.backup import new_image_id, record_image, set_image_id
from app.jobs.context import COMMITTING, SCANNING, JobContext
from app.jobs.duplicate_queue import queue_after_backup
from app.jobs.store import DONE
from app.jobs.result import JobResult

STREAM_MARKER = "NEW_STREAM"
POLL = 0.5


def split_streams(selections):
    """The streams of a selection list: groups between NEW_STREAM markers, or one per
    selection when there is no marker. Empty groups are dropped."""
    if STREAM_MARKER in selections:
        groups, cur = [], []
        for s in selections:
            if s == STREAM_MARKER:
                if cur:
                    groups.append(cur)
                cur = []
            else:
                cur.append(s)
        if cur:
            groups.append(cur)
        return groups
    return [[s] for s in selections]


def stream_key(selections):
    return json.dumps(sorted(selections))


def _latest_attempts(db, parent_id):
    """The last attempt of each stream (a retry replaces the attempt it follows)."""
    # the stream jobs (a lifecycle's duplicate jobs are of the family too)
    rows = db.all("SELECT * FROM jobs WHERE parent_id=? AND type='backup' ORDER BY id",
                  (parent_id,))
    latest = {}
    for r in rows:
        latest[json.loads(r["params"]).get("stream")] = r
    return rows, latest


def _phase(phases):
    """The phase of a set: the earliest any of its running streams is in."""
    for p in (SCANNING, "copying", COMMITTING):
        if p in phases:
            return p
    return None


class BackupSetJob:
    """The parent job of a multi-stream backup (app/jobs/kinds.py): prepare() reads its
    streams; run() waits for its child jobs and records the set image."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"])
        self.streams = None

    def prepare(self):
        self.streams = self.job["params"]["streams"]

    def run(self):
        master, job, ctx = self.master, self.job, self.ctx
        ctx.log(f"multi-stream backup of {job['client']}: {len(self.streams)} streams, each a "
                "child job")
        ctx.flush()
        latest = self._wait()
        if ctx.cancelled:
            raise Canceled()
        good = [r for r in latest.values()
                if r["status"] in (st.OK, st.PARTIAL) and r["image_id"]]
        bad = [r for r in latest.values() if r not in good]
        for r in bad:
            ctx.log(f"stream {json.loads(r['params'])['selections']} (job {r['id']}) ended "
                    f"with status {r['status']}: {st.text(r['status'])}", "error")
        if not good:
            worst = max((r["status"] for r in bad), default=st.INTERNAL)
            raise CairnError(f"no stream of the backup succeeded (see jobs "
                             f"{', '.join(str(r['id']) for r in bad)})", status_code=worst)
        images = [master.image(r["image_id"]) for r in good]
        set_id, info, dups = self._record(images)
        ctx.files = sum(i["files"] for i in images)
        ctx.bytes = sum(i["bytes"] for i in images)
        ctx.log(f"set image {set_id} recorded: {len(images)} stream image(s) "
                f"({', '.join(i['id'] for i in images)}), {info['files']} entries in its index")
        if dups:
            ctx.log(f"lifecycle {images[0]['lifecycle']}: duplicate job(s) "
                    f"{', '.join(map(str, dups))} queued to copy the set")
        ctx.flush(sample=True)
        if bad:
            why = f"{len(bad)} of {len(latest)} streams failed; the set image holds the others"
            return JobResult(st.PARTIAL, message=why,
                             image_id=set_id, bytes=ctx.bytes, files=ctx.files)
        return JobResult(image_id=set_id, bytes=ctx.bytes, files=ctx.files)

    def _wait(self):
        """Waits until every child job has ended, passing a cancel on to them; the last
        attempt of each stream."""
        master, job, ctx = self.master, self.job, self.ctx
        while True:
            rows, latest = _latest_attempts(master.db, job["id"])
            if ctx.check_cancel():
                for r in rows:
                    if r["state"] != DONE:
                        master.jobs.request_cancel(r["id"])
            if all(r["state"] == DONE for r in rows):
                return latest
            ctx.files = sum(r["files"] for r in latest.values())
            ctx.bytes = sum(r["bytes"] for r in latest.values())
            # The set's totals and phase: its streams' once every stream knows them.
            if all(r["total_bytes"] is not None for r in latest.values()):
                ctx.set_totals(sum(r["total_files"] or 0 for r in latest.values()),
                               sum(r["total_bytes"] for r in latest.values()))
            ctx.phase = _phase([r["phase"] for r in latest.values() if r["state"] != DONE])
            ctx.flush(sample=True)
            time.sleep(POLL)

    def _record(self, images):
        """Writes the set image's index and records it, its stream images part of it:
        (set image id, the index writer's info)."""
        master, job = self.master, self.job
        set_id = set_image_id(job)
        if master.db.one("SELECT 1 FROM images WHERE id=?", (set_id,)):
            set_id = new_image_id(master.db, job["client"], job["id"])
        info, sources = write_set_index(master, set_id, images)
        dups = record_set(master, set_id=set_id, job_id=job["id"], client=job["client"],
                          policy=job["policy"], schedule=job["schedule"],
                          selections=job["params"]["selections"], images=images,
                          sources=sources, lifecycle=images[0].get("lifecycle"),
                          duplicate=True)
        return set_id, info, dups


def record_set(master, *, set_id, job_id, client, policy, schedule, selections, images,
               sources, imported=None, lifecycle=None, duplicate=False):
    """Records the set image of stream images (catalog rows) whose index is written, and
    makes them part of it, in one transaction; with `duplicate`, the duplicate jobs of its
    lifecycle are queued in it too (their ids are returned)."""
    created = min(i["created"] for i in images)
    expires = max((i["expires"] for i in images if i["expires"]), default=None)
    levels = {i["schedule_type"] for i in images}
    level = levels.pop() if len(levels) == 1 else "mixed"
    with master.db.tx() as c:
        record_image(c, id=set_id, client=client, policy=policy, schedule=schedule,
                     schedule_type=level, created=created, expires=expires,
                     bytes=sum(i["bytes"] for i in images),
                     files=sum(i["files"] for i in images),
                     storage_unit=images[0]["storage_unit"], pool=images[0]["pool"],
                     storage_host=images[0]["storage_host"], path="", image_bytes=0,
                     job_id=job_id, selections=selections,
                     warnings=sum(i["warnings"] for i in images),
                     checksum=images[0]["checksum"], base_image=None, sources=sources,
                     stream=None, **({"imported": imported} if imported else {}),
                     **({"lifecycle": lifecycle} if lifecycle else {}))
        c.executemany("UPDATE images SET part_of=? WHERE id=?",
                      [(set_id, i["id"]) for i in images])
        if not duplicate:
            return []
        return queue_after_backup(master, c, {"id": set_id, "client": client,
                                              "policy": policy, "schedule": schedule,
                                              "job_id": job_id, "lifecycle": lifecycle,
                                              "stream": None, "sources": sources})


def write_set_index(master, set_id, images):
    """One index over the stream images: every entry points at the image file holding it.
    Returns (the index writer's info, the set's sources)."""
    writer = IndexWriter(master.home.index_path(set_id))
    try:
        sources = join_stream_indexes(master, writer, images)
        info = writer.close()
    except BaseException:
        writer.abort()
        raise
    return info, sources


def join_stream_indexes(master, writer, images, sources=None):
    """Adds the entries of the stream images' indexes to `writer`, each with the source that
    holds its member; returns the sources (image ids) in the order they are numbered. With
    `sources` given (a set's recorded list, when its index is rebuilt) entries are numbered
    by it, and an entry held by an image not in it is refused."""
    fixed = sources is not None
    sources = list(sources or [])
    src_of = {iid: k for k, iid in enumerate(sources, 1)}

    def source(image_id):
        k = src_of.get(image_id)
        if k is None:
            if fixed:
                raise ValueError(f"an entry is held by image {image_id}, which the set does "
                                 f"not list among its sources")
            sources.append(image_id)
            k = src_of[image_id] = len(sources)
        return k

    for img in images:
        with IndexReader(master.home.index_path(img["id"])) as r:
            for _key, entries in r.directories():
                rows = []
                for e in entries:
                    row = e.to_full_row()
                    holder = img["id"] if e.src == 0 else img["sources"][e.src - 1]
                    row[13] = source(holder)
                    rows.append(row)
                writer.add_rows(rows)
    return sources
