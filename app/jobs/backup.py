"""A backup job: choose a volume, stream the client's selections into a partial image (on the
storage host directly, or agent to agent over the data plane), index the file rows as they
arrive, then commit the image and record it in the catalog. Until the commit nothing is
visible; any failure or cancel removes the partial image and the partial index.

What the pool's storage type does (where the image goes, what the agents are told, what the
pool reports back) comes from its BackupSide (plugins/storage/base.py): the job never asks
which type it writes to."""

import json
import posixpath
import threading
import time

from app import status as st
from app import backup_excludes, timeutil
from app.formats import imagemeta, owners
from app.catalog_index import IndexWriter, rebuild_hint
from app.errors import CairnError, Canceled, ValidationError
from app.jobs import holds, incremental
from app.jobs.commit import commit, record_image  # noqa: F401 - record_image: backup_set
from app.jobs.context import COMMITTING, SCANNING, JobContext, results, start_listening_side
from app.jobs.result import JobResult
from app.policy_edit import client_excludes
from plugins.storage import registry

# How often the log tells how the commit's uploads to a cloud pool's bucket go.
UPLOAD_LOG_EVERY = 5.0


def new_image_id(db, client, job_id):
    """Client, second and job: unique even for backups of one client that run at once
    (streams, several policies)."""
    base = f"{client}_{int(time.time())}_{job_id}"
    n, iid = 1, base
    while db.one("SELECT 1 FROM images WHERE id=?", (iid,)):
        n += 1
        iid = f"{base}.{n}"
    return iid


def set_image_id(parent):
    """The id of the set image of a multi-stream backup: chosen from its parent job alone,
    so that each stream image names its set in its metadata before the set is recorded."""
    return f"{parent['client']}_{int(timeutil.parse_iso(parent['created']))}_{parent['id']}"


def expiry_of(job, schedule, created, lifecycle=None):
    """When an image made at `created` expires (None: never): its lifecycle's backup step's
    retention when the policy has a lifecycle, else its schedule's. A retention whose end
    cannot be written as a date (a schedule saved before retentions were limited) fails the
    backup before anything is written."""
    retention = schedule["retention_s"] if schedule else None
    if lifecycle is not None:
        retention = lifecycle["steps"][0]["retention_s"]
    if not retention:
        return None
    try:
        return timeutil.iso(created + retention)
    except (OverflowError, ValueError, OSError):
        raise ValidationError(
            f"schedule {job['schedule']} of policy {job['policy']} keeps images for "
            f"{timeutil.format_duration(retention)}: their expiry date cannot be written; "
            "nothing was backed up",
            hint=f"give the schedule a retention of at most "
                 f"{timeutil.format_duration(timeutil.MAX_DURATION_S)}, or 'infinite'") \
            from None


class _Early:
    """A function run in a thread of its own beside the job's; result() waits for it and
    returns what it returned, or raises what it raised."""

    def __init__(self, fn):
        self._out = self._error = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True,
                                        name="backup-early")
        self._thread.start()

    def _run(self, fn):
        try:
            self._out = fn()
        except BaseException as e:  # noqa: BLE001 - raised again by result()
            self._error = e

    def wait(self):
        self._thread.join()

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out


def hold_base(master, job, *, client, pool, level, stream, use):
    """Chooses the image an incremental compares with (or a full's files cache: level
    "differential" picks the newest image) and holds it and its sources for the job, in one
    catalog transaction (app/jobs/holds.py). `use` says what for, e.g. "as its files cache".
    Returns (base or None, why not)."""
    with master.db.tx():
        base, why = incremental.choose_base(master.db, client=client, policy=job["policy"],
                                            pool=pool, level=level, stream=stream)
        if base is not None:
            reads = incremental.reads_of(base)
            holds.hold(master.db, job["id"], {
                i: (f"reads it {use}" if i == base["id"] else
                    f"reads it through image {base['id']}, which it uses {use}")
                for i in reads})
    return base, why


def missing_images(master, storage, image_ids):
    """Of image_ids, those not in the catalog, being expired, or whose file the storage
    server no longer has: [(image id, why)]."""
    out = []
    for iid in dict.fromkeys(image_ids):
        row = master.db.one("SELECT path, expiring FROM images WHERE id=?", (iid,))
        if row is None:
            out.append((iid, "it is no longer in the catalog"))
        elif row["expiring"] is not None:
            out.append((iid, f"expire job {row['expiring']} is removing it"))
        elif row["path"] and not storage.call("stat_path", {"path": row["path"]},
                                              timeout=60)["exists"]:
            out.append((iid, f"its file {row['path']} is missing"))
    return out


