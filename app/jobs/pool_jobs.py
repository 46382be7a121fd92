"""Jobs on pools: verify (read images or the whole pool back, the way the pool's storage type
says: app/jobs/disk_verify.py for image files read member by member, app/jobs/chunk_verify.py
for pools of chunks) and, on pools whose type has it, space reclaim (remove chunks no image
references any more, compact containers). A verify also makes the pool's folders and files
private again and reports what was open to other users."""

import json
import time

from app import status as st
from app import timeutil
from app.errors import CairnError, ValidationError
from app.jobs import chunk_verify, cleanup, disk_verify
from app.jobs.context import JobContext, results
from app.jobs.storage import pool_storage, pool_type
from app.jobs.repair import queue_repairs
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


def verify_target(master, *, image=None, pool=None):
    """What a verify of an image (its id) or of a disk pool (its name) reads: (the image's
    catalog row or None, pool, server, host, storage type); every pool type. Queueing a
    verify and the job's prepare() check it alike."""
    img = master.image(image) if image else None
    return (img, *pool_type(master, img["pool"] if img else pool))


class VerifyJob:
    """A verify job (app/jobs/kinds.py): prepare() finds the image or pool, its storage
    server, host and storage type, and the storage spec; run() has the type's verifier
    (VERIFIERS) read it back."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"], work="verifying")
        self.found = self.verifier = None

    def prepare(self):
        p = self.job["params"]
        image, pool, server, host, storage_type = verify_target(
            self.master, image=p.get("image"), pool=None if p.get("image") else p["pool"])
        self.found = dict(image=image, pool=pool, server=server, host=host,
                          storage_type=storage_type, spec=pool_storage(self.master, server))
        self.verifier = VERIFIERS[storage_type.verifier]

    def run(self):
        result = self.verifier(self.master, self.job, self.ctx, **self.found)
        if result.status in (st.CHECKSUM_MISMATCH, st.IMAGE_DAMAGED):
            self._repair()
        return result

    def _repair(self):
        """The damaged images with a good copy in another pool are repaired from it."""
        found = self.master.job(self.job["id"]).get("result") or {}
        ids = [d.get("image") for d in found.get("images") or []]
        queued = queue_repairs(self.master, self.ctx, self.found["pool"]["name"], ids)
        self.ctx.flush()
        if queued:
            self.master.jobs.set_result(self.job["id"], dict(found, repairs=queued))


class ReclaimJob:
    """A space reclaim job (app/jobs/kinds.py): prepare() finds the pool, which must be of a
    type that has space reclaim, its server, host and storage spec; run() has the storage
    host's agent reclaim, waiting while the pool is in use."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"], work="reclaiming")
        self.pool = self.server = self.host = self.spec = None

    def prepare(self):
        self.pool, self.server, self.host, self.spec = chunk_pool(
            self.master, self.job["params"]["pool"])

    def run(self):
        master, ctx, pool = self.master, self.ctx, self.pool
        below = pool["compact_below"]
        ctx.log(f"space reclaim of deduplication pool {pool['name']} on {self.host['name']} "
                f"({self.server['path']}): containers whose live data is below {below}% of "
                "their size are compacted")
        ctx.flush()
        r = self._reclaim(below)
        ctx.bytes = r.get("freed_bytes", 0)
        ctx.files = r.get("removed_chunks", 0)
        ctx.log(f"reclaimed {r.get('freed_bytes', 0)} bytes: {r.get('removed_chunks', 0)} "
                f"chunk(s) no image references removed, {r.get('containers_deleted', 0)} "
                f"container(s) deleted, {r.get('containers_compacted', 0)} compacted; "
                f"{r.get('live_chunks', 0)} chunk(s) in use")
        for path in r.get("stale_recipes_removed") or []:
            ctx.log(f"removed the unfinished recipe {path} of a backup that never completed")
        for path in r.get("orphan_recipes_removed") or []:
            ctx.log(f"removed the recipe {path}, which no catalog image owns (a backup stopped "
                    "before recording it); its chunks are not kept", "warning")
        master.jobs.set_result(self.job["id"], r)
        ctx.flush(sample=True)
        return JobResult(bytes=ctx.bytes, files=ctx.files)

    def _reclaim(self, below):
        """The storage host's agent reclaims; while the pool is busy it is asked again, up
        to BUSY_WAIT_S. Returns what it did."""
        master, ctx = self.master, self.ctx
        # A recipe the catalog does not know is an image being committed right now (its commit
        # record names it, or it is younger than every running backup) and keeps its chunks, or
        # an orphan left by a crash, whose chunks go.
        waited = 0.0
        while True:
            conn = master.hosts.connect(self.host)
            # Recipes of images the catalog does not know, older than every running backup, are
            # orphans: their chunks are not kept (app/jobs/cleanup.py).
            call = conn.start("pool_reclaim", {
                "storage": self.spec, "compact_below": below / 100.0,
                "known": sorted(cleanup.known_images(master.db)),
                "min_age_s": cleanup.min_age_s(master.db)}, on_event=ctx.on_event)
            ctx.supervise([call])
            try:
                return results([call])[0]
            except CairnError as e:
                if e.status != st.POOL_BUSY or waited >= BUSY_WAIT_S:
                    raise
                if not waited:
                    ctx.log("the pool is in use by backups, restores or a verify; space "
                            f"reclaim tries again every {int(BUSY_RETRY_S)} s for up to "
                            f"{int(BUSY_WAIT_S / 60)} minutes", "warning")
                    ctx.flush()
            waited += _pause(ctx, BUSY_RETRY_S)


