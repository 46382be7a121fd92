"""Queueing a lifecycle's duplications, and when a queued one may start.

After each backup under a lifecycle the master queues one duplicate job per duplicate step
(app/jobs/duplicate.py), in the very transaction that records the image: a backup committed
is a backup whose copies are queued, also when its commit is finished by the recovery after
a kill (app/jobs/commit.py). The jobs are the backup job's family (their parent_id is the
backup job, or the parent of a multi-stream backup), and each is queued behind the limits of
its storage unit like any job.

An incremental's copy needs its base's copy in the same pool: a duplicate job waits while
another duplicate job to its pool works on an image its image reads data from (the chain is
copied oldest first), and copies a source that still lacks a copy there itself."""

import json

from app.jobs.store import ACTIVE, QUEUED

JOB_TYPE = "duplicate"

_STEPS_SQL = ("SELECT s.position, s.retention_s, u.name AS storage_unit, d.name AS pool "
              "FROM lifecycles l JOIN lifecycle_steps s ON s.lifecycle_id=l.id "
              "JOIN storage_units u ON u.id=s.storage_unit_id "
              "JOIN disk_pools d ON d.id=u.pool_id "
              "WHERE l.name=? AND s.kind='duplicate' ORDER BY s.position")


def queue_after_backup(master, c, record):
    """In the transaction `c` that records an image: its duplicate jobs, one per duplicate
    step of the lifecycle it was made under (none for a stream image of a multi-stream
    backup: its set is duplicated). Returns the job ids."""
    name = record.get("lifecycle")
    if not name or record.get("stream"):
        return []
    prio = c.execute("SELECT priority FROM policies WHERE name=?",
                     (record["policy"],)).fetchone()
    ids = []
    for s in c.execute(_STEPS_SQL, (name,)).fetchall():
        retention = None if s["retention_s"] < 0 else s["retention_s"]
        params = {"image": record["id"], "copy": s["position"], "lifecycle": name,
                  "pool": s["pool"], "retention_s": retention,
                  "reads": list(record.get("sources") or [])}
        ids.append(master.jobs.create(
            JOB_TYPE, client=record["client"], policy=record["policy"],
            schedule=record["schedule"], storage_unit=s["storage_unit"],
            priority=prio[0] if prio else 0, params=params, parent_id=record.get("job_id"),
            note=f"duplicate job queued: copy {s['position']} of image {record['id']} to "
                 f"storage unit {s['storage_unit']} (lifecycle {name})", c=c))
    return ids


def unfinished(db):
    """[(id, params)] of the duplicate jobs not ended, by id: read once per dispatcher tick."""
    # By state, not "not done": the index on state then skips the catalog's ended jobs.
    return [(r["id"], json.loads(r["params"] or "{}")) for r in db.all(
        "SELECT id, params FROM jobs WHERE type=? AND state IN (?, ?) ORDER BY id",
        (JOB_TYPE, QUEUED, ACTIVE))]


def wait_reason(db, job, others=None):
    """Why a queued duplicate job waits for another (its image's base being copied to the
    same pool), or None. others: unfinished(db), when the caller has read it already."""
    params = json.loads(job["params"]) if isinstance(job["params"], str) else job["params"]
    reads = set(params.get("reads") or [])
    if not reads:
        return None
    for oid, other in (unfinished(db) if others is None else others):
        if oid == job["id"]:
            continue
        if other.get("image") in reads and other.get("pool") == params.get("pool"):
            return (f"waits for duplicate job {oid}: image {other['image']}, which this "
                    f"image reads data from, is copied to disk pool {other['pool']} first")
    return None
