"""Storage servers, disk pools and storage units, and the jobs that look after a pool (verify,
cleanup, reclaim, import). Part of the master API (app/master/__init__.py).

The modules of those jobs are imported lazily, by the methods that queue them: every command
opens the master, and a backup or a listing needs none of them."""

from app import pool_mounts, shared_volumes
from app.errors import CairnError, ValidationError
from plugins.storage import registry


class StorageAPI:
    # ---- reading them ---------------------------------------------------------------------
    def storage_server(self, name):
        """One storage server, with its host's name and its type's options; NotFound names
        the command that creates one."""
        return self.config.storage_server(name)

    def storage_servers(self):
        """Every storage server, by name."""
        return self.config.storage_servers()

    def disk_pools(self):
        """Every disk pool, by name, with its volumes, server, server type and host."""
        return self.config.disk_pools()

    def storage_units(self):
        """Every storage unit, by name, with its pool, server, host and running jobs."""
        return self.config.storage_units()

    # ---- storage --------------------------------------------------------------------------
    def create_storage_server(self, name, *, type, host, path=None, options=None, check=True,
                              credentials=None):
        """A new storage server. A type that makes its storage path (dedup) has it created on
        the host and checked (writable; a warning when it is on a network file system), and
        with encryption at rest the master makes the pool's key (the type's create_key).
        credentials: a cloud pool's bucket credentials {"access_key", "secret_key"}, kept by
        the master beside the pools' keys; the type checks its bucket from the host."""
        path, options = self.config.validate_storage_server(
            name, type=type, host=host, path=path, options=options)
        storage_type = registry.get(type)
        warnings = []
        if storage_type.makes_path and check:
            # Another host's pool may use the same directory when it is on a shared file
            # system: a GPFS file system of the host's cluster is known before the path is
            # made, another shared mount once the host said where the path is.
            if pool_mounts.on_shared(path, pool_mounts.host_rows(self, host)):
                shared_volumes.check(self.db, [path], host, what="storage path",
                                     shared={path: True})
            conn = self.hosts.connect(self.config.host(host))
            v = conn.call("check_volumes", {"paths": [path], "create": True},
                          timeout=120)["volumes"][0]
            if not v["ok"]:
                raise ValidationError(f"storage path {path} on host {host}: {v['error']}",
                                      hint="create the directory on the storage server and "
                                           "make it writable for the agent's user")
            shared_volumes.check(self.db, [path], host, what="storage path", shared={
                path: shared_volumes.is_shared(v.get("filesystem"))})
            w = storage_type.path_warning(v.get("filesystem"))
            if w:
                warnings.append(w)
        storage_type.create_key(self.home, name, options, credentials=credentials)
        try:
            if check:
                conn = self.hosts.connect(self.config.host(host))
                warnings += storage_type.check_server(
                    lambda op, args: conn.call(op, args, timeout=120),
                    {"name": name, "path": path, "options": options}, self.home)
            srv = self.config.add_storage_server(name, type=type, host=host, path=path,
                                                 options=options)
        except BaseException:
            storage_type.remove_key(self.home, name, options)
            raise
        srv["warnings"] = warnings
        if (options or {}).get("encrypted"):
            srv["key_file"] = self.home.key_path(name)   # to be backed up by the admin
        return srv

    def check_volumes(self, server, volumes):
        srv = self.config.storage_server(server)
        conn = self.hosts.connect(self.config.host(srv["host"]))
        return conn.call("check_volumes", {"paths": volumes}, timeout=120)["volumes"]

    def create_disk_pool(self, name, *, server, volumes, high_water=98, low_water=80,
                         max_io_streams=None, compact_below=None, check=True, comment=""):
        """compact_below: a deduplicating pool's compaction threshold in percent (default
        app.config.DEFAULT_COMPACT_BELOW). check: each volume is checked on the storage
        server's host first (it exists and the agent's user can write to it; a volume on a
        shared file system is refused where another host's pool uses it, or a directory
        around or inside it), and the pool comes back with "warnings" (pool_mounts: a file
        system the volume should be on that is not mounted there)."""
        vols, *_ = self.config.validate_disk_pool(
            name, server=server, volumes=volumes, high_water=high_water, low_water=low_water,
            max_io_streams=max_io_streams, compact_below=compact_below)
        warnings = []
        if check:
            srv = self.config.storage_server(server)
            checked = self.check_volumes(server, vols)
            bad = [v for v in checked if not v["ok"]]
            if bad:
                raise ValidationError(
                    "volume " + "; ".join(f"{v['path']}: {v['error']}" for v in bad)
                    + f" (on host {srv['host']})",
                    hint="create the directory on the storage server and make it writable "
                         "for the agent's user, then try again")
            # Other hosts' pools count where the volume is on a shared file system: a
            # parallel or network mount, or a GPFS file system of the host's cluster.
            rows = pool_mounts.host_rows(self, srv["host"])
            shared_volumes.check(self.db, vols, srv["host"], server=server, shared={
                v["path"]: shared_volumes.is_shared(v.get("filesystem"))
                or pool_mounts.on_shared(v["path"], rows) for v in checked})
            warnings = pool_mounts.warnings(self, server, vols, rows=rows)
        pool = self.config.add_disk_pool(name, server=server, volumes=vols,
                                         high_water=high_water, low_water=low_water,
                                         max_io_streams=max_io_streams,
                                         compact_below=compact_below, comment=comment)
        pool["warnings"] = warnings
        return pool

    def disk_pools_checked(self):
        """Every disk pool, each with "warnings" (pool_mounts) read from its storage server's
        host now: `disk-pool list --check`. Each host is probed once."""
        read = {}
        pools = self.config.disk_pools()
        for p in pools:
            p["warnings"] = pool_mounts.warnings(self, p["server"], p["volumes"],
                                                 pool=p["name"], read=read)
            p["host_readable"] = read.get(p["host"]) is not None
        return pools

    def disk_pool_report(self, name):
        """One disk pool as `disk-pool show` gives it: its attributes, each volume as its
        storage server's host finds it now ("checks": exists, writable, size, free, file
        system; empty with "error" when the host cannot be reached) and "warnings" on file
        systems it should be on that are not mounted there (pool_mounts)."""
        pool = self.config.disk_pool(name)
        try:
            pool["checks"] = self.check_volumes(pool["server"], pool["volumes"])
            pool["error"] = None
        except CairnError as e:
            pool["checks"], pool["error"] = [], e.message
        pool["warnings"] = pool_mounts.warnings(self, pool["server"], pool["volumes"],
                                                pool=name) if pool["error"] is None else []
        return pool

    def create_storage_unit(self, name, *, pool, max_concurrent_jobs=1, comment=""):
        """A storage unit on a disk pool: what policies write to."""
        return self.config.add_storage_unit(name, pool=pool,
                                            max_concurrent_jobs=max_concurrent_jobs,
                                            comment=comment)

    # ---- benchmarks -----------------------------------------------------------------------
    def start_storage_benchmark(self, server, volumes=None, workload=None, max_pairs=None,
                                force=False, min_threads=None, max_threads=None, step=None,
                                object_size=None, **tuning):
        """Queues a benchmark of a storage server. workload `stgpool` or `db`: the disk
        benchmark (app/jobs/benchmark.py), thread pairs on `volumes` (default: its pools'
        volumes), up to max_pairs pairs (default 8); tuning: step_seconds, max_step_seconds,
        interval, file_size. workload `object`, for a server whose pool is in a bucket: the
        object storage benchmark of the bucket (app/jobs/object_benchmark.py), min_threads to
        max_threads by step, objects of object_size bytes; tuning: objects_per_thread,
        seconds, ranged_size, ranged_per_thread, part_size. workload None: object for a server
        with a bucket, else stgpool. Refused while backups or restores use the pool, unless
        `force`."""
        from app.jobs import benchmark, object_benchmark
        srv = self.config.storage_server(server)
        bucket = object_benchmark.has_bucket(srv)
        if workload is None:
            workload = object_benchmark.WORKLOAD if bucket else "stgpool"
        threads = dict(min_threads=min_threads, max_threads=max_threads, step=step,
                       object_size=object_size)
        if workload != object_benchmark.WORKLOAD:
            given = [k for k, v in threads.items() if v is not None]
            if given:
                raise ValidationError(f"{given[0]} is a setting of the object benchmark of a "
                                      f"cloud server's bucket, not of the {workload} disk "
                                      "benchmark", hint="give --max-pairs to the disk "
                                                        "benchmark")
            return benchmark.make_job(self, server, volumes=volumes, workload=workload,
                                      max_pairs=benchmark.DEFAULT_PAIRS if max_pairs is None
                                      else max_pairs, force=force, **tuning)
        for what, value in (("volumes", volumes), ("max_pairs", max_pairs)):
            if value not in (None, []):
                raise ValidationError(f"{what} is for the disk benchmark; the object "
                                      f"benchmark measures the bucket of storage server "
                                      f"{server}", hint="give --workload stgpool or db to "
                                                        "measure its cache's disks")
        return object_benchmark.make_job(self, server, force=force, **threads, **tuning)

    def storage_benchmarks(self, server=None, limit=100):
        """The recorded benchmark runs, newest first, each with its steps and sizing verdict
        (app/storage_sizing.py)."""
        from app.jobs import benchmark
        return benchmark.runs(self, server, limit)

    # ---- deduplication pools -------------------------------------------------------------
    def start_verify(self, image=None, pool=None):
        """Queues a verify job of an image or a whole disk pool (every pool type)."""
        from app.jobs import pool_jobs
        return pool_jobs.make_verify_job(self, image=image, pool=pool)

    def verify_due(self, now=None):
        """Queues the scheduled verify jobs of pools whose verify interval has passed."""
        from app.jobs import pool_jobs
        return pool_jobs.verify_due(self, now)

    def start_cleanup(self, pool, dry_run=False):
        """Queues a cleanup job of a disk pool (any type): removes the pool files that no
        catalog image owns and that are older than every running backup (app/jobs/cleanup.py);
        dry_run only lists them."""
        from app.jobs import cleanup
        return cleanup.make_job(self, pool, dry_run=dry_run)

    def start_import(self, pool, key_file=None):
        """Queues an import of a disk pool (any type): records every image on the pool that
        the catalog does not know, from what the image says about itself (app/jobs/
        pool_import.py). key_file: a file holding an encrypted pool's key the master does not
        have; the master keeps it once it opened the pool."""
        from app.jobs import pool_import
        return pool_import.make_job(self, pool, key_file=key_file)

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
