"""The catalog backup job (`cairn catalog backup`): the master's own state written as one
archive (app/catalog_backup/archive.py) to a pool, while other jobs run.

prepare() finds the storage unit's pool, its host and where the archive goes, and the
escrow public key the pool keys are sealed to (app/catalog_backup/escrow.py: made when the
backup was queued, with the passphrase; the job itself never sees the passphrase, so that
it can run in any dispatcher, later, or on a schedule). run() takes a consistent copy of the
catalog with sqlite's online backup API (other jobs keep writing meanwhile; the copy is the
catalog as of one moment), takes the file indexes of the images in that copy, known_hosts
and the sealed pool keys, and writes the archive under a partial name, then commits it."""

import json
import os
import socket
import sqlite3
import tempfile
import time

from app import __version__, status as st, timeutil
from app.catalog_backup import archive, escrow, place
from app.errors import CairnError, Canceled, ValidationError
from app.formats import private
from app.jobs.context import JobContext
from app.jobs.result import JobResult
from plugins.storage import registry
from plugins.storage.cloud import keys as bucket_keys
from plugins.storage.dedup import keys as pool_keys

JOB_TYPE = "catalog-backup"


def target(master, storage_unit):
    """(storage unit, pool, host) a catalog backup to `storage_unit` writes to."""
    stu = master.config.storage_unit(storage_unit)
    pool = master.config.disk_pool(stu["pool"])
    if not pool["volumes"]:
        raise ValidationError(f"disk pool {pool['name']} has no volume to hold catalog backups")
    if registry.can(pool["server_type"], "bucket"):
        # its volume is a cache: a catalog backup there would go with the storage host
        raise ValidationError(f"disk pool {pool['name']} keeps its data in a bucket, and "
                              "catalog backups are written to a pool's file system",
                              hint="give a storage unit of an advanced-disk or dedup pool, "
                                   "on another host than the master")
    return stu, pool, master.config.host(stu["host"])


def make_job(master, storage_unit, passphrase, retention_s=None):
    """Queues a catalog backup to a storage unit. The passphrase makes the escrow on first
    use and must open it afterwards (a mistyped one is refused now, not at recovery time);
    it is not kept, nor put in the job. retention_s: older catalog backups in the same
    folder are removed once this one is written."""
    target(master, storage_unit)
    escrow.ensure(master.db, passphrase)
    return queue(master, storage_unit, retention_s=retention_s)


def queue(master, storage_unit, *, retention_s=None, policy=None, schedule=None,
          not_after=None, note=None, c=None):
    """A catalog backup job in the queue (by hand, or by a catalog schedule of `policy`)."""
    params = {"storage_unit": storage_unit}
    if retention_s is not None and retention_s >= 0:
        params["retention_s"] = int(retention_s)
    return master.jobs.create(
        JOB_TYPE, policy=policy, schedule=schedule, params=params, not_after=not_after,
        note=note or f"catalog backup queued to storage unit {storage_unit}", c=c)


def check_schedulable(master, passphrase):
    """A catalog schedule needs the catalog backup key: made (or checked) with the
    passphrase when one is given, else it must exist already."""
    if passphrase is not None:
        escrow.ensure(master.db, passphrase)
    elif escrow.load(master.db) is None:
        raise ValidationError("a catalog schedule needs the catalog backup passphrase once",
                              hint="give --passphrase-file F (it makes the key that scheduled "
                                   "catalog backups seal the pool keys to; the passphrase is "
                                   "stored nowhere), or run `cairn catalog backup` first")


def snapshot_catalog(source, dest, job_id):
    """sqlite's online backup of the catalog into `dest`: the catalog as of one moment,
    whatever other jobs write meanwhile. In the copy this job has ended well (it has, if the
    copy is ever read: the archive exists only when the job succeeded), and no dispatcher
    holds the lease (a recovered master would wait for this one's to run out). Returns
    (images, jobs, schema version) of the copy."""
    src = sqlite3.connect(source, timeout=30)
    try:
        dst = sqlite3.connect(dest)
        try:
            # One step: a read transaction on the WAL catalog, which blocks no writer; in
            # steps, each write by another job would start the copy again.
            src.backup(dst)
            now = timeutil.iso(time.time())
            with dst:
                dst.execute("UPDATE jobs SET state='done', status=?, ended=? WHERE id=?",
                            (st.OK, now, job_id))
                dst.execute("INSERT INTO job_log(job_id, ts, level, message) VALUES (?,?,?,?)",
                            (job_id, now, "info", "the catalog was copied for this backup"))
                dst.execute("DELETE FROM leases")
                # the manifest key goes only where the passphrase opens it (the escrow)
                dst.execute("DELETE FROM settings WHERE key=?", (escrow.MAC_SETTING,))
            dst.execute("PRAGMA journal_mode=DELETE")
            images = dst.execute("SELECT id FROM images ORDER BY id").fetchall()
            jobs = dst.execute("SELECT count(*) FROM jobs").fetchone()[0]
            version = dst.execute("PRAGMA user_version").fetchone()[0]
        finally:
            dst.close()
    finally:
        src.close()
    return [r[0] for r in images], jobs, version


def pool_key_names(home, suffix=".key"):
    """The storage servers whose pool key (suffix ".key") or bucket credentials (".s3") are
    in the home, sorted."""
    try:
        return sorted(n[:-len(suffix)] for n in os.listdir(home.keys)
                      if n.endswith(suffix) and not n.startswith("."))
    except FileNotFoundError:
        return []


