"""Committing a backup image: the rename that gives the pool file its final name and the
catalog row that records it, made one step that a kill at any point leaves either done or
undone (docs/master.md, "Committing an image").

1. begin: in one catalog transaction, check that every image the new one reads from is still
   there, and write the commit's record (image_commits: the partial and final names and the
   whole catalog row to insert).
2. rename: the storage server's agent renames the partial file to its final name, durably.
3. record: in one catalog transaction, insert the image's row and delete the commit record;
   an image made under a lifecycle gets its duplicate jobs queued in that transaction
   (app/jobs/duplicate_queue.py).

A failure the job sees undoes the step at once (the job ends failed, so nothing of it stays).
A process killed between 1 and 3 leaves the commit record; once its job has ended (the
dispatcher ends a job whose process stopped), `recover` resolves it from what the storage
server holds: a final file without its partial means the rename happened, and the image is
recorded as it would have been; anything else is removed. Until then the images the job read
from stay held (app/jobs/holds.py)."""

import json
import time

from app import status as st
from app import timeutil
from app.errors import CairnError
from app.jobs.duplicate_queue import queue_after_backup
from app.jobs.store import DONE, NEXT_CHANGE

TICK = 1.0


def record_image(c, *, sources, selections, **fields):
    """The catalog row of a committed image and its dependencies on the images it reads
    from, in the caller's transaction. An image it reads from that is gone or being expired
    makes it an image that cannot be restored: refused, nothing is written."""
    gone = missing_sources(c, sources)
    if gone:
        raise CairnError(
            f"image {fields['id']} reads data from image(s) {', '.join(gone)}, which "
            "are no longer in the catalog or are being expired; it was not recorded",
            status_code=st.IMAGE_DAMAGED,
            hint="run the backup again: it compares with an image that is still there, or "
                 "takes a full")
    fields.update(sources=json.dumps(sources), selections=json.dumps(selections))
    names = ", ".join(fields)
    c.execute(f"INSERT INTO images({names}) VALUES ({', '.join('?' * len(fields))})",
              tuple(fields.values()))
    c.executemany("INSERT OR IGNORE INTO image_deps(image_id, depends_on) VALUES (?,?)",
                  [(fields["id"], s) for s in sources])


def missing_sources(c, sources):
    """The images of `sources` that are not in the catalog or that an expire job removes."""
    gone = []
    for s in dict.fromkeys(sources):
        row = c.execute("SELECT expiring FROM images WHERE id=?", (s,)).fetchone()
        if row is None or row[0] is not None:
            gone.append(s)
    return gone


def commit(master, conn, *, job_id, record, partial, final, storage, extra_bytes=0,
           timeout=300, on_event=None, tick=None):
    """Commits a finished image (steps 1 to 3 above) and returns the agent's commit result
    ({"path", "bytes"}). conn: the storage host's agent; storage: the pool's storage spec
    (its type renames the image into place). record: record_image's fields without path and
    image_bytes, which the commit fills in (image_bytes: the file's size plus
    extra_bytes). The result's "duplicates": the duplicate jobs queued for it. timeout: the
    most seconds the storage host's commit may take (None: no limit; BackupSide.
    commit_timeout). on_event, tick: see _rename."""
    _begin(master, job_id=job_id, record=record, partial=partial, final=final,
           extra_bytes=extra_bytes)
    try:
        committed = _rename(conn, partial, final, storage, timeout, on_event, tick)
        committed["duplicates"] = _record(master, record, committed["path"],
                                          committed["bytes"] + extra_bytes)
    except BaseException:
        try:
            _undo(master, master.hosts.connect(master.config.host(record["storage_host"])),
                  record["id"], partial, final)
        except Exception:  # noqa: BLE001 - the commit record stays; recover() resolves it
            pass
        raise
    return committed


def _begin(master, *, job_id, record, partial, final, extra_bytes):
    with master.db.tx() as c:
        gone = missing_sources(c, record["sources"])
        if gone:
            raise CairnError(
                f"the image(s) {', '.join(gone)} this backup reads data from are no longer in "
                "the catalog or are being expired; the image was not committed",
                status_code=st.IMAGE_DAMAGED,
                hint="run the backup again: it compares with an image that is still there, "
                     "or takes a full")
        c.execute("INSERT INTO image_commits(image_id, job_id, storage_host, pool, partial, "
                  "final, record, started) VALUES (?,?,?,?,?,?,?,?)",
                  (record["id"], job_id, record["storage_host"], record["pool"], partial,
                   final, json.dumps({**record, "extra_bytes": extra_bytes}),
                   timeutil.iso(time.time())))


