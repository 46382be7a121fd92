"""How a restore moves its bytes: the image stream read through the hash worker's buffer
ring (_Source), files written at explicit offsets on the worker's threads, past the page
cache where the device takes it (_Writer, for the files _DirectChoice picks), and a file
waiting for its checksum before it is put in place (_Pending).

Standard library only: this runs on client hosts."""

import errno
import fcntl
import os

from app import status
from app.errors import CairnError
from app.formats import directio
from plugins.filesystems import posix


CHUNK = 1 << 20
NBUF = 8
# Threads that write the files and check them: a direct write waits for the device, so a
# restore that writes with O_DIRECT keeps more of them in flight (a restore of 20,000 files
# of 100 KiB in two streams: 4.16 s against 4.46 s, means of six alternating rounds).
WRITE_THREADS = 2
WRITE_THREADS_DIRECT = 4
FILL = 256 << 10
# Direct writes (see _Writer): files of at least DIRECT_MIN bytes, in pieces whose file offset,
# length and place in the buffer are multiples of DIRECT_ALIGN (the logical block size of
# most devices; where a device wants more, the write is refused and repeated buffered).
# Below DIRECT_MIN, waiting for the device on every file costs more than the copy it saves.
_O_DIRECT = getattr(os, "O_DIRECT", 0)
DIRECT_MIN = 64 << 10
DIRECT_ALIGN = 512
_DIRECT_REFUSED = {errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def _damaged(message):
    return CairnError(message, status_code=status.IMAGE_DAMAGED)


class _Source:
    """Buffered reading of the member stream, through the hash worker's buffer ring so that
    a file's data can be hashed on the other core after it was written out."""

    def __init__(self, src, worker):
        self.src = src
        self._readinto = getattr(src, "readinto", None)
        self.worker = worker
        self.idx = worker.acquire()
        self.buf = worker.views[self.idx]
        self.start = 0
        self.end = 0
        self.jobs = []
        self.offset = 0  # bytes of the stream consumed

    def _refill(self):
        if self.jobs:
            self.worker.put(self.jobs)
            self.jobs = []
        self.worker.release(self.idx)
        self.idx = self.worker.acquire()
        self.buf = self.worker.views[self.idx]
        self.start = self.end = 0
        if self._readinto is not None:
            buf = self.buf
            n = self._readinto(buf)
            # A network stream hands over one record at a time: read on to FILL bytes and a
            # multiple of DIRECT_ALIGN, so that the ring turns once per buffer, not per
            # record, and the pieces of files stay aligned for direct writes.
            while n and (n < FILL or n % DIRECT_ALIGN) and n < len(buf):
                k = self._readinto(buf[n:])
                if not k:
                    break
                n += k
        else:
            data = self.src.read(len(self.buf))
            n = len(data)
            self.buf[:n] = data
        if not n:
            raise _damaged("the image stream ended before all requested members were read "
                           "(at byte %d)" % self.offset)
        self.end = n

    def take(self, n):
        """Up to n bytes (at least 1) as a memoryview into the buffer, valid until the next
        call."""
        if self.start >= self.end:
            self._refill()
        s = self.start
        k = self.end - s
        if k > n:
            k = n
        self.start = s + k
        self.offset += k
        return self.buf[s:s + k]

    def read_exact(self, n):
        s = self.start
        if self.end - s >= n:
            self.start = s + n
            self.offset += n
            return bytes(self.buf[s:s + n])
        parts = []
        while n:
            mv = self.take(n)
            parts.append(bytes(mv))
            n -= len(mv)
        return b"".join(parts)

    def skip(self, n):
        while n > 0:
            n -= len(self.take(n))

    def hash(self, h, mv):
        self.jobs.extend(h.jobs(mv))

    def write(self, w, off, mv):
        """Queue writing mv, just taken, at off of a file (_Writer); the buffer stays until
        it is written."""
        self.jobs.append((w, (off, mv, self.start - len(mv)), None))

    def detach(self):
        """Hands back the buffer: this stream is read no further."""
        if self.jobs:
            self.worker.put(self.jobs)
            self.jobs = []
        if self.idx is not None:
            self.worker.release(self.idx)
            self.idx = self.buf = None

    def submit(self, h, done):
        """Queue the end of one file's data: done(h) runs on the worker after its last
        update."""
        self.jobs.extend(h.close(done))
        self.worker.put(self.jobs)
        self.jobs = []


class _Writer:
    """Writes one file's data on the hash threads, at explicit offsets, so that the kernel's
    work of writing (page cache, block allocation) runs beside the reading of the stream.
    All of a file's writes go to one thread, in order; the first error ends its writing and
    is kept for the main thread.

    A file opened with O_DIRECT (`direct`) takes its aligned pieces straight from the buffer
    to the device: copying a restore's data into the page cache is most of its CPU time, and
    the pages it fills push out what the host had cached. The unaligned rest goes through the
    page cache (O_DIRECT is switched off for it, and on again for the next aligned piece);
    where the file system refuses a direct write, the file is written buffered from there on
    and `refused` tells the restore to open no more files with O_DIRECT."""

    __slots__ = ("fd", "error", "allowed", "direct", "refused", "direct_bytes")

    def __init__(self, fd, direct=False):
        self.fd = fd
        self.error = None
        self.allowed = direct  # opened with O_DIRECT and not refused since
        self.direct = direct  # the descriptor's O_DIRECT flag as it is now
        self.refused = False
        self.direct_bytes = 0

    def update(self, piece):
        """piece: (file offset, memoryview, the view's offset in its page-aligned buffer)."""
        if self.error is not None:
            return
        off, mv, at = piece
        fd = self.fd
        n = len(mv)
        done = 0
        try:
            if self.allowed and not (off | at) % DIRECT_ALIGN:
                whole = n - n % DIRECT_ALIGN
                if whole:
                    if not self.direct:
                        self._switch(True)
                    try:
                        while done < whole:
                            done += os.pwrite(fd, mv[done:whole], off + done)
                    except OSError as e:
                        if e.errno not in _DIRECT_REFUSED:
                            raise
                        self.allowed = False
                        self.refused = True
                    self.direct_bytes += done
            if done < n:
                if self.direct:
                    self._switch(False)
                while done < n:
                    done += os.pwrite(fd, mv[done:], off + done)
        except OSError as e:
            self.error = e

    def _switch(self, on):
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags | _O_DIRECT if on else flags & ~_O_DIRECT)
        self.direct = on

    def finished(self, _):
        """The end of the file's writes: frees the hash worker's note of its thread."""


