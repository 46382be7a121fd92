"""AdvancedDisk, the agent half: an image is a pax tar file, written as it streams in (by the
client's archiver on the storage host itself, or from the data connection), renamed into
place by the commit, read by restores and checked member by member by verify
(image_check.py). A policy that compresses makes it a zstd-compressed tar of independent
frames with a seek table (zframes.py): compressed on the storage host as it arrives
("server"), or by the client before it crosses the network ("client"). Restores, verify,
rebuild-index, imports and copies read a compressed image's tar stream through its frames.
Standard library only (zstandard for compressed images): this runs on every storage host."""

import errno
import os

from app import status
from app.errors import Canceled, CairnError, StorageError, ValidationError
from app.formats import private
from app.formats.durable import sync_dir
from app.formats.writeback import start_writeback
from plugins.storage.advanced_disk import image_check, zframes
from plugins.storage.agent_base import AgentStorage, ImageFile, Reading

WRITEBACK_EVERY = 32 << 20
# What the receiving side reads from the data connection at a time: one data-plane frame
# (app/agent/dataplane.FRAME).
RECEIVE_BYTES = 1 << 20


class FileSink:
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
                emit("log", {"level": "warning", "message": loosened_text(c)})
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


def loosened_text(c):
    if c["error"]:
        return (f"{c['path']} is open to other users (mode {c['mode']}) and cannot be made "
                f"private: {c['error']}")
    return (f"{c['path']} was open to other users (mode {c['mode']}); it is private again")


def remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _compression(spec):
    """(where, level) a backup's storage spec asks for ("server" or "client"), or None."""
    c = (spec or {}).get("compression") or {}
    if c.get("at") in ("server", "client"):
        return c["at"], int(c.get("level") or 1)
    return None


def _not_compressed_text(host_side):
    return (f"the image is stored uncompressed: {host_side}'s Python lacks the zstandard "
            "module (" + zframes.MISSING_HINT + ")")


class _FramedSink:
    """A FileSink behind a zstd FrameWriter: the archiver's (or the data connection's) tar
    stream, compressed frame by frame into the image file."""

    def __init__(self, sink, level):
        self.file = sink
        self.frames = zframes.FrameWriter(sink.write, level)
        self.write = self.frames.write

    @property
    def bytes(self):
        """The bytes of the stream taken in (as a plain image's sink counts them)."""
        return self.frames.tar_bytes + len(self.frames._buf)

    def finish(self):
        self.frames.finish()
        self.file.finish()

    def close(self):
        self.file.close()


class _FileWrite:
    """The LocalWrite of an image file: compressed here when the policy compresses (the
    client is the storage host, so "client" and "server" are one place)."""

    bases_problem = None

    def __init__(self, path, emit, spec=None):
        self.path = path
        self.sink = FileSink(path, emit)
        self.compressed = None
        want = _compression(spec)
        if want is not None and not zframes.available():
            emit("log", {"level": "warning",
                         "message": _not_compressed_text("the storage host")})
        elif want is not None:
            self.sink = _FramedSink(self.sink, want[1])
            self.compressed = {"at": "server"}

    def report(self):
        if self.compressed is None:
            return {}
        return {"compression": dict(self.compressed, **self.sink.frames.report())}

    def finish(self):
        self.sink.finish()
        self.sink.close()
        return self.report()

    def abort(self):
        self.sink.close()
        remove(self.path)


class _FileReceiver(_FileWrite):
    """The Receiver of an image file: the client's stream, as it comes when the client
    compressed it (it starts with a zstd frame), else compressed here when the policy
    compresses."""

    def __init__(self, path, emit, spec=None):
        super().__init__(path, emit, spec)
        self.listening = {"codecs": [zframes.CODEC]} if zframes.available() else {}
        self.client_compressed = False

    def take(self, chan, is_cancelled):
        mv = memoryview(bytearray(RECEIVE_BYTES))
        first = True
        while True:
            if is_cancelled():
                raise Canceled()
            n = chan.readinto(mv)
            if n == 0:
                return
            if first:
                first = False
                if bytes(mv[:4]) == zframes.MAGIC:
                    # compressed by the client: stored as it comes; finish() checks its table
                    self.client_compressed = True
                    if isinstance(self.sink, _FramedSink):
                        self.sink = self.sink.file
            self.sink.write(mv[:n])

    def finish(self):
        if self.client_compressed:
            out = self._client_frames()
            taken = out["compression"]["tar_bytes"]
        else:
            out = super().finish()
            taken = self.sink.bytes
        # bytes: the image stream's, as taken in (a copy checks them against what was sent)
        return dict(out, bytes=taken, path=self.path)

    def _client_frames(self):
        """Finishes an image the client compressed: its frame table must be whole."""
        self.sink.finish()
        self.sink.close()
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            size = os.fstat(fd).st_size
            coffs, toffs, tlens = zframes.read_table(fd, size, self.path)
        except CairnError as e:
            raise StorageError("the client's compressed image cannot be stored: "
                               + e.message) from None
        finally:
            os.close(fd)
        return {"compression": {"at": "client", "codec": zframes.CODEC,
                                "frames": len(tlens), "tar_bytes": sum(tlens),
                                "stored_bytes": size}}


class _ClientFrames:
    """The client's sink of a policy that compresses on the client: the archiver's stream
    compressed into frames before it crosses the network."""

    def __init__(self, chan, level):
        self.chan = chan
        self.frames = zframes.FrameWriter(chan.write, level)
        self.write = self.frames.write

    def finish(self):
        self.frames.finish()
        self.chan.finish()


