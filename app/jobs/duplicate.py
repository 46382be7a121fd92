"""A duplicate job: a copy of an image in the pool of a lifecycle's duplicate step (queued after
each backup, app/jobs/duplicate_queue.py), recorded as a further copy of the image with its
own retention (app/jobs/copies.py).

The copy goes agent to agent on the data plane, from the storage host of a copy the image
has (its primary, else the next that can be read) to the target pool's storage host, or
within one agent when both pools are on one host (app/agent/duplicate.py). The source type
reads the image, the target type writes it as it takes a backup (its BackupSide for a copy,
StorageType.duplicate_side), so any type copies to any other; between two pools that keep
chunks only the chunks the target lacks travel, and the job says how much was sent.

An incremental's copy needs its sources' copies in the same pool (a restore reads one
storage server): the images the image reads data from that lack a copy there are copied
first, oldest first, each recorded as a copy of its own. The copy is written under a partial
name and committed last (app/jobs/duplicate_commit.py)."""

import time

from app import status as st
from app import timeutil
from app.errors import CairnError, Canceled
from app.jobs import copies, duplicate_commit, holds
from app.jobs.context import COMMITTING, JobContext, results, start_listening_side
from app.jobs.duplicate_queue import JOB_TYPE  # noqa: F401 - the kind's name, for kinds.py
from app.jobs.result import JobResult
from app.jobs.storage import image_storage
from plugins.storage import registry


def _mib(n):
    return f"{n / (1 << 20):.1f} MiB"


def chain(db, image):
    """The images a copy of `image` needs in a pool, oldest first, the image last: the
    images it reads data from (its sources), then itself."""
    ids = list(dict.fromkeys(image["sources"]))
    rows = [dict(r) for r in db.all(
        f"SELECT id, created FROM images WHERE id IN ({','.join('?' * len(ids))})", ids)] \
        if ids else []
    rows.sort(key=lambda r: (r["created"], r["id"]))
    return [r["id"] for r in rows] + [image["id"]]


