"""Appending to a file with O_DIRECT where the file system allows it, so that data written
once and rarely read back (a deduplication pool's containers) goes from the caller's buffer
to the device without being copied into the page cache. That copy is most of a backup's
kernel time, and the cache it fills evicts data the storage host uses. Standard library
only: this runs on every storage host.

Direct I/O wants aligned offsets, lengths and memory, so the bytes pass through a
page-aligned staging buffer (an anonymous mmap) and go out in whole blocks; the last partial
block is written through the file's ordinary descriptor when the file is finished. Where
O_DIRECT is missing, refused (some FUSE file systems, older tmpfs) or a direct write fails with
EINVAL, writing goes on through the ordinary descriptor: slower, never wrong."""

import errno
import mmap
import os

ALIGN = 4096  # covers 512-byte and 4 KiB logical blocks
STAGE = 4 << 20
# A file system with large blocks (Storage Scale: often 4-16 MiB, its st_blksize) takes
# direct writes best in whole blocks at block boundaries; larger ones are not waited for.
MAX_UNIT = 16 << 20
_IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX")) if hasattr(os, "sysconf") else 16
_UNSUPPORTED = {errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def enabled():
    """Direct I/O is on unless CAIRN_DIRECT_IO=0 (e.g. in a host's agent environment)."""
    return os.environ.get("CAIRN_DIRECT_IO", "1").strip() not in ("0", "no", "off", "false")


class Appender:
    """Appends to the file behind `fd` (opened for writing, its first len(head) bytes being
    `head`, already written through fd) from offset len(head) on. write() takes a list of
    bytes-like objects; finish() writes what is left. Errors are OSError, as from os.write;
    nothing is half-written silently."""

    def __init__(self, path, fd, head):
        self.fd = fd
        self.dfd = None
        self.base = 0  # file offset of the staging buffer's first byte (aligned)
        self.used = 0  # bytes in the staging buffer
        self.stage = None
        self.direct = False
        self.unit = ALIGN  # direct writes end on a multiple of this (from the file's start)
        flag = getattr(os, "O_DIRECT", 0)
        if flag and enabled():
            try:
                self.dfd = os.open(path, os.O_WRONLY | flag | getattr(os, "O_CLOEXEC", 0))
            except OSError as e:
                if e.errno not in _UNSUPPORTED:
                    raise
        if self.dfd is not None:
            self.direct = True
            blk = os.fstat(fd).st_blksize
            self.unit = blk if ALIGN <= blk <= MAX_UNIT and not blk & (blk - 1) else ALIGN
            self.stage = mmap.mmap(-1, max(STAGE, 2 * self.unit))
            self.stage[:len(head)] = head
            self.used = len(head)
        else:
            self.base = len(head)

    def write(self, bufs):
        if not self.direct:
            self._buffered(bufs)
            return
        need = self.used + sum(len(b) for b in bufs)
        if need > len(self.stage):
            self._grow(need)
        stage, at = self.stage, self.used
        for b in bufs:
            n = len(b)
            stage[at:at + n] = b
            at += n
        self.used = at
        self._out((self.base + at) // self.unit * self.unit - self.base)

    def finish(self):
        """Writes the last partial block (through fd) and closes the direct descriptor."""
        try:
            if self.used:
                self._pwrite_all(self.fd, memoryview(self.stage)[:self.used], self.base)
                self.base += self.used
                self.used = 0
        finally:
            self.close()

    def close(self):
        if self.dfd is not None:
            os.close(self.dfd)
            self.dfd = None
        if self.stage is not None:
            stage, self.stage = self.stage, None
            try:
                stage.close()
            except BufferError:
                pass  # a view of it lives on in a failed write's traceback; freed with it

    # ---- inside ---------------------------------------------------------------------------
    def _out(self, whole):
        """Writes the first `whole` (aligned) staged bytes and keeps the rest at the start."""
        if whole <= 0:
            return
        view = memoryview(self.stage)
        try:
            try:
                self._pwrite_all(self.dfd, view[:whole], self.base)
            except OSError as e:
                if e.errno not in _UNSUPPORTED:
                    raise
                # the file system took the open but not the write: the same bytes, buffered
                self._pwrite_all(self.fd, view[:whole], self.base)
                self.direct = False
            rest = self.used - whole
            if rest:
                view[:rest] = view[whole:self.used].tobytes()
        finally:
            view.release()
        self.base += whole
        self.used = rest
        if not self.direct:
            # from here on everything goes through fd; what is staged goes first
            staged = self.stage[:self.used]
            self.close()
            self.used = 0
            self._buffered([staged])

    def _grow(self, need):
        size = -(-need // STAGE) * STAGE
        bigger = mmap.mmap(-1, size)
        bigger[:self.used] = self.stage[:self.used]
        old, self.stage = self.stage, bigger
        try:
            old.close()
        except BufferError:
            pass

    def _buffered(self, bufs):
        """bufs at the end through fd: one system call per IOV_MAX of them."""
        at = 0
        while at < len(bufs):
            part = bufs[at:at + _IOV_MAX]
            done = os.pwritev(self.fd, part, self.base)
            self.base += done
            for b in part:
                if done < len(b):
                    # a short write: the rest of this buffer goes first next time
                    bufs[at] = memoryview(b)[done:]
                    break
                done -= len(b)
                at += 1

    @staticmethod
    def _pwrite_all(fd, data, offset):
        view = memoryview(data)
        done, n = 0, len(view)
        while done < n:
            done += os.pwrite(fd, view[done:], offset + done)
