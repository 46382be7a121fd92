"""Retention and expiry. An image may leave the pool only together with every image that
reads data from it (the incrementals after a full, the stream images of a set): expiring one
by hand takes its dependents along, after a confirmation that names them; when retention ends,
an image whose dependents are still retained is kept until they expire too.

Nor may an image leave while a job still reads it (app/jobs/holds.py): a restore, or a backup
that uses it as its incremental base or files cache. Expiring such an image by hand is
refused, naming the job; when its retention has ended it is kept, and expired by a later run
once the job has ended.

An expire job first checks the holds and marks its images as being expired, in one catalog
transaction, so that no backup chooses them from then on; then it removes them newest first,
each from the pool, the catalog file index and the catalog, so that an interruption never
leaves an image whose sources are gone.

An image with several copies (a lifecycle's duplications) goes whole when every copy's
retention has ended; a copy whose retention ends earlier goes alone (app/jobs/
expire_copies.py), the next copy taking the primary's place when the primary goes."""

import json
import time

from app import timeutil
from app.errors import CairnError, Canceled, ValidationError
from app.jobs import copies, expire_copies, holds
from app.jobs.commit import note
from app.jobs.context import JobContext
from app.jobs.storage import image_storage, pool_type
from app.jobs.result import JobResult

RETENTION = "retention ended"


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
    """Images whose retention has ended (of every copy they have), that nothing still
    retained reads from and that no job holds: the ones an automatic expiry removes at `now`.
    Returns (removable ids, kept: {id: why})."""
    return removable(db, expire_copies._whole_ended(db, now))


def removable(db, image_ids):
    """Of image_ids, those that may go now: no job holds them, and everything that goes with
    them (the images that read from them, the stream images of a set and the set of a stream
    image) goes too. Returns (removable ids, kept: {id: why})."""
    out = set(image_ids)
    kept = {}
    for h in holds.holders(db, out):
        if h["image"] in out:
            out.discard(h["image"])
            kept[h["image"]] = f"{h['type']} job {h['job']} still reads it"
    changed = True
    while changed:
        changed = False
        for iid in sorted(out):
            why = None
            for (d,) in db.all("SELECT image_id FROM image_deps WHERE depends_on=?", (iid,)):
                if d not in out:
                    why = f"image {d} still needs its data"
                    break
            if why is None:
                row = db.one("SELECT part_of FROM images WHERE id=?", (iid,))
                if row and row[0] and row[0] not in out:
                    why = f"it belongs to image {row[0]}"
            if why is None:
                for (part,) in db.all("SELECT id FROM images WHERE part_of=?", (iid,)):
                    if part not in out:
                        why = f"its stream image {part} stays"
                        break
            if why is not None:
                out.discard(iid)
                kept[iid] = why
                changed = True
    return sorted(out), kept


def refuse_if_held(db, image_ids, image_id=None):
    """Expiring by hand: refused while a job reads one of the images, naming the job."""
    held = holds.holders(db, image_ids)
    if held:
        jobs = sorted({h["job"] for h in held})
        what = f"image {image_id}" if image_id else "the images"
        raise ValidationError(
            f"{what} cannot be expired now: " + "; ".join(holds.describe(h) for h in held),
            hint=f"wait for job{'s' if len(jobs) > 1 else ''} "
                 f"{', '.join(map(str, jobs))} to end (or cancel it: `cairn jobs cancel "
                 f"{jobs[0]}`), then expire again")


def order_newest_first(db, image_ids):
    rows = db.all(f"SELECT id FROM images WHERE id IN ({','.join('?' * len(image_ids))}) "
                  "ORDER BY created DESC, id DESC", list(image_ids))
    return [r[0] for r in rows]


