"""Reading byte ranges of image files: the members a restore needs, located by the rows'
[offset, length] (and, for an incremental chain, [offset, length, k]: the k-th image file of
the list), become one stream (ExtentReader) or are copied raw to a sink (copy_extents).
Standard library only: this runs on storage servers.
"""

import errno
import os

from app import status
from app.errors import CairnError, Canceled

CHUNK = 1 << 20


def _damaged(message):
    return CairnError(message, status_code=status.IMAGE_DAMAGED)


def _why(e):
    return (e.strerror or str(e)).lower()


def _merge(extents, nfiles=1):
    """Validated [offset, length, file] triples, neighbours in one file joined so that a run
    of adjacent members is read with large reads."""
    out = []
    for ext in extents:
        try:
            off, ln = int(ext[0]), int(ext[1])
            k = int(ext[2]) if len(ext) > 2 else 0
        except (TypeError, ValueError, IndexError):
            raise _damaged("invalid image extent %r" % (ext,))
        if off < 0 or ln < 0 or not 0 <= k < nfiles:
            raise _damaged("invalid image extent %r" % (ext,))
        if not ln:
            continue
        if out and out[-1][2] == k and out[-1][0] + out[-1][1] == off:
            out[-1][1] += ln
        else:
            out.append([off, ln, k])
    return out


class FileSource:
    """An image file read by position. A tolerant one (a restore's: see ExtentReader) reads
    the bytes it cannot read, for an I/O error or past the file's end, as zeros and notes
    them in `damage`: (position, length, what), so that only the files there are lost."""

    def __init__(self, path, tolerant=False):
        try:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (OSError, TypeError, ValueError) as e:
            raise _damaged("the backup image %s cannot be opened: %s"
                           % (path, _why(e) if isinstance(e, OSError) else e))
        self.path = path
        self.size = os.fstat(self.fd).st_size
        self.tolerant = tolerant
        self.damage = []

    def sequential(self):
        try:
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except (OSError, AttributeError):
            pass

    def preadinto(self, mv, pos):
        try:
            n = os.preadv(self.fd, [mv], pos)
        except OSError as e:
            if not self.tolerant or e.errno != errno.EIO:
                raise _damaged("reading the backup image %s failed: %s" % (self.path, _why(e)))
            return self.unreadable(mv, pos, "bytes %d..%d of %s cannot be read (%s)"
                                   % (pos, pos + len(mv), self.path, _why(e)))
        if not n and self.tolerant and len(mv):
            return self.unreadable(mv, pos, "%s ends at byte %d (it is cut short)"
                                   % (self.path, self.size))
        return n

    def unreadable(self, mv, pos, what):
        mv[:] = bytes(len(mv))
        self.damage.append((pos, len(mv), what))
        return len(mv)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class ExtentReader:
    """A read-only stream over the concatenation of byte ranges of one image (`paths` a str)
    or of several (a list; each extent names its image). `opener(path)` gives the source of
    an image (None, or an opener that gives None: the file itself; a deduplication pool
    gives its recipe's stream, a compressed advanced-disk image its tar stream):
    an object with `size`, `preadinto(memoryview, position)` and `close()`, and `damage`
    where it reads past damage. tolerant: image files read past damage (see FileSource)."""

    def __init__(self, paths, extents, opener=None, tolerant=False):
        self.paths = [paths] if isinstance(paths, str) else list(paths)
        self._extents = _merge(extents, len(self.paths))
        self._starts = []  # where each extent begins in this stream
        at = 0
        for e in self._extents:
            self._starts.append(at)
            at += e[1]
        self._i = 0
        first = self._extents[0] if self._extents else [0, 0, 0]
        self._pos, self._left, self._k = first
        self._srcs = []
        try:
            used = {e[2] for e in self._extents}
            for k, path in enumerate(self.paths):
                # a file no extent reads (an image of a chain this restore does not need)
                src = None
                if k in used:
                    src = opener(path) if opener is not None else None
                    if src is None:  # the image file is read as it is
                        src = FileSource(path, tolerant)
                self._srcs.append(src)
            for off, ln, k in self._extents:
                if off + ln > self._srcs[k].size and not tolerant:
                    raise _damaged(
                        "the backup image %s is damaged: it is %d bytes long, but bytes up "
                        "to %d are needed" % (self.paths[k], self._srcs[k].size, off + ln))
            if len(self._extents) == 1 and self._extents[0][1] >= 8 * CHUNK:
                seq = getattr(self._srcs[first[2]], "sequential", None)
                if seq is not None:
                    seq()
        except BaseException:
            self.close()
            raise

    @property
    def path(self):
        return self.paths[self._k] if self.paths else ""

    def readable(self):
        return True

    def readinto(self, buf):
        mv = memoryview(buf)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        want = len(mv)
        total = 0
        while total < want:
            if not self._left:
                self._i += 1
                if self._i >= len(self._extents):
                    break
                self._pos, self._left, self._k = self._extents[self._i]
            n = min(self._left, want - total)
            got = self._srcs[self._k].preadinto(mv[total:total + n], self._pos)
            if not got:
                raise _damaged("the backup image %s ends early (at byte %d)"
                               % (self.path, self._pos))
            total += got
            self._pos += got
            self._left -= got
        return total

    def damage_between(self, start, stop):
        """What the image sources found damaged (see FileSource, and a deduplication pool's
        recipe stream) in bytes start..stop of this stream: a list of texts."""
        found = []
        for (off, ln, k), at in zip(self._extents, self._starts):
            lo, hi = max(start, at), min(stop, at + ln)
            if lo >= hi:
                continue
            src = self._srcs[k] if k < len(self._srcs) else None
            lo, hi = off + lo - at, off + hi - at
            for pos, n, what in getattr(src, "damage", ()):
                if pos < hi and lo < pos + n and what not in found:
                    found.append(what)
        return found

    def read(self, n=-1):
        if n is None or n < 0:
            n = self._left + sum(e[1] for e in self._extents[self._i + 1:])
        buf = bytearray(n)
        got = self.readinto(buf)
        del buf[got:]
        return bytes(buf)

    def close(self):
        srcs, self._srcs = getattr(self, "_srcs", []), []
        for src in srcs:
            if src is not None:
                src.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def copy_extents(path, extents, out, *, is_cancelled, on_bytes=None, opener=None,
                 tolerant=False, damage=None):
    """Copy the byte ranges of `path` to out.write in large chunks, as they are (complete tar
    members when the ranges come from rows). Returns the number of bytes copied. Errors of
    `out` propagate unchanged: only the caller knows whether that is a storage or a network
    failure. tolerant: see ExtentReader; what was read past is added to the list `damage`."""
    buf = bytearray(CHUNK)
    mv = memoryview(buf)
    total = 0
    with ExtentReader(path, extents, opener, tolerant) as r:
        while True:
            if is_cancelled():
                raise Canceled()
            n = r.readinto(mv)
            if not n:
                break
            out.write(mv[:n])
            total += n
            if on_bytes is not None:
                on_bytes(n)
        if damage is not None:
            damage.extend(r.damage_between(0, total))
    return total
