"""Committing a copy of an image (a duplicate job's, app/jobs/duplicate.py) as one step that a
kill at any point leaves either done or undone, as app/jobs/commit.py does for images.

1. begin, before anything is written: a copy_commits record (phase "writing") names the
   partial file the target pool's agent writes, its final name and the copy's catalog row.
2. phase "committing", once the copy is complete: the agent renames it into place.
3. record: in one catalog transaction, the image_copies row goes in and the record goes.

A failure the job sees undoes it at once. A process killed in between leaves the record;
once its job has ended (the dispatcher ends a job whose process stopped), `recover` resolves
it from what the target storage host holds: in the committing phase, a final file without
its partial means the rename happened, and the copy is recorded as it would have been;
anything else is removed. Nothing of a copy that was not recorded looks complete: its file
has a partial name until the rename."""

import json
import time

from app import timeutil
from app.errors import CairnError
from app.jobs import copies
from app.jobs.commit import note
from app.jobs.store import DONE


def begin(master, *, job_id, image_id, storage_host, pool, partial, final, record):
    with master.db.tx() as c:
        c.execute("INSERT OR REPLACE INTO copy_commits(job_id, image_id, storage_host, pool, "
                  "partial, final, record, phase, started) VALUES (?,?,?,?,?,?,?,?,?)",
                  (job_id, image_id, storage_host, pool, partial, final, json.dumps(record),
                   "writing", timeutil.iso(time.time())))


def set_phase(master, job_id, image_id, phase, record=None):
    with master.db.tx() as c:
        if record is None:
            c.execute("UPDATE copy_commits SET phase=? WHERE job_id=? AND image_id=?",
                      (phase, job_id, image_id))
        else:
            c.execute("UPDATE copy_commits SET phase=?, record=? WHERE job_id=? AND "
                      "image_id=?", (phase, json.dumps(record), job_id, image_id))


def record_copy(master, job_id, image_id, record, path, image_bytes):
    """Steps 3: the copy's row in, the commit record out, in one transaction. Returns the
    copy's number, or raises when the image left the catalog meanwhile."""
    with master.db.tx() as c:
        if c.execute("SELECT 1 FROM images WHERE id=? AND expiring IS NULL",
                     (image_id,)).fetchone() is None:
            raise CairnError(f"image {image_id} was expired while it was copied; the copy "
                             "was not recorded")
        number = copies.free_number(c, image_id, record["copy"])
        fields = {k: v for k, v in record.items() if k != "copy"}
        copies.insert(c, image_id, number, **dict(fields, path=path, image_bytes=image_bytes))
        c.execute("DELETE FROM copy_commits WHERE job_id=? AND image_id=?", (job_id, image_id))
    return number


def undo(master, conn, row):
    """Removes what a copy left on the target storage host (its final file only when the
    rename happened and no copy names it) and the commit record. Returns what was removed."""
    removed = None
    if conn.call("stat_path", {"path": row["partial"]}, timeout=60)["exists"]:
        conn.call("abort_image", {"partial": row["partial"]}, timeout=60)
        removed = row["partial"]
    elif row["phase"] == "committing" and not _recorded(master.db, row["final"]) and \
            conn.call("stat_path", {"path": row["final"]}, timeout=60)["exists"]:
        conn.call("remove_image", {"path": row["final"]}, timeout=120)
        removed = row["final"]
    with master.db.tx() as c:
        c.execute("DELETE FROM copy_commits WHERE job_id=? AND image_id=?",
                  (row["job_id"], row["image_id"]))
    return removed


def _recorded(db, path):
    return db.one("SELECT 1 FROM image_copies WHERE path=? UNION SELECT 1 FROM images "
                  "WHERE path=?", (path, path)) is not None


def pending(db):
    """Copy commit records whose job has ended: left by a process that stopped."""
    return [dict(r) for r in db.all(
        "SELECT * FROM copy_commits k WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE "
        "j.id=k.job_id AND j.state!=?) ORDER BY job_id, image_id", (DONE,))]


def recover(master):
    """Resolves the copies of duplicate jobs whose process stopped (see the module's
    docstring). A storage host that cannot be asked now is asked on a later call. Returns
    [{"image", "job", "outcome": "recorded" | "removed", "why"}]."""
    out = []
    for row in pending(master.db):
        try:
            conn = master.hosts.connect(master.config.host(row["storage_host"]))
            out.append(_resolve(master, conn, row))
        except CairnError as e:
            note(master, row["job_id"], f"the unfinished copy of image {row['image_id']} "
                 f"could not be resolved yet: {e.message}")
    return out


def _resolve(master, conn, row):
    image_id, job_id = row["image_id"], row["job_id"]
    why = "the process running the job stopped before the copy was complete"
    if row["phase"] == "committing":
        final = conn.call("stat_path", {"path": row["final"]}, timeout=60)
        renamed = final["exists"] and not conn.call(
            "stat_path", {"path": row["partial"]}, timeout=60)["exists"]
        if renamed and not _recorded(master.db, row["final"]):
            record = json.loads(row["record"])
            extra = record.pop("extra_bytes", 0)
            try:
                number = record_copy(master, job_id, image_id, record, row["final"],
                                     final["size"] + extra)
            except CairnError as e:
                why = e.message
            else:
                note(master, job_id, f"copy {number} of image {image_id} was committed to "
                     f"{row['final']} before the process running this job stopped; it is "
                     "recorded in the catalog now", "info")
                return {"image": image_id, "job": job_id, "outcome": "recorded", "why": None}
        elif renamed:
            why = "its copy is recorded already"
        else:
            why = "the process running the job stopped before the copy was renamed into place"
    removed = undo(master, conn, row)
    note(master, job_id, f"the unfinished copy of image {image_id} was undone ({why})"
         + (f": {removed} removed" if removed else ""))
    return {"image": image_id, "job": job_id, "outcome": "removed", "why": why}