def _claim(master, job, ctx, images, reason, units=()):
    """Checks the holds and marks the images this job removes, and the copies it removes of
    images that stay (units: (image id, copy number)), in one transaction. By hand, any hold
    refuses the whole job; after retention, held images (and what goes with them) are left
    for a later run. Returns (the ids to remove, the copies to remove)."""
    ids = [i for i in images if master.db.one("SELECT 1 FROM images WHERE id=?", (i,))]
    by_retention = reason == RETENTION
    with master.db.tx() as c:
        units, kept_copies = expire_copies.removable(master.db, [tuple(u) for u in units],
                                                     ids)
        units = expire_copies.claim(c, job["id"], units)
        if by_retention:
            todo, kept = removable(master.db, ids)
        else:
            refuse_if_held(master.db, ids)
            missing_deps = [d for d in dependents(master.db, ids) if d not in ids]
            if missing_deps:
                raise ValidationError(
                    f"image(s) {', '.join(missing_deps)} read data from the images to expire "
                    "and are not part of this job",
                    hint="expire them together (the confirmation lists them)")
            todo, kept = ids, {}
        c.executemany("UPDATE images SET expiring=? WHERE id=?",
                      [(job["id"], i) for i in todo])
    for iid, why in sorted({**kept, **kept_copies}.items()):
        ctx.log(f"image {iid} is kept for now, a later expiry run removes it: {why}",
                "warning")
    ctx.flush()
    return todo, units