# A scheduled verify comes after every other queued job (backups have priority 0 or more),
# and the dispatcher holds it while a backup or restore uses or waits for its pool, so that
# reading a whole pool back never slows the backups down.
SCHEDULED_VERIFY_PRIORITY = -1


def make_verify_job(master, *, image=None, pool=None, scheduled=False, why=None):
    if bool(image) == bool(pool):
        raise ValidationError("verify needs an image or a disk pool (not both)")
    img = verify_target(master, image=image, pool=pool)[0]
    if img:
        return master.jobs.create("verify", client=img["client"], policy=img["policy"],
                                  params={"image": img["id"]},
                                  note=f"verify job queued for image {img['id']}")
    params = {"pool": pool, **({"scheduled": True} if scheduled else {})}
    return master.jobs.create("verify", params=params,
                              priority=SCHEDULED_VERIFY_PRIORITY if scheduled else 0,
                              note=f"verify job queued for pool {pool}"
                                   + (f": {why}" if why else ""))


def verify_due(master, now=None):
    """Queues a verify job of each pool whose verify interval (`disk-pool set POOL
    verify_every 7d`) has passed since its last verify of the whole pool was queued, or that
    has none yet; never a second one while one is queued or running. Returns the job ids."""
    now = time.time() if now is None else now
    pools = master.db.all("SELECT name, verify_every FROM disk_pools "
                          "WHERE verify_every IS NOT NULL ORDER BY name")
    if not pools:
        return []
    last, busy = {}, set()
    for r in master.db.all("SELECT params, state, created FROM jobs WHERE type='verify'"):
        pool = json.loads(r["params"] or "{}").get("pool")
        if pool is None:
            continue
        if r["state"] != "done":
            busy.add(pool)
        last[pool] = max(last.get(pool, 0.0), timeutil.parse_iso(r["created"]))
    queued = []
    for p in pools:
        name, every = p["name"], p["verify_every"]
        if name in busy or (name in last and now - last[name] < every):
            continue
        queued.append(make_verify_job(
            master, pool=name, scheduled=True,
            why=f"scheduled, every {timeutil.format_duration(every)}"))
    return queued


def make_reclaim_job(master, pool, reason="started by the administrator"):
    chunk_pool(master, pool)
    for r in master.db.all("SELECT params FROM jobs WHERE type='reclaim' AND state!='done'"):
        if json.loads(r[0] or "{}").get("pool") == pool:
            raise CairnError(f"a space reclaim of pool {pool!r} is queued or running already")
    return master.jobs.create("reclaim", params={"pool": pool},
                              note=f"space reclaim job queued for pool {pool}: {reason}")
