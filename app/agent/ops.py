"""What an agent can be asked to do. Each handler takes the request (for emit and cancel) and
the request's arguments, and returns the result dict or raises CairnError."""

import errno
import os
import platform
import socket
import stat
import sys

from app import status
from app.agent import dataplane
from app.errors import CairnError, Canceled, StorageError, ValidationError
from app.formats import directio, private
from app.formats.writeback import start_writeback

HANDLERS = {}


def handler(fn):
    HANDLERS[fn.__name__] = fn
    return fn


def _accelerators():
    found = []
    for mod in ("isal", "zstandard", "pyfastcdc", "cryptography", "xxhash", "blake3"):
        try:
            __import__(mod)
            found.append(mod)
        except ImportError:
            pass
    return found


def _os_release():
    info = {}
    try:
        with open("/etc/os-release") as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                info[k] = v.strip('"')
    except OSError:
        pass
    return info.get("PRETTY_NAME") or platform.system()


def _memory():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


@handler
def ping(req):
    return {"pong": True, "pid": os.getpid()}


@handler
def probe(req):
    from plugins.filesystems import posix, storage_scale
    u = platform.uname()
    # A cluster that cannot be read is reported, never a reason for the probe to fail; the
    # short per-command timeout keeps the whole probe within the master's wait.
    try:
        scale = storage_scale.cluster_info(timeout=20)
    except storage_scale.ScaleError as e:
        scale = e.to_dict()
    except Exception as e:  # noqa: BLE001
        scale = {"error": f"the Storage Scale cluster could not be read: {e}", "hint": None}
    return {
        "hostname": socket.getfqdn(),
        "os": _os_release(),
        "kernel": u.release,
        "machine": u.machine,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "cpus": os.cpu_count(),
        "memory_bytes": _memory(),
        "uid": os.getuid(),
        "accelerators": _accelerators(),
        "filesystems": posix.filesystems(),
        "storage_scale": scale,
    }


