"""Jobs on pools: verify (read images or the whole pool back, the way the pool's storage type
says: app/jobs/disk_verify.py for image files read member by member, app/jobs/chunk_verify.py
for pools of chunks) and, on pools whose type has it, space reclaim (remove chunks no image
references any more, compact containers). A verify also makes the pool's folders and files
private again and reports what was open to other users."""

import json
import time

from app import status as st
from app.errors import CairnError, ValidationError
from app.jobs import chunk_verify, cleanup, disk_verify
from app.jobs.context import JobContext, results
from app.jobs.storage import pool_storage, pool_type
from app.jobs.result import JobResult

# Reclaim needs the pool to itself; it waits for the jobs using it this long.
BUSY_WAIT_S = 3600.0
BUSY_RETRY_S = 10.0

# How each storage type's verifier (plugins/storage/base.py) reads a pool back.
VERIFIERS = {"members": disk_verify.run, "chunks": chunk_verify.run}


def _pause(ctx, seconds):
    """Sleeps, cancelable; returns the seconds slept."""
    end = time.monotonic() + seconds
    start = time.monotonic()
    while time.monotonic() < end:
        ctx.raise_if_cancelled()
        time.sleep(min(0.5, max(0.0, end - time.monotonic())))
    return time.monotonic() - start


def chunk_pool(master, pool_name):
    """(pool, storage server, host, storage spec) of a pool whose type has space reclaim (and
    chunk usage, and a chunk index); refuses other pools."""
    pool, server, host, storage_type = pool_type(master, pool_name)
    if not storage_type.capabilities.reclaim:
        raise ValidationError(f"disk pool {pool_name!r} is not a deduplication pool",
                              hint="verify and space reclaim work on pools of dedup storage "
                                   "servers; AdvancedDisk images are plain files checked on "
                                   "restore")
    return pool, server, host, pool_storage(master, server)


def verify_target(master, pool_name):
    """(pool, server, host, storage type) of a pool to verify: every pool type."""
    return pool_type(master, pool_name)


def run_verify(master, job):
    ctx = JobContext(master.jobs, job["id"])
    p = job["params"]
    pool_name = master.image(p["image"])["pool"] if p.get("image") else p["pool"]
    pool, server, host, storage_type = verify_target(master, pool_name)
    return VERIFIERS[storage_type.verifier](master, job, ctx, pool, server, host, storage_type)


def run_reclaim(master, job):
    ctx = JobContext(master.jobs, job["id"])
    pool, server, host, spec = chunk_pool(master, job["params"]["pool"])
    below = pool["compact_below"]
    ctx.log(f"space reclaim of deduplication pool {pool['name']} on {host['name']} "
            f"({server['path']}): containers whose live data is below {below}% of their "
            "size are compacted")
    ctx.flush()
    # A recipe the catalog does not know is an image being committed right now (its commit
    # record names it, or it is younger than every running backup) and keeps its chunks, or
    # an orphan left by a crash, whose chunks go.
    waited = 0.0
    while True:
        conn = master.hosts.connect(host)
        # Recipes of images the catalog does not know, older than every running backup, are
        # orphans: their chunks are not kept (app/jobs/cleanup.py).
        call = conn.start("pool_reclaim", {"storage": spec, "compact_below": below / 100.0,
                                           "known": sorted(cleanup.known_images(master.db)),
                                           "min_age_s": cleanup.min_age_s(master.db)},
                          on_event=ctx.on_event)
        ctx.supervise([call])
        try:
            r = results([call])[0]
            break
        except CairnError as e:
            if e.status != st.POOL_BUSY or waited >= BUSY_WAIT_S:
                raise
            if not waited:
                ctx.log("the pool is in use by backups, restores or a verify; space reclaim "
                        f"tries again every {int(BUSY_RETRY_S)} s for up to "
                        f"{int(BUSY_WAIT_S / 60)} minutes", "warning")
                ctx.flush()
        waited += _pause(ctx, BUSY_RETRY_S)
    ctx.bytes = r.get("freed_bytes", 0)
    ctx.files = r.get("removed_chunks", 0)
    ctx.log(f"reclaimed {r.get('freed_bytes', 0)} bytes: {r.get('removed_chunks', 0)} chunk(s) "
            f"no image references removed, {r.get('containers_deleted', 0)} container(s) "
            f"deleted, {r.get('containers_compacted', 0)} compacted; "
            f"{r.get('live_chunks', 0)} chunk(s) in use")
    for path in r.get("stale_recipes_removed") or []:
        ctx.log(f"removed the unfinished recipe {path} of a backup that never completed")
    for path in r.get("orphan_recipes_removed") or []:
        ctx.log(f"removed the recipe {path}, which no catalog image owns (a backup stopped "
                "before recording it); its chunks are not kept", "warning")
    master.jobs.set_result(job["id"], r)
    ctx.flush(sample=True)
    return JobResult(bytes=ctx.bytes, files=ctx.files)


def make_verify_job(master, *, image=None, pool=None):
    if bool(image) == bool(pool):
        raise ValidationError("verify needs an image or a disk pool (not both)")
    if image:
        img = master.image(image)
        verify_target(master, img["pool"])
        return master.jobs.create("verify", client=img["client"], policy=img["policy"],
                                  params={"image": img["id"]},
                                  note=f"verify job queued for image {img['id']}")
    verify_target(master, pool)
    return master.jobs.create("verify", params={"pool": pool},
                              note=f"verify job queued for pool {pool}")


def make_reclaim_job(master, pool, reason="started by the administrator"):
    chunk_pool(master, pool)
    for r in master.db.all("SELECT params FROM jobs WHERE type='reclaim' AND state!='done'"):
        if json.loads(r[0] or "{}").get("pool") == pool:
            raise CairnError(f"a space reclaim of pool {pool!r} is queued or running already")
    return master.jobs.create("reclaim", params={"pool": pool},
                              note=f"space reclaim job queued for pool {pool}: {reason}")
