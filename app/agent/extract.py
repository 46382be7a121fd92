"""Restore data mover: writes the members of an image stream to a target directory.

The stream carries exactly one member per plan item, in plan order. Both the stream and the
plan may come from a compromised client, so every name is checked, every parent directory is
reached through directory descriptors opened with O_NOFOLLOW (a symlink on the way is refused,
never followed) and nothing is written outside the target directory. A refused member's data
is still read past, so the stream stays in step with the plan.

The target is opened once (OpenTarget), walking from / without following links, and every
process of the restore works from that descriptor, never from the path again: an ordinary
user who owns the target's parent can swap the path for a link while the restore runs, and
must not redirect it. A link on the way (in the target's path or below it) is followed only
where only root could have made it: owned by root (or by this process's user), in a
directory owned by them that no one else may write to, and older than the restore (so never
one the restore made from the image); below the target it must also stay inside it. That
lets a restore to / pass a merged /usr (/bin -> usr/bin). Directories are made private
(0700) and get their final mode last, so that what ends up private is never readable
while the restore writes it.

Standard library only: this runs on client hosts.
"""

import errno
import fcntl
import os
import stat
import time
from collections import deque

from app import status
from app.errors import CairnError, Canceled, RestoreTargetInvalid, ValidationError
from app.formats import entry, fflags, tarfmt

CHUNK = 1 << 20
NBUF = 8
# Threads that write the files and check them: a direct write waits for the device, so a
# restore that writes with O_DIRECT keeps more of them in flight (a restore of 20,000 files
# of 100 KiB in two streams: 4.16 s against 4.46 s, means of six alternating rounds).
WRITE_THREADS = 2
WRITE_THREADS_DIRECT = 4
FILL = 256 << 10
PROGRESS_EVERY = 0.25
MAX_PENDING = 64
KEEP_FDS = 64
OVERWRITE_MODES = ("skip", "overwrite", "rename")

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
# Links followed on the way to one directory, at most (the kernel's own limit).
MAX_LINKS = 40
# A link whose change time is this close to the restore's start, or later, may have been
# made by the restore itself: the file system's clock is coarse (a tick behind).
LINK_AGE_NS = 50_000_000
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC

_TYPES = {
    entry.KIND_FILE: (tarfmt.REGTYPE, tarfmt.AREGTYPE, tarfmt.CONTTYPE),
    entry.KIND_DIR: (tarfmt.DIRTYPE,),
    entry.KIND_SYMLINK: (tarfmt.SYMTYPE,),
    entry.KIND_HARDLINK: (tarfmt.LNKTYPE,),
    entry.KIND_FIFO: (tarfmt.FIFOTYPE,),
    entry.KIND_CHAR: (tarfmt.CHRTYPE,),
    entry.KIND_BLOCK: (tarfmt.BLKTYPE,),
}
_NODE_TYPES = {entry.KIND_FIFO: stat.S_IFIFO, entry.KIND_CHAR: stat.S_IFCHR,
               entry.KIND_BLOCK: stat.S_IFBLK}
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
_ACCESS_ACL = (b"system.posix_acl_access",)
_DEFAULT_ACL = (b"system.posix_acl_default",)

