"""Images that jobs still read, so that no expiry removes them under the job.

A backup holds the images it reads from: the base of an incremental (and the images that
base takes data from, its sources), or the image a full into a deduplication pool uses as
its files cache. The hold is written in the same catalog transaction that chooses the image,
and an expire job checks the holds and marks its images (images.expiring) in one
transaction too; sqlite runs write transactions one after the other, so either the backup
chose first and the expire refuses, or the expire marked first and the backup chooses
another image (or takes a full). A hold lasts until the job ends, and after a kill until the
job's unfinished commit is resolved (app/jobs/commit.py).

A restore's images are its params["reads"], written when it is queued; a rebuild of an
image's catalog index holds its image."""

import json

from app.jobs.store import DONE


def hold(db, job_id, reasons):
    """Holds images for a job, {image id: why the job reads it}; call inside the
    transaction that chose them."""
    db.conn.executemany("INSERT OR IGNORE INTO image_holds(job_id, image_id, why) "
                        "VALUES (?,?,?)", [(job_id, i, why) for i, why in reasons.items()])


def release(db, job_id):
    with db.tx() as c:
        c.execute("DELETE FROM image_holds WHERE job_id=?", (job_id,))


def holders(db, image_ids):
    """The jobs that may still read one of image_ids: backups holding it (running, or killed
    with a commit not yet resolved) and restores queued or running. A list of {"job", "type",
    "state", "image", "why"}, by job. Inside a transaction it answers for that transaction."""
    wanted = set(image_ids)
    out = []
    for r in db.all("SELECT h.job_id, h.image_id, h.why, j.type, j.state FROM image_holds h "
                    "JOIN jobs j ON j.id=h.job_id WHERE j.state!=? OR EXISTS (SELECT 1 FROM "
                    "image_commits k WHERE k.job_id=h.job_id) ORDER BY h.job_id, h.image_id",
                    (DONE,)):
        if r["image_id"] in wanted:
            out.append({"job": r["job_id"], "type": r["type"], "state": r["state"],
                        "image": r["image_id"], "why": r["why"]})
    for r in db.all("SELECT id, type, state, params FROM jobs WHERE state!=? AND type IN "
                    "('restore', 'rebuild-index') ORDER BY id", (DONE,)):
        params = json.loads(r["params"] or "{}")
        for i in sorted({params.get("image"), *(params.get("reads") or [])} & wanted):
            out.append({"job": r["id"], "type": r["type"], "state": r["state"], "image": i,
                        "why": "it restores from it" if r["type"] == "restore" else
                        "it rebuilds the image's catalog index"})
    return sorted(out, key=lambda h: (h["job"], h["image"]))


def describe(h):
    """`image X: backup job 12 (active) reads it as the base of its differential`."""
    state = "running" if h["state"] == "active" else h["state"]
    if h["state"] == DONE:
        state = "stopped; its commit is not resolved yet"
    return f"image {h['image']}: {h['type']} job {h['job']} ({state}) {h['why']}"
