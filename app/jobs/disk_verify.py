"""The verify job on an AdvancedDisk pool: the storage server's agent reads image files back
and checks every member the catalog index lists (its tar header, its length, a file's
checksum; plugins/storage/advanced_disk/image_check.py), so that damage is found before a
restore needs the data. Damage is reported per image as the files it hits and why.

`cairn images verify IMAGE` reads everything a restore of the image would: its own members
and, for an incremental or a set of streams, those it takes from earlier images.
`cairn disk-pool verify POOL` reads every image file of the pool once, with its own
metadata and end marker. Both also make the pool's image folders private again and report
what was open to other users (app/jobs/pool_modes.py).

This is the verifier "members" of the storage types (plugins/storage/base.py)."""

import posixpath

from app import status as st
from app.errors import CairnError, NotFound
from app.jobs import copies
from app.jobs.context import results
from app.jobs.pool_modes import exposed_text, report_modes
from app.jobs.result import JobResult
from app.jobs.verify_pace import pace_args
from plugins.storage.advanced_disk import image_check

LOG_FILES = 20
# The damaged files of one image the job's result lists (a lost image file of millions of
# files would make a result of hundreds of MB); "damaged_files" counts them all.
RESULT_FILES = 100_000


def _holder(master, img, k):
    """The image whose file holds the members of source k of `img` (0: itself)."""
    if k == 0:
        return img
    if not 0 < k <= len(img["sources"]):
        raise CairnError(f"the index of image {img['id']} names source {k}, which the "
                         "catalog does not list", status_code=st.IMAGE_DAMAGED)
    return master.image(img["sources"][k - 1])


def files_to_read(master, img, own_only):
    """([(holder image, agent file spec)], [(missing source id, [paths])]) for `img`: the
    image files to read and, per file, the members the catalog index lists in it. own_only:
    the image's own members only (a pool verify reads every image once)."""
    groups = {}
    with master.open_index(img) as index:
        for e in index.walk("/"):
            if e.offset < 0 or e.length <= 0 or (own_only and e.src):
                continue  # a directory the index made up has no member
            groups.setdefault(e.src, []).append([e.offset, e.length, e.kind, e.checksum,
                                                 e.path])
    files, missing = [], []
    for k in sorted(groups):
        try:
            holder = _holder(master, img, k)
        except NotFound:
            missing.append((img["sources"][k - 1], [m[4] for m in groups[k]]))
            continue
        if not holder["path"]:
            continue  # a set image holds no member of its own
        whole = holder["id"] == img["id"] or holder.get("part_of") == img["id"]
        files.append((holder, {"path": holder["path"], "checksum": holder["checksum"],
                               "whole": whole, "members": groups[k]}))
    return files, missing


def _still_there(master, image_id):
    try:
        master.image(image_id)
        return True
    except NotFound:
        return False


def _listed(items):
    return "; ".join(items[:LOG_FILES]) + (f"; and {len(items) - LOG_FILES} more"
                                           if len(items) > LOG_FILES else "")


