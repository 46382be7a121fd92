"""Jobs on pools: verify (read images or the whole pool back and check every chunk against its
fingerprint, naming the damaged files of each image; AdvancedDisk pools in
app/jobs/disk_verify.py) and, on deduplication pools, space reclaim (remove chunks no image
references any more, compact containers). A verify also makes the pool's folders and files
private again and reports what was open to other users."""

import json
import posixpath
import time

import plugins.storage
from app import status as st
from app.errors import CairnError, ValidationError
from app.jobs.backup import pool_access
from app.jobs.context import JobContext, results

# How many damaged files of one image the job log names; the job's result keeps them all.
LOG_FILES = 20
# How many paths found open to other users the job log names, and its result keeps.
LOG_MODES = 20
RESULT_MODES = 1000
# Reclaim needs the pool to itself; it waits for the jobs using it this long.
BUSY_WAIT_S = 3600.0
BUSY_RETRY_S = 10.0


def _pause(ctx, seconds):
    """Sleeps, cancelable; returns the seconds slept."""
    end = time.monotonic() + seconds
    start = time.monotonic()
    while time.monotonic() < end:
        ctx.raise_if_cancelled()
        time.sleep(min(0.5, max(0.0, end - time.monotonic())))
    return time.monotonic() - start


def dedup_pool(master, pool_name):
    """(pool, storage server, host, access) of a deduplication pool; refuses other pools."""
    pool = master.config.disk_pool(pool_name)
    server = master.config.storage_server(pool["server"])
    if plugins.storage.get(server["type"]) is not plugins.storage.dedup:
        raise ValidationError(f"disk pool {pool_name!r} is not a deduplication pool",
                              hint="verify and space reclaim work on pools of dedup storage "
                                   "servers; AdvancedDisk images are plain files checked on "
                                   "restore")
    return pool, server, master.config.host(server["host"]), pool_access(master, server)


def verify_target(master, pool_name):
    """(pool, server, host, plugin) of a pool to verify: every pool type."""
    pool = master.config.disk_pool(pool_name)
    server = master.config.storage_server(pool["server"])
    return pool, server, master.config.host(server["host"]), plugins.storage.get(server["type"])


def _mode_line(m):
    if m.get("error"):
        return (f"{m['path']} is open to other users (mode {m['mode']}) and could not be made "
                f"private: {m['error']}; run `chmod go-rwx` on it as its owner or as root")
    return f"{m['path']} was open to other users (mode {m['mode']}); it is private again"


def _paths(n):
    return (f"{n} file or folder of the pool was" if n == 1
            else f"{n} files or folders of the pool were")


def exposed_text(modes):
    """The job's message when a verify found nothing worse than modes open to others."""
    return (f"{_paths(len(modes))} open to other users; "
            f"{'it is' if len(modes) == 1 else 'they are'} private again: see the log")


def report_modes(ctx, modes):
    """Logs what a verify found open to other users (made private, or why it could not be);
    returns the findings for the job's result (at most RESULT_MODES)."""
    if not modes:
        return []
    ctx.log(f"{_paths(len(modes))} open to other users: anyone on the storage "
            "host (or on any node mounting its file system) could read backed-up data or see "
            "which clients are backed up. Cairn keeps them private (folders 0700, files "
            "0600); find out who changed them.", "error")
    for m in modes[:LOG_MODES]:
        ctx.log(_mode_line(m), "error")
    if len(modes) > LOG_MODES:
        ctx.log(f"... and {len(modes) - LOG_MODES} more (the job's result lists up to "
                f"{RESULT_MODES})", "error")
    return modes[:RESULT_MODES]


def _recipe_images(master, pool_name):
    """{recipe path: image id} of the pool's images in the catalog."""
    return {r["path"]: r["id"] for r in master.db.all(
        "SELECT id, path FROM images WHERE pool=?", (pool_name,))}


def damaged_files(master, image_id, ranges):
    """The files of an image whose members overlap the damaged byte ranges of its stream."""
    if not ranges:
        return []
    spans = sorted((r["offset"], r["offset"] + r["length"]) for r in ranges)
    img = master.image(image_id)
    out = []
    with master.open_index(img) as index:
        for e in index.walk("/"):
            if e.src or e.offset < 0 or e.length <= 0:
                continue
            lo, hi = e.offset, e.offset + e.length
            for a, b in spans:
                if a >= hi:
                    break
                if b > lo:
                    out.append(e.path)
                    break
    return out