class _Pending:
    """A regular file whose data is written to a temporary name and waits for its checksum
    (and its writer) before it is put in place. Files are finished in batches, behind a mark
    of the hash worker (see _Restore.checkpoint), not one by one."""

    __slots__ = ("fd", "tmp", "final", "replace", "dfd", "expected", "member", "path",
                 "key", "digest", "writer", "span", "reader")

    def done(self, digest):
        self.digest = digest


# Where direct writes pay: file systems on the host's own (or a parallel file system's)
# devices. Not memory (tmpfs: the page cache is the file), not the network (NFS and CIFS send
# each direct write to the server and wait for it), not FUSE (refused or emulated).
_NOT_FOR = {"tmpfs", "ramfs", "overlay", "squashfs"}


def suits_target(path):
    """Whether files restored under `path` (str or bytes) should be written with O_DIRECT."""
    if not directio.enabled() or not getattr(os, "O_DIRECT", 0):
        return False
    fs = posix.filesystem_of(os.fsdecode(path))
    if fs is None:
        return False
    kind = fs["type"]
    return fs["class"] != "network" and kind not in _NOT_FOR and not kind.startswith("fuse")


class _DirectChoice:
    """Which files a restore writes with O_DIRECT (see _Writer): those of at least DIRECT_MIN
    bytes in a directory whose file system takes direct writes, until one refuses them (from
    then on every file goes through the page cache)."""

    def __init__(self, direct, direct_for, root, target):
        self.on = direct and bool(_O_DIRECT)
        # Whether files may be written with O_DIRECT, by the device of their directory: a
        # file system mounted below the target (NFS, tmpfs) is asked about on its own.
        self.ask = direct_for if self.on else None
        self.devices = {os.fstat(root).st_dev: True}
        self.target = target  # the target's path, for `ask`
        self.here = self.on  # for the directory of the restore's chain

    def refused(self):
        """A file system refused a direct write: no more files are opened with O_DIRECT."""
        self.on = self.here = False

    def enter(self, fd, key):
        """The restore's chain is now at directory `fd` (components `key` below the target):
        whether it lies on a file system that takes direct writes. The target's does (else
        direct writes are off); another is asked about once (`ask`)."""
        if self.ask is None:
            return
        dev = os.fstat(fd).st_dev
        ok = self.devices.get(dev)
        if ok is None:
            try:
                ok = bool(self.ask(os.path.join(self.target, *key)))
            except Exception:  # noqa: BLE001 - not knowing means the page cache, never wrong
                ok = False
            self.devices[dev] = ok
        self.here = self.on and ok
