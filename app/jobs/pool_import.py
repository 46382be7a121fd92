"""Importing a pool's images: `cairn disk-pool import POOL [--key-file F]`, a job like verify.
It records every committed image on the pool that the catalog does not know, from what the
image says about itself (docs/image-format.md), for a master that lost its catalog or whose
catalog backup is older than the pool's newest images.

The storage host's agent lists the pool's images and reads of each its metadata member, its
summary and where its trailing index lies (app/agent/pool_import.py; file data is never read);
the storage type's ImportSide (plugins/storage/base.py) says how (an encrypted pool's key) and
what it adds to the catalog row. The master then (app/jobs/import_plan.py) refuses what cannot
be believed, orders the images so that a base comes before its incrementals, and lists as
incomplete those whose chain lacks an image. Image by image, the agent sends the rows of its
trailing index; the master writes the image's catalog index from them exactly as a backup does
(an incremental's unchanged entries completed from its base image's index), then records the
image. The stream images of a multi-stream backup get their set image again.

An image the catalog has, or whose commit is in progress (app/jobs/commit.py), is left alone,
so a second import records nothing. Partial files are never read. An image that names a host,
policy or schedule the catalog lacks is recorded with its names, and the result says so."""

import json
import time
import os

from app import status as st
from app import timeutil
from app.catalog_index import IndexCorrupt, IndexReader, IndexWriter, check_index, \
    rebuild_command
from app.errors import CairnError, Canceled, ValidationError
from app.formats import entry as E
from app.jobs.backup import record_image
from app.jobs.backup_set import record_set, write_set_index
from app.jobs import copies
from app.jobs.context import JobContext, results
from app.jobs.import_plan import Names, Plan, record_fields
from app.jobs.incremental import Completer
from app.jobs.result import JobResult
from app.jobs.storage import pool_type

JOB_TYPE = "import"
# Lines per kind (imported, incomplete, refused) the job log names; the result has them all.
LOG_LINES = 200
# Image errors that end the import of that image only; any other error ends the job.
IMAGE_ERRORS = (st.IMAGE_DAMAGED, st.CHECKSUM_MISMATCH, st.INVALID_REQUEST)


def _side(master, pool_name, key_file):
    pool, server, host, storage_type = pool_type(master, pool_name)
    side = storage_type.import_images(server=server, pool=pool, home=master.home,
                                      key_file=key_file)
    return pool, host, side


def make_job(master, pool_name, key_file=None):
    """Queues an import of a disk pool. key_file: a file holding an encrypted pool's key
    that the master does not have (read when the job runs; the key is kept by the master once
    it opened the pool)."""
    key_file = os.path.abspath(key_file) if key_file else None
    _side(master, pool_name, key_file)  # an unknown pool or an unusable key file: refused now
    for r in master.db.all("SELECT id, params FROM jobs WHERE type=? AND state!='done'",
                           (JOB_TYPE,)):
        if json.loads(r["params"] or "{}").get("pool") == pool_name:
            raise ValidationError(f"an import of disk pool {pool_name!r} is queued or running "
                                  f"already (job {r['id']})",
                                  hint=f"follow it with `cairn jobs show {r['id']}`")
    return master.jobs.create(JOB_TYPE, params={"pool": pool_name, "key_file": key_file},
                              note=f"import job queued for disk pool {pool_name}")


class _Refused(Exception):
    """One image that cannot be recorded, and why."""


def _in_catalog(db, image_id):
    return db.one("SELECT 1 FROM images WHERE id=? UNION ALL "
                  "SELECT 1 FROM image_commits WHERE image_id=?", (image_id, image_id))


class _Rows:
    """The rows the agent sends, into the new index: an incremental's unchanged entries
    completed from its base image's index; a full's rows that name no member of its own are
    left out (they are counted)."""

    def __init__(self, writer, completer):
        self.writer = writer
        self.completer = completer
        self.error = None
        self.orphans = 0

    def add(self, rows):
        if self.error is not None:
            return
        try:
            if self.completer is None:
                keep = [r for r in rows if len(r) != E.SHORT_ROW and r[E.OFFSET] != -1]
                self.orphans += len(rows) - len(keep)
                rows = keep
            else:
                self.completer.complete(rows)
            self.writer.add_rows(rows)
        except (IndexCorrupt, ValueError) as e:
            self.error = e