def run_verify(master, job):
    ctx = JobContext(master.jobs, job["id"])
    p = job["params"]
    pool_name = master.image(p["image"])["pool"] if p.get("image") else p["pool"]
    pool, server, host, plugin = verify_target(master, pool_name)
    if plugin is not plugins.storage.dedup:
        from app.jobs import disk_verify
        return disk_verify.run(master, job, ctx, pool, host, plugin.IMAGE_DIR)
    access = pool_access(master, server)
    if p.get("image"):
        img = master.image(p["image"])
        recipes = [img["path"]]
        what = f"image {img['id']}"
    else:
        recipes = None
        what = f"the whole pool {pool['name']}"
    ctx.log(f"verify of {what} on {host['name']} ({server['path']}): every chunk is read back "
            "and checked against its fingerprint")
    ctx.flush()
    conn = master.hosts.connect(host)
    call = conn.start("dedup_verify", {"root": access["root"], "key": access["key"],
                                       "recipes": recipes}, on_event=ctx.on_event)
    ctx.supervise([call])
    result = results([call])[0]
    known = _recipe_images(master, pool["name"])
    damaged_images = []
    for entry in result["images"]:
        iid = known.get(entry["path"])
        if entry.get("error"):
            damaged_images.append({"image": iid, "path": entry["path"], "error": entry["error"],
                                   "files": []})
            ctx.log(f"image {iid or entry['path']}: {entry['error']}", "error")
            continue
        if not entry["damage"]:
            continue
        files = damaged_files(master, iid, entry["damage"]) if iid else []
        damaged_images.append({"image": iid, "path": entry["path"], "files": files,
                               "ranges": entry["damage"]})
        reasons = sorted({d["reason"] for d in entry["damage"] if d.get("reason")})
        ctx.log(f"image {iid or entry['path']}: {len(entry['damage'])} damaged chunk range(s), "
                f"{len(files)} file(s) hit: " + ", ".join(files[:LOG_FILES])
                + (f" and {len(files) - LOG_FILES} more" if len(files) > LOG_FILES else "")
                + (f" ({'; '.join(reasons[:3])})" if reasons else ""), "error")
    for d in result.get("damage", []):
        ctx.log(f"container {posixpath.basename(d['container'])} at byte {d['offset']}: "
                f"{d['reason']}", "error")
    aside = result.get("set_aside", 0)
    if aside:
        ctx.log(f"{aside} damaged chunk(s) set aside: the next backup of the same data stores "
                "them again (without trusting its files cache for them), and the images above "
                "become restorable in full once it has", "warning")
    checked = len(result["images"])
    ctx.bytes = result.get("bytes", 0)
    ctx.files = checked
    # A whole-pool verify also names the pool's files that no catalog image owns.
    from app.jobs import cleanup
    unknown = cleanup.unknown_files(master.db, result.get("files") or [])
    cleanup.log_unknown(ctx, unknown, pool["name"])
    exposed = report_modes(ctx, result.get("modes") or [])
    master.jobs.set_result(job["id"], {"images": damaged_images,
                                       "containers": result.get("containers"),
                                       "container_damage": result.get("damage", []),
                                       "damaged_chunks": result.get("damaged_chunks", 0),
                                       "set_aside": aside, "unknown_files": unknown,
                                       "modes": exposed})
    ctx.flush(sample=True)
    if damaged_images:
        n_files = sum(len(d["files"]) for d in damaged_images)
        return (st.CHECKSUM_MISMATCH,
                f"damage found: {len(damaged_images)} image(s), {n_files} file(s); see the log",
                None, ctx.bytes, checked)
    if result.get("damage"):
        # the disk under the pool lost bytes even if no image needs them
        n = len(result["damage"])
        ctx.log(f"{n} damaged record(s) in the containers, used by no image (set aside "
                "earlier, or no longer referenced); space reclaim removes them when it "
                "compacts their containers", "warning")
        return (st.CHECKSUM_MISMATCH,
                f"damage found in the containers ({n} record(s)), used by no image; see the log",
                None, ctx.bytes, checked)
    if exposed:
        return (st.POOL_EXPOSED, exposed_text(exposed),
                None, ctx.bytes, checked)
    ctx.log(f"verified {checked} image(s): no damage")
    return st.OK, None, None, ctx.bytes, checked


def run_reclaim(master, job):
    ctx = JobContext(master.jobs, job["id"])
    pool, server, host, access = dedup_pool(master, job["params"]["pool"])
    below = pool["compact_below"]
    ctx.log(f"space reclaim of deduplication pool {pool['name']} on {host['name']} "
            f"({server['path']}): containers whose live data is below {below}% of their "
            "size are compacted")
    ctx.flush()
    # A recipe the catalog does not know is an image being committed right now (its commit
    # record names it, or it is younger than every running backup) and keeps its chunks, or
    # an orphan left by a crash, whose chunks go.
    waited = 0.0
    from app.jobs import cleanup
    while True:
        conn = master.hosts.connect(host)
        # Recipes of images the catalog does not know, older than every running backup, are
        # orphans: their chunks are not kept (app/jobs/cleanup.py).
        call = conn.start("dedup_reclaim", {"root": access["root"], "key": access["key"],
                                            "compact_below": below / 100.0,
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
    return st.OK, None, None, ctx.bytes, ctx.files


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
    dedup_pool(master, pool)
    for r in master.db.all("SELECT params FROM jobs WHERE type='reclaim' AND state!='done'"):
        if json.loads(r[0] or "{}").get("pool") == pool:
            raise CairnError(f"a space reclaim of pool {pool!r} is queued or running already")
    return master.jobs.create("reclaim", params={"pool": pool},
                              note=f"space reclaim job queued for pool {pool}: {reason}")
