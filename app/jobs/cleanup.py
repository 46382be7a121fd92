"""Pool files no catalog image owns ("orphans"): an image file or partial file of a backup
whose process was killed before the catalog recorded it (before commits became recoverable,
see app/jobs/commit.py), or one left by a partial backup that never came back. Nothing reads
them; they only hold space (and in a deduplication pool, their chunks).

A pool file belongs to an image by its name (app/formats/poolfiles.py). It is an orphan when
neither a catalog image nor an unfinished commit has that image id, and it is older than the
oldest running backup (plus a margin): a running backup's files are younger than the job.

`unknown_files` compares any pool's file list with the catalog (verify of both pool types
reports its result); the cleanup job (`cairn disk-pool cleanup POOL [--dry-run]`) removes the
orphans; space reclaim of a deduplication pool does not keep their chunks."""

import json
import os
import posixpath
import stat
import time

from app import status as st
from app import timeutil
from app.errors import ValidationError
from app.formats.poolfiles import parse_name
from app.jobs.context import JobContext
from app.jobs.storage import pool_type
from app.jobs.store import ACTIVE
from app.jobs.result import JobResult

# Files younger than this beyond the oldest running backup are left alone: it covers the time
# between looking at the catalog and the storage server looking at its files.
MARGIN_S = 120.0
LOG_FILES = 50


def known_images(db):
    """The image ids that own pool files: the catalog's images, unfinished commits, and the
    partial files of copies being made (a lifecycle's duplications name theirs apart)."""
    known = {r[0] for r in db.all("SELECT id FROM images UNION SELECT image_id FROM "
                                  "image_commits")}
    for (partial,) in db.all("SELECT partial FROM copy_commits"):
        parsed = parse_name(posixpath.basename(partial))
        if parsed:
            known.add(parsed[0])
    return known


def min_age_s(db, now=None):
    """A pool file younger than this (in seconds, measured by the storage server) may belong
    to a backup or a duplication that runs now."""
    now = time.time() if now is None else now
    row = db.one("SELECT min(started) FROM jobs WHERE state=? AND type IN ('backup', "
                 "'duplicate')", (ACTIVE,))
    oldest = timeutil.parse_iso(row[0]) if row and row[0] else now
    return max(0.0, now - oldest) + MARGIN_S


def remove_stale_index_temps(master, now=None):
    """The catalog index files a master killed mid-write left (indexes/ID.cidx.tmp), removed
    once they are older than every running job (plus the margin): a running job's index
    file is younger than the job. Returns the names removed."""
    now = time.time() if now is None else now
    row = master.db.one("SELECT min(started) FROM jobs WHERE state=?", (ACTIVE,))
    oldest = min(now, timeutil.parse_iso(row[0])) if row and row[0] else now
    try:
        names = os.listdir(master.home.indexes)
    except FileNotFoundError:
        return []
    removed = []
    for name in sorted(names):
        if not name.endswith(".cidx.tmp"):
            continue
        path = os.path.join(master.home.indexes, name)
        try:
            s = os.lstat(path)
            if stat.S_ISREG(s.st_mode) and s.st_mtime < oldest - MARGIN_S:
                os.unlink(path)
                removed.append(name)
        except FileNotFoundError:
            continue
    return removed


def unknown_files(db, files, known=None, min_age=None):
    """Of a pool's file list (app/agent/poolfiles.list_files), the files no catalog image
    owns: [{"path", "image", "partial", "size", "age_s", "orphan", "why"}]. orphan: old
    enough to be removed by a cleanup; why: in words."""
    known = known_images(db) if known is None else known
    min_age = min_age_s(db) if min_age is None else min_age
    out = []
    for f in files:
        if f["image"] in known:
            continue
        if f["image"] is None:
            orphan, why = False, "not a file name Cairn makes; left alone"
        elif f["age_s"] <= min_age:
            orphan, why = False, "may belong to a backup running now"
        else:
            orphan = True
            why = (f"the partial file of image {f['image']}, which never completed"
                   if f["partial"] else
                   f"image {f['image']} is not in the catalog (a backup stopped before "
                   "recording it)")
        out.append(dict(f, orphan=orphan, why=why))
    return out


def pool_location(master, pool_name):
    """(pool, storage host, volumes, storage type) of a disk pool of any type."""
    pool, _server, host, storage_type = pool_type(master, pool_name)
    return pool, host, pool["volumes"], storage_type


def pool_unknown_files(master, host, volumes, storage_type):
    """unknown_files of a disk pool (where pool_location found it), listed by its storage
    server's agent now."""
    image_dir = storage_type.image_dir
    known, min_age = known_images(master.db), min_age_s(master.db)
    listing = master.hosts.connect(host).call(
        "pool_files", {"volumes": volumes, "image_dir": image_dir}, timeout=600)
    return unknown_files(master.db, listing["files"], known, min_age), listing["errors"]