class ExpireJob:
    """An expire job (app/jobs/kinds.py): prepare() reads the images it names and why;
    run() checks their holds and marks them in one transaction (what may go depends on the
    moment), then removes them."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"], work="expiring")
        self.images = self.reason = None

    def prepare(self):
        self.images = self.job["params"]["images"]
        self.copies = self.job["params"].get("copies") or []
        self.reason = self.job["params"].get("reason", "by the administrator")

    def run(self):
        master, job, ctx, ids = self.master, self.job, self.ctx, self.images
        if ids:
            ctx.log(f"expiring {len(ids)} image(s): {', '.join(ids)} ({self.reason})")
        if self.copies:
            ctx.log(f"expiring {len(self.copies)} copy(ies) of images that other copies keep: "
                    + ", ".join(f"{i} copy {n}" for i, n in self.copies) + f" ({self.reason})")
        ctx.flush()
        todo, units = _claim(master, job, ctx, ids, self.reason, self.copies)
        try:
            result = _remove(master, ctx, todo)
            gone = _remove_copies(master, ctx, job["id"])
        except BaseException:
            # The images and copies not removed may be chosen by backups again.
            with master.db.tx() as c:
                c.execute("UPDATE images SET expiring=NULL WHERE expiring=?", (job["id"],))
                expire_copies.unclaim(c, job["id"])
            raise
        return JobResult(bytes=result.bytes + gone[1], files=result.files + gone[0])


def _remove(master, ctx, ids):
    removed = nbytes = 0
    reclaim_pools = set()
    for iid in order_newest_first(master.db, ids) if ids else []:
        if ctx.cancelled:
            raise Canceled()
        img = master.image(iid)
        # every copy's file first, the primary's last: the row goes once all are gone
        for k in reversed(copies.copies(master.db, iid)):
            if k["path"]:
                conn = master.hosts.connect(master.config.host(k["storage_host"]))
                conn.call("remove_image", {"path": k["path"],
                                          "storage": image_storage(master, k)}, timeout=120)
            if not k["primary"]:
                with master.db.tx() as c:
                    c.execute("DELETE FROM image_copies WHERE image_id=? AND copy_number=?",
                              (iid, k["copy"]))
                _note_removed(master, ctx, dict(img, **k, id=iid), reclaim_pools)
        with master.db.tx() as c:
            c.execute("DELETE FROM image_deps WHERE image_id=?", (iid,))
            c.execute("DELETE FROM images WHERE id=?", (iid,))
        master.remove_index(iid)
        removed += 1
        nbytes += img["image_bytes"]
        ctx.files = removed
        ctx.bytes = nbytes
        _note_removed(master, ctx, img, reclaim_pools)
    _queue_reclaims(master, ctx, reclaim_pools)
    return JobResult(bytes=nbytes, files=removed)


def _note_removed(master, ctx, img, reclaim_pools):
    """The pool's storage type says what the removal freed, and whether a space reclaim
    frees the rest."""
    text, reclaim = pool_type(master, img["pool"])[3].expired(img)
    if reclaim:
        reclaim_pools.add(img["pool"])
    if img.get("copy") and img.get("primary") is False:
        text = f"copy {img['copy']}: {text}"
    ctx.log(text)
    ctx.flush()


def _remove_copies(master, ctx, job_id):
    """Removes the copies the job marked of images that stay: (copies, bytes)."""
    n = nbytes = 0
    reclaim_pools = set()
    for k in expire_copies.marked(master.db, job_id):
        if ctx.cancelled:
            raise Canceled()
        if k["path"]:
            conn = master.hosts.connect(master.config.host(k["storage_host"]))
            conn.call("remove_image", {"path": k["path"],
                                          "storage": image_storage(master, k)}, timeout=120)
        with master.db.tx() as c:
            c.execute("DELETE FROM image_copies WHERE image_id=? AND copy_number=?",
                      (k["image_id"], k["copy_number"]))
        img = master.image(k["image_id"])
        n += 1
        nbytes += k["image_bytes"]
        _note_removed(master, ctx, dict(img, pool=k["pool"], storage_host=k["storage_host"],
                                        image_bytes=k["image_bytes"], copy=k["copy_number"],
                                        primary=False,
                                        dedup=json.loads(k["dedup"]) if k["dedup"] else None),
                      reclaim_pools)
    _queue_reclaims(master, ctx, reclaim_pools)
    return n, nbytes


def _queue_reclaims(master, ctx, reclaim_pools):
    if not reclaim_pools:
        return
    # the pool jobs (and the verifiers behind them) are loaded when a reclaim is queued, not
    # by every command that opens the master
    from app.jobs import pool_jobs
    for pool in sorted(reclaim_pools):
        try:
            jid = pool_jobs.make_reclaim_job(master, pool, "images expired")
            ctx.log(f"space reclaim of pool {pool} queued as job {jid}")
        except CairnError as e:
            ctx.log(f"space reclaim of pool {pool} not queued: {e.message}")


def make_job(master, image_ids, reason, c=None, copies=()):
    """An expire job of whole images and of copies ((image id, copy number)) of images that
    stay; reason RETENTION makes it leave held images for a later run."""
    first = master.image(image_ids[0] if image_ids else copies[0][0])
    params = {"images": list(image_ids), "reason": reason}
    if copies:
        params["copies"] = [list(u) for u in copies]
    return master.jobs.create(
        "expire", client=first["client"], policy=first["policy"], schedule=first["schedule"],
        params=params, note=f"expire job queued: {reason}", c=c)


def expire_due(master, now=None):
    """Queues expire jobs for the images whose retention has ended (one job per client), and
    for the copies whose retention has ended of images that stay, unless an expire job for
    them is already waiting. Returns the job ids."""
    now = time.time() if now is None else now
    ready, _kept = due(master.db, now)
    # copies of images whose every copy has ended go with their image, when it may go
    units, _kept = expire_copies.due(master.db, now)
    _note_held(master, now)
    if not ready and not units:
        return []
    pending, pending_copies = set(), set()
    for r in master.db.all("SELECT params FROM jobs WHERE type='expire' AND state!='done'"):
        params = json.loads(r[0] or "{}")
        pending.update(params.get("images", []))
        pending_copies.update(tuple(u) for u in params.get("copies", []))
    by_client = {}
    for iid in [i for i in ready if i not in pending]:
        by_client.setdefault(master.image(iid)["client"], ([], []))[0].append(iid)
    for u in [u for u in units if u not in pending_copies and u[0] not in pending]:
        by_client.setdefault(master.image(u[0])["client"], ([], []))[1].append(u)
    jobs = []
    for client, (ids, copy_units) in sorted(by_client.items()):
        try:
            jobs.append(make_job(master, ids, RETENTION, copies=copy_units))
        except CairnError:
            continue
    return jobs


def _note_held(master, now):
    """Says once in the log of each job that holds an image whose retention has ended that
    the image's expiry waits for it."""
    ended = {r[0] for r in master.db.all("SELECT id FROM images WHERE expires IS NOT NULL "
                                         "AND expires<=?", (timeutil.iso(now),))}
    for h in holds.holders(master.db, ended):
        text = (f"the retention of image {h['image']} has ended; it is expired after this job "
                "has ended, since this job reads it")
        note(master, h["job"], text, "info")


