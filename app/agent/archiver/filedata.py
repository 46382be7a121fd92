"""A regular file's member in a backup: opened without following links and without touching
its access time, its holes found and left out, its data read straight into the image
stream's buffers and hashed, and any change while it was read reported."""

import errno
import os
import stat
import time
from hashlib import sha256 as _sha256

from app.agent.archiver.common import PROGRESS_EVERY, why
from app.errors import Canceled
from app.formats import entry, fflags, tarfmt

MAX_SPARSE_SEGMENTS = 200000
FADVISE_MIN = 8 << 20

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_NOATIME = getattr(os, "O_NOATIME", 0)
_SEEK_DATA = getattr(os, "SEEK_DATA", None)
_SEEK_HOLE = getattr(os, "SEEK_HOLE", None)


class FileData:
    """Part of a backup (app/agent/archiver/backup.py): the member of a regular file, with
    its data."""

    def open_file(self, dfd, name, path):
        flags = _FILE_FLAGS | _NOATIME
        while True:
            try:
                return os.open(name, flags, dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.EPERM and flags & _NOATIME:
                    flags &= ~_NOATIME  # O_NOATIME needs ownership; the read matters more
                    continue
                if e.errno == errno.ENOENT:
                    self.warn(path, "vanished during backup")
                elif e.errno == errno.ELOOP:
                    self.warn(path, "changed during backup: replaced by a symbolic link")
                else:
                    self.warn(path, "cannot be read: %s" % why(e))
                return None

    def data_segments(self, fd, size):
        """(offset, length) of the data regions of a file with holes, or None when it has
        none worth keeping (or the file system cannot tell)."""
        if _SEEK_DATA is None:
            return None
        segs = []
        off = 0
        try:
            while off < size:
                try:
                    d = os.lseek(fd, off, _SEEK_DATA)
                except OSError as e:
                    if e.errno == errno.ENXIO:
                        break  # only a hole from here to the end
                    raise
                if d >= size:
                    break
                h = min(os.lseek(fd, d, _SEEK_HOLE), size)
                segs.append((d, h - d))
                off = h
                if len(segs) > MAX_SPARSE_SEGMENTS:
                    return None
        except OSError:
            return None
        finally:
            try:
                os.lseek(fd, 0, os.SEEK_SET)
            except OSError:
                pass
        if len(segs) == 1 and segs[0] == (0, size):
            return None
        return segs

    def regular(self, dfd, name, path, spath, st0):
        fd = self.open_file(dfd, name, path)
        if fd is None:
            return False
        out = self.out
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.warn(path, "changed during backup: no longer a regular file")
                return False
            flags = self.inode_flags(fd, st.st_dev)
            if flags and self.left_out(flags):
                return False
            ftext = fflags.to_text(flags) if flags else None
            size = st.st_size
            segs = None
            if size and st.st_blocks * 512 < size:
                segs = self.data_segments(fd, size)
            uid = st.st_uid
            gid = st.st_gid
            mode = stat.S_IMODE(st.st_mode)
            xattrs = self.xattrs(fd, st.st_dev)
            if segs is None:
                area = size
                header = tarfmt.member_header(
                    path[1:], tarfmt.REGTYPE, mode, uid, gid, size, st.st_mtime_ns, b"",
                    self.uname(uid), self.gname(gid), 0, 0, xattrs, fflags=ftext)
            else:
                smap = tarfmt.sparse_map_bytes(segs, size)
                area = len(smap) + sum(ln for _, ln in segs)
                header = tarfmt.member_header(
                    path[1:], tarfmt.REGTYPE, mode, uid, gid, area, st.st_mtime_ns, b"",
                    self.uname(uid), self.gname(gid), 0, 0, xattrs, sparse_realsize=size,
                    fflags=ftext)
            if size >= FADVISE_MIN:
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                except (OSError, AttributeError):
                    pass
            offset = out.pos
            out.put(header)
            checksum = None
            if segs is None and size <= tarfmt.PIECE and self.checksum == "crc32":
                checksum = self.copy_small(fd, size)
            h = tarfmt.TreeHash(self.checksum) if checksum is None else None
            problem = None
            if checksum is None and segs is None:
                problem = self.copy(fd, path, None, size, h)
            elif checksum is None:
                out.put(smap)
                for off, ln in segs:
                    p = self.copy(fd, path, off, ln, h)
                    problem = problem or p
            out.zeros(tarfmt.padding(area))
            if problem is None:
                try:
                    st2 = os.fstat(fd)
                    if st2.st_size != size or st2.st_mtime_ns != st.st_mtime_ns:
                        problem = "changed during backup"
                except OSError:
                    pass
            if problem:
                self.warn(path, problem)
            self.files += 1
            self.bytes += area - (len(smap) if segs is not None else 0)
            row = [spath, entry.KIND_FILE, mode, uid, gid, size, st.st_mtime_ns, offset,
                   out.pos - offset, checksum, "", st.st_ctime_ns, st.st_ino]
            if h is not None:
                out.finish(h, row)
            self.add_row(row)
            if st.st_nlink > 1:
                self.links[(st0.st_dev, st0.st_ino)] = (path[1:], spath)
            return True
        finally:
            os.close(fd)

    def copy_small(self, fd, size):
        """The data of a file of one checksum piece that fits the free part of the image
        buffer, read in one call and checked with CRC-32 right away: its checksum, as
        TreeHash gives it, without the hashing jobs that spread a large file's pieces over
        threads (for small files they cost more than the read). None when the file does not
        fit, or did not read whole: the caller then copies it as usual, from its start."""
        out = self.out
        space = out.space()
        if len(space) < size:
            return None
        view = space[:size]
        try:
            got = os.preadv(fd, [view], 0) if size else 0
        except OSError:
            return None
        if got != size:
            return None
        out.fill += size
        out.pos += size
        return _sha256(tarfmt.crc32(view).to_bytes(4, "big")).hexdigest()

    def copy(self, fd, path, off, length, h):
        """Copy `length` bytes of the file (from `off` with pread, or sequentially) into the
        image. A short file is padded with zeros so the member keeps its announced size.
        Returns a warning text, or None."""
        out = self.out
        remaining = length
        copied = 0
        first = True
        problem = None
        while remaining > 0:
            if not first and self.is_cancelled():
                raise Canceled()
            first = False
            space = out.space()
            n = len(space)
            if n > remaining:
                n = remaining
            try:
                if off is None:
                    got = os.readv(fd, [space[:n]])
                else:
                    got = os.preadv(fd, [space[:n]], off)
                    off += got
            except OSError as e:
                problem = "read error: %s (the rest of the file is stored as zeros)" % why(e)
                break
            if not got:
                problem = "changed during backup"
                break
            out.data(got, h)
            remaining -= got
            now = time.monotonic()
            if now - self.last_progress >= PROGRESS_EVERY:
                self.progress(now, extra=copied + got)
            copied += got
        if remaining:
            out.zeros(remaining, h)
        return problem
