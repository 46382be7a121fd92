"""What an agent can be asked to do. Each handler takes the request (for emit and cancel) and
the request's arguments, and returns the result dict or raises CairnError.

The modules of one operation (the archiver, the restore, the index reader, the data plane
between hosts, Storage Scale's commands and snapshots, pool files) are imported lazily, by
the handler that needs them: the agent starts once per job over SSH and answers its hello
before it loads what backups and restores need (app/agent/server.py, PRELOAD), and nothing
else until a request asks for it.
What it loads at its start anyway (the restore I/O checks, the file systems, the image
format) is imported here at the top."""

import os
import platform
import socket
import stat
import sys

from app import status
from app.errors import CairnError, Canceled, ValidationError
from app.agent.restore_io import suits_target
from app.formats import pace, private
from app.formats.durable import sync_dir
from app.formats.tarfmt import PIECE_HASHES
from plugins.filesystems import posix
from plugins.storage import agents

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
    from plugins.filesystems import storage_scale
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
    out = []
    for p in paths:
        v = {"path": p, "ok": False, "size": None, "free": None, "error": None}
        try:
            if create:
                # a new storage server's storage path (a type that makes its path):
                # its own, private from the start
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

@handler
def backup(req, selections, image_meta, dest, checksum="sha256", excludes=None,
           previous=None, snapshot="none", file_list="walk", since=None, references=None,
           skip_nodump=False, exclude_names=None):
    """Client side of a backup. dest is {"mode": "file", "path": partial, "storage": spec}
    when the storage is on this host, or {"mode": "net", "host", "port", "cert", "token",
    "storage": the client's part of the spec} to stream to the storage server's agent; the
    spec's type says which storage half writes or sends the image (plugins/storage/agents.py).
    snapshot, file_list and since: see app/agent/scale_backup.py. references: a files cache
    for a full (app/formats/changes.py), with previous; its base images are the spec's
    "bases" when the pool is on this host. The summary adds the snapshots read from and how
    the file list was made."""
    from app.agent.scale_backup import Preparation
    if dest["mode"] not in ("file", "net"):
        raise ValidationError(f"unknown destination mode {dest['mode']!r}")
    half = agents.get(dest.get("storage"))
    prep = Preparation(selections, snapshot=snapshot, file_list=file_list,
                       job_id=image_meta.get("job_id"), since=since, emit=req.emit,
                       is_cancelled=req.is_cancelled)
    try:
        prep.start()
        # prep.report(): what the catalog records of the snapshots and the file list, in the
        # image too (its summary member), so that an import finds it there
        kw = dict(emit=req.emit, emit_encoded=req.emit_encoded,
                  is_cancelled=req.is_cancelled, image_meta=image_meta,
                  checksum=checksum, excludes=dict(excludes or {}, **prep.excludes),
                  exclude_names=exclude_names,
                  previous=previous, read_from=prep.read_from, listing=prep.listing,
                  unchanged_before_ns=prep.unchanged_before_ns, references=references,
                  skip_nodump=skip_nodump, summary_extra=prep.report())
        if dest["mode"] == "file":
            summary = _write_here(req, half, dest, selections, kw)
        else:
            summary = _send(req, half, dest, selections, kw)
    finally:
        left = prep.finish()
    summary.update(prep.report())
    summary["snapshots_left"] = [s["name"] for s in left]
    return summary


def _write_here(req, half, dest, selections, kw):
    """The image written on this host, the storage host, by the storage type's sink."""
    from app.agent.archiver import backup_to
    write = half.local_write(dest.get("storage"), dest["path"], emit=req.emit,
                             image_id=kw["image_meta"].get("image_id"),
                             references=bool(kw["references"]))
    if kw["references"] and write.bases_problem:
        req.emit("log", {"level": "warning", "message": "files cache not used, every file "
                         "is read: " + write.bases_problem})
        kw.update(previous=None, references=None)
    try:
        summary = backup_to(write.sink, selections, **kw)
        summary.update(write.finish())
    except BaseException:
        write.abort()
        raise
    return summary


def _send(req, half, dest, selections, kw):
    """The image sent to the storage host's agent over the data plane, through the storage
    type's client sink."""
    from app.agent import dataplane
    from app.agent.archiver import backup_to
    chan = dataplane.connect(dest["host"], dest["port"], dest["cert"], dest["token"])
    try:
        out, note = half.client_sink(chan, dest.get("storage"))
        if note:
            req.emit("log", {"level": "warning", "message": note})
        summary = backup_to(out, selections, **kw)
        out.finish()
        summary.update(half.client_report(out))
    finally:
        chan.close()
    return summary


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@handler
def delete_snapshots(req, snapshots):
    """Delete the snapshots of a backup whose agent was killed: [[device, name, fileset]]."""
    from app.agent.scale_backup import delete_snapshots as delete
    return {"snapshots": delete([tuple(s) for s in snapshots])}