class DuplicateJob:
    """A duplicate job (app/jobs/kinds.py): prepare() finds the image and the target storage
    unit, its pool, storage server and type; run() copies what the pool lacks of the image's
    chain and records each copy."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"])
        self.p = job["params"]
        self.image = self.stu = self.pool = self.server = self.storage_type = None
        self.host = None
        self.calls = []
        self.done = []  # what each copied image sent: dicts for the job's result

    def prepare(self):
        cfg, p = self.master.config, self.p
        self.stu = cfg.storage_unit(self.job["storage_unit"])
        self.pool = cfg.disk_pool(self.stu["pool"])
        self.server = cfg.storage_server(self.pool["server"])
        self.storage_type = registry.of_server(self.server)
        self.host = cfg.host(self.server["host"])
        if self.master.db.one("SELECT 1 FROM images WHERE id=?", (p["image"],)):
            self.image = self.master.image(p["image"])

    def run(self):
        ctx, p = self.ctx, self.p
        if self.image is None:
            return JobResult(message=f"image {p['image']} is no longer in the catalog (it "
                                     "expired); nothing to copy")
        ctx.log(f"copy {p['copy']} of image {self.image['id']} to storage unit "
                f"{self.stu['name']} (disk pool {self.pool['name']} on {self.host['name']}; "
                f"lifecycle {p.get('lifecycle')}, kept "
                f"{timeutil.format_duration(p.get('retention_s'))})")
        todo = [i for i in chain(self.master.db, self.image)
                if copies.copy_on_pool(self.master.db, i, self.pool["name"]) is None]
        if not todo:
            have = copies.copy_on_pool(self.master.db, self.image["id"], self.pool["name"])
            return JobResult(message=f"image {self.image['id']} has copy {have['copy']} in disk "
                                     f"pool {self.pool['name']} already")
        self._hold(todo)
        try:
            if todo[:-1]:
                ctx.log(f"the images it reads data from are copied first, oldest first: "
                        f"{', '.join(todo[:-1])}")
            ctx.flush()
            for iid in todo:
                ctx.raise_if_cancelled()
                self._copy(self.master.image(iid))
        finally:
            holds.release(self.master.db, self.job["id"])
        return self._report()

    def _hold(self, ids):
        """Holds the images for the job, so that no expiry removes a copy it reads."""
        with self.master.db.tx() as c:
            for iid in ids:
                row = c.execute("SELECT expiring FROM images WHERE id=?", (iid,)).fetchone()
                if row is None or row[0] is not None:
                    raise CairnError(f"image {iid} is being expired; it is not copied",
                                     status_code=st.INVALID_REQUEST)
            holds.hold(self.master.db, self.job["id"],
                       {i: "it copies it to another pool" for i in ids})

    def _source(self, image):
        """(copy, its storage host's agent) of the first copy of the image, outside the
        target pool, that can be read now; the job log says why others could not."""
        why = []
        for c in copies.copies(self.master.db, image["id"]):
            if c["pool"] == self.pool["name"] or not c["path"]:
                continue
            try:
                conn = self.master.hosts.connect(self.master.config.host(c["storage_host"]))
                if conn.call("stat_path", {"path": c["path"]}, timeout=60)["exists"]:
                    return c, conn
                why.append(f"copy {c['copy']}: its file {c['path']} is missing")
            except CairnError as e:
                why.append(f"copy {c['copy']}: {e.message}")
            self.ctx.log(f"image {image['id']}: {why[-1]}; trying its next copy", "warning")
        raise CairnError(f"image {image['id']} has no copy that can be read: "
                         + ("; ".join(why) or "no copy outside the target pool"),
                         status_code=st.IMAGE_DAMAGED)

    def _copy(self, image):
        """One image's copy into the target pool, committed and recorded."""
        ctx, master = self.ctx, self.master
        if copies.copy_on_pool(master.db, image["id"], self.pool["name"]) is not None:
            return
        if not image["path"]:
            return self._copy_set(image)
        source, conn = self._source(image)
        target = master.hosts.connect(self.host)
        vols = target.call("check_volumes", {"paths": self.pool["volumes"]},
                           timeout=120)["volumes"]
        counts = {v: len([1 for p in copies.known_in_pool(master.db, self.pool["name"])
                          if p.startswith(v.rstrip("/") + "/")]) for v in self.pool["volumes"]}
        volume, reason = self.storage_type.choose_volume(vols, self.pool["high_water"], counts)
        if volume is None:
            code = st.POOL_FULL if "high-water" in reason else st.VOLUME_UNAVAILABLE
            raise CairnError(f"no volume of disk pool {self.pool['name']} can take the copy: "
                             f"{reason}", status_code=code)
        final = self.storage_type.image_paths(volume, image["client"], image["id"])[1]
        partial = self.storage_type.image_paths(
            volume, image["client"], f"{image['id']}.dup{self.job['id']}")[0]
        side = self.storage_type.duplicate_side(server=self.server, pool=self.pool,
                                                home=master.home, volume=volume,
                                                image_id=image["id"], source=source)
        record = self._record(image)
        duplicate_commit.begin(master, job_id=self.job["id"], image_id=image["id"],
                               storage_host=self.host["name"], pool=self.pool["name"],
                               partial=partial, final=final, record=record)
        ctx.log(f"image {image['id']}: from copy {source['copy']} (disk pool {source['pool']} "
                f"on {source['storage_host']}); " + side.placed_text())
        ctx.flush()
        try:
            summary, received = self._transfer(image, source, conn, target, side, partial)
            stats = side.outcome(summary, received)
            extra = side.stored_bytes(stats)
            record.update(side.catalog_fields(stats), extra_bytes=extra)
            duplicate_commit.set_phase(master, self.job["id"], image["id"], "committing",
                                       record)
            self.ctx.set_phase(COMMITTING)
            committed = target.call("commit_image", {"partial": partial, "final": final,
                                                     "storage": side.commit_spec()},
                                    timeout=side.commit_timeout)
            record.pop("extra_bytes")
            number = duplicate_commit.record_copy(master, self.job["id"], image["id"],
                                                  record, committed["path"],
                                                  committed["bytes"] + extra)
        except BaseException:
            self._undo(image)
            raise
        self._log_copy(image, number, summary, stats, side)

    def _record(self, image):
        """The copy's catalog row, but for its path and size (known once committed)."""
        retention = self.p.get("retention_s")
        created = timeutil.parse_iso(image["created"])
        return {"copy": self.p["copy"], "storage_unit": self.stu["name"],
                "pool": self.pool["name"], "storage_host": self.host["name"],
                "created": timeutil.iso(time.time()),
                "expires": timeutil.iso(created + retention) if retention else None,
                "job_id": self.job["id"], "state": "ok", "dedup": None, "compression": None}

    def _transfer(self, image, source, conn, target, side, partial):
        """Streams (or sends the chunks of) one image: (the sending side's summary, the
        receiving side's result)."""
        ctx, master = self.ctx, self.master
        spec = image_storage(master, dict(image, pool=source["pool"]))
        self.calls = []
        if source["storage_host"] == self.host["name"]:
            ctx.log("source and target pools are on the same host: copied there, no network")
            self.calls.append(conn.start("copy_image", {
                "image_path": source["path"], "storage": spec, "partial": partial,
                "target": side.storage_spec(), "image_id": image["id"]},
                on_event=ctx.on_event))
        else:
            src_host = master.config.host(source["storage_host"])
            addr = master.hosts.data_address(self.host, src_host)
            recv, port, cert, token = start_listening_side(
                ctx, target, "receive_image", {"path": partial, "storage": side.storage_spec()},
                self.job["id"], address=addr)
            self.calls.append(recv)
            ctx.log(f"data plane: {src_host['name']} -> {self.host['name']} ({addr}:{port}, "
                    "TLS, per-job key)")
            self.calls.insert(0, conn.start("send_image", {
                "image_path": source["path"], "storage": spec, "sink": side.client_spec(),
                "host": addr, "port": port, "cert": cert, "token": token},
                on_event=ctx.on_event))
        ctx.supervise(self.calls)
        out = results(self.calls)
        if ctx.cancelled:
            raise Canceled()
        summary = out[0]
        received = out[1] if len(out) > 1 else summary["received"]
        if received.get("bytes") != summary["bytes"]:
            raise CairnError(f"the copy of image {image['id']} holds {received.get('bytes')} "
                             f"bytes of its {summary['bytes']}; it was not committed",
                             status_code=st.STORAGE_WRITE_FAILED)
        return summary, received

    def _undo(self, image):
        for c in self.calls:
            c.cancel()
        for c in self.calls:
            c.wait_done(30)
        row = self.master.db.one("SELECT * FROM copy_commits WHERE job_id=? AND image_id=?",
                                 (self.job["id"], image["id"]))
        if row is not None:
            try:
                # A fresh connection: the agent that was writing may be the one that died.
                duplicate_commit.undo(self.master, self.master.hosts.connect(self.host),
                                      dict(row))
            except Exception:  # noqa: BLE001 - the record stays; recover() resolves it
                pass
        self.ctx.flush()

    def _copy_set(self, image):
        """A multi-stream set has no file: its copy is there once its stream images have
        copies in the pool (copied before it, as its sources)."""
        missing = [s for s in image["sources"]
                   if copies.copy_on_pool(self.master.db, s, self.pool["name"]) is None]
        if missing:
            raise CairnError(f"set image {image['id']}: its stream image(s) "
                             f"{', '.join(missing)} have no copy in disk pool "
                             f"{self.pool['name']}", status_code=st.IMAGE_DAMAGED)
        record = self._record(image)
        with self.master.db.tx() as c:
            number = copies.free_number(c, image["id"], record.pop("copy"))
            copies.insert(c, image["id"], number, **dict(record, path="", image_bytes=0))
        self.ctx.log(f"copy {number} of set image {image['id']} recorded: its "
                     f"{len(image['sources'])} stream images have copies in disk pool "
                     f"{self.pool['name']}")

    def _log_copy(self, image, number, summary, stats, side):
        sent, size = summary.get("sent_bytes", 0), summary["bytes"]
        # on one host nothing crosses a network: what the target took is copied, not sent
        verb = "copied" if "received" in summary else "sent"
        how = (f"{summary['sent_chunks']} of {summary['chunks']} chunks were {verb} (the "
               f"target pool held the others)" if summary.get("mode") == "chunks" else
               f"the image's stream was {verb} whole")
        self.ctx.log(f"copy {number} of image {image['id']} committed in disk pool "
                     f"{self.pool['name']}: {_mib(size)} of image, {_mib(sent)} {verb} "
                     f"({100.0 * sent / size if size else 0:.2f}%); {how}")
        for text in side.result_texts(stats):
            self.ctx.log(text)
        rate = side.rate(stats)
        if rate is not None:
            self.master.jobs.set_dedup_ratio(self.job["id"], rate)
        self.done.append({"image": image["id"], "copy": number, "image_bytes": size,
                          "sent_bytes": sent, "mode": summary.get("mode")})

    def _report(self):
        size = sum(d["image_bytes"] for d in self.done)
        sent = sum(d["sent_bytes"] for d in self.done)
        self.master.jobs.set_result(self.job["id"], {"copies": self.done, "image_bytes": size,
                                                     "sent_bytes": sent})
        self.ctx.bytes, self.ctx.files = size, len(self.done)
        self.ctx.flush(sample=True)
        return JobResult(bytes=size, files=len(self.done),
                         message=f"{len(self.done)} cop{'y' if len(self.done) == 1 else 'ies'} "
                                 f"made; {_mib(sent)} sent for {_mib(size)} of image")