def run(master, job, ctx, *, image, pool, server, host, storage_type, spec):
    """Verifies `image` (the job's image, None for a whole pool) or every image of `pool`,
    as the verify job's prepare() found them (app/jobs/pool_jobs.py). Returns the job's
    result and sets its result record."""
    if image is not None:
        images = [image]
        own_only = False
        # the image folder of each volume that holds a file this image reads
        held = [images[0]["path"]] + [r[0] for r in master.db.all(
            "SELECT path FROM images WHERE id IN (SELECT depends_on FROM image_deps "
            "WHERE image_id=?)", (images[0]["id"],))]
        tops = sorted({posixpath.dirname(posixpath.dirname(x)) for x in held if x})
        what = f"image {images[0]['id']}"
    else:
        # primary copies and the further copies a lifecycle put in the pool alike
        images = copies.images_in_pool(master, pool["name"])
        own_only = True
        tops = [posixpath.join(v, storage_type.image_dir) for v in pool["volumes"]]
        what = f"the whole pool {pool['name']} ({len(images)} image files)"
    ctx.log(f"verify of {what} on {host['name']}: every member the catalog lists is read "
            "back, its tar header checked and each file's data against its checksum")
    ctx.set_totals(None, sum(i["image_bytes"] for i in images))
    ctx.flush()
    conn = master.hosts.connect(host)
    call = conn.start("make_private", {"paths": tops})
    ctx.supervise([call])
    modes = results([call])[0]["modes"]

    done = {"bytes": 0, "files": 0}

    def on_event(event, data):
        if event == "progress":
            ctx.bytes = done["bytes"] + data.get("bytes", 0)
            ctx.files = done["files"] + data.get("files", 0)
        else:
            ctx.on_event(event, data)

    paced = pace_args(ctx, pool)
    damaged, checked = [], 0
    for img in images:
        entry = {"image": img["id"], "path": img["path"], "files": [], "damage": [],
                 "structure": [], "errors": []}
        try:
            files, missing = files_to_read(master, img, own_only)
        except CairnError as e:  # its catalog index is missing or damaged
            if not _still_there(master, img["id"]):
                ctx.log(f"image {img['id']} was expired during the verify: not read")
                continue
            entry["errors"].append(e.message)
        else:
            if image is not None:
                ctx.set_totals(None, sum(m[1] for _, f in files for m in f["members"]))
            call = conn.start("pool_verify", {"storage": spec,
                                              "images": [f for _, f in files],
                                              **paced},
                              on_event=on_event)
            ctx.supervise([call])
            r = results([call])[0]
            done["bytes"] += r["bytes"]
            done["files"] += r["members"]
            ctx.bytes, ctx.files = done["bytes"], done["files"]
            checked += 1
            if not _found(master, ctx, img, files, missing, r, entry, modes):
                continue
        if entry["damage"] or entry["structure"] or entry["errors"]:
            entry["error"] = "; ".join(entry.pop("errors")) or None
            _log_image(ctx, entry)
            entry["damaged_files"] = len(entry["damage"])
            del entry["damage"][RESULT_FILES:]
            entry["files"] = [d["path"] for d in entry["damage"]]
            damaged.append(entry)
    exposed = report_modes(ctx, modes)
    master.jobs.set_result(job["id"], {"images": damaged, "checked": checked,
                                       "modes": exposed})
    ctx.flush(sample=True)
    if damaged:
        n_files = sum(d["damaged_files"] for d in damaged)
        only_data = all(not d["error"] and not d["structure"]
                        and all(x["reason"] == image_check.DATA_MISMATCH for x in d["damage"])
                        for d in damaged)
        why = f"damage found: {len(damaged)} image(s), {n_files} file(s); see the log"
        return JobResult(st.CHECKSUM_MISMATCH if only_data else st.IMAGE_DAMAGED, message=why,
                         bytes=ctx.bytes, files=ctx.files)
    if exposed:
        return JobResult(st.POOL_EXPOSED, message=exposed_text(exposed), bytes=ctx.bytes,
                         files=ctx.files)
    ctx.log(f"verified {checked} image(s), {ctx.files} member(s): no damage")
    return JobResult(bytes=ctx.bytes, files=ctx.files)


def _found(master, ctx, img, files, missing, r, entry, modes):
    """Puts what the agent found for `img` into its result entry (and the modes found into
    `modes`); False when the image was expired while it was read (nothing to report)."""
    for sid, paths in missing:
        entry["errors"].append(f"it needs image {sid}, which is no longer in the catalog, "
                               f"for {len(paths)} file(s)")
        entry["damage"] += [{"path": x, "reason": f"its data is in image {sid}, which is no "
                             "longer in the catalog"} for x in paths]
    for (holder, spec), f in zip(files, r["files"]):
        modes += f["modes"]
        if f["error"]:
            if not _still_there(master, holder["id"]):
                if holder["id"] == img["id"]:
                    ctx.log(f"image {img['id']} was expired during the verify: not read")
                    return False
                entry["errors"].append(f"it needs image {holder['id']}, which was expired "
                                       "during the verify")
            else:
                entry["errors"].append(f["error"])
            entry["damage"] += [{"path": m[4], "reason": "its image file cannot be read"}
                                for m in spec["members"]]
            continue
        entry["damage"] += [dict(d, image_file=holder["path"]) for d in f["damage"]]
        entry["structure"] += [dict(s, image_file=holder["path"]) for s in f["structure"]]
    return True


def _log_image(ctx, entry):
    iid = entry["image"]
    if entry["error"]:
        ctx.log(f"image {iid}: {entry['error']}", "error")
    # members found damaged one by one (a whole file that cannot be read is said above)
    files = [d for d in entry["damage"] if "image_file" in d]
    if files:
        ctx.log(f"image {iid}: {len(files)} damaged file(s): "
                + _listed([f"{d['path']}: {d['reason']}" for d in files]), "error")
    for s in entry["structure"]:
        ctx.log(f"image {iid}: {s['image_file']} at byte {s['offset']}: {s['reason']}",
                "error")