def _listening(listener):
    """The listening event: the port, and why it is open on every address when it is."""
    return {"port": listener.port, "address": listener.address, "note": listener.note}


@handler
def receive_image(req, path, cert, key, token, storage=None, bind=None):
    """Storage side of a backup from another host: listen, take the stream, write the
    partial image (as the storage spec's type does), confirm. The image is committed later by
    commit_image. bind: the address the client is told (see dataplane.Listener)."""
    from app.agent import dataplane
    half = agents.get(storage)
    listener = dataplane.Listener(cert, key, token, bind=bind)
    receiver = None
    try:
        receiver = half.receiver(storage, path, req.emit)
        req.emit("listening", dict(_listening(listener), **receiver.listening))
        chan = listener.accept(req.is_cancelled)
        listener.close()
        try:
            receiver.take(chan, req.is_cancelled)
            result = receiver.finish()
            chan.ack(True)
        except BaseException:
            chan.ack(False)
            raise
        finally:
            chan.close()
        return result
    except BaseException:
        if receiver is not None:
            receiver.abort()
        raise
    finally:
        listener.close()


@handler
def commit_image(req, partial, final, storage=None):
    """Makes a finished image visible under its final name, atomically and durably."""
    return agents.get(storage).commit(storage, partial, final, emit=req.emit)


@handler
def abort_image(req, partial):
    _remove(partial)
    return {}


@handler
def remove_image(req, path, storage=None):
    """Removes a committed image, wherever its pool's type keeps it (storage: its spec)."""
    agents.get(storage).remove_image(storage, path)
    return {}


@handler
def check_storage(req, storage):
    """What a new storage server's type checks on its host beyond its path (a cloud pool:
    its bucket and credentials)."""
    return agents.get(storage).check_server(storage)


@handler
def set_aside_image(req, path, aside, back=False):
    """Moves a committed image file out of the way under a partial name in its folder (a
    repair writes a good copy in its place), or with `back` puts it back (the repair
    failed). A partial name is never taken for an image, so a process stopped in between
    leaves an image a verify names as missing, never a damaged one taken for good."""
    if not (isinstance(path, str) and isinstance(aside, str) and path.startswith("/")
            and os.path.dirname(path) == os.path.dirname(aside)
            and os.path.basename(aside).startswith(".") and aside.endswith(".partial")
            and not os.path.basename(path).startswith(".")):
        raise ValidationError("set_aside_image needs an image path and a partial name in the "
                              "same folder")
    src, dst = (aside, path) if back else (path, aside)
    if os.path.lexists(dst):
        raise CairnError(f"{dst} exists already; {src} was not moved",
                         status_code=status.STORAGE_WRITE_FAILED)
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        raise CairnError(f"{src} is gone", status_code=status.IMAGE_DAMAGED) from None
    sync_dir(os.path.dirname(path))
    return {}


