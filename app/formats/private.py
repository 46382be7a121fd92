"""What Cairn keeps for itself is private to the user it runs as: the folders and files of a
pool (a deduplicating pool, the image folders of an AdvancedDisk pool), CAIRN_HOME and the
agent's copy on a host. Folders are 0700 and files 0600 whatever the umask, and a folder
found more open (an older Cairn made them 0755, or someone loosened them by hand) is made
private again when Cairn next uses it; verify walks whole trees (walk) and names what it found.

Modes are changed on descriptors opened without following symbolic links (fchmod on an
O_NOFOLLOW descriptor), never by path, so that a link swapped in for a name between a look
and a change cannot make Cairn change some other file.

A change is reported as a dict {"path", "mode" (the mode found, octal text), "error" (None
when it was made private, else why it could not be)} in the list the caller passes.
Standard library only: this runs in the agent on every host."""

import errno
import os
import stat

DIR_MODE = 0o700
FILE_MODE = 0o600
OPEN_BITS = 0o077  # what lets the group or others read, write or enter

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _CLOEXEC
_OWN_DIR_FLAGS = _DIR_FLAGS | _NOFOLLOW
# a regular file is opened only to change its mode: never block (a fifo put in its place)
_LOOK_FLAGS = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
# what cannot be changed is reported, never a reason to stop a backup
_CANNOT = (errno.EPERM, errno.EACCES, errno.EROFS)


class NotAFolder(OSError):
    """A name that must be a real folder of Cairn's is a symbolic link or a file."""


def mode_text(mode):
    return "%04o" % stat.S_IMODE(mode)


def _note(changed, path, mode, error=None):
    if changed is not None:
        changed.append({"path": path, "mode": mode_text(mode), "error": error})


def tighten(fd, path, changed=None, st=None):
    """Takes the group's and others' bits from what `fd` is open on. Returns whether any was
    set; `changed` gets the change (or why it could not be made)."""
    st = st or os.fstat(fd)
    if not st.st_mode & OPEN_BITS:
        return False
    if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        return False  # a folder shared on purpose (sticky, like /tmp) is never Cairn's own
    try:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~OPEN_BITS)
    except OSError as e:
        if e.errno not in _CANNOT:
            raise
        owner = "" if st.st_uid == os.geteuid() else f" (it belongs to uid {st.st_uid})"
        _note(changed, path, st.st_mode, f"{e.strerror}{owner}")
        return True
    _note(changed, path, st.st_mode)
    return True


def _not_a_folder(name, dir_fd, path):
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder"
    return NotAFolder(errno.ENOTDIR, f"{path} is {what}: Cairn keeps its data only in real "
                                     "folders of its own; move it away", path)


def private_dir(name, dir_fd=None, changed=None, path=None, create=True):
    """The descriptor of folder `name` (relative to dir_fd, or a path), made (0700) when it is
    missing (unless not `create`: FileNotFoundError) and made private when it is not. A
    symbolic link in its place is never followed: NotAFolder."""
    path = path or name
    try:
        fd = os.open(name, _OWN_DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, DIR_MODE, dir_fd=dir_fd)
            made = True
        except FileExistsError:
            made = False  # made meanwhile by another process: looked at like any other
        try:
            fd = os.open(name, _OWN_DIR_FLAGS, dir_fd=dir_fd)
        except OSError as e:
            raise _not_a_folder(name, dir_fd, path) or e from None
        if made:
            _exactly(fd, DIR_MODE)
            return fd
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _not_a_folder(name, dir_fd, path) or e from None
        raise
    try:
        tighten(fd, path, changed)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _exactly(fd, mode):
    """The mode of something Cairn just made, whatever the umask took from it."""
    if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
        os.fchmod(fd, mode)


def _open_above(path):
    """A descriptor of a folder that is not Cairn's own (a volume, a mount point): followed
    as it is, its missing folders made private."""
    try:
        return os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        parent, name = os.path.split(path)
        if not name or parent == path:
            raise
    pfd = _open_above(parent)
    try:
        try:
            os.mkdir(name, DIR_MODE, dir_fd=pfd)
            made = True
        except FileExistsError:
            made = False
        fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
        if made:
            _exactly(fd, DIR_MODE)
        return fd
    finally:
        os.close(pfd)


def makedirs(path, own=0, changed=None, top=False):
    """The descriptor of folder `path`; missing folders are made private. The last `own`
    folders of the path are Cairn's own: opened without following links, made private when
    they are not. The folders above them belong to the administrator (a volume and what
    holds it) and are used as they are, except that with `top` the folder just above them
    (a pool's root, CAIRN_HOME: named by the administrator, possibly through a link, but
    Cairn's alone) is made private too."""
    path = os.path.abspath(path)
    parts = [p for p in path.split("/") if p]
    own = min(own, len(parts) - 1)  # a folder of / itself (/tmp, /srv) is never Cairn's own
    above = "/" + "/".join(parts[:len(parts) - own])
    fd = _open_above(above)
    try:
        if top:
            tighten(fd, above, changed)
        for name in parts[len(parts) - own:]:
            above = os.path.join(above, name)
            nfd = private_dir(name, dir_fd=fd, changed=changed, path=above)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def create(name, flags, dir_fd=None, changed=None):
    """Opens file `name` with os.O_CREAT (and `flags`) as 0600 whatever the umask, never
    through a symbolic link. An existing file is made private when it is not (reported in
    `changed`)."""
    fd = os.open(name, flags | os.O_CREAT | _NOFOLLOW | _CLOEXEC, FILE_MODE, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if st.st_mode & OPEN_BITS:
            tighten(fd, name, changed, st)
        elif stat.S_IMODE(st.st_mode) & FILE_MODE != FILE_MODE and st.st_uid == os.geteuid():
            os.fchmod(fd, FILE_MODE)  # a umask that took the owner's own bits
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_file(name, dir_fd=None, changed=None, path=None):
    """Makes an existing regular file private; a missing one, a link or anything else is
    left alone."""
    try:
        fd = os.open(name, _LOOK_FLAGS, dir_fd=dir_fd)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            tighten(fd, path or name, changed, st)
    finally:
        os.close(fd)


def walk(top, changed, is_cancelled=None):
    """Makes every folder and regular file below (and including) folder `top` private,
    reporting each change in `changed`. Symbolic links below `top` are not followed (Cairn
    makes none in its trees). One stat per entry, from the folder listing: cheap enough for
    verify, too much for every open of a pool with millions of files. A missing top is no
    error."""
    try:
        fd = os.open(top, _DIR_FLAGS)  # named by the caller: a link to it is followed
    except FileNotFoundError:
        return
    try:
        tighten(fd, top, changed)
    except BaseException:
        os.close(fd)
        raise
    _walk(fd, top, changed, is_cancelled)


def _walk(fd, path, changed, is_cancelled):
    try:
        with os.scandir(fd) as it:
            entries = list(it)
        for e in entries:
            if is_cancelled is not None and is_cancelled():
                return
            sub = os.path.join(path, e.name)
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile (a reclaim, an expiry)
            if stat.S_ISDIR(st.st_mode):
                try:
                    sfd = private_dir(e.name, dir_fd=fd, changed=changed, path=sub,
                                      create=False)
                except (FileNotFoundError, NotAFolder):
                    continue
                _walk(sfd, sub, changed, is_cancelled)
            elif stat.S_ISREG(st.st_mode) and st.st_mode & OPEN_BITS:
                private_file(e.name, dir_fd=fd, changed=changed, path=sub)
    finally:
        os.close(fd)
