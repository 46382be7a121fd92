"""Which copy of an image a restore reads (app/jobs/copies.py).

By default the primary copy, and when it cannot be read (its files are missing, its storage
host does not answer, its data is damaged) the next copy, in copy order; the job log says
which copy was read and why another was not. With a copy chosen (`cairn restore ... --copy
N`) that copy and no other.

A copy of an incremental (or of a multi-stream set) is restored from the copies of its
sources in the same disk pool: one storage server reads them all. A copy whose sources have
no copy there cannot be restored, and is passed over (or, when chosen, refused)."""

from app import status as st
from app.errors import CairnError, NotFound, ValidationError
from app.jobs import copies


def check_copy(db, image, number):
    """Refuses, when a restore is queued, a copy the image does not have or one that cannot
    be restored (its sources have no copy in its pool)."""
    c = copies.copy_numbered(db, image["id"], number)
    if c is None:
        have = ", ".join(str(x["copy"]) for x in copies.copies(db, image["id"]))
        raise NotFound(f"image {image['id']} has no copy {number}",
                       hint=f"its copies: {have} (see `cairn images copies {image['id']}`)")
    missing = missing_sources(db, image, c["pool"])
    if missing:
        raise ValidationError(
            f"copy {number} of image {image['id']} (disk pool {c['pool']}) cannot be restored: "
            f"image(s) {', '.join(missing)}, whose data it reads, have no copy in that pool",
            hint="restore another copy, or leave out --copy")
    return c


def missing_sources(db, image, pool):
    """The images an image reads data from (its sources) that have no copy in `pool`."""
    return [s for s in image["sources"] if copies.copy_on_pool(db, s, pool) is None]


def as_copy(image, c):
    """The image as its copy `c` holds it: the image's own fields, the copy's location."""
    return dict(image, storage_unit=c["storage_unit"], pool=c["pool"],
                storage_host=c["storage_host"], path=c["path"], copy=c["copy"])


def choices(db, image, number=None):
    """The copies a restore tries, in order: [copy dicts]."""
    if number is not None:
        return [check_copy(db, image, number)]
    return [c for c in copies.copies(db, image["id"]) if c["expiring"] is None] or \
        copies.copies(db, image["id"])


def paths_of(db, image, c, extents):
    """The files copy `c` of an image reads, by the position its extents name: its own,
    then each source's copy in the same pool (None for a source no extent reads)."""
    used = {x[2] for x in extents}
    paths = [c["path"] or None]
    for k, source_id in enumerate(image["sources"], 1):
        if k not in used:
            paths.append(None)
            continue
        sc = copies.copy_on_pool(db, source_id, c["pool"])
        if sc is None:
            raise CairnError(f"image {image['id']} reads image {source_id}, which has no copy "
                             f"in disk pool {c['pool']}", status_code=st.IMAGE_DAMAGED)
        paths.append(sc["path"])
    return paths


def usable(master, image, c, extents):
    """(storage host's agent, image paths) of a copy a restore can read now, or raises a
    CairnError saying why not: a source without a copy in its pool, a storage host that does
    not answer, a file that is missing."""
    paths = paths_of(master.db, image, c, extents)
    conn = master.hosts.connect(master.config.host(c["storage_host"]))
    for p in paths:
        if p and not conn.call("stat_path", {"path": p}, timeout=60)["exists"]:
            raise CairnError(f"its file {p} is missing on {c['storage_host']}",
                             status_code=st.IMAGE_DAMAGED)
    return conn, paths


def describe(c):
    return f"copy {c['copy']} (disk pool {c['pool']} on {c['storage_host']})"


#: statuses a restore from one copy ends with that another copy may not: its data damaged
#: or missing, its storage host gone or not to be trusted, its pool busy with space reclaim
FALL_BACK = {st.IMAGE_DAMAGED, st.CHECKSUM_MISMATCH, st.HOST_UNREACHABLE, st.AUTH_FAILED,
             st.HOST_KEY_UNKNOWN, st.HOST_KEY_CHANGED, st.NO_PYTHON, st.AGENT_FAILED,
             st.DATA_PLANE_FAILED, st.VOLUME_UNAVAILABLE, st.POOL_BUSY}