@handler
def commit_file(req, partial, final):
    """Makes a plain file the master wrote on this host (a catalog backup: over SFTP, or by
    the master itself on its own machine) durable under its final name: its data synced,
    renamed, the folder synced. The partial name starts with a dot in the same folder, so
    that a writer killed half-way leaves nothing that looks complete."""
    if not (isinstance(partial, str) and isinstance(final, str) and final.startswith("/")
            and os.path.dirname(partial) == os.path.dirname(final)
            and os.path.basename(partial).startswith(".")
            and not os.path.basename(final).startswith(".")):
        raise ValidationError("commit_file needs a partial name starting with a dot and a "
                              "final name in the same folder")
    try:
        fd = os.open(partial, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise CairnError(f"{partial} is gone; it cannot be committed",
                         status_code=status.STORAGE_WRITE_FAILED) from None
    try:
        os.fsync(fd)
        os.fchmod(fd, private.FILE_MODE)
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if os.path.lexists(final):
        raise CairnError(f"{final} exists already; {partial} was not committed",
                         status_code=status.STORAGE_WRITE_FAILED)
    os.rename(partial, final)
    sync_dir(os.path.dirname(final))
    return {"path": final, "bytes": size}


@handler
def stat_path(req, path):
    try:
        st = os.stat(path)
    except OSError as e:
        return {"exists": False, "error": e.strerror}
    return {"exists": True, "size": st.st_size, "is_dir": stat.S_ISDIR(st.st_mode)}


# ---- restore --------------------------------------------------------------------------------

def _direct(target_dir, direct_io):
    """restore_from's direct and direct_for for a request's direct_io ("auto" or "off")."""
    if direct_io == "off":
        return {"direct": False}
    if direct_io != "auto":
        raise ValidationError(f"direct_io must be 'auto' or 'off', not {direct_io!r}")
    return {"direct": suits_target(target_dir), "direct_for": suits_target}


@handler
def restore(req, image_path, extents, plan, target_dir, overwrite="skip", checksum="sha256",
            image_paths=None, storage=None, direct_io="auto", streams=None):
    """Restore when the image and the target are on this host: no network at all.
    image_paths: the image files of an incremental chain, which extents name by position.
    storage: the pool's storage spec, whose type says how its images are read. streams: the
    number of processes that restore at once (None: see restore_streams)."""
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
        reading = agents.get(storage).reading(storage)
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
def send_extents(req, image_path, extents, cert, key, token, image_paths=None, storage=None,
                 bind=None):
    """Storage side of a restore to another host: serve the image's members to the peer."""
    from app.agent import dataplane
    from app.agent.extents import copy_extents
    used = {e[2] for e in extents if len(e) > 2} or {0}
    for k, p in enumerate(image_paths or [image_path]):
        if k in used and not os.path.exists(p):
            raise CairnError(f"image file {p} is missing", status_code=status.IMAGE_DAMAGED)
    reading = agents.get(storage).reading(storage)
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
def index_image(req, image_path, checksum, storage=None):
    """Reads an image back, member by member, and sends the rows of its catalog index as
    "rows" events in batches (see app/agent/reindex.py): for `cairn images rebuild-index`.
    storage: the pool's storage spec, whose type says how the image is read."""
    from app.agent import reindex
    if checksum not in PIECE_HASHES:
        raise ValidationError(f"unknown checksum algorithm {checksum!r}")
    reading = agents.get(storage).reading(storage)
    images = []
    try:
        open_source = reading.opener()
        first = open_source(image_path) if open_source is not None else None
        if first is None:  # the image file is read as it is
            images = [reindex.FileImage(image_path)]
        else:
            # two readers of one stream: the members, and the trailing index beside them
            images = [reindex.StreamImage(first)]
            images.append(reindex.StreamImage(open_source(image_path)))
        return reindex.index_image(images[0], checksum=checksum, emit=req.emit,
                                   is_cancelled=req.is_cancelled, trailing=images[-1])
    finally:
        for image in images:
            image.close()
        reading.close_streams()
        reading.close()


@handler
def restore_receive(req, host, port, cert, token, plan, target_dir, overwrite="skip",
                    checksum="sha256", direct_io="auto", lengths=None):
    """Target side of a restore from another host's storage. lengths: each plan item's
    member length in the stream (see restore_from)."""
    from app.agent import dataplane
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


# ---- copies of images in other pools (a lifecycle's duplications) ----------------------------

@handler
def send_image(req, image_path, storage, sink, host, port, cert, token):
    """Source side of a copy to another host's pool: the image read from its pool, sent to
    the target's receiving side (receive_image) through the target type's client sink."""
    from app.agent import duplicate
    return duplicate.send_image(req, image_path, storage, sink, host, port, cert, token)


@handler
def copy_image(req, image_path, storage, partial, target, image_id):
    """A copy between two pools of this host: the image read from its pool (`storage`),
    written under `partial` by the target pool's type (`target`), committed later by
    commit_image."""
    from app.agent import duplicate
    return duplicate.copy_here(req, image_path, storage, partial, target, image_id)


# ---- pools: verify, space reclaim, usage, chunk index -----------------------------------------

@handler
def pool_verify(req, storage, images=None, max_bytes_per_s=None):
    """Reads images (or, where the type can, the whole pool) back and reports the damage
    found, as the storage spec's type does (its verifier, plugins/storage/base.py), at most
    max_bytes_per_s (the pool's verify pace) when given."""
    if max_bytes_per_s is not None and (not isinstance(max_bytes_per_s, int)
                                        or isinstance(max_bytes_per_s, bool)
                                        or max_bytes_per_s <= 0):
        raise ValidationError("max_bytes_per_s must be a positive number of bytes")
    return agents.get(storage).verify(req, storage, images,
                                      pace.make(max_bytes_per_s, req.is_cancelled))


@handler
def pool_reclaim(req, storage, compact_below=0.5, known=None, min_age_s=None):
    """Space reclaim of a pool whose type has it: removes what no image references any more.
    known, min_age_s: the image ids the catalog knows and the age beyond which an image file
    no catalog image owns is an orphan, whose data is not kept."""
    if (known is None) != (min_age_s is None):
        raise ValidationError("known and min_age_s go together")
    if known is not None:
        if not isinstance(known, list) or not all(isinstance(i, str) for i in known):
            raise ValidationError("known must be a list of image ids")
        _age(min_age_s, "min_age_s")
    return agents.get(storage).reclaim(req, storage, compact_below, known, min_age_s)


@handler
def pool_open(req, storage):
    """Opens the pool a backup is about to write to (AgentStorage.warm), while the master
    still prepares the backup's request: the backup finds it open."""
    agents.get(storage).warm(storage)
    return {}


@handler
def pool_usage(req, storage):
    """What a pool whose type keeps chunks holds: chunks and bytes."""
    return agents.get(storage).usage(storage)


@handler
def pool_rebuild_index(req, storage):
    """Rebuilds a pool's chunk index from its containers alone."""
    return agents.get(storage).rebuild_index(storage)


# ---- importing a pool's images -------------------------------------------------------------

@handler
def pool_images(req, storage, volumes, image_dir, skip):
    """The committed images of a pool whose ids are not in `skip`, each with what it says
    about itself ("images" events; app/agent/pool_import.py), for an import."""
    from app.agent import pool_import
    _pool_place(volumes, image_dir)
    if not isinstance(skip, list) or not all(isinstance(i, str) for i in skip):
        raise ValidationError("skip must be a list of image ids")
    return pool_import.list_images(req, storage, volumes, image_dir, skip)


@handler
def image_rows(req, storage, path, index, data_start, data_end):
    """The rows of an image's own trailing index, for an import (app/agent/pool_import.py)."""
    from app.agent import pool_import
    if not isinstance(path, str) or not path.startswith("/") or not isinstance(index, dict):
        raise ValidationError("image_rows needs an image path and its index's place")
    return pool_import.image_rows(req, storage, path, index, data_start, data_end)


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


# ---- modes of pools ---------------------------------------------------------------------------

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


# ---- benchmarks -------------------------------------------------------------------------------

@handler
def disk_benchmark(req, volumes, workload="stgpool", max_pairs=8, step_seconds=10.0,
                   max_step_seconds=None, interval=None, file_size=1 << 30):
    """Thread pairs writing and reading on the volumes, one more pair per step, until the
    combined throughput stabilizes (app/agent/diskbench.py): "step" events, then the steps
    and what they found. Its files are removed whatever ends it."""
    from app.agent.diskbench import DiskBenchmark
    for name, value in (("step_seconds", step_seconds), ("interval", interval),
                        ("max_step_seconds", max_step_seconds)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or value <= 0):
            raise ValidationError(f"{name} must be a positive number of seconds")
    return DiskBenchmark(volumes, workload=workload, max_pairs=max_pairs,
                         step_seconds=step_seconds, max_step_seconds=max_step_seconds,
                         interval=interval, file_size=file_size, emit=req.emit,
                         is_cancelled=req.is_cancelled).run()


@handler
def object_benchmark(req, bucket, min_threads=1, max_threads=8, step=1, object_size=None,
                     objects_per_thread=None, seconds=None, ranged_size=None,
                     ranged_per_thread=None, part_size=None):
    """Threads uploading objects to a cloud pool's bucket, reading them back and reading
    ranges of them, min_threads to max_threads (plugins/storage/cloud/objbench.py): "step"
    events, then the steps. bucket: the bucket spec, credentials included. Its objects are
    removed whatever ends it. An argument left out (None) takes the benchmark's default."""
    from plugins.storage.cloud.objbench import ObjectBenchmark
    given = {"object_size": object_size, "objects_per_thread": objects_per_thread,
             "seconds": seconds, "ranged_size": ranged_size,
             "ranged_per_thread": ranged_per_thread, "part_size": part_size}
    return ObjectBenchmark(bucket, min_threads=min_threads, max_threads=max_threads, step=step,
                           emit=req.emit, is_cancelled=req.is_cancelled,
                           **{k: v for k, v in given.items() if v is not None}).run()
