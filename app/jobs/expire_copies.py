"""Expiry of an image's copies (app/jobs/copies.py), each at its own retention; the expire job
(app/jobs/expire.py) runs it beside the expiry of whole images.

An image goes whole (catalog row, index, every copy) when all its copies' retentions have
ended, as an image without copies always did. Before that, a copy whose retention has ended
goes alone: its file is removed and its row dropped; when it is the primary copy, the next
copy takes its place first (copies.promote), in the transaction that marks it, so no backup
or restore chooses the leaving copy from then on.

The rules of whole images hold per pool: a copy of an image may not leave its pool while a
copy of an image that reads data from it (a later incremental, a set of streams) stays in
that pool, nor while a job holds the image (app/jobs/holds.py)."""

from app import timeutil
from app.jobs import copies, holds


def _whole_ended(db, now):
    """Images every copy of which has ended its retention."""
    t = timeutil.iso(now)
    return {r[0] for r in db.all(
        "SELECT id FROM images i WHERE expires IS NOT NULL AND expires<=? AND NOT EXISTS "
        "(SELECT 1 FROM image_copies k WHERE k.image_id=i.id AND (k.expires IS NULL OR "
        "k.expires>?))", (t, t))}


def due(db, now, whole=None):
    """Copies whose retention has ended, of images that stay (some other copy is retained),
    that may go now: ([(image id, copy number)], kept: {"IMAGE copy N": why})."""
    t = timeutil.iso(now)
    whole = _whole_ended(db, now) if whole is None else set(whole)
    units = {(r[0], r[1]) for r in db.all(
        "SELECT id, copy_number FROM images WHERE expires IS NOT NULL AND expires<=? AND "
        "expiring IS NULL", (t,))}
    units |= {(r[0], r[1]) for r in db.all(
        "SELECT image_id, copy_number FROM image_copies WHERE expires IS NOT NULL AND "
        "expires<=? AND expiring IS NULL", (t,))}
    units = {u for u in units if u[0] not in whole}
    return removable(db, units, whole)


def removable(db, units, whole=()):
    """Of units (image id, copy number), those that may go now, given that the images of
    `whole` go entirely: no job holds the image, and no image that reads data from it keeps
    a copy in the same pool. Returns (sorted units, kept: {"IMAGE copy N": why})."""
    out, kept = set(units), {}
    held = {h["image"]: h for h in holds.holders(db, {u[0] for u in out})}
    for u in sorted(out):
        if u[0] in held:
            out.discard(u)
            h = held[u[0]]
            kept[f"{u[0]} copy {u[1]}"] = f"{h['type']} job {h['job']} still reads it"
    pool_of = {u: (copies.copy_numbered(db, *u) or {}).get("pool") for u in out}
    changed = True
    while changed:
        changed = False
        for u in sorted(out):
            for (d,) in db.all("SELECT image_id FROM image_deps WHERE depends_on=?", (u[0],)):
                if d in whole:
                    continue
                dc = copies.copy_on_pool(db, d, pool_of[u])
                if dc is not None and (d, dc["copy"]) not in out:
                    out.discard(u)
                    kept[f"{u[0]} copy {u[1]}"] = (f"copy {dc['copy']} of image {d} in disk "
                                                   f"pool {pool_of[u]} still needs its data")
                    changed = True
                    break
    return sorted(out), kept


def claim(c, job_id, units):
    """Marks the copies an expire job removes, in its transaction; a primary copy first
    hands its place to the next copy. An image's last copy is never removed alone (it goes
    with its image). Returns [(image id, copy number)] as marked."""
    marked = []
    for iid, number in units:
        row = c.execute("SELECT copy_number FROM images WHERE id=?", (iid,)).fetchone()
        others = c.execute("SELECT count(*) FROM image_copies WHERE image_id=? AND "
                           "copy_number!=? AND expiring IS NULL", (iid, number)).fetchone()[0]
        if row is None or (row[0] == number and not others):
            continue
        if row[0] == number:
            copies.promote(c, iid, job_id)
        else:
            c.execute("UPDATE image_copies SET expiring=? WHERE image_id=? AND copy_number=?",
                      (job_id, iid, number))
        marked.append((iid, number))
    return marked


def unclaim(c, job_id):
    """The copies a failed expire job did not remove stay (unmarked)."""
    c.execute("UPDATE image_copies SET expiring=NULL WHERE expiring=?", (job_id,))


def marked(db, job_id):
    """The copies an expire job marked, newest image first."""
    return [dict(r) for r in db.all(
        "SELECT k.* FROM image_copies k JOIN images i ON i.id=k.image_id WHERE k.expiring=? "
        "ORDER BY i.created DESC, k.image_id DESC, k.copy_number", (job_id,))]


def left_marked(db):
    """Whether copies are marked by an expire job that has ended (its process stopped)."""
    return db.one("SELECT 1 FROM image_copies WHERE expiring IS NOT NULL AND NOT EXISTS "
                  "(SELECT 1 FROM jobs j WHERE j.id=image_copies.expiring AND "
                  "j.state!='done')") is not None