def _delete_left_snapshots(master, ctx, client_host, snapshots):
    """The client's agent deletes its snapshots itself, also when the backup fails; this is
    for an agent that was killed before it could. Deleting a deleted one is harmless."""
    try:
        r = master.hosts.connect(client_host).call(
            "delete_snapshots", {"snapshots": [[s["device"], s["name"], s.get("fileset")]
                                               for s in snapshots]}, timeout=300)
    except Exception as e:  # noqa: BLE001 - the backup's own error matters more
        ctx.log(f"the snapshots {', '.join(s['name'] for s in snapshots)} on "
                f"{client_host['name']} may be left behind: {e}", "warning")
        return
    for x in r["snapshots"]:
        if not x["deleted"] and x["error"]:
            ctx.log(f"snapshot {x['name']} on {client_host['name']} could not be deleted: "
                    f"{x['error']}", "warning")


def _mib(n):
    return f"{n / (1 << 20):.1f} MiB"


class BackupJob:
    """One backup job, step by step (app/jobs/kinds.py): prepare() finds the storage unit,
    its pool, storage server and type, the client, the policy and the schedule; run() places
    the image, chooses what it compares with, streams it and commits it (or undoes what it
    wrote)."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"])
        self._upload_logged = 0.0
        self.p = job["params"]
        self.stu = self.pool = self.server = self.storage_type = None
        self.storage_host = self.client_host = self.policy = self.schedule = None
        self.selections = self.level = self.checksum = self.stream = None
        self.base = self.base_index = self.completer = self.previous = self.since = None
        self.cache = self.references = self.lifecycle = None
        self.storage = self.client = self.side = None
        self.image_id = self.partial = self.final = None
        self.index = None
        self.index_info = None
        # the index is closed by the agent connection's reader (rows_end) or by run()
        self.index_lock = threading.Lock()
        self.index_error = []
        self.snapshots = []
        self.calls = []

    def prepare(self):
        job, cfg = self.job, self.master.config
        self.stu = cfg.storage_unit(job["storage_unit"])
        self.pool = cfg.disk_pool(self.stu["pool"])
        self.server = cfg.storage_server(self.pool["server"])
        self.storage_type = registry.of_server(self.server)
        self.storage_host = cfg.host(self.server["host"])
        self.client_host = cfg.host(job["client"])
        self.policy = cfg.policy(job["policy"])
        self.selections = self.p["selections"]
        self.schedule = next((s for s in self.policy["schedules"]
                              if s["name"] == job["schedule"]), None)
        self.level = self.p.get("schedule_type") or (self.schedule["type"] if self.schedule
                                                     else "full")
        if "retention_s" in self.p:
            # as queued: a schedule changed or removed since applies to later jobs
            self.schedule = dict(self.schedule or {"name": job["schedule"],
                                                   "type": self.level},
                                 retention_s=self.p["retention_s"])
        self.checksum = self.p.get("checksum", "crc32")
        self.stream = self.p.get("stream")
        self.set = None
        if job.get("parent_id"):
            parent = self.master.jobs.get(job["parent_id"])
            self.set = {"id": set_image_id(parent),
                        "streams": len(parent["params"].get("streams") or []),
                        "selections": parent["params"].get("selections") or []}
        self.lifecycle = (self.master.lifecycle_config.get(self.policy["lifecycle"])
                          if self.policy.get("lifecycle") else None)

    def run(self):
        try:
            return self._run()
        finally:
            # The images it read from may go once it has ended (or been recorded).
            holds.release(self.master.db, self.job["id"])

    def _run(self):
        # A full's files cache is worked out from the catalog while the agents start: both
        # take about a tenth of a second for tens of thousands of files.
        early = None
        if self.level == "full" and self.storage_type.capabilities.files_cache \
                and not self.p.get("no_files_cache"):
            early = _Early(self._find_files_cache)
        try:
            self._place()
        except BaseException:
            if early is not None:
                early.wait()  # it may be putting a hold on an image: released at the end
            raise
        found = early.result() if early is not None else None
        if self.level != "full":
            self._choose_base()
        if self.level == "full" and self.side.files_cache:
            self._choose_files_cache(found)
        created = time.time()
        expires = expiry_of(self.job, self.schedule, created, self.lifecycle)
        meta = self._meta(created, expires)
        # the state the next incremental compares with, kept in the index as it is written
        self.index = IndexWriter(self.master.home.index_path(self.image_id),
                                 appendix=incremental.NextState())
        try:
            summary, received = self._transfer(meta)
            stats = self.side.outcome(summary, received)
            self._close_index()
            if self.index_error:
                raise CairnError(f"indexing the image failed: {self.index_error[0]}")
            info = self.index_info
            warnings = max(summary.get("warnings", 0), self.ctx.warnings)
            self.ctx.set_phase(COMMITTING)
            committed = self._commit(meta, expires, summary, stats, warnings)
        except BaseException:
            self._undo()
            raise
        finally:
            if self.base_index is not None:
                self.base_index.close()
        return self._report(summary, stats, committed, info, warnings)

    def _meta(self, created, expires):
        """The image's own metadata (its `.cairn/image.json`): everything the catalog records
        of it that is known before the data, so that the image can be recorded again from
        the pool alone (app/formats/imagemeta.py)."""
        return {"format": imagemeta.FORMAT, "format_version": imagemeta.FORMAT_VERSION,
                "image_id": self.image_id, "client": self.client_host["name"],
                "policy": self.job["policy"], "schedule": self.job["schedule"],
                "schedule_type": self.level,
                "base_image": self.base["id"] if self.base else None,
                "created": timeutil.iso(created), "expires": expires,
                "retention_s": (self.lifecycle["steps"][0]["retention_s"] if self.lifecycle
                                else self.schedule["retention_s"] if self.schedule else None),
                "selections": self.selections, "job_id": self.job["id"],
                "checksum": self.checksum, "storage_unit": self.stu["name"],
                "pool": self.pool["name"], "stream": self.stream, "set": self.set}

    def _place(self):
        """Logs what the job does, chooses the volume and names the image."""
        ctx, pool, job = self.ctx, self.pool, self.job
        ctx.log(f"backup of {self.client_host['name']} ({', '.join(self.selections)}) under "
                f"policy {job['policy']}, schedule {job['schedule']}, to storage unit "
                f"{self.stu['name']} (disk pool {pool['name']} on {self.storage_host['name']})")
        ctx.flush()
        self.storage = self.master.hosts.connect(self.storage_host)
        warm = self.storage_type.warm_spec(self.server, self.master.home)
        if warm is not None:
            # the storage host's agent opens the pool (its chunk index: tens of ms for a
            # large pool) while this job places the image and works out its request; the
            # backup takes the open pool, and nobody waits for this answer
            self.storage.start("pool_open", {"storage": warm})
        vols = self.storage.call("check_volumes", {"paths": pool["volumes"]},
                                 timeout=120)["volumes"]
        counts = {v: self.master.db.one(
            "SELECT count(*) FROM images WHERE pool=? AND path LIKE ?",
            (pool["name"], v.rstrip("/") + "/%"))[0] for v in pool["volumes"]}
        volume, reason = self.storage_type.choose_volume(vols, pool["high_water"], counts)
        if volume is None:
            code = st.POOL_FULL if "high-water" in reason else st.VOLUME_UNAVAILABLE
            raise CairnError(f"no volume of disk pool {pool['name']} can take the image: "
                             f"{reason}", status_code=code)
        self.client = self.master.hosts.connect(self.client_host)
        self.image_id = new_image_id(self.master.db, self.client_host["name"], job["id"])
        self.partial, self.final = self.storage_type.image_paths(
            volume, self.client_host["name"], self.image_id)
        self.side = self.storage_type.backup_side(
            server=self.server, pool=pool, home=self.master.home, volume=volume,
            image_id=self.image_id, policy=self.policy, client_host=self.client_host)
        ctx.log(self.side.placed_text())

    def _choose_base(self):
        """The image an incremental compares with, held for the job; without a usable one
        the backup is a full."""
        level, ctx = self.level, self.ctx
        base, why = hold_base(self.master, self.job, client=self.client_host["name"],
                              pool=self.pool["name"], level=level, stream=self.stream,
                              use=f"as the base of its {level} incremental")
        gone = missing_images(self.master, self.storage, incremental.reads_of(base)) \
            if base else []
        if gone:
            why = (f"image {base['id']} cannot be used: "
                   + "; ".join(f"image {i}: {w}" for i, w in gone))
            base = None
        if base is not None:
            try:
                self.base_index = incremental.open_base_index(self.master, base)
                self.previous, base_entries = incremental.previous_state(self.base_index)
            except (CairnError, ValueError) as e:
                why = (f"the index of image {base['id']} cannot be read ({e}); "
                       + rebuild_hint(base["id"]))
                if self.base_index is not None:
                    self.base_index.close()
                    self.base_index = None
                base = None
        if base is None:
            holds.release(self.master.db, self.job["id"])
            ctx.log(f"{level} incremental taken as a full backup: {why}", "warning")
            self.level = "full"
            return
        self.base = base
        # The chain keeps one checksum kind, so that a restore verifies all its members
        # alike.
        self.checksum = base["checksum"]
        self.completer = incremental.Completer(base, self.base_index, base_entries)
        self.since = incremental.scan_started(base)
        ctx.log(f"{level} incremental: compared with image {base['id']} "
                f"({base['schedule_type']}, {base['created']}, {base_entries} files)")

    def _find_files_cache(self):
        """(the files cache, None) or (None, why there is none): the newest image, held for
        the job, and the state of its files."""
        if self.p.get("no_files_cache"):
            return None, "the backup was asked to read every file"
        cache_base, why = hold_base(self.master, self.job, client=self.client_host["name"],
                                    pool=self.pool["name"], level="differential",
                                    stream=self.stream, use="as its files cache")
        if cache_base is None:
            return None, why
        return incremental.files_cache(self.master, cache_base, checksum=self.checksum)

    def _choose_files_cache(self, found=None):
        """A full into a pool with a files cache takes unchanged files from the newest
        image, held for the job, without reading them. found: what _find_files_cache
        returned, when it ran already."""
        cache, why = found if found is not None else self._find_files_cache()
        if cache is None:
            holds.release(self.master.db, self.job["id"])
            self.ctx.log(f"files cache: none, every file is read ({why})")
            return
        self.cache = cache
        self.previous, self.references = cache["state"], cache["references"]
        self.side.use_files_cache(cache["paths"])
        self.ctx.log(f"files cache: image {cache['base']['id']} ({cache['base']['created']}, "
                     f"{cache['entries']} files); unchanged files are taken from the pool, "
                     "not read again")

    def _on_event(self, event, data):
        if event == "snapshot":
            self.snapshots.append(data)
        elif event == "rows":
            if not self.index_error:
                try:
                    if self.index is None:
                        raise CairnError("the agent sent rows after saying it had sent all")
                    if self.completer is not None:
                        self.completer.complete(data["rows"])
                    self.index.add_rows(data["rows"])
                except Exception as e:  # noqa: BLE001 - reported as the job's failure below
                    self.index_error.append(e)
        elif event == "rows_end":
            # every row is here: the index is closed (and made durable) now, while the agent
            # writes and syncs the end of the image, instead of after it
            self._close_index(data.get("rows"))
        else:
            self.ctx.on_event(event, data)

    def _close_index(self, rows=None):
        """Closes the image's index once, when the agent has sent every row (`rows`: how
        many it says it sent) or, at the latest, when the transfer is over."""
        with self.index_lock:
            if self.index is None or self.index_error:
                return
            try:
                received = self.index.rows_received
                if rows is not None and rows != received:
                    raise CairnError(f"the agent says it sent {rows} rows; {received} arrived")
                self.index_info = self.index.close()
                self.index = None
            except Exception as e:  # noqa: BLE001 - reported as the job's failure
                self.index_error.append(e)

    def _destination(self):
        """Where the client's agent writes: a file sink on its own host when it is the
        storage host, else the storage host's receiving side (started here)."""
        ctx, side = self.ctx, self.side
        if self.storage_host["name"] == self.client_host["name"]:
            ctx.log(side.local_text())
            return {"mode": "file", "path": self.partial, "storage": side.storage_spec()}
        listening = {}
        addr = self.master.hosts.data_address(self.storage_host, self.client_host)
        recv, port, cert, token = start_listening_side(
            ctx, self.storage, "receive_image",
            {"path": self.partial, "storage": side.storage_spec()}, self.job["id"],
            listening=listening, address=addr)
        self.calls.append(recv)
        side.heard(listening)
        if self.references and listening.get("bases_problem"):
            ctx.log("files cache not used, every file is read: "
                    + listening["bases_problem"], "warning")
            self.previous = self.references = None
        ctx.log(f"data plane: {self.client_host['name']} -> {self.storage_host['name']} "
                f"({addr}:{port}, TLS, per-job key)")
        dest = {"mode": "net", "host": addr, "port": port, "cert": cert, "token": token,
                "storage": side.client_spec()}
        text = side.client_text()
        if text:
            ctx.log(text)
        return dest

    def _transfer(self, meta):
        """Streams the image: (the client's summary, the storage side's result or None when
        the client wrote the image itself)."""
        dest = self._destination()
        excludes, names = self._excludes()
        send = self.client.start("backup", {
            "selections": self.selections, "image_meta": meta, "dest": dest,
            "checksum": meta["checksum"], "excludes": excludes, "exclude_names": names,
            "previous": self.previous,
            "snapshot": self.policy.get("snapshot") or "none",
            "file_list": self.policy.get("file_list") or "auto", "since": self.since,
            "references": self.references,
            "skip_nodump": bool(self.policy.get("skip_nodump"))}, on_event=self._on_event)
        self.calls.insert(0, send)
        self.ctx.set_phase(SCANNING)
        self.ctx.supervise(self.calls)
        outcome = results(self.calls)
        if self.ctx.cancelled:
            raise Canceled()
        if self.index_error:
            raise CairnError(f"indexing the image failed: {self.index_error[0]}")
        return outcome[0], (outcome[1] if len(outcome) > 1 else None)

    def _excludes(self):
        """({path: why}, [name globs]) the client leaves out: the policy's excludes as the
        job was queued with them (a job queued before excludes existed reads the policy's
        now), the pseudo file systems and Cairn's own pools (app/backup_excludes.py)."""
        # Backing up the pool's own images into the pool helps nobody and grows forever;
        # nor any other pool's (on a shared file system other storage servers write there),
        # nor the pseudo file systems.
        own = self.side.excludes() \
            if self.storage_host["name"] == self.client_host["name"] else {}
        excludes = dict(backup_excludes.default_excludes(self.master.db, self.selections),
                        **own)
        chosen = self.p.get("excludes") or client_excludes(
            self.master.db, self.job["policy"], self.client_host["name"])
        for path in chosen["paths"]:
            excludes[path] = f"excluded by policy {self.job['policy']}"
        if chosen["paths"] or chosen["names"]:
            self.ctx.log("excluded by the policy: " + ", ".join(chosen["paths"]
                                                               + chosen["names"]))
        return excludes, chosen["names"]

    def _commit_event(self, event, data):
        """What the storage host says while it commits: a cloud pool's uploads, logged
        every UPLOAD_LOG_EVERY seconds and once they are done."""
        if event != "upload":
            return
        now = time.monotonic()
        last = data["containers"] == data["of"]
        if not last and now - self._upload_logged < UPLOAD_LOG_EVERY:
            return
        self._upload_logged = now
        self.ctx.log(f"{'uploaded' if last else 'uploading'} to the bucket: "
                     f"{data['containers']} of {data['of']} container(s) the backup was "
                     f"waiting for, {data['bytes'] / (1 << 20):.1f} of "
                     f"{data['total_bytes'] / (1 << 20):.1f} MiB")

    def _commit(self, meta, expires, summary, stats, warnings):
        """Checks that the images this one reads from are still there, then commits it."""
        sources = self.completer.sources if self.completer else []
        # A base removed behind Cairn's back (its file deleted, say) while this backup ran:
        # committing would make an image whose unchanged files cannot be restored.
        gone = missing_images(self.master, self.storage, sources)
        if gone:
            raise CairnError(
                f"this {self.level} incremental takes its unchanged files from image(s) that "
                "are gone: " + "; ".join(f"image {i}: {w}" for i, w in gone)
                + "; the image was not committed",
                status_code=st.IMAGE_DAMAGED,
                hint="check the storage server; expire the damaged image(s) with "
                     "`cairn images expire IMAGE --with-dependents`, then back up again (a "
                     "full is taken when no usable image is left)")
        job, side = self.job, self.side
        return commit(
            self.master, self.storage, job_id=job["id"], partial=self.partial,
            final=self.final, storage=side.commit_spec(), extra_bytes=side.stored_bytes(stats),
            timeout=side.commit_timeout, on_event=self._commit_event, tick=self.ctx.flush,
            record=dict(
                id=self.image_id, client=self.client_host["name"], policy=job["policy"],
                schedule=job["schedule"], schedule_type=meta["schedule_type"],
                created=meta["created"], expires=expires, bytes=summary["bytes"],
                files=summary["files"], storage_unit=self.stu["name"], pool=self.pool["name"],
                storage_host=self.storage_host["name"], job_id=job["id"],
                selections=self.selections, warnings=warnings, checksum=meta["checksum"],
                base_image=meta["base_image"], sources=sources, stream=self.stream,
                snapshot=json.dumps(summary["snapshots"]) if summary.get("snapshots")
                else None,
                scan=json.dumps(summary["scan"]) if summary.get("scan") else None,
                owners=owners.to_column(summary.get("owners")),
                lifecycle=self.lifecycle["name"] if self.lifecycle else None,
                **side.catalog_fields(stats)))

    def _undo(self):
        """After a failure or cancel: stops both sides, removes the partial index and the
        partial image, and the snapshots an agent killed early left behind."""
        for c in self.calls:
            c.cancel()
        for c in self.calls:
            c.wait_done(30)
        with self.index_lock:
            index, self.index = self.index, None
        if index is not None:
            index.abort()
        else:
            # closed, and the image not recorded: the index has no image to describe
            self.master.remove_index(self.image_id)
        try:
            # A fresh connection: the agent that was writing may be the one that died.
            self.master.hosts.connect(self.storage_host).call(
                "abort_image", {"partial": self.partial}, timeout=60)
        except Exception:  # noqa: BLE001 - the original error matters more
            pass
        if self.snapshots:
            _delete_left_snapshots(self.master, self.ctx, self.client_host, self.snapshots)
        self.ctx.flush()

    def _report(self, summary, stats, committed, info, warnings):
        ctx, side = self.ctx, self.side
        # what the client read beside what the files cache took unread: the job's bytes
        # and rate count both, as the image holds both
        reused = summary.get("reused_bytes") or 0
        result = {"read_bytes": summary["bytes"] - reused, "files_cache_files":
                  summary.get("reused") or 0, "files_cache_bytes": reused}
        if stats is not None or reused:
            self.master.jobs.set_dedup_ratio(
                self.job["id"], side.rate(stats) if stats is not None else None, result)
        if self.completer is not None:
            completer = self.completer
            ctx.log(f"{self.level} incremental: {summary['files']} new or changed entries "
                    f"sent ({completer.new} new), {completer.unchanged} unchanged "
                    f"({summary.get('unchanged_bytes', 0)} bytes not sent again), "
                    f"{completer.deleted} deleted since image {self.base['id']}")
        if summary.get("reused"):
            ctx.log(f"files cache: {summary['reused']} unchanged files "
                    f"({_mib(summary.get('reused_bytes', 0))}) taken from image "
                    f"{self.cache['base']['id']} without reading them")
        for text in side.result_texts(stats) + side.committed_texts(committed):
            ctx.log(text)
        ctx.bytes, ctx.files = summary["bytes"], summary["files"]
        ctx.log(f"image {self.image_id} committed: {summary['files']} files, "
                f"{summary.get('dirs', 0)} directories, {summary['bytes']} bytes of data "
                f"({committed['bytes']} bytes on {posixpath.dirname(committed['path'])}); "
                f"index {info['bytes']} bytes")
        if committed.get("duplicates"):
            ctx.log(f"lifecycle {self.lifecycle['name']}: duplicate job(s) "
                    f"{', '.join(map(str, committed['duplicates']))} queued to copy the image")
        ctx.flush(sample=True)
        code = st.PARTIAL if warnings else st.OK
        msg = (f"{warnings} warning(s): some files were skipped or changed, see the log"
               if warnings else None)
        return JobResult(code, message=msg, image_id=self.image_id, bytes=summary["bytes"],
                         files=summary["files"])
