"""A cloud pool's chunk store: the deduplication store (plugins/storage/dedup/store.py) kept on
the storage host as a cache, with everything that makes the pool also in a bucket.

Objects in the bucket, under the pool's prefix:
    pool.json                   the pool's format, encryption flag and key check (never a key)
    containers/NNNNNNNN.ctr     a sealed container, byte for byte as in the cache
    containers/NNNNNNNN.idx     the chunks it holds (IDX_RECORD each), so that a cache is
                                rebuilt without reading the containers
    images/CLIENT/ID.recipe     a committed image's recipe

In the cache, beside containers/NNNNNNNN.ctr, a note containers/NNNNNNNN.cloud (holding the
container's size) says the container and its .idx are in the bucket. A .ctr without a note is
waiting for its upload; a note without a .ctr is a container trimmed from the cache, fetched
again when a chunk of it is read. The note is written only once both objects are stored and
is removed only when the container is deleted, so the container's number stays taken, the
store lists it, and a reclaim finds it, whether or not the cache holds its bytes.

Sealed containers are uploaded as they are sealed, by UPLOADERS threads (each in parallel
parts), while the backup goes on; the commit of an image waits until every container is in
the bucket, then uploads the recipe, then makes the image committed in the cache: an image is
committed only once the bucket holds all of it. A pool whose backups end once the cache
holds them (upload_on_seal False) leaves the uploads until the image is committed: on a
storage host short of cores, uploads beside the ingest would slow the backup they are meant
not to hold up."""

import fcntl
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

from app import status as st
from app.formats import private
from plugins.storage.cloud.bucket import Bucket, BucketError
from plugins.storage.dedup.chunk_index import Location
from plugins.storage.dedup.containers import _container_number, container_name, fsync_dir
from plugins.storage.dedup.store import POOL_FILE, ChunkStore

UPLOADERS = 2
# A container the cache lacks is read record by record (ranged GETs) for its first this many
# reads, or this share of its size, then fetched whole.
RANGED_READS = 8
RANGED_SHARE = 0.125
# Recipes committed in the cache whose upload is queued (a pool whose jobs end once the cache
# holds the image): a file per recipe, named as it, holding its name in the bucket.
PENDING_DIR = "cloud-pending"
NOTE_SUFFIX = ".cloud"
FETCH_SUFFIX = ".fetching"  # held (flock) by the process fetching the container
IDX_MAGIC = b"CRNDIDX\x00"
IDX_RECORD = struct.Struct(">32sQI")  # fingerprint, offset of the record, stored length
CONTAINERS = "containers/"
IMAGES = "images/"
# Without a cache limit, containers in the bucket are trimmed from the cache when its file
# system has less than this share free.
AUTO_FREE = 0.10


def container_object(number):
    return CONTAINERS + container_name(number)


def index_object(number):
    return CONTAINERS + container_name(number)[:-len(".ctr")] + ".idx"


def index_bytes(entries):
    return IDX_MAGIC + b"".join(IDX_RECORD.pack(bytes(fp), loc.offset, loc.stored_length)
                                for fp, loc in entries)


def parse_index(number, data, name):
    if data[:len(IDX_MAGIC)] != IDX_MAGIC or (len(data) - len(IDX_MAGIC)) % IDX_RECORD.size:
        raise BucketError(f"{name} in the bucket is not a container index",
                          status_code=st.IMAGE_DAMAGED)
    return [(fp, Location(number, offset, length))
            for fp, offset, length in IDX_RECORD.iter_unpack(data[len(IDX_MAGIC):])]