class ImportJob:
    """An import job (app/jobs/kinds.py): prepare() finds the pool, its storage host and the
    storage type's ImportSide (and with it the key file's key); run() imports."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"], work="importing")
        self.pool = self.host = self.side = self.conn = self.names = None
        self.out = None
        self.failed = set()     # images not recorded: their incrementals are not either

    def prepare(self):
        p = self.job["params"]
        self.pool, self.host, self.side = _side(self.master, p["pool"], p.get("key_file"))

    def run(self):
        master, ctx, pool = self.master, self.ctx, self.pool
        ctx.log(f"import of disk pool {pool['name']} on {self.host['name']}: every image the "
                "catalog does not know is read (its metadata and its own index, no file data) "
                "and recorded")
        ctx.log(self.side.reading_text())
        ctx.flush()
        self.conn = master.hosts.connect(self.host)
        self.names = Names(master.db, pool)
        found, listing = self._list()
        self.out = {"pool": pool["name"], "read": len(found), "imported": [], "sets": [],
                    "already_known": 0, "copies": [], "commits_pending": [], "incomplete": [],
                    "errors": [], "skipped": listing["skipped"], "notes": [],
                    "missing": {}, "listing_errors": listing["errors"], "key": None}
        self._known(listing["known"])
        known_ids = {r[0] for r in master.db.all("SELECT id FROM images")}
        plan = Plan(self.side, found, known_ids.__contains__,
                    pending=[k["id"] for k in self.out["commits_pending"]])
        self.out["errors"] += plan.errors
        self.out["incomplete"] += plan.incomplete
        self.failed.update(e["image"] for e in plan.errors + plan.incomplete)
        ctx.total_files = len(plan.order)
        for iid in plan.order:
            ctx.raise_if_cancelled()
            self._one(plan, plan.descriptions[iid])
        self._sets(plan)
        if self.out["imported"]:
            self.out["key"] = self.side.keep_key(master.home)
        self.out["missing"] = self.names.missing_lists()
        master.jobs.set_result(self.job["id"], self.out)
        return self._report()

    # ---- reading the pool ----------------------------------------------------------------

    def _list(self):
        """The agent's descriptions of the pool's images the catalog does not know, and its
        listing's result."""
        ctx, master = self.ctx, self.master
        skip = sorted(r[0] for r in master.db.all(
            "SELECT id FROM images UNION SELECT image_id FROM image_commits"))
        found = []

        def on_event(event, data):
            if event == "images":
                found.extend(data["images"])
            elif event == "totals":
                ctx.total_files = data.get("files")
            elif event == "progress":
                ctx.files = data.get("files", ctx.files)
            else:
                ctx.on_event(event, data)

        call = self.conn.start("pool_images", {
            "storage": self.side.storage_spec(), "volumes": self.pool["volumes"],
            "image_dir": self.side.type.image_dir, "skip": skip}, on_event=on_event)
        ctx.supervise([call])
        try:
            listing = results([call])[0]
        except CairnError as e:
            if e.status == st.CANCELED:
                raise
            raise CairnError(f"the images of disk pool {self.pool['name']} cannot be read: "
                             f"{e.message}", status_code=e.status,
                             hint=(self.side.failure_hint() if e.status == st.INVALID_REQUEST
                                   else None) or e.hint) from None
        if ctx.cancelled:
            raise Canceled()
        ctx.files = 0
        ctx.log(f"{listing['count']} image(s) on the pool that the catalog does not know; "
                f"{len(listing['known'])} it has; {len(listing['skipped'])} file(s) skipped")
        for s in listing["skipped"][:LOG_LINES]:
            ctx.log(f"skipped {s['path']}: {s['why']}")
        for e in listing["errors"]:
            ctx.log(f"could not be listed: {e}", "warning")
        ctx.flush()
        return found, listing

    def _known(self, known):
        """The pool's images the catalog has, and those whose commit is in progress."""
        pending = {r[0] for r in self.master.db.all("SELECT image_id FROM image_commits")}
        for k in known:
            if k["id"] in pending:
                self.out["commits_pending"].append(k)
                self.ctx.log(f"left {k['path']}: the commit of image {k['id']} is in progress "
                             "or unresolved (the master resolves it, app/jobs/commit.py)")
            elif not self._as_copy(k):
                self.out["already_known"] += 1

    def _as_copy(self, k):
        """An image the catalog has from another pool, found here (a lifecycle's copy, made
        before the catalog was lost or rebuilt): recorded as a further copy of it, kept as
        long as the image's primary copy (its own retention is not in the pool). Returns
        whether it was."""
        db, pool = self.master.db, self.pool["name"]
        have = copies.copies(db, k["id"])
        if not have or any(c["pool"] == pool or c["path"] == k["path"] for c in have):
            return False
        row = db.one("SELECT u.name FROM storage_units u JOIN disk_pools d ON d.id=u.pool_id "
                     "WHERE d.name=? ORDER BY u.name LIMIT 1", (pool,))
        if row is None:
            self.ctx.log(f"{k['path']} is a copy of image {k['id']}, but disk pool {pool} has "
                         "no storage unit to record it under: create one and import again",
                         "warning")
            return False
        size = self.conn.call("stat_path", {"path": k["path"]}, timeout=60).get("size") or 0
        with db.tx() as c:
            number = copies.free_number(c, k["id"], 2)
            copies.insert(c, k["id"], number, storage_unit=row[0], pool=pool,
                          storage_host=self.host["name"], path=k["path"], image_bytes=size,
                          created=timeutil.iso(time.time()), expires=have[0]["expires"],
                          job_id=self.job["id"], state="ok", dedup=None)
        self.out["copies"].append({"image": k["id"], "copy": number, "path": k["path"]})
        self.ctx.log(f"{k['path']}: recorded as copy {number} of image {k['id']} (its primary "
                     f"copy is in disk pool {have[0]['pool']}), kept as long as the image")
        return True

    # ---- one image -----------------------------------------------------------------------

    def _one(self, plan, d):
        iid, ctx = d["id"], self.ctx
        base = plan.base_of(iid)
        if base in self.failed:
            self._incomplete(d, base, f"its base image {base} could not be recorded")
            return
        if _in_catalog(self.master.db, iid):
            self.out["already_known"] += 1
            ctx.log(f"image {iid} was recorded meanwhile (its backup committed it)")
            return
        try:
            fields, notes, unknown = self._index_and_record(d)
        except _Refused as e:
            self._error(d, str(e))
            return
        except CairnError as e:
            if e.status not in IMAGE_ERRORS:
                raise
            self._error(d, e.message)
            return
        self.out["imported"].append(iid)
        for n in unknown + notes:
            self.out["notes"].append({"image": iid, "note": n})
        ctx.files += 1
        ctx.bytes += fields["image_bytes"]
        if len(self.out["imported"]) <= LOG_LINES:
            ctx.log(f"image {iid} recorded ({fields['schedule_type']}, {fields['created']}, "
                    f"client {fields['client']}, policy {fields['policy']}, "
                    f"{fields['files']} files)" + (f"; {'; '.join(notes)}" if notes else ""))
        ctx.flush(sample=True)

    def _error(self, d, why):
        self.failed.add(d["id"])
        self.out["errors"].append({"image": d["id"], "path": d["path"], "error": why})
        self.ctx.log(f"image {d['id']} ({d['path']}) not recorded: {why}", "error")
        self.ctx.flush()

    def _incomplete(self, d, base, why):
        self.failed.add(d["id"])
        self.out["incomplete"].append({"image": d["id"], "path": d["path"], "base": base,
                                       "why": why})

    def _base(self, d):
        """(base image's row, its open index) of an incremental; (None, None) for a full."""
        base_id = d["meta"].get("base_image")
        if base_id is None:
            return None, None
        base = self.master.image(base_id)
        if base["pool"] != self.pool["name"]:
            raise _Refused(f"its base image {base_id} is in disk pool {base['pool']}, not in "
                           "this one")
        path = self.master.home.index_path(base_id)
        problems = check_index(path)
        if problems:
            raise _Refused(f"it is an incremental: its unchanged entries are completed from "
                           f"the index of its base image {base_id}, which is damaged "
                           f"({problems[0]}); rebuild that one (`{rebuild_command(base_id)}`), "
                           "then import again")
        return base, IndexReader(path)

    def _index_and_record(self, d):
        """Writes the image's catalog index from the rows of its own index, then records it:
        (its catalog row, its notes, its notes on names the catalog lacks)."""
        base, base_index = self._base(d)
        writer = IndexWriter(self.master.home.index_path(d["id"]))
        try:
            completer = Completer(base, base_index, 0) if base is not None else None
            rows = _Rows(writer, completer)
            found = self._rows(d, rows)
            if found["bad_lines"]:
                raise _Refused(f"{found['bad_lines']} line(s) of its own index "
                               "(.cairn/index.jsonl) are not rows a backup writes: "
                               + "; ".join(found["problems"][:5]))
            if rows.error is not None:
                raise _Refused(f"the rows of its own index cannot be indexed: {rows.error}")
            if not found["rows"]:
                raise _Refused("its own index lists no entry")
            fields, notes, unknown = record_fields(
                job_id=self.job["id"], side=self.side, names=self.names, d=d,
                counts=found, host=self.host,
                sources=completer.sources if completer is not None else [],
                notes=[f"{rows.orphans} row(s) of its own index name no member of this full "
                       "image and were left out"] if rows.orphans else [])
            writer.close()
            writer = None
            self._record(fields)
        except BaseException:
            if writer is not None:
                writer.abort()
            else:
                self.master.remove_index(d["id"])
            raise
        finally:
            if base_index is not None:
                base_index.close()
        return fields, notes, unknown

    def _rows(self, d, rows):
        call = self.conn.start("image_rows", {
            "storage": self.side.storage_spec(), "path": d["path"], "index": d["index"],
            "data_start": d["data_start"], "data_end": d["data_end"]},
            on_event=lambda event, data: rows.add(data["rows"]) if event == "rows" else None)
        self.ctx.supervise([call])
        found = results([call])[0]
        if self.ctx.cancelled:
            raise Canceled()
        return found

    def _record(self, fields):
        with self.master.db.tx() as c:
            if c.execute("SELECT 1 FROM images WHERE id=? UNION ALL SELECT 1 FROM "
                         "image_commits WHERE image_id=?",
                         (fields["id"], fields["id"])).fetchone():
                raise _Refused("it was recorded meanwhile by its backup")
            record_image(c, **fields)

    # ---- sets of streams -----------------------------------------------------------------

    def _sets(self, plan):
        """The set image of the stream images imported, once per set the catalog lacks."""
        members = {}
        for iid in self.out["imported"]:
            s = plan.descriptions[iid]["meta"].get("set")
            if s:
                members.setdefault(s["id"], (s, []))[1].append(iid)
        for r in self.master.db.all("SELECT id, imported FROM images WHERE part_of IS NULL "
                                    "AND imported IS NOT NULL"):
            set_id = json.loads(r["imported"]).get("set")
            if set_id in members and r["id"] not in members[set_id][1]:
                members[set_id][1].append(r["id"])
        for set_id, (s, ids) in sorted(members.items()):
            if _in_catalog(self.master.db, set_id):
                continue
            self._record_set(set_id, s, ids)

    def _record_set(self, set_id, s, ids):
        master = self.master
        images = sorted((master.image(i) for i in ids), key=lambda i: (i["created"], i["id"]))
        _info, sources = write_set_index(master, set_id, images)
        first = images[0]
        imported = {"job": self.job["id"], "at": timeutil.iso(timeutil.now()),
                    "streams": s["streams"], "found": len(images)}
        try:
            record_set(master, set_id=set_id, job_id=self.job["id"], client=first["client"],
                       policy=first["policy"], schedule=first["schedule"],
                       selections=[p for p in s["selections"] if p != "NEW_STREAM"],
                       images=images, sources=sources, imported=json.dumps(imported))
        except BaseException:
            master.remove_index(set_id)
            raise
        self.out["sets"].append(set_id)
        text = (f"set image {set_id} of a multi-stream backup recorded: {len(images)} of its "
                f"{s['streams']} stream images ({', '.join(i['id'] for i in images)})")
        if len(images) < s["streams"]:
            note = (f"{s['streams'] - len(images)} of its stream images are not on the pool "
                    "(a stream whose backup failed has none)")
            self.out["notes"].append({"image": set_id, "note": note})
            text += f"; {note}"
        self.ctx.log(text)

    # ---- the end -------------------------------------------------------------------------

    def _report(self):
        ctx, out = self.ctx, self.out
        for i in out["incomplete"][:LOG_LINES]:
            ctx.log(f"image {i['image']} ({i['path']}) not recorded, its chain is "
                    f"incomplete: {i['why']}", "warning")
        missing = out["missing"]
        if missing["hosts"]:
            ctx.log(f"images name host(s) the catalog lacks: {', '.join(missing['hosts'])}: "
                    "they are recorded with these names; restore them to another host "
                    "(--to-host), or add the host(s)", "warning")
        for kind in ("policies", "schedules", "storage_units"):
            if missing[kind]:
                ctx.log(f"images name {kind.replace('_', ' ')} the catalog lacks: "
                        f"{', '.join(missing[kind])}: they are recorded with these names",
                        "warning")
        if out["key"]:
            ctx.log(out["key"], "warning")
        n = len(out["imported"])
        ctx.log(f"{n} image(s) imported" + (f", {len(out['sets'])} set image(s)"
                                            if out["sets"] else "")
                + (f", {len(out['copies'])} copy(ies) of images the catalog has"
                   if out["copies"] else "")
                + f"; {len(out['incomplete'])} with an incomplete chain and "
                  f"{len(out['errors'])} unreadable or refused, not recorded; "
                  f"{out['already_known']} already in the catalog")
        ctx.flush(sample=True)
        if out["errors"]:
            return JobResult(st.IMAGE_DAMAGED, message=(
                f"{n} image(s) imported; {len(out['errors'])} could not be read or were "
                "refused: see the job's result"), bytes=ctx.bytes, files=ctx.files)
        if out["incomplete"] or out["listing_errors"]:
            return JobResult(st.PARTIAL, message=(
                f"{n} image(s) imported; {len(out['incomplete'])} not recorded, their chain "
                "is incomplete: see the job's result"), bytes=ctx.bytes, files=ctx.files)
        return JobResult(bytes=ctx.bytes, files=ctx.files)
