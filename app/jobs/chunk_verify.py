"""The verify job of a pool that keeps chunks (its storage type's verifier is "chunks",
plugins/storage/base.py): the storage server's agent reads images (or the whole pool) back and
checks every chunk against its fingerprint; damage comes back per image as byte ranges of its
stream, which the catalog index turns into the files they hit. The damaged chunks are set
aside so that the next backup of their data stores them again. A verify also makes the pool's
folders and files private again and reports what was open to other users."""

import posixpath

from app import status as st
from app.jobs import cleanup, copies
from app.jobs.context import results
from app.jobs.pool_modes import exposed_text, report_modes
from app.jobs.result import JobResult
from app.jobs.verify_pace import pace_args

# How many damaged files of one image the job log names; the job's result keeps them all.
LOG_FILES = 20


def _recipe_images(master, pool_name):
    """{recipe path: image id} of the pool's images in the catalog, primary copies and
    further copies alike."""
    return copies.known_in_pool(master.db, pool_name)


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


def run(master, job, ctx, *, image, pool, server, host, storage_type, spec):
    """Verifies `image` (the job's image, None for a whole pool) or the whole pool, as the
    verify job's prepare() found them (app/jobs/pool_jobs.py). Returns the job's result and
    sets its result record."""
    if image is not None:
        recipes = [image["path"]]
        what = f"image {image['id']}"
    else:
        recipes = None
        what = f"the whole pool {pool['name']}"
    ctx.log(f"verify of {what} on {host['name']} ({server['path']}): every chunk is read back "
            "and checked against its fingerprint")
    ctx.flush()
    conn = master.hosts.connect(host)
    call = conn.start("pool_verify", {"storage": spec, "images": recipes,
                                      **pace_args(ctx, pool)},
                      on_event=ctx.on_event)
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
        why = f"damage found: {len(damaged_images)} image(s), {n_files} file(s); see the log"
        # a recipe missing or unreadable is a damaged image (62), as an AdvancedDisk image
        # file is; chunks that do not match are damaged data (61)
        lost = any(d.get("error") for d in damaged_images)
        return JobResult(st.IMAGE_DAMAGED if lost else st.CHECKSUM_MISMATCH, message=why,
                         bytes=ctx.bytes, files=checked)
    if result.get("damage"):
        # the disk under the pool lost bytes even if no image needs them
        n = len(result["damage"])
        ctx.log(f"{n} damaged record(s) in the containers, used by no image (set aside "
                "earlier, or no longer referenced); space reclaim removes them when it "
                "compacts their containers", "warning")
        why = f"damage found in the containers ({n} record(s)), used by no image; see the log"
        return JobResult(st.CHECKSUM_MISMATCH, message=why,
                         bytes=ctx.bytes, files=checked)
    if exposed:
        return JobResult(st.POOL_EXPOSED, message=exposed_text(exposed), bytes=ctx.bytes,
                         files=checked)
    ctx.log(f"verified {checked} image(s): no damage")
    return JobResult(bytes=ctx.bytes, files=checked)