def log_unknown(ctx, unknown, pool_name):
    """Names a pool's unknown files in a job's log (verify, cleanup)."""
    orphans = [f for f in unknown if f["orphan"]]
    for f in unknown[:LOG_FILES]:
        ctx.log(f"{f['path']} ({f['size']} bytes): {f['why']}", "warning")
    if len(unknown) > LOG_FILES:
        ctx.log(f"... and {len(unknown) - LOG_FILES} more (see the job's result)", "warning")
    if orphans:
        ctx.log(f"{len(orphans)} file(s) of disk pool {pool_name} belong to no catalog image "
                f"({sum(f['size'] for f in orphans)} bytes): `cairn disk-pool cleanup "
                f"{pool_name}` removes them", "warning")


def make_job(master, pool_name, dry_run=False):
    pool_location(master, pool_name)  # an unknown pool is refused now
    for r in master.db.all("SELECT id, params FROM jobs WHERE type='cleanup' AND "
                           "state!='done'"):
        if json.loads(r["params"] or "{}").get("pool") == pool_name:
            raise ValidationError(f"a cleanup of disk pool {pool_name!r} is queued or running "
                                  f"already (job {r['id']})")
    return master.jobs.create(
        "cleanup", params={"pool": pool_name, "dry_run": bool(dry_run)},
        note=f"cleanup job queued for disk pool {pool_name}"
             + (" (dry run: nothing is removed)" if dry_run else ""))


class CleanupJob:
    """A cleanup job (app/jobs/kinds.py): prepare() finds the disk pool, its storage host,
    volumes and storage type; run() has the host list the pool's files and removes the
    orphans (or, in a dry run, names them)."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"], work="cleaning")
        self.name = self.dry_run = None
        self.host = self.volumes = self.storage_type = None

    def prepare(self):
        params = self.job["params"]
        self.name, self.dry_run = params["pool"], params.get("dry_run", False)
        _pool, self.host, self.volumes, self.storage_type = pool_location(self.master,
                                                                          self.name)

    def run(self):
        master, ctx, name, dry_run = self.master, self.ctx, self.name, self.dry_run
        ctx.log(f"cleanup of disk pool {name} on {self.host['name']}: files no catalog image "
                "owns, older than every running backup" + (" (dry run: nothing is removed)"
                                                           if dry_run else ""))
        ctx.flush()
        min_age = min_age_s(master.db)
        unknown, errors = pool_unknown_files(master, self.host, self.volumes, self.storage_type)
        for e in errors:
            ctx.log(f"could not be listed: {e}", "warning")
        orphans = [f for f in unknown if f["orphan"]]
        for f in unknown:
            if not f["orphan"]:
                ctx.log(f"left {f['path']}: {f['why']}")
            elif dry_run:
                ctx.log(f"would remove {f['path']} ({f['size']} bytes): {f['why']}")
        removed, skipped = [], []
        if orphans and not dry_run:
            removed, skipped = self._remove(orphans, min_age)
        freed = sum(f["size"] for f in orphans if f["path"] in set(removed))
        result = {"pool": name, "dry_run": dry_run, "unknown": unknown,
                  "orphans": [f["path"] for f in orphans], "removed": removed,
                  "skipped": skipped, "freed_bytes": freed, "errors": errors}
        master.jobs.set_result(self.job["id"], result)
        ctx.files, ctx.bytes = (len(orphans), sum(f["size"] for f in orphans)) if dry_run \
            else (len(removed), freed)
        if dry_run:
            ctx.log(f"dry run: {len(orphans)} orphan file(s) would be removed")
        else:
            note = self.storage_type.orphans_note
            ctx.log(f"{len(removed)} orphan file(s) removed, {freed} bytes"
                    + (f"; {note}" if removed and note else ""))
        ctx.flush(sample=True)
        if skipped or errors:
            why = f"{len(skipped)} file(s) left, {len(errors)} folder(s) not listed; see the log"
            return JobResult(st.PARTIAL, message=why,
                             bytes=ctx.bytes, files=ctx.files)
        return JobResult(bytes=ctx.bytes, files=ctx.files)

    def _remove(self, orphans, min_age):
        """The storage host removes the orphans (each again only when still old enough):
        (removed paths, [{"path", "why"}] left)."""
        ctx = self.ctx
        r = self.master.hosts.connect(self.host).call(
            "remove_pool_files", {"paths": [f["path"] for f in orphans],
                                  "volumes": self.volumes,
                                  "image_dir": self.storage_type.image_dir,
                                  "min_age_s": min_age},
            timeout=600)
        removed, skipped = r["removed"], r["skipped"]
        why = {f["path"]: f["why"] for f in orphans}
        for p in removed:
            ctx.log(f"removed {p}: {why.get(p, '')}")
        for x in skipped:
            ctx.log(f"left {x['path']}: {x['why']}", "warning")
        return removed, skipped
