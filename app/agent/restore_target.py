"""Where a restore writes: the names of a plan checked so that none leaves the target, the
target opened once from / (OpenTarget), and directories below it walked one descriptor at a
time (_Chain), following no link but those only root could have made (_Links): see the
threat model at the head of app/agent/extract.py.

Standard library only: this runs on client hosts."""

import errno
import os
import stat

from app.errors import RestoreTargetInvalid


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
# Links followed on the way to one directory, at most (the kernel's own limit).
MAX_LINKS = 40
# A link whose change time is this close to the restore's start, or later, may have been
# made by the restore itself: the file system's clock is coarse (a tick behind).
LINK_AGE_NS = 50_000_000
KEEP_FDS = 64
NAME_MAX = 255


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