@handler
def check_volumes(req, paths, create=False):
    """For each path: exists, is a directory, writable, size, free, file system."""
    from plugins.filesystems import posix
    out = []
    for p in paths:
        v = {"path": p, "ok": False, "size": None, "free": None, "error": None}
        try:
            if create:
                # a new deduplicating pool's storage path: its own, private from the start
                os.close(private.makedirs(p))
            st = os.stat(p)
            if not stat.S_ISDIR(st.st_mode):
                v["error"] = "not a directory"
            else:
                # One agent serves concurrent jobs: the name must differ per call, not only
                # per process.
                probe_name = os.path.join(
                    p, f".cairn-write-test-{os.getpid()}-{os.urandom(6).hex()}")
                try:
                    fd = os.open(probe_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    os.close(fd)
                    os.unlink(probe_name)
                except OSError as e:
                    v["error"] = f"not writable: {e.strerror}"
                vfs = os.statvfs(p)
                v["size"] = vfs.f_blocks * vfs.f_frsize
                v["free"] = vfs.f_bavail * vfs.f_frsize
                v["filesystem"] = posix.filesystem_of(p)
                v["ok"] = v["error"] is None
        except FileNotFoundError:
            v["error"] = "does not exist"
        except OSError as e:
            v["error"] = e.strerror or str(e)
        out.append(v)
    return {"volumes": out}


@handler
def list_dir(req, path):
    """One directory of the host's file system, for picking backup selections."""
    try:
        entries = []
        with os.scandir(path) as it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                kind = ("d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode)
                        else "f" if stat.S_ISREG(st.st_mode) else "o")
                entries.append({"name": e.name, "kind": kind, "size": st.st_size,
                                "mtime": st.st_mtime})
    except OSError as e:
        raise ValidationError(f"cannot list {path}: {e.strerror}") from None
    entries.sort(key=lambda x: x["name"])
    return {"path": path, "entries": entries}


# ---- backup ---------------------------------------------------------------------------------

WRITEBACK_EVERY = 32 << 20


class _FileSink:
    """Writes an image being made on this host. Holds the fd so the caller can fsync.

    The commit must fsync the image; to keep that final wait short, writeback of what was
    written is started every few dozen MiB while the backup goes on."""

    # The image's folder (the client's) and the pool's image folder above it are Cairn's
    # own, private like the image: their names tell which clients are backed up and when.
    OWN_FOLDERS = 2

    def __init__(self, path, emit=None):
        changed = []
        try:
            dfd = private.makedirs(os.path.dirname(path), own=self.OWN_FOLDERS,
                                   changed=changed)
            try:
                self.fd = private.create(os.path.basename(path), os.O_WRONLY | os.O_EXCL,
                                         dir_fd=dfd)
            finally:
                os.close(dfd)
        except FileExistsError:
            raise StorageError(f"{path} exists already: another backup writes it") from None
        except OSError as e:
            raise StorageError(f"cannot create {path}: {e.strerror}") from None
        for c in changed:
            if emit is not None:
                emit("log", {"level": "warning", "message": _loosened_text(c)})
        self.path = path
        self.bytes = 0
        self._flushed = 0

    def write(self, data):
        mv = memoryview(data)
        while mv:
            try:
                n = os.write(self.fd, mv)
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    raise StorageError(f"the volume holding {self.path} is full") from None
                raise StorageError(f"writing {self.path} failed: {e.strerror}") from None
            mv = mv[n:]
            self.bytes += n
        if self.bytes - self._flushed >= WRITEBACK_EVERY:
            start_writeback(self.fd, self._flushed, self.bytes - self._flushed)
            self._flushed = self.bytes

    def finish(self):
        try:
            os.fsync(self.fd)
        except OSError as e:
            raise StorageError(f"flushing {self.path} failed: {e.strerror}") from None

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _loosened_text(c):
    if c["error"]:
        return (f"{c['path']} is open to other users (mode {c['mode']}) and cannot be made "
                f"private: {c['error']}")
    return (f"{c['path']} was open to other users (mode {c['mode']}); it is private again")


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@handler
def backup(req, selections, image_meta, dest, checksum="sha256", excludes=None,
           previous=None, snapshot="none", file_list="walk", since=None, references=None,
           skip_nodump=False):
    """Client side of a backup. dest is {"mode": "file", "path": partial} when the storage
    is on this host, or {"mode": "net", "host", "port", "cert", "token"} to stream to the
    storage server's agent. snapshot, file_list and since: see app/agent/scale_backup.py.
    references: a files cache for a full into a deduplication pool (app/formats/changes.py),
    with previous; its base images are dest["dedup"]["bases"] when the pool is on this host.
    The summary adds the snapshots read from and how the file list was made."""
    from app.agent.archiver import backup_to
    from app.agent.scale_backup import Preparation
    if dest["mode"] not in ("file", "net"):
        raise ValidationError(f"unknown destination mode {dest['mode']!r}")
    prep = Preparation(selections, snapshot=snapshot, file_list=file_list,
                       job_id=image_meta.get("job_id"), since=since, emit=req.emit,
                       is_cancelled=req.is_cancelled)
    try:
        prep.start()
        kw = dict(emit=req.emit, is_cancelled=req.is_cancelled, image_meta=image_meta,
                  checksum=checksum, excludes=dict(excludes or {}, **prep.excludes),
                  previous=previous, read_from=prep.read_from, listing=prep.listing,
                  unchanged_before_ns=prep.unchanged_before_ns, references=references,
                  skip_nodump=skip_nodump)
        dedup = dest.get("dedup")
        if dest["mode"] == "file" and dedup:
            from app.dedup.ingest import Ingest
            ingest = Ingest(dedup["root"], dest["path"], params=dedup.get("params"),
                            key=dedup.get("key"), image_id=image_meta.get("image_id"),
                            bases=dedup.get("bases") if references else None)
            if references and ingest.bases_problem:
                req.emit("log", {"level": "warning", "message": "files cache not used, every "
                                 "file is read: " + ingest.bases_problem})
                kw.update(previous=None, references=None)
            try:
                summary = backup_to(ingest, selections, **kw)
                summary["dedup"] = ingest.finish({})
            except BaseException:
                ingest.abort()
                _remove(dest["path"])
                raise
        elif dest["mode"] == "file":
            sink = _FileSink(dest["path"], req.emit)
            try:
                summary = backup_to(sink, selections, **kw)
                sink.finish()
            except BaseException:
                sink.close()
                _remove(dest["path"])
                raise
            sink.close()
        else:
            chan = dataplane.connect(dest["host"], dest["port"], dest["cert"], dest["token"])
            out = chan
            if dedup:
                from app.dedup.wire import client_sink
                out, note = client_sink(chan, dedup.get("mode"), dedup.get("params"))
                if note:
                    req.emit("log", {"level": "warning", "message": note})
            try:
                summary = backup_to(out, selections, **kw)
                out.finish()
                if hasattr(out, "report"):
                    summary["client_dedup"] = out.report()
                if dedup:
                    summary["dedup_mode"] = "client" if hasattr(out, "report") else "server"
            finally:
                chan.close()
    finally:
        left = prep.finish()
    summary.update(prep.report())
    summary["snapshots_left"] = [s["name"] for s in left]
    return summary


@handler
def delete_snapshots(req, snapshots):
    """Delete the snapshots of a backup whose agent was killed: [[device, name, fileset]]."""
    from app.agent.scale_backup import delete_snapshots as delete
    return {"snapshots": delete([tuple(s) for s in snapshots])}


def _listening(listener):
    """The listening event: the port, and why it is open on every address when it is."""
    return {"port": listener.port, "address": listener.address, "note": listener.note}


def _pump(chan, write, is_cancelled):
    """Everything the peer sends on the data connection, to write(), until its clean end."""
    mv = memoryview(bytearray(dataplane.FRAME))
    while True:
        if is_cancelled():
            raise Canceled()
        n = chan.readinto(mv)
        if n == 0:
            return
        write(mv[:n])


def _receive_dedup(req, path, cert, key, token, dedup, bind):
    """receive_image into a deduplication pool: the stream (server-side deduplication) or
    queries and new chunks only (client-side), and a files cache's references. The listening
    event says whether the files cache's base images can be used (bases_problem)."""
    from app.dedup import wire
    from app.dedup.ingest import Ingest
    listener = dataplane.Listener(cert, key, token, bind=bind)
    ingest = None
    try:
        ingest = Ingest(dedup["root"], path, params=dedup.get("params"), key=dedup.get("key"),
                        image_id=dedup.get("image_id"), bases=dedup.get("bases"))
        req.emit("listening", dict(_listening(listener), bases_problem=ingest.bases_problem))
        chan = listener.accept(req.is_cancelled)
        listener.close()
        try:
            wire.serve(chan, ingest, req.is_cancelled)
            stats = ingest.finish({})
            chan.ack(True)
        except BaseException:
            chan.ack(False)
            raise
        finally:
            chan.close()
        stats["mode"] = dedup.get("mode") or "server"
        return {"bytes": stats["bytes"], "path": path, "dedup": stats}
    except BaseException:
        if ingest is not None:
            ingest.abort()
        _remove(path)
        raise
    finally:
        listener.close()


@handler
def receive_image(req, path, cert, key, token, dedup=None, bind=None):
    """Storage side of a backup from another host: listen, take the stream, write the
    partial image, confirm. The image is committed later by commit_image. bind: the address
    the client is told (see dataplane.Listener)."""
    if dedup:
        return _receive_dedup(req, path, cert, key, token, dedup, bind)
    listener = dataplane.Listener(cert, key, token, bind=bind)
    sink = None
    try:
        sink = _FileSink(path, req.emit)
        req.emit("listening", _listening(listener))
        chan = listener.accept(req.is_cancelled)
        listener.close()
        try:
            _pump(chan, sink.write, req.is_cancelled)
            sink.finish()
            chan.ack(True)
        except BaseException:
            chan.ack(False)
            raise
        finally:
            chan.close()
        sink.close()
        return {"bytes": sink.bytes, "path": path}
    except BaseException:
        if sink is not None:
            sink.close()
            _remove(path)
        raise
    finally:
        listener.close()


@handler
def commit_image(req, partial, final, dedup=None):
    """Makes a finished image visible under its final name, atomically and durably."""
    if dedup:
        from app.dedup.ingest import commit_recipe
        if not os.path.exists(partial):
            raise CairnError(f"{partial} is gone; the image cannot be committed",
                               status_code=status.IMAGE_DAMAGED)
        size = commit_recipe(dedup["root"], partial, final, key=dedup.get("key"))
        return {"path": final, "bytes": size}
    if os.path.exists(final):
        raise StorageError(f"{final} exists already; the image was not committed")
    try:
        os.rename(partial, final)
        dfd = os.open(os.path.dirname(final), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except FileNotFoundError:
        raise CairnError(f"{partial} is gone; the image cannot be committed",
                           status_code=status.IMAGE_DAMAGED) from None
    except OSError as e:
        raise StorageError(f"committing {final} failed: {e.strerror}") from None
    return {"path": final, "bytes": os.stat(final).st_size}


@handler
def abort_image(req, partial):
    _remove(partial)
    return {}


@handler
def remove_image(req, path):
    _remove(path)
    return {}


@handler
def stat_path(req, path):
    try:
        st = os.stat(path)
    except OSError as e:
        return {"exists": False, "error": e.strerror}
    return {"exists": True, "size": st.st_size, "is_dir": stat.S_ISDIR(st.st_mode)}


# ---- restore --------------------------------------------------------------------------------

class _ImageReading:
    """How a restore reads its images: files, or recipes of a deduplication pool (read under
    a session so that space reclaim does not move chunks meanwhile)."""

    def __init__(self, dedup):
        self.dedup = dedup
        self.session = None
        self.recipes = {}
        self.streams = []  # the recipe streams opened: a part may turn their read-ahead off
        if dedup:
            from app.dedup.ingest import SESSION_TIMEOUT, open_store
            self.store = open_store(dedup["root"], dedup.get("key"))
            self.session = self.store.session(timeout=SESSION_TIMEOUT)

    def opener(self, tolerant=False):
        """How to open an image's source; a tolerant one reads a damaged or missing chunk as
        zeros and notes it (its `damage`), so that only the files that use it are lost."""
        if not self.dedup:
            return None
        from app.dedup.recipe import RecipeStream, read_recipe

        def open_recipe(path):
            # Through the session: its containers stay open while the restore reads them.
            # Each chunk's record is checked (crc32, length, an encrypted one's tag), and each
            # restored file against its checksum from the catalog, so the SHA-256 of every
            # chunk, about a sixth of a restore's CPU time, is left to verify jobs.
            recipe = self.recipes.get(path)
            if recipe is None:
                recipe = self.recipes[path] = read_recipe(path)  # read once for all streams
            source = _RecipeSource()
            stream = RecipeStream(self.session, recipe, check_fingerprints=False,
                                  on_damage=source.damaged if tolerant else None)
            self.streams.append(stream)
            source.take(stream)
            return source
        return open_recipe

    def forked(self, parts):
        """In a forked process, one of `parts` that restore at once: locks of the store and
        the session that another thread may have held at the fork are made anew (see
        restore_streams). With at least as many parts as cores, each part decodes its
        chunks in its own thread: the processes keep the cores busy, and handing every
        chunk to read-ahead threads and back cost a sixth of the CPU time of a restore of
        small files, and as much of its time."""
        if self.session is not None:
            self.session.forked()
        if parts >= (os.cpu_count() or 1):
            for stream in self.streams:
                stream.stop_reading_ahead()

    def close(self):
        if self.session is not None:
            self.session.close()
            self.session = None


class _RecipeSource:
    def __init__(self):
        self.stream = None
        self.size = 0
        self.damage = []  # (stream offset, length, what) read past

    def take(self, stream):
        self.stream = stream
        self.size = stream.size

    def damaged(self, offset, length, what):
        self.damage.append((offset, length, what))

    def preadinto(self, mv, pos):
        return self.stream.preadinto(mv, pos)

    def close(self):
        close = getattr(self.stream, "close", None)
        if close is not None:
            close()


def _direct(target_dir, direct_io):
    """restore_from's direct and direct_for for a request's direct_io ("auto" or "off")."""
    if direct_io == "off":
        return {"direct": False}
    if direct_io != "auto":
        raise ValidationError(f"direct_io must be 'auto' or 'off', not {direct_io!r}")
    return {"direct": directio.suits_target(target_dir), "direct_for": directio.suits_target}


@handler
def restore(req, image_path, extents, plan, target_dir, overwrite="skip", checksum="sha256",
            image_paths=None, dedup=None, direct_io="auto", streams=None):
    """Restore when the image and the target are on this host: no network at all.
    image_paths: the image files of an incremental chain, which extents name by position.
    dedup: {"root", "key"} when the images are recipes of a deduplication pool. streams:
    the number of processes that restore at once (None: see restore_streams)."""
    from app.agent.extents import ExtentReader
    from app.agent.restore_target import OpenTarget
    from app.agent.restore_streams import restore_in_streams
    if len(extents) != len(plan):
        raise ValidationError(f"the restore has {len(plan)} plan items but {len(extents)} "
                             f"extents")
    if streams is not None and (type(streams) is not int or streams < 1):
        raise ValidationError(f"streams must be a whole number of 1 or more, not {streams!r}")
    with OpenTarget(target_dir) as target:
        direct = _direct(target_dir, direct_io)
        reading = _ImageReading(dedup)
        try:
            def source_for(indexes):
                return ExtentReader(image_paths or image_path, [extents[i] for i in indexes],
                                    reading.opener(tolerant=True), tolerant=True)

            summary = restore_in_streams(source_for, target, plan, overwrite=overwrite,
                                         emit=req.emit, is_cancelled=req.is_cancelled,
                                         checksum=checksum, sizes=[e[1] for e in extents],
                                         after_fork=reading.forked, streams=streams, **direct)
        finally:
            reading.close()
        target.publish()
        return summary


@handler
def send_extents(req, image_path, extents, cert, key, token, image_paths=None, dedup=None,
                 bind=None):
    """Storage side of a restore to another host: serve the image's members to the peer."""
    from app.agent.extents import copy_extents
    used = {e[2] for e in extents if len(e) > 2} or {0}
    for k, p in enumerate(image_paths or [image_path]):
        if k in used and not os.path.exists(p):
            raise CairnError(f"image file {p} is missing", status_code=status.IMAGE_DAMAGED)
    reading = _ImageReading(dedup)
    try:
        listener = dataplane.Listener(cert, key, token, bind=bind)
        try:
            req.emit("listening", _listening(listener))
            chan = listener.accept(req.is_cancelled)
        finally:
            listener.close()
        damage = []
        try:
            # Past damage: the target's agent loses only the files there (their checksums
            # do not match) and names them; what was damaged is told here.
            n = copy_extents(image_paths or image_path, extents, chan,
                             is_cancelled=req.is_cancelled,
                             opener=reading.opener(tolerant=True), tolerant=True,
                             damage=damage)
            chan.finish()
        finally:
            chan.close()
            for what in damage:
                req.emit("warning", {"path": image_path or "", "message": "damaged image "
                                     "data read as zeros (the files there are not "
                                     "restored): " + what})
    finally:
        reading.close()
    return {"bytes": n, "damaged_ranges": len(damage)}


@handler
def index_image(req, image_path, checksum, dedup=None):
    """Reads an image back, member by member, and sends the rows of its catalog index as
    "rows" events in batches (see app/agent/reindex.py): for `cairn images rebuild-index`.
    dedup: {"root", "key"} when the image is a recipe of a deduplication pool."""
    from app.agent import reindex
    from app.formats.tarfmt import PIECE_HASHES
    if checksum not in PIECE_HASHES:
        raise ValidationError(f"unknown checksum algorithm {checksum!r}")
    reading = _ImageReading(dedup)
    images = []
    try:
        if dedup:
            open_recipe = reading.opener()
            # two readers of one stream: the members, and the trailing index beside them
            images = [reindex.StreamImage(open_recipe(image_path).stream) for _ in range(2)]
        else:
            images = [reindex.FileImage(image_path)]
        return reindex.index_image(images[0], checksum=checksum, emit=req.emit,
                                   is_cancelled=req.is_cancelled, trailing=images[-1])
    finally:
        for image in images:
            image.close()
        for stream in reading.streams:
            stream.close()
        reading.close()


@handler
def restore_receive(req, host, port, cert, token, plan, target_dir, overwrite="skip",
                    checksum="sha256", direct_io="auto", lengths=None):
    """Target side of a restore from another host's storage. lengths: each plan item's
    member length in the stream (see restore_from)."""
    from app.agent.extract import restore_from
    from app.agent.restore_target import OpenTarget
    with OpenTarget(target_dir) as target:
        direct = _direct(target_dir, direct_io)
        chan = dataplane.connect(host, port, cert, token)
        try:
            summary = restore_from(chan, target, plan, overwrite=overwrite, emit=req.emit,
                                   is_cancelled=req.is_cancelled, checksum=checksum,
                                   lengths=lengths, **direct)
            chan.drain()
            chan.ack(True)
        finally:
            chan.close()
        target.publish()
    return summary


# ---- deduplication pools --------------------------------------------------------------------

@handler
def dedup_verify(req, root, key=None, recipes=None):
    """Reads images (recipes given) or the whole pool back and checks every chunk; damage is
    reported per image as byte ranges of its stream."""
    from app.dedup import pool
    from app.dedup.ingest import SESSION_TIMEOUT, open_store
    store = open_store(root, key)
    # "modes": what was open to other users (and is private now)
    modes = (pool.check_recipe_modes(recipes) if recipes
             else pool.check_modes(store, root, req.is_cancelled))
    with store.session(timeout=SESSION_TIMEOUT) as session:
        if recipes:
            out = pool.verify_images(store, recipes, emit=req.emit,
                                     is_cancelled=req.is_cancelled, session=session)
        else:
            out = pool.verify_pool(store, root, emit=req.emit, is_cancelled=req.is_cancelled)
    out["modes"] = modes
    return out


@handler
def dedup_reclaim(req, root, key=None, compact_below=0.5, known=None, min_age_s=None):
    """Removes chunks no image references any more and compacts containers. Refused (PoolBusy)
    while a backup, restore or verify uses the pool. known, min_age_s: the image ids the
    catalog knows and the age beyond which a recipe no catalog image owns is an orphan, whose
    chunks are not kept (see pool.live_fingerprints)."""
    from app.dedup import pool
    from app.dedup.ingest import open_store
    if (known is None) != (min_age_s is None):
        raise ValidationError("known and min_age_s go together")
    if known is not None:
        if not isinstance(known, list) or not all(isinstance(i, str) for i in known):
            raise ValidationError("known must be a list of image ids")
        _age(min_age_s, "min_age_s")
    store = open_store(root, key, keyless=True)
    removed = []
    orphans = []

    def live():
        fps, gone = pool.live_fingerprints(root, known=known, min_age_s=min_age_s,
                                           orphans=orphans)
        removed.extend(gone)
        return fps
    stats = store.reclaim(live, compact_below=compact_below, is_cancelled=req.is_cancelled)
    if stats.get("cancelled"):
        raise Canceled()
    stats["stale_recipes_removed"] = removed
    stats["orphan_recipes_removed"] = orphans
    stats["pool"] = store.stats()
    return stats


@handler
def dedup_stats(req, root, key=None):
    from app.dedup.ingest import open_store
    return open_store(root, key, keyless=True).stats()


@handler
def dedup_rebuild_index(req, root, key=None):
    """Rebuilds the chunk index from the containers alone."""
    from app.dedup.ingest import SESSION_TIMEOUT, open_store
    store = open_store(root, key, keyless=True)
    with store.session(timeout=SESSION_TIMEOUT):
        return store.rebuild_index()


# ---- pool files no catalog image owns ----------------------------------------------------------

def _pool_place(volumes, image_dir):
    if not isinstance(volumes, list) or not all(isinstance(v, str) and v.startswith("/")
                                                for v in volumes):
        raise ValidationError("volumes must be a list of absolute paths")
    if not isinstance(image_dir, str) or not image_dir or "/" in image_dir \
            or image_dir in (".", ".."):
        raise ValidationError(f"image_dir must be a folder name, not {image_dir!r}")


def _age(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValidationError(f"{what} must be a number of seconds, not {value!r}")


@handler
def pool_files(req, volumes, image_dir):
    """The image files of a disk pool's volumes with their ages (app/formats/poolfiles.py)."""
    from app.formats import poolfiles
    _pool_place(volumes, image_dir)
    return poolfiles.list_files(volumes, image_dir)


@handler
def remove_pool_files(req, paths, volumes, image_dir, min_age_s):
    """Removes orphan files of a disk pool, each only if it is still an old pool file."""
    from app.formats import poolfiles
    _pool_place(volumes, image_dir)
    _age(min_age_s, "min_age_s")
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ValidationError("paths must be a list of paths")
    return poolfiles.remove_files(paths, volumes, image_dir, min_age_s)


# ---- verify of AdvancedDisk images and modes of pools ---------------------------------------

@handler
def image_verify(req, files):
    """Reads image files back and checks every member the catalog lists in them (headers,
    lengths, checksums; see app/agent/image_check.py). files: [{"path", "checksum",
    "whole", "members": [[offset, length, kind, checksum, path], ...]}]. A file that cannot
    be read is reported in its result, never a failure of the request."""
    from app.agent import image_check
    if not isinstance(files, list) or not all(isinstance(f, dict) and f.get("path")
                                              for f in files):
        raise ValidationError("image_verify needs a list of files, each with its path")
    done = {"bytes": 0, "members": 0}

    def progress(nbytes, members):
        req.emit("progress", {"bytes": done["bytes"] + nbytes,
                              "files": done["members"] + members})

    out = []
    for spec in files:
        r = image_check.check_file(spec, progress=progress, is_cancelled=req.is_cancelled)
        done["bytes"] += r["bytes"]
        done["members"] += r["members"]
        out.append(r)
    return {"files": out, "bytes": done["bytes"], "members": done["members"]}


@handler
def make_private(req, paths):
    """Makes every folder and file below each of `paths` (the image folders of a pool)
    private to the agent's user, and says what was open to other users: [{"path", "mode",
    "error"}] (app/formats/private.py). A path that does not exist is skipped."""
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("/")
                                              for p in paths):
        raise ValidationError("make_private needs a list of absolute paths")
    changed = []
    for path in paths:
        try:
            private.walk(path, changed, req.is_cancelled)
        except OSError as e:
            changed.append({"path": path, "mode": None, "error": e.strerror or str(e)})
        if req.is_cancelled():
            raise Canceled()
    return {"modes": changed}
