"""Retention and expiry. An image may leave the pool only together with every image that
reads data from it (the incrementals after a full, the stream images of a set): expiring one
by hand takes its dependents along, after a confirmation that names them; when retention ends,
an image whose dependents are still retained is kept until they expire too.

An expire job removes its images newest first, each from the pool, the catalog file index
and the catalog, so that an interruption never leaves an image whose sources are gone."""

import json
import time

from app import status as st
from app import timeutil
from app.errors import CairnError, Canceled, ValidationError
from app.jobs.context import JobContext


def dependents(db, image_ids):
    """The images that read from any of image_ids, directly or through others, and the stream
    images of a set (they go with it): the closure, without image_ids themselves."""
    seen = set(image_ids)
    todo = list(image_ids)
    out = []
    while todo:
        iid = todo.pop()
        rows = db.all("SELECT image_id FROM image_deps WHERE depends_on=? "
                      "UNION SELECT id FROM images WHERE part_of=?", (iid, iid))
        for (d,) in rows:
            if d not in seen:
                seen.add(d)
                out.append(d)
                todo.append(d)
    return out


def due(db, now):
    """Images whose retention has ended and that nothing still retained reads from: the ones
    an automatic expiry removes at `now`. Returns (removable ids, kept: {id: why})."""
    ended = {r[0] for r in db.all("SELECT id FROM images WHERE expires IS NOT NULL AND "
                                  "expires<=?", (timeutil.iso(now),))}
    removable = set(ended)
    kept = {}
    changed = True
    while changed:
        changed = False
        for iid in sorted(removable):
            for (d,) in db.all("SELECT image_id FROM image_deps WHERE depends_on=?", (iid,)):
                if d not in removable:
                    removable.discard(iid)
                    kept[iid] = f"image {d} still needs its data"
                    changed = True
                    break
    # A stream image goes with its set, not on its own.
    for iid in sorted(removable):
        row = db.one("SELECT part_of FROM images WHERE id=?", (iid,))
        if row and row[0] and row[0] not in removable:
            removable.discard(iid)
            kept[iid] = f"it belongs to image {row[0]}"
    return sorted(removable), kept


def busy_with(db, image_ids):
    """A restore job that is queued or running and reads one of the images, or None."""
    for r in db.all("SELECT id, params FROM jobs WHERE state!='done' AND type='restore'"):
        params = json.loads(r["params"] or "{}")
        if {params.get("image"), *(params.get("reads") or [])} & set(image_ids):
            return r["id"]
    return None


def order_newest_first(db, image_ids):
    rows = db.all(f"SELECT id FROM images WHERE id IN ({','.join('?' * len(image_ids))}) "
                  "ORDER BY created DESC, id DESC", list(image_ids))
    return [r[0] for r in rows]


def run(master, job):
    ctx = JobContext(master.jobs, job["id"])
    ids = job["params"]["images"]
    ctx.log(f"expiring {len(ids)} image(s): {', '.join(ids)} "
            f"({job['params'].get('reason', 'by the administrator')})")
    ctx.flush()
    busy = busy_with(master.db, ids)
    if busy:
        raise ValidationError(f"image(s) {', '.join(ids)} are being read by restore job {busy}",
                              hint="wait for that job or cancel it")
    missing_deps = [d for d in dependents(master.db, ids) if d not in ids]
    if missing_deps:
        raise ValidationError(f"image(s) {', '.join(missing_deps)} read data from the images "
                              f"to expire and are not part of this job",
                              hint="expire them together (the confirmation lists them)")
    removed = nbytes = 0
    dedup_pools = set()
    for iid in order_newest_first(master.db, ids):
        if ctx.cancelled:
            raise Canceled()
        img = master.image(iid)
        if img["path"]:
            conn = master.hosts.connect(master.config.host(img["storage_host"]))
            conn.call("remove_image", {"path": img["path"]}, timeout=120)
        with master.db.tx() as c:
            c.execute("DELETE FROM image_deps WHERE image_id=?", (iid,))
            c.execute("DELETE FROM images WHERE id=?", (iid,))
        master.remove_index(iid)
        removed += 1
        nbytes += img["image_bytes"]
        ctx.files = removed
        ctx.bytes = nbytes
        if img.get("dedup"):
            dedup_pools.add(img["pool"])
            ctx.log(f"image {iid} ({img['schedule_type']}, {img['created']}) removed from "
                    f"deduplication pool {img['pool']}: the chunks only it used are freed by "
                    "space reclaim")
        else:
            ctx.log(f"image {iid} ({img['schedule_type']}, {img['created']}) removed: "
                    f"{img['image_bytes']} bytes freed on {img['storage_host']}")
        ctx.flush()
    for pool in sorted(dedup_pools):
        from app.jobs import pool_jobs
        try:
            jid = pool_jobs.make_reclaim_job(master, pool, "images expired")
            ctx.log(f"space reclaim of pool {pool} queued as job {jid}")
        except CairnError as e:
            ctx.log(f"space reclaim of pool {pool} not queued: {e.message}")
    return st.OK, None, None, nbytes, removed


def make_job(master, image_ids, reason, c=None):
    first = master.image(image_ids[0])
    return master.jobs.create(
        "expire", client=first["client"], policy=first["policy"], schedule=first["schedule"],
        params={"images": list(image_ids), "reason": reason},
        note=f"expire job queued: {reason}", c=c)


def expire_due(master, now=None):
    """Queues expire jobs for the images whose retention has ended (one job per client),
    unless an expire job for them is already waiting. Returns the job ids."""
    now = time.time() if now is None else now
    removable, _kept = due(master.db, now)
    if not removable:
        return []
    pending = set()
    for r in master.db.all("SELECT params FROM jobs WHERE type='expire' AND state!='done'"):
        pending.update(json.loads(r[0] or "{}").get("images", []))
    todo = [i for i in removable if i not in pending]
    by_client = {}
    for iid in todo:
        img = master.image(iid)
        by_client.setdefault(img["client"], []).append(iid)
    jobs = []
    for client, ids in sorted(by_client.items()):
        try:
            jobs.append(make_job(master, ids, "retention ended"))
        except CairnError:
            continue
    return jobs