class TarReading(Reading):
    """How restores, rebuild-index and imports read the pool's images: a plain one as the
    file it is, a compressed one through its frames (zframes.ZstdImage)."""

    def __init__(self):
        self.opened = []  # compressed images opened: readers that do not close them

    def opener(self, tolerant=False):
        def open_image(path):
            source = zframes.open_source(path, tolerant)
            if source is not None:
                self.opened.append(source)
            return source
        return open_image

    def close_streams(self):
        for source in self.opened:
            source.close()
        self.opened = []

    def close(self):
        self.close_streams()


def commit_file(partial, final):
    """Renames a finished image file to its final name, durably."""
    if os.path.exists(final):
        raise StorageError(f"{final} exists already; the image was not committed")
    try:
        os.rename(partial, final)
        sync_dir(os.path.dirname(final))
    except FileNotFoundError:
        raise CairnError(f"{partial} is gone; the image cannot be committed",
                         status_code=status.IMAGE_DAMAGED) from None
    except OSError as e:
        raise StorageError(f"committing {final} failed: {e.strerror}") from None
    return {"path": final, "bytes": os.stat(final).st_size}


_CUT_SHORT_HINT = ("verify the image (`cairn images verify IMAGE`); copy it from another "
                   "copy")


def _check_tar_end(size, tail, path):
    """Refuses a tar stream that does not end with the end-of-archive marker (two zero
    blocks) or is not made of whole blocks: a file cut short would be copied as a complete
    image."""
    if size < 1024 or size % 512 or tail != bytes(1024):
        raise CairnError(f"image file {path} is cut short: it does not end with the tar "
                         "end-of-archive marker", status_code=status.IMAGE_DAMAGED,
                         hint=_CUT_SHORT_HINT)


class TarImage(ImageFile):
    """An image file read whole for a copy in another pool (see _check_tar_end)."""

    def __init__(self, path):
        super().__init__(path)
        end = 1024
        tail = os.pread(self.fd, end, max(0, self.size - end)) if self.size >= end else b""
        try:
            _check_tar_end(self.size, tail, path)
        except CairnError:
            self.close()
            raise


class CompressedTarImage(zframes.ZstdImage):
    """A compressed image read whole for a copy in another pool: its tar stream, each frame
    checked as it is decoded (a frame that does not decode fails the copy)."""

    def __init__(self, path):
        super().__init__(path)
        tail = bytearray(min(1024, self.size))
        try:
            self.preadinto(tail, self.size - len(tail))
            _check_tar_end(self.size, bytes(tail), path)
        except CairnError:
            self.close()
            raise

    def entries(self):
        return None

    def chunk(self, fp):
        raise ValidationError("an image file has no chunks")


def verify_files(req, files, pace=None):
    """Reads image files back and checks every member the catalog lists in them (headers,
    lengths, checksums; see image_check.py). files: [{"path", "checksum", "whole",
    "members": [[offset, length, kind, checksum, path], ...]}]. A file that cannot be read
    is reported in its result, never a failure of the request."""
    if not isinstance(files, list) or not all(isinstance(f, dict) and f.get("path")
                                              for f in files):
        raise ValidationError("image_verify needs a list of files, each with its path")
    done = {"bytes": 0, "members": 0}

    def progress(nbytes, members):
        req.emit("progress", {"bytes": done["bytes"] + nbytes,
                              "files": done["members"] + members})

    out = []
    for spec in files:
        r = image_check.check_file(spec, progress=progress, is_cancelled=req.is_cancelled,
                                   pace=None if pace is None else
                                   (lambda n: pace(done["bytes"] + n)))
        done["bytes"] += r["bytes"]
        done["members"] += r["members"]
        out.append(r)
    return {"files": out, "bytes": done["bytes"], "members": done["members"]}


class AdvancedDiskAgent(AgentStorage):
    name = "advanced-disk"
    image_suffix = ".tar"

    def local_write(self, spec, path, *, emit, image_id, references):
        return _FileWrite(path, emit, spec)

    def client_sink(self, chan, spec):
        want = _compression(spec)
        if want is None or want[0] != "client":
            return chan, None
        if not zframes.available():
            return chan, ("the stream is sent uncompressed and the storage server compresses "
                          "it: the client's Python lacks the zstandard module ("
                          + zframes.MISSING_HINT + ")")
        return _ClientFrames(chan, want[1]), None

    def client_report(self, sink):
        if not isinstance(sink, _ClientFrames):
            return {}
        return {"compression": dict(sink.frames.report(), at="client")}

    def receiver(self, spec, path, emit):
        return _FileReceiver(path, emit, spec)

    def reading(self, spec):
        return TarReading()

    def image_info(self, spec, path):
        """A compressed image's frames, from its seek table (an import records them)."""
        try:
            c = zframes.describe(path)
        except OSError as e:
            raise CairnError(f"cannot open image file {path}: {e.strerror}",
                             status_code=status.IMAGE_DAMAGED) from None
        return {"compression": c} if c else {}

    def commit(self, spec, partial, final, emit=None):
        return commit_file(partial, final)

    def verify(self, req, spec, images, pace=None):
        return verify_files(req, images, pace)

    def image_source(self, spec, path):
        """The image file itself (its bytes are the image stream), or a compressed one's tar
        stream."""
        if zframes.is_compressed(path):
            return CompressedTarImage(path)
        return TarImage(path)


HALF = AdvancedDiskAgent()
