"""The container files of a chunk store (plugins/storage/dedup/store.py): their names, their
header, the directory fsync that makes a rename durable, and the containers a pool session
keeps open; ChunkStore's part that numbers, lists and scans them."""

import errno
import fcntl
import os
import struct
import threading

from app.formats import private
# the pool's modules sync their folders through this name
from app.formats.durable import sync_dir as fsync_dir  # noqa: F401
from app.formats.tarfmt import crc32 as _crc32
from plugins.storage.dedup.encoding import RECORD_HEADER, RECORD_MAGIC, _decode_record, \
    _valid_codec_byte
from plugins.storage.dedup.errors import _write_failed

CONTAINER_MAGIC = b"CRNDCTR\x00"
CONTAINER_VERSION = 1
CONTAINER_HEADER = struct.Struct(">8sII")  # magic, version, container number
CONTAINER_DIGITS = 8


def container_name(number, committed=True):
    return f"{number:0{CONTAINER_DIGITS}d}" + (".ctr" if committed else ".partial")


def _container_header(number):
    return CONTAINER_HEADER.pack(CONTAINER_MAGIC, CONTAINER_VERSION, number)


def _container_number(name):
    stem, dot, ext = name.partition(".")
    # "cloud": a cloud pool's note that the container is in its bucket (see
    # plugins/storage/cloud/store.py); its number stays taken while the note is there
    if dot and ext in ("ctr", "partial", "cloud") and len(stem) == CONTAINER_DIGITS and stem.isdigit():
        return int(stem)
    return None



def _is_busy(e):
    return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)



class _OpenContainers:
    """Container files a session reads, each opened once (up to LIMIT; beyond, fd() returns
    None and the read opens and closes its own)."""

    LIMIT = 64

    def __init__(self):
        self._fds = {}
        self._lock = threading.Lock()
        self._closed = False

    def fd(self, number, path):
        with self._lock:
            fd = self._fds.get(number)
            if fd is not None:
                return fd
            if self._closed or len(self._fds) >= self.LIMIT:
                return None
            fd = self._fds[number] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            return fd

    def close(self):
        with self._lock:
            self._closed = True
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


class Containers:
    """ChunkStore's containers: where each is, which are committed, what each holds, and a
    new one for a writer. Mixed into ChunkStore; uses its containers_dir and _locked()."""

    def container_path(self, number, committed=True):
        return os.path.join(self.containers_dir, container_name(number, committed))

    # What a store whose containers also live elsewhere (a cloud pool's cache) changes; here,
    # the folder is all there is.
    def container_bytes(self, number):
        """A committed container's size in bytes, or None when it is gone."""
        try:
            return os.stat(self.container_path(number)).st_size
        except FileNotFoundError:
            return None

    def read_missing(self, number, offset, length):
        """Bytes of a committed container that is not in the folder, read from where else it
        is without bringing it back whole; None: bring it back (fetch_container)."""
        return None

    def fetch_container(self, number):
        """Brings back a committed container that is not in the folder; False when there is
        nowhere to bring it from."""
        return False

    def delete_container(self, number):
        """Deletes a committed container; False when it was gone already."""
        try:
            os.unlink(self.container_path(number))
            return True
        except FileNotFoundError:
            return False

    def container_sealed(self, number, size, entries):
        """A writer sealed a new container holding `entries` [(fp, Location)]."""

    def containers_written(self, numbers):
        """Space reclaim's new containers, sealed: called before the index names them."""

    def _open_container(self, number):
        """A committed container opened for reading (brought back first when it must be)."""
        path = self.container_path(number)
        try:
            return open(path, "rb")
        except FileNotFoundError:
            if not self.fetch_container(number):
                raise
            return open(path, "rb")
    def committed_containers(self):
        numbers = []
        for name in os.listdir(self.containers_dir):
            n = _container_number(name)
            if n is not None and name.endswith(".ctr"):
                numbers.append(n)
        return sorted(numbers)

    def _scan(self, number, decode):
        """Yields (offset, header or None, error or None) for each record of a committed
        container; ends after the first record that is cut short or unreadable, since the
        records after it cannot be found. With `decode`, each record's data is checked too
        (for an encrypted store opened keyless: its crc32 only)."""
        path = self.container_path(number)
        with self._open_container(number) as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(CONTAINER_HEADER.size)
            if len(head) < CONTAINER_HEADER.size:
                yield 0, None, "container header is cut short"
                return
            magic, version, stored_number = CONTAINER_HEADER.unpack(head)
            if magic != CONTAINER_MAGIC or version != CONTAINER_VERSION \
                    or stored_number != number:
                yield 0, None, "container header is not valid for this container"
                return
            offset = CONTAINER_HEADER.size
            while offset < size:
                raw = f.read(RECORD_HEADER.size)
                if len(raw) < RECORD_HEADER.size:
                    yield offset, None, "record header is cut short (torn end)"
                    return
                header = RECORD_HEADER.unpack(raw)
                if header[0] != RECORD_MAGIC or not _valid_codec_byte(header[2]):
                    yield offset, None, "no valid record header here"
                    return
                stored_length = header[4]
                if offset + RECORD_HEADER.size + stored_length > size:
                    yield offset, header, "stored bytes are cut short (torn end)"
                    return
                stored = f.read(stored_length)
                error = None
                if decode:
                    try:
                        _decode_record(header, stored, f"{path} offset {offset}",
                                       self.encrypted, self._cipher)
                    except ValueError as e:
                        error = str(e)
                elif _crc32(stored) != header[5]:
                    error = "crc32 of the stored bytes does not match"
                yield offset, header, error
                offset += RECORD_HEADER.size + stored_length

    def remove_stale_partials(self):
        """Deletes .partial containers whose writer has died (it no longer holds its lock);
        returns their paths. Live writers in any process are left alone."""
        return [path for path, size in self._remove_stale_partials()]

    def _remove_stale_partials(self):
        removed = []
        for name in sorted(os.listdir(self.containers_dir)):
            if not name.endswith(".partial") or _container_number(name) is None:
                continue
            path = os.path.join(self.containers_dir, name)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if _is_busy(e):
                    continue
                raise
            try:
                size = os.fstat(fd).st_size
                os.unlink(path)
                removed.append((path, size))
            finally:
                os.close(fd)
        return removed
    def _new_container(self):
        """Claims the next container number; the fd is returned locked for this writer."""
        with self._locked():
            used = [_container_number(n) for n in os.listdir(self.containers_dir)]
            number = max([n for n in used if n is not None], default=0) + 1
            while True:
                path = self.container_path(number, committed=False)
                try:
                    fd = private.create(path, os.O_WRONLY | os.O_EXCL)
                except FileExistsError:
                    number += 1
                    continue
                except OSError as e:
                    raise _write_failed(path, e) from None
                if os.path.exists(self.container_path(number)):
                    os.close(fd)
                    os.unlink(path)
                    number += 1
                    continue
                break
        # held until commit or abort, so remove_stale_partials can tell a live writer
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            os.write(fd, _container_header(number))
        except OSError as e:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise _write_failed(path, e) from None
        return number, fd
