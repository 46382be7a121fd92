"""Inode flags (chattr: append-only, immutable, nodump, ...): read and set through the
FS_IOC_GETFLAGS / FS_IOC_SETFLAGS ioctls, and written into an image as the pax record
SCHILY.fflags with the names bsdtar gives them (sappnd, schg, nodump, ...), so that other
tars can read them too. Only the flags a backup should carry are kept; those a file system
manages itself (extents, inline data, encryption, ...) are not.

Standard library only: this runs on client hosts.
"""

import errno
import fcntl
import struct

FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602

SYNC = 0x00000008
IMMUTABLE = 0x00000010
APPEND = 0x00000020
NODUMP = 0x00000040
NOATIME = 0x00000080
DIRSYNC = 0x00010000

# (flag, name in SCHILY.fflags), in the order names are written
NAMES = ((APPEND, b"sappnd"), (IMMUTABLE, b"schg"), (NODUMP, b"nodump"),
         (NOATIME, b"noatime"), (SYNC, b"sync"), (DIRSYNC, b"dirsync"))
KEPT = 0
for _flag, _ in NAMES:
    KEPT |= _flag
_BY_NAME = {name: flag for flag, name in NAMES}
# the flags that stop a file from being changed: set after everything else
LOCKING = IMMUTABLE | APPEND

# the file system has no such flags (tmpfs before Linux 6.0, NFS, FUSE, ...)
UNSUPPORTED = {errno.ENOTTY, errno.EINVAL, errno.EOPNOTSUPP,
               getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.ENOSYS}

_INT = struct.Struct("i")


def get(fd):
    """The kept flags of an open file or directory; OSError where they cannot be read
    (errno in UNSUPPORTED: the file system has none)."""
    return _INT.unpack(fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * _INT.size))[0] & KEPT


def set_kept(fd, flags):
    """Sets the kept flags of an open file to `flags`, leaving the file system's own as they
    are. OSError where it cannot (EPERM: immutable and append-only need root)."""
    now = _INT.unpack(fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * _INT.size))[0]
    new = (now & ~KEPT) | (flags & KEPT)
    if new != now:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, _INT.pack(new))


def to_text(flags):
    """The SCHILY.fflags value for `flags`, or None when none is set."""
    names = [name for flag, name in NAMES if flags & flag]
    return b",".join(names) if names else None


def from_text(text):
    """The flags a SCHILY.fflags value names; names this host does not know are left out."""
    flags = 0
    for name in text.split(b","):
        flags |= _BY_NAME.get(name.strip(), 0)
    return flags