class CatalogBackupJob:
    """A catalog backup job (app/jobs/kinds.py)."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"])
        self.stu = self.pool = self.host = self.escrow = self.mac_key = None
        self._last_flush = 0.0

    def prepare(self):
        self.stu, self.pool, self.host = target(self.master, self.job["params"]["storage_unit"])
        self.escrow = escrow.load(self.master.db)
        self.mac_key = escrow.mac_key(self.master.db)
        if self.escrow is None or self.mac_key is None:
            raise CairnError("there is no catalog backup key yet",
                             hint="queue the catalog backup with `cairn catalog backup "
                                  "--storage-unit STU --passphrase-file F`",
                             status_code=st.INVALID_REQUEST)

    def run(self):
        home, ctx = self.master.home, self.ctx
        os.close(private.makedirs(home.work))
        with tempfile.TemporaryDirectory(dir=home.work, prefix="catalog-backup-") as work:
            copy = os.path.join(work, archive.CATALOG)
            os.close(private.create(copy, os.O_WRONLY))
            images, njobs, version = snapshot_catalog(home.catalog, copy, self.job["id"])
            ctx.raise_if_cancelled()
            members = [(archive.CATALOG, copy)]
            if os.path.isfile(home.known_hosts):
                members.append((archive.KNOWN_HOSTS, home.known_hosts))
            members += self._indexes(images)
            sealed = self._sealed_keys()
            creds = self._sealed_credentials()
            keys_file = os.path.join(work, archive.KEYS)
            with os.fdopen(private.create(keys_file, os.O_WRONLY | os.O_TRUNC), "w") as f:
                json.dump({"keys": sealed, "credentials": creds}, f)
            members.append((archive.KEYS, keys_file))
            return self._write(members, images, njobs, version, sorted(sealed), sorted(creds))

    def _indexes(self, images):
        """The file indexes of the images in the catalog's copy (an index written since
        belongs to an image the copy does not know)."""
        out = []
        for image_id in images:
            path = self.master.home.index_path(image_id)
            if os.path.isfile(path):
                out.append((f"{archive.INDEX_DIR}/{os.path.basename(path)}", path))
            else:
                self.ctx.log(f"image {image_id} has no file index in the catalog; the catalog "
                             "backup holds none for it", "warning")
        return out

    def _sealed_keys(self):
        """{storage server: its pool key sealed to the escrow}."""
        out = {}
        for server in pool_key_names(self.master.home):
            key = pool_keys.load(self.master.home, server)
            out[server] = escrow.seal(self.escrow["public"], key.hex().encode(),
                                      "pool-key:" + server)
        return out

    def _sealed_credentials(self):
        """{storage server: its bucket's credentials (a cloud pool) sealed to the escrow}."""
        out = {}
        for server in pool_key_names(self.master.home, ".s3"):
            creds = bucket_keys.load(self.master.home, server)
            text = "".join(f"{k}={creds[k]}\n" for k in bucket_keys.FIELDS)
            out[server] = escrow.seal(self.escrow["public"], text.encode(),
                                      "bucket-credentials:" + server)
        return out

    def _tick(self):
        """Between two members: a member more, the job's progress written now and then (its
        heartbeat), and whether it was canceled."""
        ctx = self.ctx
        ctx.files += 1
        now = time.monotonic()
        if now - self._last_flush >= 1.0:
            self._last_flush = now
            ctx.flush(sample=True)
        return ctx.check_cancel()

    def _write(self, members, images, njobs, version, key_names, credential_names=()):
        ctx, job_id = self.ctx, self.job["id"]
        created = time.time()
        manifest = {"format": archive.FORMAT, "version": archive.VERSION,
                    "created": timeutil.iso(created), "created_epoch": int(created),
                    "master_host": socket.gethostname(), "cairn_version": __version__,
                    "job_id": job_id, "catalog_schema": version, "images": len(images),
                    "jobs": njobs, "indexes": sum(1 for n, _ in members
                                                  if n.startswith(archive.INDEX_DIR + "/")),
                    "keys": key_names, "credentials": list(credential_names),
                    "escrow": self.escrow,
                    "members": archive.describe(members)}
        folder = place.folder_of(self.pool)
        partial, final = archive.file_names(created, job_id)
        t = place.Target(self.master, self.host, folder, partial, final)
        ctx.total_files = len(members)
        ctx.log(f"catalog backup of {len(images)} image(s), {njobs} job(s), "
                f"{manifest['indexes']} file index(es), {len(key_names)} pool key(s) and "
                f"{len(credential_names)} bucket credential(s) to {t.final} on host "
                f"{self.host['name']}")
        ctx.flush()
        try:
            done = archive.write(t.open(), manifest, members,
                                 lambda body: escrow.manifest_mac(self.mac_key, body),
                                 self._tick)
            if not done:
                raise Canceled()
            r = t.commit()
        except OSError as e:  # writing the archive: a full or failing volume
            t.discard()
            raise t.failed(e) from None
        except BaseException:
            t.discard()
            raise
        escrow.record_escrowed(self.master.db, key_names)
        ctx.bytes, ctx.files = r["bytes"], len(members)
        ctx.log(f"catalog backup written: {r['path']} ({r['bytes']} bytes)")
        removed = t.prune(self.job["params"].get("retention_s"), time.time())
        if removed:
            ctx.log(f"removed {len(removed)} older catalog backup file(s) from {t.folder}: "
                    + ", ".join(removed))
        self.master.jobs.set_result(job_id, {"path": r["path"], "bytes": r["bytes"],
                                             "images": len(images), "jobs": njobs,
                                             "indexes": manifest["indexes"],
                                             "keys": key_names, "created": manifest["created"],
                                             "removed": removed,
                                             "host": self.host["name"]})
        ctx.flush(sample=True)
        return JobResult(bytes=r["bytes"], files=len(members))