def _write_private(path, data):
    """A small file written whole and durably, private, under its final name at once."""
    tmp = path + ".new"
    fd = private.create(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class Remote:
    """A bucket behind a store (plugins/storage/dedup/ingest.open_store's `remote`): spec is
    the storage spec's "bucket" part; cache_limit the most bytes of containers the cache keeps
    (None: trimmed when its file system runs low)."""

    def __init__(self, spec, cache_limit=None, upload_on_seal=True):
        self.spec = dict(spec)
        self.cache_limit = cache_limit
        self.upload_on_seal = upload_on_seal
        self.ident = (spec["endpoint"], spec["bucket"], spec.get("prefix") or "",
                      spec["access_key"], cache_limit, upload_on_seal)

    def make(self, root, key=None, keyless=False):
        return CloudStore(root, key=key, keyless=keyless, bucket=lambda: Bucket(self.spec),
                          cache_limit=self.cache_limit, upload_on_seal=self.upload_on_seal)


class CloudStore(ChunkStore):
    """A ChunkStore whose containers are also in the bucket `bucket()` makes (see the
    module's docstring)."""

    def __init__(self, root, *, bucket, cache_limit=None, upload_on_seal=True, **kw):
        self._make_bucket = bucket
        self.upload_on_seal = upload_on_seal
        self._bucket = bucket()
        self._pid = os.getpid()
        self._inherited = []  # the clients of the processes this one was forked from
        self.cache_limit = cache_limit
        self._uploads = {}  # container number -> Future of its upload
        self._entries = {}  # container number -> its entries, known when it was sealed here
        self._upload_lock = threading.Lock()
        self._fetch_lock = threading.Lock()
        self._pool = None
        self._ranged = {}  # container number -> (ranged reads, bytes) of one not in the cache
        self._drainer = None
        self._drain_again = False
        self._config_in_bucket = False
        root = os.path.abspath(root)
        from_bucket = False
        if not os.path.exists(os.path.join(root, POOL_FILE)):
            # an empty cache of a pool the bucket holds: its pool.json decides what the pool
            # is (encrypted or not, its key check) before the store opens it
            config = self._bucket_config()
            if config is not None:
                os.close(private.makedirs(root, top=True))
                _write_private(os.path.join(root, POOL_FILE), config)
                from_bucket = self._config_in_bucket = True
        super().__init__(root, **kw)
        if from_bucket:
            self.sync_from_bucket()

    @property
    def bucket(self):
        """The bucket's client of this process. A restore's forked parts (app/agent/
        restore_streams.py) get a copy of the store whose client's pooled connections are the
        agent's sockets, which a part closes at once, and whose numbers its own files may take
        next: a part makes a client of its own, and keeps the inherited one referenced and
        unused (collected, it would close descriptors by number). A part ends with os._exit."""
        if self._pid != os.getpid():
            self._inherited.append(self._bucket)
            self._bucket = self._make_bucket()
            self._pid = os.getpid()
            self._upload_lock = threading.Lock()
            self._fetch_lock = threading.Lock()
            self._pool = None  # the parent's upload threads are not in this process
            self._uploads = {}
            self._drainer = None
        return self._bucket

    def _bucket_config(self):
        if self.bucket.size(POOL_FILE) is None:
            return None
        return self.bucket.get_bytes(POOL_FILE)

    # ---- what the cache holds -------------------------------------------------------------
    def _note_path(self, number):
        return os.path.join(self.containers_dir, container_name(number)[:-len(".ctr")]
                            + NOTE_SUFFIX)

    def _listed(self):
        """({numbers with a .ctr}, {numbers with a note})"""
        ctr, noted = set(), set()
        for name in os.listdir(self.containers_dir):
            n = _container_number(name)
            if n is None:
                continue
            if name.endswith(".ctr"):
                ctr.add(n)
            elif name.endswith(NOTE_SUFFIX):
                noted.add(n)
        return ctr, noted

    def committed_containers(self):
        ctr, noted = self._listed()
        return sorted(ctr | noted)

    def container_bytes(self, number):
        size = super().container_bytes(number)
        if size is not None:
            return size
        try:
            with open(self._note_path(number), "rb") as f:
                return int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return None

    def cache_usage(self):
        """{"containers", "cached", "cached_bytes", "waiting", "waiting_bytes",
        "waiting_recipes"}: what the cache holds of the pool's containers, and what is not in
        the bucket yet."""
        ctr, noted = self._listed()
        out = {"containers": len(ctr | noted), "cached": len(ctr), "cached_bytes": 0,
               "waiting": 0, "waiting_bytes": 0, "waiting_recipes": len(self.pending_recipes())}
        for n in ctr:
            size = super().container_bytes(n) or 0
            out["cached_bytes"] += size
            if n not in noted:
                out["waiting"] += 1
                out["waiting_bytes"] += size
        return out

    # ---- uploads ---------------------------------------------------------------------------
    def container_sealed(self, number, size, entries):
        self._entries[number] = list(entries)
        if self.upload_on_seal:
            self._submit(number)

    def _submit(self, number):
        self.bucket  # noqa: B018 - first: in a forked process, its own client and locks
        with self._upload_lock:
            future = self._uploads.get(number)
            if future is not None and not (future.done() and future.exception()):
                return future
            if self._pool is None:
                self._pool = ThreadPoolExecutor(UPLOADERS, thread_name_prefix="cloud-upload")
            future = self._uploads[number] = self._pool.submit(self._upload, number)
            return future

    def _upload(self, number):
        path = self.container_path(number)
        entries = self._entries.get(number)
        if entries is None:  # sealed by another process, or before this one started
            entries = [(header[1], Location(number, offset, header[4]))
                       for offset, header, error in self._scan(number, decode=False)
                       if header is not None and error is None]
        self.bucket.put_file(container_object(number), path)
        self.bucket.put_bytes(index_object(number), index_bytes(entries))
        _write_private(self._note_path(number), str(os.stat(path).st_size).encode())
        fsync_dir(self.containers_dir)
        self._entries.pop(number, None)

    def flush_uploads(self, numbers=None, progress=None):
        """Uploads the containers not in the bucket yet (those given, or every one), the
        uploads already running included, and waits for them; raises the first failure
        after every one has been tried. progress(containers done, of, bytes done, of) is
        called as each one ends."""
        if not self._config_in_bucket:
            self.bucket.put_file(POOL_FILE, self.config_path)
            self._config_in_bucket = True
        every = numbers is None
        if every:
            ctr, noted = self._listed()
            numbers = sorted(ctr - noted)
        else:
            numbers = [n for n in numbers if not os.path.exists(self._note_path(n))]
        sizes = [super(CloudStore, self).container_bytes(n) or 0 for n in numbers]
        futures = [self._submit(n) for n in numbers]
        failed = None
        done = done_bytes = 0
        for f, size in zip(futures, sizes):
            try:
                f.result()
            except FileNotFoundError:
                continue  # deleted by a reclaim since the listing
            except BaseException as e:  # noqa: BLE001 - raised once every upload has ended
                failed = failed or e
            done += 1
            done_bytes += size
            if progress is not None and futures:
                progress(done, len(futures), done_bytes, sum(sizes))
        if failed is not None:
            raise failed
        with self._upload_lock:
            for n in numbers:
                f = self._uploads.get(n)
                if f is not None and f.done():
                    del self._uploads[n]
        if every:
            # the containers first: a recipe in the bucket never names one that is not
            self.upload_pending()
        return len(numbers)

    # ---- recipes whose upload is queued ------------------------------------------------------
    def _pending_dir(self):
        return os.path.join(self.root, PENDING_DIR)

    def pending_recipes(self):
        try:
            return sorted(os.listdir(self._pending_dir()))
        except FileNotFoundError:
            return []

    def queue_recipe(self, name, path):
        """Notes a committed recipe (object `name`, file `path`) whose upload waits for the
        containers, and starts a thread that uploads what is waiting."""
        os.close(private.makedirs(self._pending_dir(), own=1))
        _write_private(os.path.join(self._pending_dir(), os.path.basename(path)),
                       name.encode())
        fsync_dir(self._pending_dir())
        self._drain()

    def upload_pending(self):
        """Uploads the queued recipes (their containers are in the bucket: flush_uploads
        calls this after them). A recipe removed meanwhile (expired) is forgotten."""
        for base in self.pending_recipes():
            note = os.path.join(self._pending_dir(), base)
            try:
                with open(note, "rb") as f:
                    name = f.read().decode()
            except FileNotFoundError:
                continue
            path = os.path.join(self.root, *name.split("/"))
            if os.path.exists(path):
                self.put_recipe(name, path)
            try:
                os.unlink(note)
            except FileNotFoundError:
                pass

    def _drain(self):
        """Uploads everything waiting on a thread of its own, unless one does already; a
        failure leaves it waiting for the pool's next job, which uploads it first."""
        self.bucket  # noqa: B018 - first: in a forked process, its own client and locks
        with self._upload_lock:
            if self._drainer is not None and self._drainer.is_alive():
                self._drain_again = True
                return
            self._drain_again = False
            self._drainer = threading.Thread(target=self._drain_loop, name="cloud-drain",
                                             daemon=True)
            self._drainer.start()

    def _drain_loop(self):
        while True:
            try:
                self.flush_uploads()
            except Exception:  # noqa: BLE001 - what failed waits for the next job
                return
            with self._upload_lock:
                if not self._drain_again:
                    self._drainer = None
                    return
                self._drain_again = False

    def containers_written(self, numbers):
        # a reclaim's new containers are in the bucket before the index names them and the
        # old ones are deleted there
        self.flush_uploads(numbers)

    def put_recipe(self, root_relative, path):
        self.bucket.put_file(root_relative, path)

    # ---- reading what is not in the cache --------------------------------------------------
    def read_missing(self, number, offset, length):
        """The first chunks read of a container the cache lacks come with ranged GETs of
        their records alone: a restore of a few files out of a large image reads what it
        needs, not whole containers. Once a container's reads pass RANGED_READS or a
        RANGED_SHARE of its size, it is fetched whole into the cache for the rest."""
        bucket = self.bucket  # first: in a forked part, its own client and locks
        with self._fetch_lock:
            reads, got = self._ranged.get(number, (0, 0))
            size = self.container_bytes(number) or 0
            if reads >= RANGED_READS or (size and got + length > size * RANGED_SHARE):
                return None
            self._ranged[number] = (reads + 1, got + length)
        return bucket.get_bytes(container_object(number), offset, length)

    def fetch_container(self, number):
        path = self.container_path(number)
        bucket = self.bucket  # first: in a forked part, its own client and locks
        with self._fetch_lock:
            if os.path.exists(path):
                return True
            # one process fetches a container at a time; the others wait, then find it
            lock = path[:-len(".ctr")] + FETCH_SUFFIX
            fd = private.create(lock, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.path.exists(path):
                    return True
                name = container_object(number)
                if bucket.size(name) is None:
                    return False
                bucket.get_file(name, path)
                if not os.path.exists(self._note_path(number)):
                    _write_private(self._note_path(number),
                                   str(os.stat(path).st_size).encode())
                return True
            finally:
                try:
                    os.unlink(lock)
                except FileNotFoundError:
                    pass
                os.close(fd)

    # ---- checking the bucket ---------------------------------------------------------------
    def check_bucket(self, emit=None):
        """Compares the bucket's containers with the notes that say they are there. A
        container missing from the bucket, or of another size, is uploaded again when the
        cache holds it whole; otherwise its note goes, so that the pool's verify finds its
        chunks missing and names the images that use them (their chunks are set aside, and
        the next backup of the same data stores them again). Returns {"checked",
        "uploaded_again", "lost"} (container names)."""
        ctr, noted = self._listed()
        sizes = dict(self.bucket.names(CONTAINERS))
        out = {"checked": len(noted), "uploaded_again": [], "lost": []}
        for n in sorted(noted):
            name = container_object(n)
            expected = self.container_bytes(n)
            found = sizes.get(name)
            if found is not None and found == expected and index_object(n) in sizes:
                continue
            what = ("is missing from the bucket" if found is None else
                    f"has {found} bytes in the bucket, not {expected}" if found != expected
                    else "has no chunk list (.idx) in the bucket")
            if n in ctr and super().container_bytes(n) == expected:
                os.unlink(self._note_path(n))
                self.flush_uploads([n])
                out["uploaded_again"].append(name)
                text = f"container {name} {what}: uploaded again from the cache"
            else:
                os.unlink(self._note_path(n))
                out["lost"].append(name)
                text = (f"container {name} {what}, and the cache does not hold it: its "
                        "chunks are lost")
            if emit is not None:
                emit("log", {"level": "warning", "message": text})
        return out

    # ---- removing ---------------------------------------------------------------------------
    def delete_container(self, number):
        noted = os.path.exists(self._note_path(number))
        if noted or self._uploads.get(number) is not None:
            future = self._uploads.pop(number, None)
            if future is not None:
                try:
                    future.result()
                except BaseException:  # noqa: BLE001 - the objects are deleted either way
                    pass
            self.bucket.delete([container_object(number), index_object(number)])
        here = super().delete_container(number)
        try:
            os.unlink(self._note_path(number))
        except FileNotFoundError:
            pass
        return here or noted

    def trim(self):
        """Removes containers that are in the bucket from the cache, oldest first, until the
        cache is below its limit (or its file system has AUTO_FREE free); returns
        (containers, bytes) removed."""
        ctr, noted = self._listed()
        cached = []
        total = 0
        for n in ctr:
            try:
                s = os.stat(self.container_path(n))
            except FileNotFoundError:
                continue
            total += s.st_size
            if n in noted:
                cached.append((s.st_mtime, n, s.st_size))
        if self.cache_limit is not None:
            excess = total - self.cache_limit
        else:
            vfs = os.statvfs(self.containers_dir)
            excess = int(vfs.f_blocks * vfs.f_frsize * AUTO_FREE
                         - vfs.f_bavail * vfs.f_frsize)
        removed = freed = 0
        for _, n, size in sorted(cached):
            if excess <= 0:
                break
            try:
                os.unlink(self.container_path(n))
            except FileNotFoundError:
                continue
            excess -= size
            removed += 1
            freed += size
        return removed, freed

    # ---- a cache made from the bucket ------------------------------------------------------
    def sync_from_bucket(self):
        """Takes what the bucket holds and the cache lacks: a note for each container (its
        chunks indexed from its .idx) and each recipe. Returns {"containers", "recipes"}
        taken."""
        ctr, noted = self._listed()
        known = ctr | noted
        objects = self.bucket.names(CONTAINERS)
        sizes = {name: size for name, size in objects}
        added = 0
        with self._locked():
            self._refresh()
            for name, size in objects:
                n = _container_number(name[len(CONTAINERS):])
                if n is None or not name.endswith(".ctr") or n in known:
                    continue
                idx = index_object(n)
                if idx in sizes:
                    entries = parse_index(n, self.bucket.get_bytes(idx), idx)
                else:
                    entries = None
                _write_private(self._note_path(n), str(size).encode())
                if entries is None:  # read the container itself
                    self.fetch_container(n)
                    entries = [(h[1], Location(n, off, h[4]))
                               for off, h, err in self._scan(n, decode=False)
                               if h is not None and err is None]
                self._append_index(entries)
                added += 1
        fsync_dir(self.containers_dir)
        recipes = 0
        for name, size in self.bucket.names(IMAGES):
            parts = name.split("/")
            if len(parts) != 3 or not parts[2].endswith(".recipe") or \
                    any(p in ("", ".", "..") or p.startswith(".") for p in parts[1:]):
                continue  # not a name this pool writes: never a path outside the cache
            path = os.path.join(self.root, *parts)
            if os.path.exists(path):
                continue
            os.close(private.makedirs(os.path.dirname(path), own=2))
            self.bucket.get_file(name, path)
            recipes += 1
        return {"containers": added, "recipes": recipes}

    def close_uploads(self):
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
