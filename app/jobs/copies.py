"""The copies of an image. The images row is the image's primary copy (its pool, host, path,
expiry: everything that read images before there were copies reads it as it did); the
further copies a lifecycle's duplications made are rows of image_copies. Each copy has a
number: the lifecycle step that made it (1: the backup). When the primary copy expires while
another copy is kept, the next copy takes the primary's place in the images row, keeping its
number (promote), so that an image is in the catalog exactly as long as one of its copies
is.

A copy's restore reads the image's sources (an incremental's base, a set's stream images)
from copies of theirs in the same pool: a restore reads one storage server."""

import json

#: what a copy's state says: ok, or damaged (a verify or restore found its data damaged)
STATES = ("ok", "damaged")

COPY_FIELDS = ("storage_unit", "pool", "storage_host", "path", "image_bytes", "created",
               "expires", "job_id", "dedup", "compression")


def _primary(row):
    d = {"image": row["id"], "copy": row["copy_number"], "primary": True}
    d.update({k: row[k] for k in COPY_FIELDS})
    d["state"] = "ok"
    d["expiring"] = row["expiring"]
    d["dedup"] = json.loads(d["dedup"]) if d["dedup"] else None
    d["compression"] = json.loads(d["compression"]) if d["compression"] else None
    return d


def _further(row):
    d = {"image": row["image_id"], "copy": row["copy_number"], "primary": False}
    d.update({k: row[k] for k in COPY_FIELDS})
    d["state"] = row["state"]
    d["expiring"] = row["expiring"]
    d["dedup"] = json.loads(d["dedup"]) if d["dedup"] else None
    d["compression"] = json.loads(d["compression"]) if d["compression"] else None
    return d


def copies(db, image_id):
    """Every copy of an image, the primary first, then by copy number: dicts of image, copy,
    primary, storage_unit, pool, storage_host, path, image_bytes, created, expires, job_id,
    state, dedup, expiring. Empty when the image is not in the catalog."""
    row = db.one("SELECT * FROM images WHERE id=?", (image_id,))
    if row is None:
        return []
    out = [_primary(row)]
    out += [_further(r) for r in db.all("SELECT * FROM image_copies WHERE image_id=? "
                                        "ORDER BY copy_number", (image_id,))]
    return out


def copy_on_pool(db, image_id, pool):
    """The copy of an image kept in a disk pool, or None."""
    return next((c for c in copies(db, image_id) if c["pool"] == pool), None)


def copy_numbered(db, image_id, number):
    """Copy `number` of an image, or None."""
    return next((c for c in copies(db, image_id) if c["copy"] == number), None)


def free_number(c, image_id, wanted):
    """The copy number a new copy of an image gets: `wanted` (its lifecycle step) unless
    another copy has it (a copy an earlier lifecycle made), else the next unused one."""
    used = {r[0] for r in c.execute(
        "SELECT copy_number FROM images WHERE id=? UNION SELECT copy_number FROM "
        "image_copies WHERE image_id=?", (image_id, image_id)).fetchall()}
    if wanted not in used:
        return wanted
    return max(used) + 1


def insert(c, image_id, number, **fields):
    """Records a further copy of an image, in the caller's transaction."""
    cols = ["image_id", "copy_number"] + list(fields)
    c.execute(f"INSERT INTO image_copies({', '.join(cols)}) VALUES "
              f"({', '.join('?' * len(cols))})", (image_id, number, *fields.values()))


def pools_of(db, image_id):
    """{pool: copy number} of an image's copies."""
    return {c["pool"]: c["copy"] for c in copies(db, image_id)}


def known_in_pool(db, pool):
    """{path: image id} of the copies of images that a disk pool keeps, primary or not."""
    out = {r[0]: r[1] for r in db.all("SELECT path, id FROM images WHERE pool=? AND "
                                      "path!=''", (pool,))}
    out.update({r[0]: r[1] for r in db.all("SELECT path, image_id FROM image_copies WHERE "
                                           "pool=? AND path!=''", (pool,))})
    return out


def promote(c, image_id, job_id):
    """The image's primary copy leaves (an expire job, `job_id`, removes it) while another
    copy stays: in the caller's transaction, the next copy takes the primary's place in the
    images row, and the primary's location becomes a further copy marked as being removed
    by the job. Returns the number of the copy promoted."""
    row = c.execute("SELECT * FROM images WHERE id=?", (image_id,)).fetchone()
    nxt = c.execute("SELECT * FROM image_copies WHERE image_id=? AND expiring IS NULL "
                    "ORDER BY copy_number LIMIT 1", (image_id,)).fetchone()
    if row is None or nxt is None:
        raise ValueError(f"image {image_id} has no other copy to take its primary's place")
    old = {k: row[k] for k in COPY_FIELDS}
    c.execute("DELETE FROM image_copies WHERE image_id=? AND copy_number=?",
              (image_id, nxt["copy_number"]))
    insert(c, image_id, row["copy_number"], **old, state="ok", expiring=job_id)
    c.execute("UPDATE images SET storage_unit=?, pool=?, storage_host=?, path=?, image_bytes=?, "
              "expires=?, dedup=?, compression=?, copy_number=? WHERE id=?",
              (nxt["storage_unit"], nxt["pool"], nxt["storage_host"], nxt["path"],
               nxt["image_bytes"], nxt["expires"], nxt["dedup"], nxt["compression"],
               nxt["copy_number"], image_id))
    return nxt["copy_number"]


def images_in_pool(master, pool):
    """The images a disk pool holds a file of, each as that copy holds it (its path, size
    and host the copy's), oldest first."""
    out = []
    for path, iid in sorted(known_in_pool(master.db, pool).items(), key=lambda x: x[1]):
        c = next(k for k in copies(master.db, iid) if k["path"] == path)
        out.append(dict(master.image(iid), path=path, image_bytes=c["image_bytes"],
                        storage_host=c["storage_host"], pool=pool, copy=c["copy"]))
    out.sort(key=lambda d: (d["created"], d["id"]))
    return out
