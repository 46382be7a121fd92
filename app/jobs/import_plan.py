"""What an import (app/jobs/pool_import.py) makes of the images its storage host's agent
read: which can be believed, in which order they are recorded (an incremental after its base),
which cannot be recorded because their chain is incomplete, and each image's catalog row.

Nothing an image says is used before meta_problem (app/formats/imagemeta.py) and the storage
type's own check have passed it: ids and names that would lead out of the master's folders, or
values of the wrong kind, refuse the image. An incremental whose base image is neither in the
catalog nor among the pool's readable images is listed as incomplete, never guessed; so is
every image after it in its chain."""

import json
import time

from app import timeutil
from app.errors import ValidationError
from app.formats import imagemeta, owners

OK = "ok"


def _when(text):
    """A time an image records, as the catalog writes times; ValueError when it is none."""
    try:
        return timeutil.iso(timeutil.parse_iso(text))
    except (ValidationError, OverflowError, OSError, ValueError):
        raise ValueError(f"{text!r:.60} is not a time") from None


def problem_of(side, d):
    """Why the agent's description `d` of an image cannot be used, or None."""
    if d.get("problem"):
        return d["problem"]
    meta = d.get("meta")
    why = imagemeta.meta_problem(meta, file_id=d["id"], client_dir=d["client"])
    if why:
        return why
    why = side.problem(d)
    if why:
        return why
    try:
        _when(meta["created"])
        if meta.get("expires"):
            _when(meta["expires"])
    except ValueError as e:
        return f"its metadata has an invalid time: {e}"
    if d.get("summary") is not None:
        why = imagemeta.summary_problem(d["summary"])
        if why:
            d["summary_problem"], d["summary"] = why, None
    return None


class Plan:
    """The images of one import: `order` (ids, bases first), `descriptions` {id: d},
    `errors` [{"image", "path", "error"}] and `incomplete` [{"image", "path", "base",
    "why"}]. known(id) says whether the catalog has an image; pending: the ids of images
    whose commit is in progress."""

    def __init__(self, side, found, known, pending=()):
        self._pending = set(pending)
        self.descriptions = {}
        self.errors = []
        self.incomplete = []
        self.order = []
        self._known = known
        for d in found:
            why = problem_of(side, d)
            if why:
                self.errors.append({"image": d["id"], "path": d["path"], "error": why})
            else:
                self.descriptions[d["id"]] = d
        self._bad = {e["image"]: e["error"] for e in self.errors}
        self._state = {}
        for iid in sorted(self.descriptions, key=self._created):
            self._resolve(iid)

    def _created(self, iid):
        return (self.descriptions[iid]["meta"]["created"], iid)

    def base_of(self, iid):
        return self.descriptions[iid]["meta"].get("base_image")

    def _resolve(self, iid):
        """Follows the chain of `iid` down to an image whose state is known (a full, a base
        in the catalog, an image resolved before) and decides every image on the way."""
        path, seen = [], set()
        cur = iid
        while cur not in self._state:
            path.append(cur)
            seen.add(cur)
            base = self.base_of(cur)
            if base is None or self._known(base):
                verdict = OK
                break
            if base in seen:
                verdict = f"its chain of base images turns in a circle at image {base}"
                break
            if base in self.descriptions:
                cur = base
                continue
            if base in self._bad:
                verdict = f"its base image {base} cannot be read: {self._bad[base]}"
            elif base in self._pending:
                verdict = (f"the commit of its base image {base} is in progress or "
                           "unresolved: import again once it is resolved")
            else:
                verdict = (f"its base image {base} is neither in the catalog nor on the pool "
                           "(it was removed or expired)")
            break
        else:
            verdict = self._state[cur]
            if verdict != OK:
                verdict = f"its base image {self.base_of(path[-1])} cannot be recorded"
        for k, iid_on in enumerate(reversed(path)):
            if verdict == OK:
                self._state[iid_on] = OK
                self.order.append(iid_on)
                continue
            if k:
                verdict = f"its base image {self.base_of(iid_on)} cannot be recorded"
            self._state[iid_on] = verdict
            d = self.descriptions[iid_on]
            self.incomplete.append({"image": iid_on, "path": d["path"],
                                    "base": self.base_of(iid_on), "why": verdict})


