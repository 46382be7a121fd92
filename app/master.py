# Over 800 lines: the one facade over hosts, configuration, images, restores and jobs.
"""The master API: the one entry point the CLI and the console use. It owns the catalog,
the configuration objects, the agent connections and the job queue."""

import json
import os
import time
from contextlib import contextmanager

from app import timeutil
from app import status
from app.catalog_index import IndexCorrupt, IndexReader, rebuild_hint
from app.config import Config, check_abs_path
from app.errors import CairnError, NotFound, ValidationError
from app.hosts import HostPool
from app.jobs.dispatcher import Dispatcher
from app.jobs.store import DONE, JobStore
from app.paths import Home
from app.store.db import Database
from plugins.storage import registry

OVERWRITE_CHOICES = ("skip", "overwrite", "rename")
# How restored files are written: "auto" past the page cache (O_DIRECT) where the target's
# file system suits it, "off" always through it.
DIRECT_IO_CHOICES = ("auto", "off")
# A restore whose image and target are on one host runs in up to this many processes when
# asked; "auto" (None) lets the host choose (one per core, at most 4, for 64 MiB or more).
MAX_RESTORE_STREAMS = 16


class Master:
    def __init__(self, home=None, password_provider=None):
        from app.catalog_check import check_not_truncated
        self.home = Home(home).ensure()
        check_not_truncated(self.home)
        self.db = Database(self.home.catalog)
        self.config = Config(self.db)
        self.jobs = JobStore(self.db)
        self.hosts = HostPool(self.home, password_provider)
        self.dispatcher = Dispatcher(self)

    def close(self):
        self.hosts.close()
        self.db.close()

    # ---- hosts ----------------------------------------------------------------------------
    def add_host(self, name, *, local=False, address=None, port=22, user=None, key_file=None,
                 trust_host_key=False, data_address=None, check=True):
        """Registers a host. An SSH host is connected once first (unless check=False), so
        that a wrong address, a refused key or an untrusted host key is reported now, not
        in the middle of the first backup."""
        if check and not local:
            probe_host = {"name": name, "kind": "ssh", "address": address, "port": port,
                          "user": user, "key_file": key_file and os.path.abspath(
                              os.path.expanduser(key_file))}
            t = self.hosts.transport(probe_host, trust_unknown_key=trust_host_key)
            try:
                from app.config import check_name
                check_name("host", name)
                if key_file and not os.path.isfile(os.path.expanduser(key_file)):
                    raise ValidationError(f"key file {key_file} does not exist")
                proc = t.start_agent()
                proc.close()
            finally:
                t.close()
        return self.config.add_host(name, local=local, address=address, port=port, user=user,
                                    key_file=key_file, data_address=data_address)

    def trust_host_key(self, name, fingerprint=None, replace=False):
        """Trusts the key a registered SSH host presents now: exactly the key seen, and only
        if it matches `fingerprint` when one is given. `replace` drops the keys trusted
        before (after a host was reinstalled)."""
        from app.errors import HostKeyChanged, HostKeyUnknown
        from app.transport import hostkeys
        host = self.config.host(name)
        if host["kind"] != "ssh":
            raise ValidationError(f"host {name!r} is reached without SSH; it has no host key")
        port = host["port"] or 22
        if replace:
            hostkeys.remove(self.home.known_hosts, host["address"], port)
        t = self.hosts.transport(host)
        try:
            t.connect()
        except HostKeyUnknown as e:
            if fingerprint and fingerprint != e.fingerprint:
                raise ValidationError(
                    f"host {name} presents {e.key_type} {e.fingerprint}, not {fingerprint}; "
                    "nothing was trusted",
                    hint="check the fingerprint with the host's administrator") from None
            hostkeys.add(self.home.known_hosts, host["address"], port, e.pkey)
            return {"host": name, "trusted": True, "key_type": e.key_type,
                    "fingerprint": e.fingerprint}
        except HostKeyChanged as e:
            raise HostKeyChanged(e.message, hint=f"if the host was reinstalled, check the new "
                                 f"fingerprint and run: cairn host trust {name} --replace "
                                 f"--fingerprint {e.fingerprint}") from None
        finally:
            t.close()
        return {"host": name, "trusted": False, "already_trusted": True}

    def ensure_local_host(self):
        """The embedded default: this machine is a host from the start."""
        h = self.config.local_host()
        if h is None:
            import socket
            name = socket.gethostname().split(".")[0] or "localhost"
            from app.config import NAME_RE
            if not NAME_RE.match(name) or self.db.one("SELECT 1 FROM hosts WHERE name=?",
                                                      (name,)):
                name = "localhost"
            h = self.config.add_host(name, local=True)
        return h

    def host_reachability(self, timeout=15):
        """Each host with whether its agent answers now (connecting it if needed), for the
        console's status bar: [{"name", "reachable", "error"}]."""
        from app.errors import CairnError
        out = []
        for h in self.config.hosts():
            try:
                self.hosts.connect(h).call("ping", timeout=timeout)
                out.append({"name": h["name"], "reachable": True, "error": None})
            except CairnError as e:
                out.append({"name": h["name"], "reachable": False, "error": e.message})
        return out

    def probe_host(self, name):
        host = self.config.host(name)
        conn = self.hosts.connect(host)
        info = conn.call("probe", timeout=120)
        info["host"] = name
        info["agent"] = conn.info
        return info

    def list_host_dir(self, name, path):
        host = self.config.host(name)
        return self.hosts.connect(host).call("list_dir", {"path": path}, timeout=60)

    def host_volumes(self, name):
        """The file systems a host reports (mount point, type, class, size, free, read-only),
        for picking the volumes of a disk pool. Every entry comes from the host's mount
        table, so `mounted` is True; `error` says why one could not be measured."""
        fss = self.probe_host(name).get("filesystems") or []
        for fs in fss:
            fs.setdefault("mounted", True)
        return fss

    def add_host_trusting_key(self, name, fingerprint, *, address, port=22, user=None,
                              key_file=None, data_address=None):
        """add_host for an SSH host whose unknown key the admin accepted after seeing its
        fingerprint: exactly that key is trusted, and a host that presents another one is
        refused, so a key swapped between showing and accepting is never trusted."""
        from app.errors import HostKeyUnknown
        from app.transport import hostkeys
        from app.config import check_name
        check_name("host", name)
        t = self.hosts.transport({"name": name, "kind": "ssh", "address": address,
                                  "port": port, "user": user,
                                  "key_file": key_file and os.path.abspath(
                                      os.path.expanduser(key_file))})
        try:
            t.connect()
        except HostKeyUnknown as e:
            if e.fingerprint != fingerprint:
                raise ValidationError(
                    f"host {address} now presents {e.key_type} {e.fingerprint}, not the key "
                    f"{fingerprint} that was accepted; nothing was trusted",
                    hint="check the fingerprint with the host's administrator") from None
            hostkeys.add(self.home.known_hosts, address, port, e.pkey)
        finally:
            t.close()
        return self.add_host(name, address=address, port=port, user=user, key_file=key_file,
                             data_address=data_address, check=True)

    def create_policy(self, name, *, storage_unit, priority=0, multiple_streams=False,
                      checksum="crc32", snapshot="none", file_list="auto", dedup="server",
                      skip_nodump=False, clients=(), selections=(), schedules=(), comment=""):
        """A policy with its clients, backup selections and schedules (dicts of
        add_schedule's arguments plus `name`), all or nothing: when a later part is
        refused, the policy is removed again and the error raised."""
        self.config.add_policy(name, storage_unit=storage_unit, priority=priority,
                               multiple_streams=multiple_streams, checksum=checksum,
                               snapshot=snapshot, file_list=file_list, dedup=dedup,
                               skip_nodump=skip_nodump, comment=comment)
        try:
            for host in clients:
                self.config.add_policy_client(name, host)
            for path in selections:
                self.config.add_policy_selection(name, path)
            for s in schedules:
                s = dict(s)
                self.config.add_schedule(name, s.pop("name"), **s)
        except BaseException:
            self._remove_policy(name)
            raise
        return self.config.policy(name)

    def _remove_policy(self, name):
        # Clients, selections and schedules go with it (ON DELETE CASCADE).
        with self.db.tx() as c:
            c.execute("DELETE FROM policies WHERE name=?", (name,))

    # ---- storage --------------------------------------------------------------------------
    def create_storage_server(self, name, *, type, host, path=None, options=None, check=True):
        """A new storage server. A type that makes its storage path (dedup) has it created on
        the host and checked (writable; a warning when it is on a network file system), and
        with encryption at rest the master makes the pool's key (the type's create_key)."""
        path, options = self.config.validate_storage_server(
            name, type=type, host=host, path=path, options=options)
        storage_type = registry.get(type)
        warnings = []
        if storage_type.makes_path and check:
            conn = self.hosts.connect(self.config.host(host))
            v = conn.call("check_volumes", {"paths": [path], "create": True},
                          timeout=120)["volumes"][0]
            if not v["ok"]:
                raise ValidationError(f"storage path {path} on host {host}: {v['error']}",
                                      hint="create the directory on the storage server and "
                                           "make it writable for the agent's user")
            w = storage_type.path_warning(v.get("filesystem"))
            if w:
                warnings.append(w)
        storage_type.create_key(self.home, name, options)
        try:
            srv = self.config.add_storage_server(name, type=type, host=host, path=path,
                                                 options=options)
        except BaseException:
            storage_type.remove_key(self.home, name, options)
            raise
        srv["warnings"] = warnings
        return srv

    def check_volumes(self, server, volumes):
        srv = self.config.storage_server(server)
        conn = self.hosts.connect(self.config.host(srv["host"]))
        return conn.call("check_volumes", {"paths": volumes}, timeout=120)["volumes"]

    def create_disk_pool(self, name, *, server, volumes, high_water=98, low_water=80,
                         max_io_streams=None, compact_below=None, check=True, comment=""):
        """compact_below: a deduplicating pool's compaction threshold in percent (default
        app.config.DEFAULT_COMPACT_BELOW). check: each volume is checked on the storage
        server's host first (it exists and the agent's user can write to it)."""
        vols, *_ = self.config.validate_disk_pool(
            name, server=server, volumes=volumes, high_water=high_water, low_water=low_water,
            max_io_streams=max_io_streams, compact_below=compact_below)
        if check:
            bad = [v for v in self.check_volumes(server, vols) if not v["ok"]]
            if bad:
                srv = self.config.storage_server(server)
                raise ValidationError(
                    "volume " + "; ".join(f"{v['path']}: {v['error']}" for v in bad)
                    + f" (on host {srv['host']})",
                    hint="create the directory on the storage server and make it writable "
                         "for the agent's user, then try again")
        return self.config.add_disk_pool(name, server=server, volumes=vols,
                                         high_water=high_water, low_water=low_water,
                                         max_io_streams=max_io_streams,
                                         compact_below=compact_below, comment=comment)

    def create_storage_unit(self, name, *, pool, max_concurrent_jobs=1, comment=""):
        """A storage unit on a disk pool: what policies write to."""
        return self.config.add_storage_unit(name, pool=pool,
                                            max_concurrent_jobs=max_concurrent_jobs,
                                            comment=comment)

    # ---- editing --------------------------------------------------------------------------
    def dependents(self, kind, name):
        """What still uses a configuration object (kind: host, storage-server, disk-pool,
        storage-unit, policy); it can be deleted only when this is empty."""
        from app import config_edit
        deps = config_edit.dependents(self.db, kind, name)
        return {"kind": kind, "name": name, "dependents": deps,
                "text": config_edit.describe(deps)}

    def delete_object(self, kind, name):
        from app import config_edit
        return config_edit.delete(self.db, kind, name)

    def update_object(self, kind, name, **changes):
        from app import config_edit
        return config_edit.update(self.db, self.config, kind, name, **changes)

    # ---- backups --------------------------------------------------------------------------
    def start_backup(self, policy, client=None, schedule=None, files_cache=True):
        """Queues one backup job per client of the policy (or the one client given).
        files_cache=False: a full into a deduplication pool reads every file, even those the
        previous image shows unchanged."""
        pol = self.config.policy(policy)
        if not pol["clients"]:
            raise ValidationError(f"policy {policy!r} has no clients",
                                  hint=f"add one with `cairn policy add-client {policy} HOST`")
        if not pol["selections"]:
            raise ValidationError(f"policy {policy!r} has no backup selections",
                                  hint=f"add one with `cairn policy add-selection {policy} PATH`")
        if client is not None and client not in pol["clients"]:
            raise ValidationError(f"{client!r} is not a client of policy {policy!r}",
                                  hint=f"its clients: {', '.join(pol['clients'])}")
        scheds = pol["schedules"]
        if schedule is None:
            full = [s for s in scheds if s["type"] == "full"]
            if not scheds:
                # A manual backup of a policy without schedules is a full with the default
                # retention, as admins expect from a user-directed backup.
                sched = {"name": "manual", "type": "full"}
            else:
                sched = (full or scheds)[0]
        else:
            sched = next((s for s in scheds if s["name"] == schedule), None)
            if sched is None:
                raise NotFound(f"policy {policy!r} has no schedule {schedule!r}",
                               hint="its schedules: " + (", ".join(s["name"] for s in scheds)
                                                         or "none"))
        ids = []
        for c in ([client] if client else pol["clients"]):
            ids.append(self.queue_backup(pol, c, sched, files_cache=files_cache))
        return ids

    def queue_backup(self, pol, client, sched, *, not_after=None, note=None, c=None,
                     files_cache=True):
        """Queues the backup of one client under a policy dict and a schedule dict: one job,
        or with multiple data streams a parent job and a child job per stream. Returns the
        (parent) job id. `c`: an open write transaction to queue it in."""
        from app.config import STREAM_MARKER
        from app.jobs.backup_set import split_streams, stream_key
        if c is None:
            with self.db.tx() as c:
                return self.queue_backup(pol, client, sched, not_after=not_after, note=note,
                                         c=c, files_cache=files_cache)
        plain = [s for s in pol["selections"] if s != STREAM_MARKER]
        streams = split_streams(pol["selections"]) if pol["multiple_streams"] else [plain]
        base = {"schedule_type": sched["type"], "checksum": pol["checksum"]}
        if not files_cache or sched.get("read_all"):
            base["no_files_cache"] = True
        common = dict(client=client, policy=pol["name"], schedule=sched["name"],
                      priority=pol["priority"], not_after=not_after, c=c)
        if len(streams) < 2:
            return self.jobs.create("backup", storage_unit=pol["storage_unit"],
                                    params={**base, "selections": plain}, note=note, **common)
        parent = self.jobs.create(
            "backup", storage_unit=None,
            params={**base, "selections": plain, "streams": streams},
            note=(note or "backup job queued") + f": {len(streams)} data streams, each a child "
                                                  "job", **common)
        for sel in streams:
            self.jobs.create("backup", storage_unit=pol["storage_unit"], parent_id=parent,
                             params={**base, "selections": sel, "stream": stream_key(sel)},
                             note=f"stream {', '.join(sel)} of job {parent}", **common)
        return parent

    # ---- images ---------------------------------------------------------------------------
    def images(self, client=None, policy=None, include_parts=False):
        """Images newest first. The stream images of a multi-stream backup are listed only
        with include_parts: their set image is the backup to browse and restore."""
        sql, args = "SELECT * FROM images WHERE 1=1", []
        if not include_parts:
            sql += " AND part_of IS NULL"
        if client:
            sql += " AND client=?"
            args.append(client)
        if policy:
            sql += " AND policy=?"
            args.append(policy)
        return [_image_dict(r) for r in self.db.all(sql + " ORDER BY created DESC, id DESC",
                                                     args)]

    def image(self, image_id):
        row = self.db.one("SELECT * FROM images WHERE id=?", (image_id,))
        if row is None:
            raise NotFound(f"there is no image {image_id!r}",
                           hint="see `cairn images list`")
        return _image_dict(row)

    def image_at(self, client, policy=None, at=None):
        """The newest image of a client (under a policy) created at or before `at`."""
        self.config.host(client)
        sql, args = "SELECT * FROM images WHERE client=? AND part_of IS NULL", [client]
        if policy:
            sql += " AND policy=?"
            args.append(policy)
        if at is not None:
            sql += " AND created<=?"
            args.append(timeutil.iso(timeutil.parse_iso(at)))
        row = self.db.one(sql + " ORDER BY created DESC, id DESC LIMIT 1", args)
        if row is None:
            when = f" at or before {at}" if at else ""
            raise NotFound(f"client {client!r} has no image{when}"
                           + (f" under policy {policy!r}" if policy else ""))
        return _image_dict(row)

    # ---- deduplication pools -------------------------------------------------------------
    def start_verify(self, image=None, pool=None):
        """Queues a verify job of an image or a whole disk pool (every pool type)."""
        from app.jobs import pool_jobs
        return pool_jobs.make_verify_job(self, image=image, pool=pool)

    def start_cleanup(self, pool, dry_run=False):
        """Queues a cleanup job of a disk pool (any type): removes the pool files that no
        catalog image owns and that are older than every running backup (app/jobs/cleanup.py);
        dry_run only lists them."""
        from app.jobs import cleanup
        return cleanup.make_job(self, pool, dry_run=dry_run)

    def start_rebuild_index(self, image):
        """Queues a job that rebuilds an image's catalog index from the image itself (see
        app/jobs/reindex.py)."""
        from app.jobs import reindex
        return reindex.make_job(self, image)

    def start_reclaim(self, pool):
        """Queues a space reclaim job of a deduplication pool."""
        from app.jobs import pool_jobs
        return pool_jobs.make_reclaim_job(self, pool)

    def rebuild_pool_index(self, pool):
        """Rebuilds a deduplication pool's chunk index from its containers alone."""
        from app.jobs import pool_jobs
        _pool, _server, host, spec = pool_jobs.chunk_pool(self, pool)
        return self.hosts.connect(host).call("pool_rebuild_index", {"storage": spec},
                                             timeout=3600)

    def pool_usage(self, pool):
        """Chunks and bytes a deduplication pool holds."""
        from app.jobs import pool_jobs
        _pool, _server, host, spec = pool_jobs.chunk_pool(self, pool)
        return self.hosts.connect(host).call("pool_usage", {"storage": spec}, timeout=300)

    def expire_preview(self, image_id):
        """What expiring an image takes with it: every image that reads data from it (the
        incrementals after it, the stream images of a set), which must go together."""
        from app.jobs import expire
        img = self.image(image_id)
        others = [self.image(i) for i in expire.dependents(self.db, [img["id"]])]
        others.sort(key=lambda d: (d["created"], d["id"]))
        return {"image": img["id"], "with": [d["id"] for d in others], "images": [img] + others,
                "bytes": img["image_bytes"] + sum(d["image_bytes"] for d in others)}

    def start_expire(self, image_id, with_dependents=True):
        """Queues an expire job for an image and everything that depends on it (see
        expire_preview). With with_dependents=False an image others depend on is refused."""
        from app.jobs import expire
        preview = self.expire_preview(image_id)
        if preview["with"] and not with_dependents:
            raise ValidationError(
                f"image {image_id} is needed by {len(preview['with'])} other image(s): "
                f"{', '.join(preview['with'])}",
                hint="expire them together with --with-dependents")
        ids = [preview["image"]] + preview["with"]
        # A backup that reads one of them (its incremental base, its files cache) or a
        # restore: refused now, naming the job; the job checks again as it starts.
        expire.refuse_if_held(self.db, ids, image_id)
        return expire.make_job(self, ids, "expired by the administrator")

    def expire_image(self, image_id, with_dependents=False):
        """Expires an image (and, when allowed, its dependents) through an expire job, and
        waits for it."""
        jid = self.start_expire(image_id, with_dependents=with_dependents)
        [job] = self.wait_for([jid])
        if job["status"] != status.OK:
            raise CairnError(f"expiring image {image_id} failed: {job['status_text']} "
                             f"(see `cairn jobs log {jid}`)", status_code=job["status"])
        return {"expired": image_id, "job": jid, "images": job["params"]["images"],
                "bytes": job["bytes"]}

    def expire_due(self, now=None):
        """Queues expire jobs for images whose retention has ended (see app/jobs/expire.py)."""
        from app.jobs import expire
        return expire.expire_due(self, now)

    def remove_index(self, image_id):
        from app.jobs.reindex import aside_files
        path = self.home.index_path(image_id)
        # with the indexes that rebuilds of it kept aside
        for p in [path] + aside_files(path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    # ---- settings -------------------------------------------------------------------------
    SETTINGS = {"max_jobs_per_client": (4, "jobs of one client that may run at once"),
                "backup_tries": (2, "attempts of a failed backup, the first one included"),
                "retry_delay": ("10m", "wait before the next attempt of a failed backup")}

    def setting(self, key):
        if key not in self.SETTINGS:
            raise NotFound(f"there is no setting {key!r}",
                           hint="settings: " + ", ".join(sorted(self.SETTINGS)))
        row = self.db.one("SELECT value FROM settings WHERE key=?", (key,))
        default = self.SETTINGS[key][0]
        if row is None:
            return default
        return int(row[0]) if isinstance(default, int) else row[0]

    def settings(self):
        return {k: {"value": self.setting(k), "default": d, "about": about}
                for k, (d, about) in sorted(self.SETTINGS.items())}

    def set_setting(self, key, value):
        self.setting(key)  # an unknown key is refused here
        default = self.SETTINGS[key][0]
        if isinstance(default, int):
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValidationError(f"{key} must be a whole number, not {value!r}") from None
            if value < 1:
                raise ValidationError(f"{key} must be at least 1")
        else:
            timeutil.parse_duration(value, what=key)
        with self.db.tx() as c:
            c.execute("INSERT INTO settings(key, value) VALUES (?,?) ON CONFLICT(key) DO UPDATE "
                      "SET value=excluded.value", (key, str(value)))
        return self.settings()

    @contextmanager
    def open_index(self, img):
        """The catalog file index of an image; a missing or damaged one (found on opening or
        on any read inside the block) becomes a clear error."""
        path = self.home.index_path(img["id"])
        hint = (rebuild_hint(img["id"])
                + "; `cairn catalog check` lists every index that needs it")
        try:
            reader = IndexReader(path)
        except FileNotFoundError:
            raise CairnError(f"the file index of image {img['id']} is missing ({path})",
                             hint=hint, status_code=status.IMAGE_DAMAGED) from None
        except IndexCorrupt as e:
            raise CairnError(f"the file index of image {img['id']} is damaged: {e}",
                             hint=hint, status_code=status.IMAGE_DAMAGED) from None
        except OSError as e:
            raise CairnError(f"cannot read the file index of image {img['id']} ({path}): "
                             f"{e.strerror or e}", hint="check the file's permissions and the "
                             "disk that holds it (dmesg); " + hint,
                             status_code=status.IMAGE_DAMAGED) from None
        try:
            with reader:
                yield reader
        except IndexCorrupt as e:
            raise CairnError(f"the file index of image {img['id']} is damaged: {e}",
                             hint=hint, status_code=status.IMAGE_DAMAGED) from None
        except OSError as e:
            raise CairnError(f"cannot read the file index of image {img['id']} ({path}): "
                             f"{e.strerror or e}", hint="check the disk that holds it "
                             "(dmesg); " + hint, status_code=status.IMAGE_DAMAGED) from None

    def browse(self, image_id, path="/"):
        img = self.image(image_id)
        path = "/" if path in (None, "", "/") else check_abs_path("path", path)
        with self.open_index(img) as idx:
            if path != "/":
                e = idx.lookup(path)
                if e is None:
                    raise NotFound(f"{path} is not in image {image_id}")
                if e.kind != "d":
                    return {"image": img["id"], "path": path, "entries": [e.to_dict()]}
            try:
                entries = idx.list_dir(path)
            except KeyError:
                entries = []
        return {"image": img["id"], "path": path, "entries": [e.to_dict() for e in entries]}

    # ---- finding and restoring files ------------------------------------------------------
    def list_entries(self, image_id, path="/"):
        """The entries of one directory of an image as the index's own Entry tuples (path,
        name, kind, mode, uid, gid, size, mtime_ns, offset, length, checksum, link), sorted
        by name bytes: browse() without a dict per entry, for the console's file tree, which
        lists directories of 100,000 entries at once."""
        img = self.image(image_id)
        path = "/" if path in (None, "", "/") else check_abs_path("path", path)
        with self.open_index(img) as idx:
            try:
                return idx.list_dir(path)
            except KeyError:
                raise NotFound(f"{path} is not in image {image_id}") from None

    def images_in_range(self, client=None, policy=None, since=None, until=None):
        """Images (newest first) created in [since, until]; either end may be open."""
        rows = self.images(client=client, policy=policy)
        lo = timeutil.iso(timeutil.parse_iso(since)) if since else None
        hi = timeutil.iso(timeutil.parse_iso(until)) if until else None
        return [r for r in rows if (lo is None or r["created"] >= lo)
                and (hi is None or r["created"] <= hi)]

    def image_clients(self):
        """The clients that have images: name, images, newest (created)."""
        return [{"client": r[0], "images": r[1], "newest": r[2]} for r in self.db.all(
            "SELECT client, COUNT(*), MAX(created) FROM images GROUP BY client "
            "ORDER BY client")]

    def search(self, image_id, pattern, limit=10_000, case_sensitive=False, cancel=None):
        """Files of an image whose name (or path, for a pattern with /) matches a glob;
        see app/search.py. `cancel` is a threading.Event that stops the search early."""
        from app.search import search_index
        img = self.image(image_id)
        try:
            with self.open_index(img) as idx:
                found = search_index(idx, pattern, limit=limit, case_sensitive=case_sensitive,
                                     cancel=cancel)
        except ValueError as e:
            if isinstance(e, IndexCorrupt):
                raise
            raise ValidationError(str(e)) from None
        found["image"] = img["id"]
        return found

    def find_versions(self, client, query, limit=1_000, case_sensitive=False, cancel=None):
        """Every version of a file in every image of a client, newest image first: an
        absolute path without wildcards is looked up, anything else searched as a pattern."""
        from app.search import has_wildcards
        self.config.host(client)
        query = (query or "").strip()
        if not query:
            raise ValidationError("type a path or a pattern to look for")
        exact = query.startswith("/") and not has_wildcards(query)
        if exact:
            query = check_abs_path("path", query)
        versions, errors, count, cancelled = [], [], 0, False
        for img in self.images(client=client):
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            try:
                if exact:
                    with self.open_index(img) as idx:
                        e = idx.lookup(query)
                    found = [e.to_dict()] if e is not None else []
                    n = len(found)
                else:
                    r = self.search(img["id"], query, limit=max(limit - len(versions), 0),
                                    case_sensitive=case_sensitive, cancel=cancel)
                    found, n, cancelled = r["matches"], r["count"], r["cancelled"]
            except CairnError as e:
                errors.append({"image": img["id"], "message": e.message})
                continue
            count += n
            for f in found[:max(limit - len(versions), 0)]:
                f.update(image=img["id"], created=img["created"], policy=img["policy"],
                         schedule=img["schedule"])
                versions.append(f)
            if cancelled:
                break
        return {"client": client, "query": query, "versions": versions, "count": count,
                "truncated": count > len(versions), "cancelled": cancelled, "errors": errors}

    def _restore_request(self, image_id, paths, to, to_host, overwrite, relocate):
        from app.relocate import Relocation
        img = self.image(image_id)
        if not paths:
            raise ValidationError("choose at least one path to restore",
                                  hint="give --path PATH (browse the image to find paths)")
        norm = [("/" if p == "/" else check_abs_path("path", p)) for p in paths]
        norm = [p for p in dict.fromkeys(norm)
                if not any(p != q and (q == "/" or p.startswith(q + "/")) for q in norm)]
        to = check_abs_path("restore target", to)
        host = self.config.host(to_host or img["client"])
        if overwrite not in OVERWRITE_CHOICES:
            raise ValidationError(f"overwrite choice {overwrite!r} is unknown",
                                  hint=f"choose one of: {', '.join(OVERWRITE_CHOICES)}")
        relocation = (relocate if isinstance(relocate, Relocation)
                      else Relocation.from_dict(relocate))
        return img, norm, to, host, relocation

    def preview_restore(self, image_id, paths, to, to_host=None, overwrite="skip",
                        relocate=None, limit=50, check_limit=200_000):
        """Where a restore would put the chosen paths, before it runs: the first `limit`
        items (path, kind, target on the target host) and a check of up to `check_limit`
        entries for collisions; an invalid relocation raises, naming the first bad path."""
        from app.relocate import join_target, plan_targets
        img, norm, to, host, relocation = self._restore_request(
            image_id, paths, to, to_host, overwrite, relocate)
        seen, complete = [], True
        with self.open_index(img) as idx:
            for p in norm:
                if p != "/" and idx.lookup(p) is None:
                    raise NotFound(f"{p} is not in image {image_id}")
                walk = (e for top in idx.list_dir("/") for e in idx.walk(top.path)) \
                    if p == "/" else idx.walk(p)
                for e in walk:
                    if len(seen) >= check_limit:
                        complete = False
                        break
                    seen.append((e.path, e.kind))
                if not complete:
                    break
        targets = plan_targets(relocation, seen) if relocation else \
            {p: p for p, _ in seen}
        items = [{"path": p, "kind": k, "target": join_target(to, targets[p])}
                 for p, k in seen[:limit]]
        return {"image": img["id"], "to": to, "to_host": host["name"], "items": items,
                "checked": len(seen), "complete": complete,
                "relocate": relocation.to_dict()}

    def start_restore(self, image_id, paths, to, to_host=None, overwrite="skip",
                      relocate=None, direct_io="auto", streams=None):
        """Queues a restore job. `relocate` ({"strip", "add", "rename": {"pattern",
        "replacement", "mode"}}, see app/relocate.py) changes where paths land under `to`;
        it is checked on the chosen paths now and on everything below them when the job
        builds its plan, before anything is written. `direct_io`: "auto" writes large files
        past the page cache where the target's file system suits it, "off" never (see
        DIRECT_IO_CHOICES). `streams`: the number of processes that restore at once when the
        image and the target are on one host (None: the host decides)."""
        from app.relocate import plan_targets
        if direct_io not in DIRECT_IO_CHOICES:
            raise ValidationError(f"direct I/O choice {direct_io!r} is unknown",
                                  hint=f"choose one of: {', '.join(DIRECT_IO_CHOICES)}")
        if streams is not None and (isinstance(streams, bool) or not isinstance(streams, int)
                                    or not 1 <= streams <= MAX_RESTORE_STREAMS):
            raise ValidationError(f"{streams!r} parallel restore streams: not a number from 1 "
                                  f"to {MAX_RESTORE_STREAMS}",
                                  hint="use 1 for one process, more for files restored by "
                                       "several processes at once, or leave it to the host "
                                       "(auto)")
        img, norm, to, host, relocation = self._restore_request(
            image_id, paths, to, to_host, overwrite, relocate)
        with self.open_index(img) as idx:
            kinds = []
            for p in norm:
                e = idx.lookup(p) if p != "/" else None
                if p != "/" and e is None:
                    raise NotFound(f"{p} is not in image {image_id}",
                                   hint=f"see `cairn browse {image_id} {os.path.dirname(p)}`")
                kinds.append((p, e.kind if e is not None else "d"))
        if relocation:
            plan_targets(relocation, kinds)
        # "reads": every image whose data the restore may read, so none expires under it.
        params = {"image": img["id"], "reads": [img["id"]] + img["sources"], "paths": norm,
                  "to": to, "to_host": host["name"],
                  "overwrite": overwrite}
        if relocation:
            params["relocate"] = relocation.to_dict()
        if direct_io != "auto":
            params["direct_io"] = direct_io
        if streams is not None:
            params["parallel_streams"] = streams
        # One transaction with the check, so that an expire job either sees this restore's
        # reads or has marked its images before (app/jobs/holds.py).
        with self.db.tx() as c:
            for iid in params["reads"]:
                row = c.execute("SELECT expiring FROM images WHERE id=?", (iid,)).fetchone()
                if row is not None and row[0] is not None:
                    raise ValidationError(f"image {iid}, which this restore reads, is being "
                                          f"removed by expire job {row[0]}",
                                          hint="restore from another image")
            return self.jobs.create("restore", client=img["client"], policy=img["policy"],
                                    schedule=img["schedule"], storage_unit=img["storage_unit"],
                                    params=params, c=c)

    # ---- running jobs ---------------------------------------------------------------------
    def wait_for(self, job_ids, timeout=None, poll=0.3):
        """Run the jobs here if no other dispatcher is active, else wait for them."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if Dispatcher.lease_holder(self.db) is None:
                if self.dispatcher.run_until_done(job_ids):
                    break
            states = [self.jobs.get(j)["state"] for j in job_ids]
            if all(s == DONE for s in states):
                break
            if deadline and time.monotonic() > deadline:
                raise CairnError("timed out waiting for jobs " + ", ".join(map(str, job_ids)))
            time.sleep(poll)
        return [self.jobs.get(j) for j in job_ids]

    # ---- the activity monitor -------------------------------------------------------------
    def restart_job(self, job_id):
        """Queues a job again with the type and parameters of one that failed or was
        canceled; returns the new jobs. What it names (policy and client, image and restore
        target) is checked again first, so a restart of something deleted since is refused
        here, not in the middle of the new job."""
        old = self.jobs.get(job_id)
        if old["state"] != DONE:
            raise ValidationError(f"job {job_id} is {old['state']}; only an ended job can be "
                                  "restarted", hint="cancel it first, or wait for it to end")
        if old["status"] in (status.OK, status.PARTIAL):
            raise ValidationError(
                f"job {job_id} ended with status {old['status']} "
                f"({status.text(old['status'])}); only a failed or canceled job is restarted",
                hint="start a new job instead, e.g. `cairn backup POLICY`")
        p = old["params"]
        if old["type"] == "backup":
            pol = self.config.policy(old["policy"])
            if old["client"] not in pol["clients"]:
                raise ValidationError(f"{old['client']!r} is no longer a client of policy "
                                      f"{old['policy']!r}",
                                      hint="add it again with `cairn policy add-client`")
            self.config.storage_unit(old["storage_unit"])
            if p.get("streams"):
                raise ValidationError(f"job {job_id} is the parent of a multi-stream backup",
                                      hint="restart the stream jobs that failed, or start a "
                                           "new backup of the policy")
            new_id = self.jobs.create("backup", client=old["client"], policy=old["policy"],
                                      schedule=old["schedule"], storage_unit=old["storage_unit"],
                                      priority=old["priority"], params=p,
                                      attempt=old["attempt"] + 1,
                                      retry_of=old["retry_of"] or job_id,
                                      note=f"attempt {old['attempt'] + 1}: restart of job "
                                           f"{job_id}")
        elif old["type"] == "restore":
            extra = {"relocate": p["relocate"]} if p.get("relocate") else {}
            new_id = self.start_restore(p["image"], p["paths"], p["to"], to_host=p.get("to_host"),
                                        overwrite=p.get("overwrite", "skip"),
                                        direct_io=p.get("direct_io", "auto"),
                                        streams=p.get("parallel_streams"), **extra)
        else:
            raise ValidationError(f"a {old['type']} job cannot be restarted")
        self.jobs.log(new_id, f"restart of job {job_id}")
        self.jobs.log(job_id, f"restarted as job {new_id}")
        return [self.jobs.get(new_id)]

    def cancel_job(self, job_id):
        """Asks a job to stop: a queued one ends here as canceled, a running one stops at its
        next check; an ended one is left as it is. Returns the job."""
        return self.jobs.request_cancel(job_id)

    def suspend_job(self, job_id):
        """Holds a queued job until it is resumed. A running job cannot be suspended: an
        advanced-disk image is one stream that cannot continue where it stopped, so it is
        canceled and restarted instead."""
        job = self.jobs.get(job_id)
        if job["state"] != "queued":
            raise ValidationError(
                f"job {job_id} is {job['state']}: only a queued job can be suspended",
                hint="an advanced-disk backup cannot resume mid-stream; cancel it and "
                     "restart it later" if job["state"] == "active" else None)
        self.jobs.set_suspended(job_id, True)
        self.jobs.log(job_id, "suspended by the administrator")
        return self.jobs.get(job_id)

    def resume_job(self, job_id):
        job = self.jobs.get(job_id)
        if not job["suspended"]:
            raise ValidationError(f"job {job_id} is not suspended")
        self.jobs.set_suspended(job_id, False)
        self.jobs.log(job_id, "resumed by the administrator")
        return self.jobs.get(job_id)

    def job_stats(self, job_id, after=None):
        """A job with its throughput samples (those after time `after` when given) and, once
        it has ended, its throughput figures (app.jobs.stats.summary over all its samples)."""
        from app.jobs import stats
        job = self.jobs.get(job_id)
        samples = self.jobs.samples(job_id, after=after)
        figures = None
        if job["state"] == DONE:
            every = samples if after is None else self.jobs.samples(job_id)
            started = timeutil.parse_iso(job["started"]) if job["started"] else None
            figures = stats.summary(every, started)
        return {"job": job, "samples": samples, "stats": figures}

    def throughput(self, window_s=300.0, step=1.0, now=None):
        """The summed data rate of all jobs over the last `window_s` seconds, one
        (t, bytes_per_s) point per `step`."""
        from app.jobs import stats
        now = time.time() if now is None else now
        # A second is complete once each running job has written its next sample (one a
        # second): ending two steps back keeps the newest point from dipping.
        end = now - 2 * step
        start = end - window_s
        # one sample before the window, so a job's rate counts from its first step
        rows = self.jobs.samples_since(start - 2 * step - 1.0)
        return stats.aggregate(rows, start, end, step)


def _image_dict(row):
    d = dict(row)
    d["selections"] = json.loads(d["selections"])
    d["sources"] = json.loads(d.get("sources") or "[]")
    # The Storage Scale snapshots the image was read from, and how its file list was made.
    d["snapshot"] = json.loads(d["snapshot"]) if d.get("snapshot") else []
    d["scan"] = json.loads(d["scan"]) if d.get("scan") else None
    # On a deduplication pool: what the image added to the pool and its deduplication rate.
    d["dedup"] = json.loads(d["dedup"]) if d.get("dedup") else None
    return d
