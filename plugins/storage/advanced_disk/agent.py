"""AdvancedDisk, the agent half: an image is a plain pax tar file, written as it streams in
(by the client's archiver on the storage host itself, or from the data connection), renamed
into place by the commit, read as it is by restores, and checked member by member by verify
(image_check.py). Standard library only: this runs on every storage host."""

import errno
import os

from app import status
from app.errors import Canceled, CairnError, StorageError, ValidationError
from app.formats import private
from app.formats.durable import sync_dir
from app.formats.writeback import start_writeback
from plugins.storage.advanced_disk import image_check
from plugins.storage.agent_base import AgentStorage, ImageFile

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


class _FileWrite:
    """The LocalWrite of an image file."""

    bases_problem = None

    def __init__(self, path, emit):
        self.path = path
        self.sink = FileSink(path, emit)

    def finish(self):
        self.sink.finish()
        self.sink.close()
        return {}

    def abort(self):
        self.sink.close()
        remove(self.path)


class _FileReceiver(_FileWrite):
    """The Receiver of an image file: the client's stream, as it comes."""

    listening = {}

    def take(self, chan, is_cancelled):
        mv = memoryview(bytearray(RECEIVE_BYTES))
        write = self.sink.write
        while True:
            if is_cancelled():
                raise Canceled()
            n = chan.readinto(mv)
            if n == 0:
                return
            write(mv[:n])

    def finish(self):
        super().finish()
        return {"bytes": self.sink.bytes, "path": self.path}


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


class TarImage(ImageFile):
    """An image file read whole for a copy in another pool: refused when it does not end with
    the tar end-of-archive marker (two zero blocks) or is not made of whole blocks, since a
    file cut short would be copied as a complete image."""

    def __init__(self, path):
        super().__init__(path)
        end = 1024
        tail = os.pread(self.fd, end, max(0, self.size - end)) if self.size >= end else b""
        if self.size < end or self.size % 512 or tail != bytes(end):
            self.close()
            raise CairnError(f"image file {path} is cut short: it does not end with the tar "
                             "end-of-archive marker", status_code=status.IMAGE_DAMAGED,
                             hint="verify the image (`cairn images verify IMAGE`); copy it "
                                  "from another copy")


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
        return _FileWrite(path, emit)

    def receiver(self, spec, path, emit):
        return _FileReceiver(path, emit)

    def commit(self, spec, partial, final, emit=None):
        return commit_file(partial, final)

    def verify(self, req, spec, images, pace=None):
        return verify_files(req, images, pace)

    def image_source(self, spec, path):
        """The image file itself: its bytes are the image stream."""
        return TarImage(path)


HALF = AdvancedDiskAgent()