class Names:
    """Which configuration the catalog has, looked up once per name: an image that names a
    host, policy, schedule or storage unit the catalog lacks is recorded with the names it
    carries, and the import says so."""

    def __init__(self, db, pool):
        self.db = db
        self.pool = pool
        self.missing = {"hosts": set(), "policies": set(), "schedules": set(),
                        "storage_units": set()}
        self._cache = {}

    def _one(self, sql, args):
        key = (sql, args)
        if key not in self._cache:
            self._cache[key] = self.db.one(sql, args)
        return self._cache[key]

    def schedule(self, policy, name):
        return self._one("SELECT s.* FROM schedules s JOIN policies p ON p.id=s.policy_id "
                         "WHERE p.name=? AND s.name=?", (policy, name))

    def notes(self, meta):
        """[note] on what of the image's names the catalog lacks."""
        out = []
        if not self._one("SELECT 1 FROM hosts WHERE name=?", (meta["client"],)):
            self.missing["hosts"].add(meta["client"])
            out.append(f"its client {meta['client']} is not a configured host: restore it "
                       "with --to-host, or add the host")
        if not self._one("SELECT 1 FROM policies WHERE name=?", (meta["policy"],)):
            self.missing["policies"].add(meta["policy"])
            out.append(f"its policy {meta['policy']} is not configured")
        elif not self.schedule(meta["policy"], meta["schedule"]):
            self.missing["schedules"].add(f"{meta['policy']}/{meta['schedule']}")
            out.append(f"its schedule {meta['schedule']} is not a schedule of policy "
                       f"{meta['policy']}")
        stu = meta.get("storage_unit")
        if stu and not self._one("SELECT 1 FROM storage_units WHERE name=?", (stu,)):
            self.missing["storage_units"].add(stu)
            out.append(f"its storage unit {stu} is not configured")
        return out

    def pool_unit(self):
        """A storage unit of the pool, for images that do not name theirs."""
        row = self._one("SELECT u.name FROM storage_units u JOIN disk_pools d ON "
                        "d.id=u.pool_id WHERE d.name=? ORDER BY u.name LIMIT 1",
                        (self.pool["name"],))
        return row[0] if row else ""

    def missing_lists(self):
        return {k: sorted(v) for k, v in self.missing.items()}


def _expiry(names, meta, created, lacks, notes):
    """When the image expires: as it records (format 2), else by its schedule's retention as
    the catalog has it now, else never (until expired by hand)."""
    if meta["format_version"] >= 2:
        return _when(meta["expires"]) if meta.get("expires") else None
    sched = names.schedule(meta["policy"], meta["schedule"])
    lacks.append("its retention")
    if sched is None:
        notes.append("it does not record its retention, and its schedule is not configured: "
                     "it does not expire until expired by hand")
        return None
    if not sched["retention_s"]:
        return None
    notes.append(f"its expiry comes from the retention of schedule {meta['schedule']} as "
                 "configured now")
    return timeutil.iso(timeutil.parse_iso(created) + sched["retention_s"])


def record_fields(*, job_id, side, names, d, counts, host, sources, notes=()):
    """(the image's catalog row for record_image, its notes, the notes on names the catalog
    lacks). counts: what the rows of its own index gave (files and bytes, for an image
    without a summary); notes: the caller's notes on the image, kept with the others."""
    meta, summary = d["meta"], d.get("summary")
    version = meta["format_version"]
    lacks = ["its storage unit", "its stream and set"] if version < 2 else []
    unknown = names.notes(meta)
    notes = list(notes)
    created = _when(meta["created"])
    expires = _expiry(names, meta, created, lacks, notes)
    if summary is None:
        lacks.append("the backup's summary (files, bytes and warnings are counted from its "
                     "own index)")
        if d.get("summary_problem"):
            notes.append(d["summary_problem"])
    lacks += side.lacks(d)
    if meta.get("pool") and meta["pool"] != names.pool["name"]:
        notes.append(f"it was written to disk pool {meta['pool']}")
    summary = summary or {}
    set_id = (meta.get("set") or {}).get("id")
    imported = {"job": job_id, "at": timeutil.iso(time.time()), "format_version": version,
                "job_id": meta.get("job_id"), "lacks": lacks, "notes": unknown + notes,
                **({"set": set_id} if set_id else {})}
    fields = dict(
        id=d["id"], client=meta["client"], policy=meta["policy"], schedule=meta["schedule"],
        schedule_type=meta["schedule_type"], created=created, expires=expires,
        bytes=summary.get("bytes", counts["bytes"]), files=summary.get("files", counts["files"]),
        storage_unit=meta.get("storage_unit") or names.pool_unit(), pool=names.pool["name"],
        storage_host=host["name"], path=d["path"], job_id=job_id,
        selections=meta["selections"], warnings=summary.get("warnings") or 0,
        checksum=meta["checksum"], base_image=meta.get("base_image"), sources=sources,
        stream=meta.get("stream"),
        snapshot=json.dumps(summary["snapshots"]) if summary.get("snapshots") else None,
        scan=json.dumps(summary["scan"]) if summary.get("scan") else None,
        owners=owners.to_column(summary.get("owners")),
        imported=json.dumps(imported), **side.catalog_fields(d))
    return fields, notes, unknown