def left_marked(db):
    """Whether images or copies are marked by an expire job that has ended."""
    return db.one("SELECT 1 FROM images WHERE expiring IS NOT NULL AND NOT EXISTS (SELECT 1 "
                  "FROM jobs j WHERE j.id=images.expiring AND j.state!='done')") is not None \
        or expire_copies.left_marked(db)


def recover(master):
    """Images left marked by an expire job whose process stopped: one whose file is gone (and
    that no image reads from) was removed, so its catalog row and index go too; any other is
    unmarked, so backups may use it again. Copies alike: one whose file is gone is dropped,
    any other unmarked. Returns {"removed": [...], "kept": [...]}."""
    out = {"removed": [], "kept": []}
    _recover_copies(master, out)
    for r in master.db.all("SELECT id, path, storage_host, expiring FROM images WHERE "
                           "expiring IS NOT NULL AND NOT EXISTS (SELECT 1 FROM jobs j WHERE "
                           "j.id=images.expiring AND j.state!='done') ORDER BY created DESC"):
        try:
            conn = master.hosts.connect(master.config.host(r["storage_host"]))
            present = bool(r["path"]) and conn.call("stat_path", {"path": r["path"]},
                                                    timeout=60)["exists"]
        except CairnError:
            continue  # asked again on a later call
        needed = master.db.one("SELECT 1 FROM image_deps WHERE depends_on=?", (r["id"],))
        with master.db.tx() as c:
            if not present and r["path"] and not needed:
                c.execute("DELETE FROM image_deps WHERE image_id=?", (r["id"],))
                c.execute("DELETE FROM images WHERE id=?", (r["id"],))
            else:
                c.execute("UPDATE images SET expiring=NULL WHERE id=?", (r["id"],))
        if not present and r["path"] and not needed:
            master.remove_index(r["id"])
            out["removed"].append(r["id"])
            note(master, r["expiring"], f"image {r['id']}: its file was removed before the "
                 "process running this job stopped; its catalog entry is removed now")
        else:
            out["kept"].append(r["id"])
            note(master, r["expiring"], f"image {r['id']} was not expired: the process "
                 "running this job stopped first")
    return out


def _recover_copies(master, out):
    for r in master.db.all("SELECT * FROM image_copies WHERE expiring IS NOT NULL AND NOT "
                           "EXISTS (SELECT 1 FROM jobs j WHERE j.id=image_copies.expiring AND "
                           "j.state!='done')"):
        try:
            conn = master.hosts.connect(master.config.host(r["storage_host"]))
            present = bool(r["path"]) and conn.call("stat_path", {"path": r["path"]},
                                                    timeout=60)["exists"]
        except CairnError:
            continue  # asked again on a later call
        what = f"{r['image_id']} copy {r['copy_number']}"
        with master.db.tx() as c:
            if present or not r["path"]:
                c.execute("UPDATE image_copies SET expiring=NULL WHERE image_id=? AND "
                          "copy_number=?", (r["image_id"], r["copy_number"]))
            else:
                c.execute("DELETE FROM image_copies WHERE image_id=? AND copy_number=?",
                          (r["image_id"], r["copy_number"]))
        (out["kept"] if present or not r["path"] else out["removed"]).append(what)
        note(master, r["expiring"], f"image {what}: " + (
            "not removed, the process running this job stopped first" if present
            else "its file was removed before the process running this job stopped; its "
                 "catalog entry is removed now"))