def _rename(conn, partial, final, storage, timeout, on_event=None, tick=None):
    """The agent's commit; with `tick`, called every TICK seconds while it runs (the job's
    flush: what on_event logged of a long commit shows as it happens)."""
    args = {"partial": partial, "final": final, "storage": storage}
    if tick is None:
        return conn.call("commit_image", args, on_event=on_event, timeout=timeout)
    call = conn.start("commit_image", args, on_event)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not call.wait_done(TICK):
        tick()
        if deadline is not None and time.monotonic() > deadline:
            call.cancel()
            raise CairnError(f"the commit on {conn.host} did not answer within {timeout:.0f} s")
    tick()
    return call.wait(0)


def _record(master, record, path, image_bytes):
    """Step 3; returns the ids of the duplicate jobs queued for the image."""
    with master.db.tx() as c:
        record_image(c, **record, path=path, image_bytes=image_bytes)
        c.execute("DELETE FROM image_commits WHERE image_id=?", (record["id"],))
        return queue_after_backup(master, c, record)


def _undo(master, conn, image_id, partial, final):
    """Removes what a commit left on the storage server (its final file only when the rename
    happened: the partial is gone and the final is there), the image's catalog index and the
    commit record. Returns what was removed."""
    if conn.call("stat_path", {"path": partial}, timeout=60)["exists"]:
        conn.call("abort_image", {"partial": partial}, timeout=60)
        removed = partial
    elif conn.call("stat_path", {"path": final}, timeout=60)["exists"]:
        conn.call("remove_image", {"path": final}, timeout=120)
        removed = final
    else:
        removed = None
    master.remove_index(image_id)
    with master.db.tx() as c:
        c.execute("DELETE FROM image_commits WHERE image_id=?", (image_id,))
    return removed


def note(master, job_id, text, level="warning"):
    """Adds a line to a job's log once (a recovery may be tried many times), and not at all
    when the job has been removed."""
    if master.db.one("SELECT 1 FROM jobs WHERE id=?", (job_id,)) and not master.db.one(
            "SELECT 1 FROM job_log WHERE job_id=? AND message=?", (job_id, text)):
        master.jobs.log(job_id, text, level)


def pending(db):
    """Commit records whose job has ended: left by a process that stopped mid-commit."""
    return [dict(r) for r in db.all(
        "SELECT * FROM image_commits k WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE "
        "j.id=k.job_id AND j.state!=?) ORDER BY image_id", (DONE,))]


def recover(master):
    """Resolves the commits of jobs whose process stopped mid-commit (see the module's
    docstring). A storage server that cannot be asked now is asked on a later call. Returns
    [{"image", "job", "outcome": "recorded" | "removed", "why"}]."""
    out = []
    for k in pending(master.db):
        try:
            conn = master.hosts.connect(master.config.host(k["storage_host"]))
            out.append(_resolve(master, conn, k))
        except CairnError as e:
            note(master, k["job_id"], f"the unfinished commit of image {k['image_id']} "
                 f"could not be resolved yet: {e.message}")
    return out


def _resolve(master, conn, k):
    image_id, job_id = k["image_id"], k["job_id"]
    record = json.loads(k["record"])
    extra = record.pop("extra_bytes", 0)
    final = conn.call("stat_path", {"path": k["final"]}, timeout=60)
    renamed = final["exists"] and not conn.call("stat_path", {"path": k["partial"]},
                                                timeout=60)["exists"]
    why = None
    if renamed:
        import os
        if not os.path.exists(master.home.index_path(image_id)):
            why = "its catalog index is missing"
        else:
            try:
                dups = _record(master, record, k["final"], final["size"] + extra)
            except CairnError as e:
                why = e.message
            else:
                if dups:
                    note(master, job_id, f"duplicate job(s) {', '.join(map(str, dups))} "
                         f"queued for image {image_id}", "info")
        if why is None:
            with master.db.tx() as c:
                c.execute(f"UPDATE jobs SET image_id=?, changed={NEXT_CHANGE} WHERE id=?",
                          (image_id, job_id))
                c.execute("DELETE FROM image_holds WHERE job_id=?", (job_id,))
            note(master, job_id, f"image {image_id} was committed to {k['final']} before the "
                 "process running this job stopped; it is recorded in the catalog now and can "
                 "be restored")
            return {"image": image_id, "job": job_id, "outcome": "recorded", "why": None}
    else:
        why = "the process running the job stopped before the image was renamed into place"
    removed = _undo(master, conn, image_id, k["partial"], k["final"])
    with master.db.tx() as c:
        c.execute("DELETE FROM image_holds WHERE job_id=?", (job_id,))
    note(master, job_id, f"the unfinished commit of image {image_id} was undone ({why})"
         + (f": {removed} removed" if removed else ""))
    return {"image": image_id, "job": job_id, "outcome": "removed", "why": why}