# Direct writes (see _Writer): files of at least DIRECT_MIN bytes, in pieces whose file offset,
# length and place in the buffer are multiples of DIRECT_ALIGN (the logical block size of
# most devices; where a device wants more, the write is refused and repeated buffered).
# Below DIRECT_MIN, waiting for the device on every file costs more than the copy it saves.
_O_DIRECT = getattr(os, "O_DIRECT", 0)
DIRECT_MIN = 64 << 10
DIRECT_ALIGN = 512
_DIRECT_REFUSED = {errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def _why(e):
    return (e.strerror or str(e)).lower() if isinstance(e, OSError) else str(e)


def _renameat2():
    try:
        import ctypes
        f = ctypes.CDLL(None, use_errno=True).renameat2
    except (ImportError, OSError, AttributeError):
        return None
    f.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    f.restype = ctypes.c_int
    return f


_RENAMEAT2 = _renameat2()
_RENAME_NOREPLACE = 1
_NOREPLACE_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP,
                          getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def rename_noreplace(src, dst, dir_fd):
    """Renames src to dst in the directory dir_fd unless dst exists (FileExistsError then),
    in one step: a name found free earlier may have been taken since, by another item of the
    same restore (a file restored as NAME.restored beside the image's own NAME.restored) or
    by anyone else. renameat2(RENAME_NOREPLACE) where the kernel and file system have it,
    else a hard link and an unlink (both refuse an existing name), else a plain rename."""
    if _RENAMEAT2 is not None:
        import ctypes
        if _RENAMEAT2(dir_fd, src, dir_fd, dst, _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in _NOREPLACE_UNSUPPORTED:
            raise OSError(err, os.strerror(err), os.fsdecode(dst))
    try:
        os.link(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in _NOREPLACE_UNSUPPORTED | {errno.EPERM, errno.EMLINK}:
            raise
        os.rename(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # no other way here
        return
    os.unlink(src, dir_fd=dir_fd)


def _damaged(message):
    return CairnError(message, status_code=status.IMAGE_DAMAGED)


NAME_MAX = 255


class _Refused(Exception):
    """This item cannot be restored; the message says why. The restore goes on."""


def _check_name(name, what):
    """Refuses a relative name that could leave the target: a NUL byte, an empty, '.' or
    '..' component. Three substring searches instead of a loop over the components: a
    restore checks two or three names a file."""
    if b"\0" in name:
        raise _Refused("%s contains a NUL byte" % what)
    w = b"/" + name + b"/"
    if b"//" in w or b"/./" in w or b"/../" in w:
        raise _Refused("%s has an empty, '.' or '..' component" % what)
    return name


def _components(name, what):
    """The components of a relative name, refusing anything that could leave the target."""
    return _check_name(name, what).split(b"/")


def _plan_name(path):
    """A plan path as a checked relative name (bytes): two paths are the same place exactly
    when their names are equal."""
    if not isinstance(path, str):
        raise _Refused("the path is not a string")
    b = os.fsencode(path)
    if not b.startswith(b"/"):
        raise _Refused("not an absolute path")
    return _check_name(b[1:], "the path")


def _plan_components(path):
    return _plan_name(path).split(b"/")


def _member_key(name):
    """A member name as compared with the plan: absolute names count as relative and the
    trailing slash of directories does not matter. '..' is refused wherever it is."""
    stripped = name.lstrip(b"/")
    if stripped.endswith(b"/"):
        stripped = stripped.rstrip(b"/")
    return _check_name(stripped, "the member name")


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


class _Links:
    """Which symbolic links on the way to a directory are followed (see the module notes):
    since_ns, the restore's start (None: the restore has not begun); from_root, whether the
    walk starts at the file system's root, where an absolute link means what it says."""

    __slots__ = ("since_ns", "from_root")

    def __init__(self, since_ns, from_root):
        self.since_ns = since_ns
        self.from_root = from_root

    def distrust(self, dfd, name):
        """Why the link `name` in directory dfd is not followed, or None to follow it."""
        try:
            st = os.lstat(name, dir_fd=dfd)
        except OSError as e:
            return "gone (%s)" % _why(e)
        if not stat.S_ISLNK(st.st_mode):
            return "not a directory"
        owners = (0, os.geteuid())
        if st.st_uid not in owners:
            return "a symbolic link owned by uid %d" % st.st_uid
        d = os.fstat(dfd)
        if d.st_uid not in owners or d.st_mode & 0o022:
            return "a symbolic link in a directory that others may write to"
        if self.since_ns is not None and st.st_ctime_ns >= self.since_ns - LINK_AGE_NS:
            return "a symbolic link made by this restore"
        return None

    def resolve(self, prefix, text):
        """The components (from the walk's start) that link text `text`, found in the
        directory of components `prefix`, names."""
        if text.startswith(b"/"):
            if not self.from_root:
                raise _Refused("points to an absolute path, outside the restore target")
            comps = []
        else:
            comps = list(prefix)
        for c in text.split(b"/"):
            if c in (b"", b"."):
                continue
            if c == b"..":
                if comps:
                    comps.pop()
                elif not self.from_root:
                    raise _Refused("points outside the restore target")
            else:
                comps.append(c)
        return tuple(comps)


# No link is followed (a walk with nothing to trust).
_NO_LINKS = None


class _Chain:
    """Directory descriptors from the target down to the current directory. Entries come
    grouped by directory, so most lookups reuse the cached chain; every step is opened with
    O_NOFOLLOW, so a symlink on the way is refused and never followed, unless `links`
    (a _Links) trusts it: it is then resolved from the target and walked the same way."""

    def __init__(self, root_fd, links=_NO_LINKS):
        self.root = root_fd
        self.links = links
        self.names = []
        self.fds = []
        # Where a level is not its parent's place plus its name (a link was followed):
        # level -> its real components from the target. Most chains have none.
        self.real = {}
        self.created = 0
        self.made = []  # component tuples of the directories get() made, for the caller

    def get(self, comps, create=True):
        names = self.names
        fds = self.fds
        i = 0
        n = min(len(names), len(comps))
        while i < n and names[i] == comps[i]:
            i += 1
        while len(names) > i:
            names.pop()
            self.real.pop(len(names), None)
            fd = fds.pop()
            if fd is not None:
                os.close(fd)
        j = len(fds)
        while j and fds[j - 1] is None:
            j -= 1
        fd = fds[j - 1] if j else self.root
        for k in range(j, len(names)):
            fd = self._open(fd, k, names[k], False)
            fds[k] = fd
            self._trim(k)
        for c in comps[i:]:
            made = self.created
            k = len(names)
            fd = self._open(fd, k, c, create)
            names.append(c)
            fds.append(fd)
            self._trim(len(fds) - 1)
            if self.created != made:
                self.made.append(tuple(names))
        return fd

    def _trim(self, k):
        """Keep the first KEEP_FDS descriptors and the deepest one: a very deep (or hostile)
        path must not exhaust the process's descriptors."""
        k -= 1
        if k >= KEEP_FDS and self.fds[k] is not None:
            os.close(self.fds[k])
            self.fds[k] = None

    def _place(self, k):
        """The real components of level k - 1, the parent of level k."""
        j = k - 1
        while j >= 0 and j not in self.real:
            j -= 1
        base = self.real[j] if j >= 0 else ()
        return base + tuple(self.names[j + 1:k])

    def _open(self, parent, k, name, create):
        """Opens directory `name` in `parent` as level k of the chain (making it, private,
        if `create`)."""
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise _Refused("directory %s does not exist" % os.fsdecode(name))
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                return self._follow(parent, k, name)
            raise
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
            self.created += 1
        except FileExistsError:
            pass
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                return self._follow(parent, k, name)
            raise

    def _follow(self, parent, k, name):
        """`name` in `parent` is a link or not a directory: its target, if it is a link
        that may be followed (see _Links), else refused."""
        fd, real = _through_link(self.root, self.links, parent,
                                 self._place(k) if self.links else (), name, 0)
        self.real[k] = real
        return fd

    def close(self):
        while self.fds:
            fd = self.fds.pop()
            if fd is not None:
                os.close(fd)
        self.names = []
        self.real = {}


def _through_link(root, links, parent, prefix, name, hops):
    """(descriptor, real components) of the directory that the link `name` in `parent`
    (whose components from `root` are `prefix`) leads to, walked from `root` without
    following any link that `links` does not trust; _Refused where it may not be."""
    if links is None:
        why = "a symbolic link or not a directory"
    else:
        why = links.distrust(parent, name)
    if why is not None:
        raise _Refused("parent %s is %s: not followed" % (os.fsdecode(name), why))
    if hops >= MAX_LINKS:
        raise _Refused("parent %s: too many symbolic links on the way" % os.fsdecode(name))
    try:
        text = os.readlink(name, dir_fd=parent)
    except OSError as e:
        raise _Refused("parent %s cannot be read: %s" % (os.fsdecode(name), _why(e)))
    try:
        real = links.resolve(prefix, text)
    except _Refused as e:
        raise _Refused("parent %s is a symbolic link that %s: not followed"
                       % (os.fsdecode(name), e))

    def missing(fd, c):
        raise _Refused("parent %s leads to %s, which does not exist"
                       % (os.fsdecode(name), os.fsdecode(b"/".join(real))))
    return _walk(root, links, os.dup(root), real, missing, hops + 1)


def _walk(root, links, fd, comps, missing, hops=0):
    """(descriptor, real components from `root`) of the directory `comps` names below fd
    (a descriptor this takes over), each step opened without following links but those
    `links` trusts (see _through_link). missing(fd, name): the descriptor of a directory
    that is not there (made), or _Refused."""
    place = ()
    try:
        for c in comps:
            try:
                nfd = os.open(c, _DIR_FLAGS, dir_fd=fd)
                place += (c,)
            except FileNotFoundError:
                nfd = missing(fd, c)
                place += (c,)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                nfd, place = _through_link(root, links, fd, place, c, hops)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, place


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


class OpenTarget:
    """The restore target directory, opened once, walking from / without following a link
    that an ordinary user could have planted (see the module notes and _Links). Missing
    directories of its path are made private and get their usual mode (0755 less the
    umask) by publish(), once the restore is done. Every process of a restore works from
    `fd`; nothing opens the path again."""

    def __init__(self, path):
        t = os.fsencode(path)
        self.path = t
        self.fd = None
        self.made = []  # descriptors of the directories of the path made here
        if not t.startswith(b"/"):
            raise RestoreTargetInvalid("the restore target must be an absolute path: %s"
                                       % os.fsdecode(t))
        comps = [c for c in t.split(b"/") if c not in (b"", b".")]
        if b".." in comps or b"\0" in t:
            raise RestoreTargetInvalid("the restore target %r must be named without '..' "
                                       "components and NUL bytes" % os.fsdecode(t))
        try:
            top = os.open(b"/", _DIR_FLAGS)
        except OSError as e:
            raise RestoreTargetInvalid("the file system root cannot be opened: %s" % _why(e))
        def make(fd, c):  # private until the restore is done (publish)
            os.mkdir(c, 0o700, dir_fd=fd)
            nfd = os.open(c, _DIR_FLAGS, dir_fd=fd)
            self.made.append(os.dup(nfd))
            return nfd

        try:
            fd, _ = _walk(top, _Links(None, True), os.dup(top), comps, make)
            try:
                root, here = os.fstat(top), os.fstat(fd)
            except OSError:
                os.close(fd)
                raise
            self.from_root = (here.st_dev, here.st_ino) == (root.st_dev, root.st_ino)
        except _Refused as e:
            self.close()
            raise RestoreTargetInvalid("the restore target %s cannot be used: %s (choose a "
                                       "target whose path has no such link)"
                                       % (os.fsdecode(t), e))
        except OSError as e:
            self.close()
            raise RestoreTargetInvalid("the restore target %s cannot be used: %s"
                                       % (os.fsdecode(t), _why(e)))
        finally:
            os.close(top)
        self.fd = fd

    def publish(self):
        """The directories made for the target get their usual mode: the restore is done."""
        mode = _made_mode(_umask())
        for fd in self.made:
            try:
                os.fchmod(fd, mode)
            except OSError:
                pass  # still private: nothing is exposed

    def close(self):
        for fd in self.made:
            os.close(fd)
        self.made = []
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def opened(target):
    """(an OpenTarget, whether the caller opened it and so closes it) for a path or an
    OpenTarget."""
    if isinstance(target, OpenTarget):
        return target, False
    return OpenTarget(target), True


class _Restore:
    def __init__(self, src, target, overwrite, emit, is_cancelled, plan, checksum, direct,
                 direct_for=None):
        self.checksum = checksum
        self.direct = direct and bool(_O_DIRECT)
        self.emit = emit
        self.is_cancelled = is_cancelled
        self.overwrite = overwrite
        self.target = target.path
        self.root = os.dup(target.fd)
        self.now_ns = time.time_ns()
        self.links = _Links(self.now_ns, target.from_root)
        # Whether files may be written with O_DIRECT, by the device of their directory: a
        # file system mounted below the target (NFS, tmpfs) is asked about on its own.
        self.direct_for = direct_for if self.direct else None
        self.device_direct = {os.fstat(self.root).st_dev: True}
        self.here_direct = True  # for the directory of the chain
        self.worker = tarfmt.HashWorker(
            NBUF, CHUNK, threads=WRITE_THREADS_DIRECT if self.direct else WRITE_THREADS)
        self.src = _Source(src, worker=self.worker)
        self.chain = _Chain(self.root, self.links)
        self.chain_key = None
        self.pending = []
        self.marks = deque()  # (files of pending it covers, hash worker mark)
        self.dir_refs = {}  # duplicated directory fd -> pending files written in it
        self.dirs = []
        # Directories made on the way to items (not items themselves): private until the
        # restore is done, then 0755 less the umask (see publish_implicit).
        self.implicit = []
        # Files with inode flags (append-only, immutable, ...): set last, once no more hard
        # links are made to them (see apply_file_flags). (components, flags, path)
        self.flagged = []
        # Directories this restore made -> the names it has put in them: in those, a name not
        # in the set needs no look-up (nothing else was there), one system call a file less.
        self.fresh = {}
        # Of those, the ones (and the target itself) where a new file is owned by this process
        # and gets the mode it is created with, less the umask: no set-group-ID bit, no
        # default ACL, inherited by what is made in them. A file whose owner and mode come out
        # right that way needs no fchown or fchmod.
        self.plain = set()
        self.me = (os.geteuid(), os.getegid())
        self.umask = _umask()
        if self.umask is not None and _plain_dir(self.root):
            self.plain.add(())
        self.plain_seen = False
        self.pid = os.getpid()
        self.dirmap = {}
        self.blocked = set()
        self.restored = {}
        self.link_targets = set()
        for item in plan:
            if item.get("kind") == entry.KIND_HARDLINK and item.get("link"):
                to = item.get("link_to") or item["link"]
                if isinstance(to, str):
                    self.link_targets.add(to)
        self.counter = 0
        self.files = 0
        self.ndirs = 0
        self.bytes = 0
        self.direct_bytes = 0
        self.warnings = 0
        self.skipped = 0
        self.errors = 0
        self.damaged = 0  # of the errors, items whose data in the image is damaged
        self.span = (0, 0)  # where the member of the item being restored is in the stream
        self.once = set()
        self.last_progress = 0.0
        self.can_chown = True

    # -- events

    def warn(self, path, message):
        self.warnings += 1
        self.emit("warning", {"path": path, "message": message})

    def warn_once(self, key, path, message):
        if key not in self.once:
            self.once.add(key)
            self.warn(path, message)

    def log(self, message):
        self.emit("log", {"message": message})

    def progress(self, force=False):
        now = time.monotonic()
        if force or now - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = now
            self.emit("progress", {"files": self.files, "bytes": self.bytes})

    def progress_at_end(self):
        """The last progress of a restore that fails: what is in place is counted."""
        try:
            self.progress(force=True)
        except Exception:  # noqa: BLE001 - the failure itself is what is reported
            pass

    # -- the plan

    def run(self, plan, lengths=None):
        self.run_items(plan, lengths)
        return self.complete()

    def run_items(self, plan, lengths=None):
        """Restores the plan's items from the stream; every file is in place at the end.
        lengths: each item's length in the stream (its member's, from the catalog). With
        them a damaged member costs that item alone: the stream is read on from where the
        next one begins. Without them, damage that puts the stream out of step with the
        plan ends the restore."""
        src = self.src
        for k, item in enumerate(plan):
            if self.is_cancelled():
                raise Canceled()
            self.progress()
            path = item.get("path", "")
            start = src.offset
            stop = None if lengths is None else start + lengths[k]
            try:
                m = tarfmt.read_member_header(
                    src.read_exact if stop is None else self.bounded(stop))
                if m is None:
                    raise tarfmt.FormatError("an end-of-archive block stands in its place")
                end = src.offset + tarfmt.padded(m.size)
                if stop is not None and end != stop:
                    raise tarfmt.FormatError("its header gives %d bytes of data, the catalog "
                                             "%d bytes in all" % (m.size, stop - start))
            except tarfmt.FormatError as e:
                if stop is None:
                    raise _damaged("the image stream is damaged at the member for %s: %s"
                                   % (path, e))
                self.lost(path, "not restored: its header in the image is damaged (%s)%s"
                          % (e, self.damage_note(src.src, start, stop)))
                src.skip(stop - src.offset)
                continue
            self.span = (start, end)
            try:
                self.item(item, m)
            except _Refused as e:
                self.errors += 1
                self.warn(path, "not restored: %s" % e)
            except OSError as e:
                self.full(e)
                self.errors += 1
                self.warn(path, "not restored: %s" % _why(e))
            remaining = end - src.offset
            if remaining < 0:
                raise _damaged("the member for %s is longer than its header says" % path)
            src.skip(remaining)
        self.drain()

    def bounded(self, stop):
        """read_exact for a member's headers that never reads past `stop`, where the next
        member begins: a damaged header must not take the next one's bytes."""
        src = self.src

        def read_exact(n):
            if src.offset + n > stop:
                raise tarfmt.FormatError("its headers run past the member")
            return src.read_exact(n)
        return read_exact

    def lost(self, path, message):
        """An item not restored because the image's data for it is damaged."""
        self.errors += 1
        self.damaged += 1
        self.warn(path, message)

    @staticmethod
    def damage_note(reader, start, stop):
        """What the image's reader found damaged in stream bytes start..stop, as a clause
        for a message ("" when it knows of nothing: the data itself is wrong)."""
        between = getattr(reader, "damage_between", None)
        found = between(start, stop) if between is not None else []
        return ": " + "; ".join(found) if found else ""

    def complete(self):
        """Directory metadata, the last progress event, and the summary."""
        self.publish_implicit()
        self.apply_file_flags()
        self.apply_dirs()
        self.progress(force=True)
        return self.counts()

    def counts(self):
        return {"files": self.files, "dirs": self.ndirs, "bytes": self.bytes,
                "direct_bytes": self.direct_bytes, "warnings": self.warnings,
                "skipped": self.skipped, "errors": self.errors, "damaged": self.damaged}

    def add_counts(self, counts):
        """Adds what another process restored for this restore (see restore_streams)."""
        self.files += counts["files"]
        self.ndirs += counts["dirs"]
        self.bytes += counts["bytes"]
        self.direct_bytes += counts["direct_bytes"]
        self.warnings += counts["warnings"]
        self.skipped += counts["skipped"]
        self.errors += counts["errors"]
        self.damaged += counts["damaged"]

    def use_source(self, src):
        """Reads the next items from another stream (the first one is done with)."""
        self.src.detach()
        self.src = _Source(src, worker=self.worker)

    def take_directories(self, other):
        """What `other`, a restore that made the directories of this one's files, knows about
        them (names in use, renamed or blocked directories, how files come out in them)."""
        self.dirmap = other.dirmap
        self.blocked = other.blocked
        self.fresh = other.fresh
        self.plain = other.plain
        self.device_direct = other.device_direct
        self.now_ns = other.now_ns
        self.links.since_ns = other.now_ns

    def item(self, item, m):
        path = item.get("path", "")
        kind = item.get("kind")
        if kind not in _TYPES:
            raise _Refused("unknown kind %r" % (kind,))
        # "to" is where a relocated item goes under the target; it passes the same checks
        # as a path, so a relocation can never leave the target directory either
        comps = _plan_components(item["to"] if item.get("to") is not None else path)
        key = _member_key(m.name)
        try:
            want = _member_key(os.fsencode(item.get("member") or entry.member_name(path)))
        except _Refused:
            raise _Refused("the planned member name is not acceptable")
        if key != want:
            raise _Refused("the image member %r is not the expected %r"
                           % (os.fsdecode(key), os.fsdecode(want)))
        if m.type not in _TYPES[kind]:
            raise _Refused("the image member is of type %r, the index says %r"
                           % (m.type.decode("latin-1"), kind))
        comps = self.map_dirs(comps)
        if comps is None:
            self.skipped += 1
            return
        parent = comps[:-1]
        name = comps[-1]
        if kind == entry.KIND_FILE:
            self.regular(item, m, path, comps, parent, name)
        elif kind == entry.KIND_DIR:
            self.directory(m, path, comps, parent, name)
        elif kind == entry.KIND_HARDLINK:
            self.hardlink(item, m, path, parent, name)
        else:
            self.other(item, m, kind, path, parent, name)

    def map_dirs(self, comps):
        """Apply directories restored under another name (rename mode) or left out (skip
        mode, where a non-directory stands in their place) to a path's components."""
        if self.blocked or self.dirmap:
            for i in range(len(comps) - 1, 0, -1):
                head = tuple(comps[:i])
                if head in self.blocked:
                    return None
                new = self.dirmap.get(head)
                if new is not None:
                    return list(new) + comps[i:]
        return comps

    def parent_fd(self, parent):
        key = tuple(parent)
        if key != self.chain_key:
            # pending files hold descriptors of the current chain: they keep copies of them
            self.keep_pending_dirs()
            self.chain_key = None
            self.chain.get(parent)
            self.chain_key = key
            if self.direct_for is not None:
                self.here_direct = self.direct_at(key)
            for made in self.chain.made:
                self.implicit.append(made)
                self.fresh[made] = set()
                if made[:-1] in self.plain:
                    self.plain.add(made)
                self.note_made(made[:-1], made[-1])
            del self.chain.made[:]
        return self.chain.fds[-1] if self.chain.fds else self.root

    def direct_at(self, key):
        """Whether the chain's directory (components `key`) lies on a file system that
        takes direct writes: the target's does (else self.direct is off); another is asked
        about once (direct_for)."""
        fd = self.chain.fds[-1] if self.chain.fds else self.root
        dev = os.fstat(fd).st_dev
        ok = self.device_direct.get(dev)
        if ok is None:
            try:
                ok = bool(self.direct_for(os.path.join(self.target, *key)))
            except Exception:  # noqa: BLE001 - not knowing means the page cache, never wrong
                ok = False
            self.device_direct[dev] = ok
        return ok

    def note_made(self, parent, name):
        """`name` now stands in directory `parent` (components), put there by this restore."""
        names = self.fresh.get(tuple(parent))
        if names is not None:
            names.add(name)

    def existing(self, dfd, name):
        try:
            return os.lstat(name, dir_fd=dfd)
        except FileNotFoundError:
            return None

    def free_name(self, dfd, name, names=None):
        n = 0
        while True:
            suffix = b".restored" if n == 0 else b".restored.%d" % n
            # A name at the length limit still needs room for the suffix: shorten its stem.
            cand = name[:NAME_MAX - len(suffix)] + suffix
            if (names is None or cand not in names) and self.existing(dfd, cand) is None:
                return cand
            n += 1

    def destination(self, dfd, name, path, names=None):
        """The name to restore to in `dfd` according to the overwrite mode, or None to skip.
        Returns (name, replace) where replace means an existing entry is to be replaced.
        names: what this restore has put in `dfd` when it made that directory itself; a name
        not in it is free without a look-up, one in it is taken even while it is still being
        written (under a temporary name)."""
        if names is not None and name not in names:
            return name, False
        st = self.existing(dfd, name)
        if st is None and names is None:
            return name, False
        if self.overwrite == "skip":
            self.skipped += 1
            self.log("skipped %s: it already exists" % path)
            return None, False
        if self.overwrite == "rename":
            new = self.free_name(dfd, name, names)
            self.log("restored %s as %s: the original name is taken"
                     % (path, os.fsdecode(new)))
            return new, False
        if st is not None and stat.S_ISDIR(st.st_mode):
            try:
                os.rmdir(name, dir_fd=dfd)
            except OSError as e:
                raise _Refused("a directory that cannot be replaced is in the way: %s"
                               % _why(e))
        return name, True

    def tmp_name(self):
        self.counter += 1
        return b".cairn-restore-%d-%d.tmp" % (self.pid, self.counter)

    # -- kinds

    def regular(self, item, m, path, comps, parent, name):
        if m.sparse is None:
            raise _Refused("the member uses a sparse format this agent does not restore")
        dfd = self.parent_fd(parent)
        names = self.fresh.get(tuple(parent))
        final, replace = self.destination(dfd, name, path, names)
        if final is None:
            return
        if names is not None:
            names.add(final)
        src = self.src
        tmp = self.tmp_name()
        direct = self.direct and self.here_direct and m.size >= DIRECT_MIN
        # created with its own mode where that comes out exact (see self.plain), else 0600
        # until it is finished
        mode = m.mode & 0o7777
        if tuple(parent) not in self.plain or mode & 0o7000 or mode & self.umask:
            mode = 0o600
        try:
            try:
                fd = os.open(tmp, _NEW_FILE | _O_DIRECT if direct else _NEW_FILE, mode,
                             dir_fd=dfd)
            except OSError as e:
                if not direct or e.errno not in _DIRECT_REFUSED:
                    raise
                self.direct = direct = False
                fd = os.open(tmp, _NEW_FILE, mode, dir_fd=dfd)
        except OSError as e:
            self.full(e)
            raise _Refused("cannot create the file: %s" % _why(e))
        if not self.plain_seen and tuple(parent) in self.plain:
            self.check_plain(fd, mode)
        p = _Pending()
        p.fd = fd
        p.tmp = tmp
        p.final = final
        p.replace = replace
        p.dfd = dfd
        p.expected = item.get("checksum") or ""
        p.member = m
        p.path = path
        p.key = tuple(comps)
        p.digest = None
        p.span = self.span
        p.reader = src.src
        p.writer = w = _Writer(fd, direct)
        h = tarfmt.TreeHash(self.checksum)
        try:
            if m.sparse:
                segs, used = tarfmt.read_sparse_map(src.read_exact, m.size)
                data = m.size - used
                if sum(ln for _, ln in segs) != data or any(
                        off + ln > m.realsize for off, ln in segs):
                    raise _Refused("the sparse map does not match the member")
                os.ftruncate(fd, m.realsize)
                for off, ln in segs:
                    self.copy(w, ln, h, off)
            else:
                self.copy(w, m.size, h, 0)
        except tarfmt.FormatError as e:
            self.discard_written(w, dfd, tmp)
            raise _Refused("the sparse map is damaged: %s" % e)
        except OSError as e:
            self.discard_written(w, dfd, tmp)
            self.full(e)
            raise _Refused("cannot write the file: %s" % _why(e))
        except BaseException:
            self.discard_written(w, dfd, tmp)
            raise
        src.jobs.append((w, None, w.finished))
        src.submit(h, p.done)
        self.pending.append(p)
        if len(self.pending) - (self.marks[-1][0] if self.marks else 0) >= MAX_PENDING:
            self.checkpoint()

    def copy(self, w, length, h, off):
        """Queue `length` bytes of the stream to be written at `off` of the file and hashed."""
        src = self.src
        first = True
        while length > 0:
            if not first and self.is_cancelled():
                raise Canceled()
            first = False
            mv = src.take(length)
            n = len(mv)
            length -= n
            src.write(w, off, mv)
            off += n
            src.hash(h, mv)
            self.bytes += n
            if length:
                self.progress()

    def check_plain(self, fd, mode):
        """The first file made where owner and mode are expected to come out right shows
        whether they do; where not (an NFS export squashing root, a file system that fixes
        owners), every file gets fchown and fchmod again."""
        self.plain_seen = True
        try:
            st = os.fstat(fd)
        except OSError:
            st = None
        if st is None or (st.st_uid, st.st_gid) != self.me or stat.S_IMODE(st.st_mode) != mode:
            self.plain.clear()

    def restored_one(self, path, where):
        """Count a restored non-directory; remember where it went if a hard link follows."""
        self.files += 1
        if path in self.link_targets:
            self.restored[path] = where

    def discard_written(self, w, dfd, tmp):
        """discard() for a file whose writes may still be queued: they end first, so that its
        descriptor is not closed (and its number reused) under them."""
        self.quiesce()
        self.discard(w.fd, dfd, tmp)

    def quiesce(self):
        try:
            self.worker.wait()
        except BaseException:  # noqa: BLE001 - a failed hash thread runs nothing more
            pass

    def discard(self, fd, dfd, tmp):
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass

    def full(self, e):
        """A full or read-only target makes every following file fail too: stop."""
        if isinstance(e, OSError) and e.errno in _FULL:
            raise RestoreTargetInvalid("the restore target cannot be written: %s" % _why(e))

    def checkpoint(self):
        """Marks the hash worker behind the newest MAX_PENDING files, and finishes the files
        behind the mark before it: the worker has had a whole batch's time for them, so the
        main thread seldom waits, and never for the files it has just queued."""
        self.marks.append((len(self.pending), self.worker.mark()))
        if len(self.marks) > 1:
            k, mark = self.marks.popleft()
            self.finish_first(k, mark)

    def drain(self):
        """Finishes every pending file (waiting for the hash worker)."""
        if self.pending:
            self.marks.clear()
            self.finish_first(len(self.pending), self.worker.mark())

    def finish_first(self, k, mark):
        pending = self.pending
        try:
            self.worker.wait_mark(mark)
            for i in range(k):
                self.finish(pending[i])
        except BaseException:
            self.pending = []
            self.marks.clear()
            self.discard_pending(pending)
            raise
        del pending[:k]
        self.marks = deque((n - k, m) for n, m in self.marks)

    def discard_pending(self, pending):
        if any(p.fd is not None for p in pending):
            self.quiesce()
        for p in pending:
            if p.fd is not None:
                self.discard(p.fd, p.dfd, p.tmp)
                p.fd = None
                self.release_dir(p.dfd)

    def keep_pending_dirs(self):
        """The directory chain is about to move on: each directory that pending files were
        written in is duplicated for them (they are renamed in it later), so they need not be
        finished first. Without a descriptor to spare, they are finished now."""
        copies = {}
        try:
            for p in self.pending:
                if p.fd is None or p.dfd == self.root or p.dfd in self.dir_refs:
                    continue
                new = copies.get(p.dfd)
                if new is None:
                    new = copies[p.dfd] = os.dup(p.dfd)
                    self.dir_refs[new] = 0
                p.dfd = new
                self.dir_refs[new] += 1
        except OSError:
            self.drain()

    def release_dir(self, dfd):
        n = self.dir_refs.get(dfd)
        if n is None:
            return
        if n > 1:
            self.dir_refs[dfd] = n - 1
        else:
            del self.dir_refs[dfd]
            os.close(dfd)

    def finish(self, p):
        """Puts one written file in place; its data and checksum are done (see drain)."""
        fd = p.fd
        p.fd = None
        try:
            self._finish(p, fd)
        finally:
            self.release_dir(p.dfd)

    def _finish(self, p, fd):
        try:
            if p.writer.refused:
                self.direct = False
            self.direct_bytes += p.writer.direct_bytes
            e = p.writer.error
            if e is not None:
                self.discard(fd, p.dfd, p.tmp)
                self.full(e)
                self.errors += 1
                self.warn(p.path, "not restored: cannot write the file: %s" % _why(e))
                return
            if p.expected and p.digest != p.expected:
                self.discard(fd, p.dfd, p.tmp)
                self.lost(p.path, "checksum mismatch: the file was not restored, its data in "
                          "the image is damaged%s" % self.damage_note(p.reader, *p.span))
                return
            m = p.member
            plain = p.key[:-1] in self.plain
            if not plain:
                self.drop_inherited_acls(fd, m, p.path, _ACCESS_ACL)
            if not plain or (m.uid, m.gid) != self.me:
                self.set_owner(fd, None, None, m, p.path)
            if not plain or m.mode & 0o7000 or m.mode & self.umask:
                try:
                    os.fchmod(fd, m.mode & 0o7777)
                except OSError as e:
                    self.warn(p.path, "cannot set the permissions: %s" % _why(e))
            self.set_xattrs(fd, m, p.path)
            try:
                os.utime(fd, ns=(self.now_ns, m.mtime_ns))
            except OSError as e:
                self.warn(p.path, "cannot set the modification time: %s" % _why(e))
            try:
                if not self.put_in_place(p):
                    self.discard(fd, p.dfd, p.tmp)
                    return
            except OSError as e:
                self.errors += 1
                self.warn(p.path, "cannot put the file in place: %s" % _why(e))
                self.discard(fd, p.dfd, p.tmp)
                return
            os.close(fd)
        except BaseException:
            self.discard(fd, p.dfd, p.tmp)
            raise
        flags = member_flags(m)
        if flags:
            self.flagged.append((p.key[:-1] + (p.final,), flags, p.path))
        self.restored_one(p.path, p.key[:-1] + (p.final,))

    def put_in_place(self, p):
        """Renames a finished file to its name. Only a name that was taken when the file
        was begun is replaced (or any, when overwriting): a name found free then and taken
        since is met as the overwrite mode says. Returns False when the file is skipped."""
        if p.replace or self.overwrite == "overwrite":
            os.rename(p.tmp, p.final, src_dir_fd=p.dfd, dst_dir_fd=p.dfd)
            return True
        while True:
            try:
                rename_noreplace(p.tmp, p.final, p.dfd)
                return True
            except FileExistsError:
                taken = p.final
            if self.overwrite == "skip":
                self.skipped += 1
                self.log("skipped %s: %s was made while it was restored"
                         % (p.path, os.fsdecode(taken)))
                return False
            names = self.fresh.get(p.key[:-1])
            p.final = self.free_name(p.dfd, p.key[-1], names)
            if names is not None:
                names.add(p.final)
            self.log("restored %s as %s: %s was taken while it was restored"
                     % (p.path, os.fsdecode(p.final), os.fsdecode(taken)))

    def set_owner(self, fd, dfd, name, m, path):
        if not self.can_chown:
            return
        try:
            if fd is not None:
                os.fchown(fd, m.uid, m.gid)
            else:
                os.chown(name, m.uid, m.gid, dir_fd=dfd, follow_symlinks=False)
        except OSError as e:
            if e.errno == errno.EPERM:
                self.can_chown = False
                self.warn(path, "owners are not restored: this agent may not change them "
                                "(run it as root to restore owners)")
            else:
                self.warn(path, "cannot set the owner: %s" % _why(e))

    def set_xattrs(self, target, m, path, follow=True):
        for k, v in m.xattrs:
            try:
                if isinstance(target, int) or follow:
                    os.setxattr(target, k, v)
                else:
                    os.setxattr(target, k, v, follow_symlinks=False)
            except OSError as e:
                if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                    self.warn_once("xattr-unsupported", path,
                                   "extended attributes are not restored: the target file "
                                   "system does not support them")
                elif e.errno in (errno.EPERM, errno.EACCES):
                    self.warn_once("xattr-perm", path,
                                   "some extended attributes are not restored: %s (%s)"
                                   % (_why(e), os.fsdecode(k)))
                else:
                    self.warn(path, "cannot set extended attribute %s: %s"
                              % (os.fsdecode(k), _why(e)))

    def drop_inherited_acls(self, target, m, path, names, follow=True):
        """Removes the ACLs that a new entry inherited from its directory's default ACL where
        the image holds none: a restore gives back the access that was backed up, never
        more (a 0640 file must not come back readable through an inherited ACL)."""
        have = {k for k, _ in m.xattrs}
        for name in names:
            if name in have:
                continue  # set from the image (set_xattrs)
            try:
                if isinstance(target, int) or follow:
                    os.removexattr(target, name)
                else:
                    os.removexattr(target, name, follow_symlinks=False)
            except OSError as e:
                if e.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                    self.errors += 1
                    self.warn(path, "an ACL inherited from the target directory could not be "
                                    "removed: %s" % _why(e))

    def directory(self, m, path, comps, parent, name):
        dfd = self.parent_fd(parent)
        st = self.existing(dfd, name)
        apply_meta = True
        if st is not None and stat.S_ISDIR(st.st_mode):
            # an existing directory is merged into; its own metadata only changes when
            # overwriting
            apply_meta = self.overwrite == "overwrite"
            real = name
            made = False
        elif st is not None:
            if self.overwrite == "skip":
                self.skipped += 1
                self.blocked.add(tuple(comps))
                self.log("skipped %s and everything below it: a file of another type is "
                         "in the way" % path)
                return
            if self.overwrite == "rename":
                real = self.free_name(dfd, name)
                self.log("restored %s as %s: the original name is taken"
                         % (path, os.fsdecode(real)))
            else:
                try:
                    os.unlink(name, dir_fd=dfd)
                except OSError as e:
                    raise _Refused("cannot replace the existing entry: %s" % _why(e))
                real = name
            self.mkdir(dfd, real)
            made = True
        else:
            real = name
            self.mkdir(dfd, real)
            made = True
        if real != name:
            self.dirmap[tuple(comps)] = tuple(parent) + (real,)
        self.ndirs += 1
        key = tuple(parent) + (real,)
        self.note_made(parent, real)
        if made:
            self.fresh[key] = set()
            if tuple(parent) in self.plain:
                self.plain.add(key)
            else:
                self.drop_inherited_acls(b"/proc/self/fd/%d/%s" % (dfd, real), m, path,
                                         _ACCESS_ACL + _DEFAULT_ACL, follow=False)
        if apply_meta:
            if m.xattrs:
                try:
                    fd = os.open(real, _DIR_FLAGS, dir_fd=dfd)
                except OSError as e:
                    raise _Refused("cannot open the directory: %s" % _why(e))
                try:
                    self.set_xattrs(fd, m, path)
                finally:
                    os.close(fd)
            self.dirs.append((key, m, path))

    def mkdir(self, dfd, name):
        try:
            os.mkdir(name, 0o700, dir_fd=dfd)  # its own mode comes last (apply_dirs)
        except OSError as e:
            self.full(e)
            raise _Refused("cannot create the directory: %s" % _why(e))

    def hardlink(self, item, m, path, parent, name):
        link = item.get("link") or ""
        tcomps = _plan_components(link) if link else None
        if tcomps is None:
            raise _Refused("the hard link has no target")
        if _member_key(m.linkname) != _member_key(os.fsencode(entry.member_name(link))):
            raise _Refused("the hard link target in the image does not match the index")
        self.drain()
        dfd = self.parent_fd(parent)
        final, replace = self.destination(dfd, name, path, self.fresh.get(tuple(parent)))
        if final is None:
            return
        # link_to: the plan item that holds the group's file where its first link (which
        # the member names) is not restored (see app/jobs/restore.py)
        link_to = item.get("link_to") or link
        if not isinstance(link_to, str):
            raise _Refused("the hard link's plan target is not a path")
        target = self.restored.get(link_to)
        if target is None:
            raise _Refused("its hard link target %s was not restored" % link_to)
        tchain = _Chain(self.root, self.links)
        try:
            tfd = tchain.get(list(target[:-1]), create=False) if len(target) > 1 else self.root
            tmp = self.tmp_name() if replace else final
            try:
                os.link(target[-1], tmp, src_dir_fd=tfd, dst_dir_fd=dfd, follow_symlinks=False)
                if replace:
                    os.rename(tmp, final, src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError as e:
                if replace:
                    self.discard(None, dfd, tmp)
                self.full(e)
                raise _Refused("cannot create the hard link: %s" % _why(e))
        finally:
            tchain.close()
        self.note_made(parent, final)
        self.restored_one(path, tuple(parent) + (final,))

    def other(self, item, m, kind, path, parent, name):
        if kind == entry.KIND_SYMLINK:
            plan_link = item.get("link")
            if plan_link and os.fsencode(plan_link) != m.linkname:
                raise _Refused("the symbolic link target in the image does not match the index")
        dfd = self.parent_fd(parent)
        final, replace = self.destination(dfd, name, path, self.fresh.get(tuple(parent)))
        if final is None:
            return
        tmp = self.tmp_name() if replace else final
        try:
            if kind == entry.KIND_SYMLINK:
                os.symlink(m.linkname, tmp, dir_fd=dfd)
            else:
                dev = os.makedev(m.devmajor, m.devminor) if kind != entry.KIND_FIFO else 0
                # owner-only until its owner and mode are set (below): a device node must
                # not be open to others for a moment, whatever the image says
                os.mknod(tmp, 0o600 | _NODE_TYPES[kind], dev, dir_fd=dfd)
        except OSError as e:
            self.full(e)
            raise _Refused("cannot create it: %s" % _why(e))
        try:
            self.set_owner(None, dfd, tmp, m, path)
            if kind != entry.KIND_SYMLINK:
                if tuple(parent) not in self.plain:
                    self.drop_inherited_acls(b"/proc/self/fd/%d/%s" % (dfd, tmp), m, path,
                                             _ACCESS_ACL, follow=False)
                # created just now in a directory reached without following links
                os.chmod(tmp, m.mode & 0o7777, dir_fd=dfd)
            if m.xattrs:
                self.set_xattrs(b"/proc/self/fd/%d/%s" % (dfd, tmp), m, path, follow=False)
            os.utime(tmp, ns=(self.now_ns, m.mtime_ns), dir_fd=dfd, follow_symlinks=False)
            if replace:
                os.rename(tmp, final, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError as e:
            if replace:
                self.discard(None, dfd, tmp)
                raise _Refused("cannot put it in place: %s" % _why(e))
            self.warn(path, "cannot set its metadata: %s" % _why(e))
        self.note_made(parent, final)
        self.restored_one(path, tuple(parent) + (final,))

    def publish_implicit(self):
        """The directories made on the way to items, private while the restore ran, get the
        mode a directory is made with (0755 less the umask): the image has none for them."""
        if not self.implicit:
            return
        mode = _made_mode(self.umask)
        chain = _Chain(self.root, self.links)
        try:
            for key in sorted(set(self.implicit), key=len, reverse=True):
                try:
                    os.fchmod(chain.get(list(key), create=False), mode)
                except (_Refused, OSError):
                    continue  # gone or replaced: it stays as it is, private
        finally:
            chain.close()

    def apply_file_flags(self):
        """The inode flags of restored files, last: an immutable or append-only file takes
        no more hard links, times or renames."""
        if not self.flagged:
            return
        chain = _Chain(self.root, self.links)
        try:
            for key, flags, path in self.flagged:
                if self.is_cancelled():
                    raise Canceled()
                fd = None
                try:
                    dfd = chain.get(list(key[:-1]), create=False) if len(key) > 1 else self.root
                    fd = os.open(key[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                                 | _CLOEXEC, dir_fd=dfd)
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        self.set_flags(fd, flags, path)
                except (_Refused, OSError) as e:
                    self.warn(path, "cannot set its inode flags: %s" % (
                        _why(e) if isinstance(e, OSError) else e))
                finally:
                    if fd is not None:
                        os.close(fd)
        finally:
            chain.close()

    def set_flags(self, fd, flags, path):
        try:
            fflags.set_kept(fd, flags)
        except OSError as e:
            if e.errno in fflags.UNSUPPORTED:
                self.warn_once("fflags-unsupported", path, "inode flags (chattr) are not "
                               "restored: the target file system does not have them")
            elif e.errno == errno.EPERM:
                self.warn_once("fflags-perm", path, "inode flags such as immutable and "
                               "append-only are not restored: only root may set them")
            else:
                self.warn(path, "cannot set its inode flags: %s" % _why(e))

    def apply_dirs(self):
        """Directory modes, owners and times last, deepest first: a read-only directory mode
        must not block writing its children, and writing children changes the mtime."""
        self.dirs.sort(key=lambda d: len(d[0]), reverse=True)
        chain = _Chain(self.root, self.links)
        try:
            for key, m, path in self.dirs:
                if self.is_cancelled():
                    raise Canceled()
                try:
                    fd = chain.get(list(key), create=False)
                except _Refused as e:
                    self.warn(path, "cannot set the directory's metadata: %s" % e)
                    continue
                except OSError as e:
                    self.warn(path, "cannot set the directory's metadata: %s" % _why(e))
                    continue
                self.set_owner(fd, None, None, m, path)
                try:
                    os.fchmod(fd, m.mode & 0o7777)
                    os.utime(fd, ns=(self.now_ns, m.mtime_ns))
                except OSError as e:
                    self.warn(path, "cannot set the directory's metadata: %s" % _why(e))
                flags = member_flags(m)
                if flags:
                    self.set_flags(fd, flags, path)
        finally:
            chain.close()

    def close(self):
        self.discard_pending(self.pending)
        self.pending = []
        for dfd in self.dir_refs:
            os.close(dfd)
        self.dir_refs = {}
        self.chain.close()
        try:
            os.close(self.root)
        except OSError:
            pass
        self.worker.close()


def _umask():
    """This process's umask, read without changing it (other threads create files too), or
    None where the kernel does not say (before Linux 4.7)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def member_flags(m):
    """The inode flags a member carries (SCHILY.fflags), 0 for none."""
    text = m.pax.get(b"SCHILY.fflags") if m.pax else None
    return fflags.from_text(text) if text else 0


def _made_mode(umask):
    """The mode of a directory made without one from the image, as mkdir -p makes it."""
    return 0o755 & ~(umask if umask is not None else 0o022)


def _plain_dir(fd):
    """Whether files made in the directory get this process's owner and their mode less the
    umask, and directories made in it inherit nothing that changes that."""
    try:
        if os.fstat(fd).st_mode & stat.S_ISGID:
            return False
        os.getxattr(fd, "system.posix_acl_default")
        return False  # a default ACL decides new files' modes instead of the umask
    except OSError as e:
        return e.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP)


def check_request(overwrite, checksum):
    if overwrite not in OVERWRITE_MODES:
        raise ValidationError("overwrite must be one of %s, not %r"
                             % (", ".join(OVERWRITE_MODES), overwrite))
    try:
        tarfmt.piece_hash(checksum)
    except ValueError as e:
        raise ValidationError(str(e))


def restore_from(src, target_dir, plan, *, overwrite, emit, is_cancelled,
                 checksum=tarfmt.DEFAULT_CHECKSUM, direct=False, direct_for=None,
                 lengths=None):
    """Restore the members of `src` (one per plan item, in plan order) under `target_dir`
    (a path, or an OpenTarget that the caller publishes and closes).

    plan items: {"path", "kind", "checksum", "link", "member"} and, for a relocated item,
    "to": its absolute path under the target instead of "path" (see the module notes); a
    hard link may name in "link_to" the plan item to link to, where that is not its member's
    target (the group's first link, not restored).
    overwrite: "skip", "overwrite" or "rename". Events: "progress", "warning", "log".
    direct: write the data of large files with O_DIRECT where the file system takes it (see
    _Writer), for targets on the host's own devices (directio.suits_target). direct_for(path):
    the same question for a directory below the target on another file system (a mount
    point inside it), asked once per device; without it such directories follow the target.
    lengths: each item's length in the stream, from the catalog: then a damaged member
    costs only its own item (see _Restore.run_items).
    Returns {"files", "dirs", "bytes", "direct_bytes", "warnings", "skipped", "errors",
    "damaged"} (direct_bytes: of bytes, those written with O_DIRECT; damaged: of errors,
    the items lost to damage in the image).
    """
    check_request(overwrite, checksum)
    target, own = opened(target_dir)
    try:
        r = _Restore(src, target, overwrite, emit, is_cancelled, plan, checksum, direct,
                     direct_for)
        try:
            summary = r.run(plan, lengths)
        except BaseException:
            r.progress_at_end()
            raise
        finally:
            r.close()
        if own:
            target.publish()
        return summary
    finally:
        if own:
            target.close()
