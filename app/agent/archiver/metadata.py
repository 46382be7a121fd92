"""The metadata a member carries beside the data: owner and group names, extended
attributes and inode flags, each looked up once per id or file system where it can be."""

import errno
import grp
import os
import pwd

from app.agent.archiver.common import DIR_FLAGS
from app.formats import fflags


def _cached_name(cache, key, lookup):
    """User and group names for the headers, looked up once per id ("" when unknown)."""
    try:
        return cache[key]
    except KeyError:
        try:
            n = os.fsencode(lookup())
        except (KeyError, OverflowError):
            n = b""
        cache[key] = n
        return n


class Metadata:
    """Part of a backup (app/agent/archiver/backup.py): the metadata helpers. Uses its users,
    groups, no_xattr_devs, no_flags_devs, skip_nodump and nodump."""

    def uname(self, uid):
        return _cached_name(self.users, uid, lambda: pwd.getpwuid(uid).pw_name)

    def gname(self, gid):
        return _cached_name(self.groups, gid, lambda: grp.getgrgid(gid).gr_name)

    def xattrs(self, target, dev, follow=False, dfd=None, name=None):
        """Extended attributes of every namespace this process can read, as (name, value)
        bytes pairs. `target` is an fd or a path."""
        if dev in self.no_xattr_devs:
            return None
        try:
            if isinstance(target, int):
                names = os.listxattr(target)
            else:
                try:
                    names = os.listxattr(target, follow_symlinks=follow)
                except OSError as e:
                    if e.errno != errno.ENAMETOOLONG or dfd is None:
                        raise
                    # deeper than PATH_MAX: name it through the open parent directory
                    target = b"/proc/self/fd/%d/%s" % (dfd, name)
                    names = os.listxattr(target, follow_symlinks=follow)
        except OSError as e:
            if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                self.no_xattr_devs.add(dev)
            return None
        if not names:
            return None
        out = []
        for n in sorted(names):
            try:
                if isinstance(target, int):
                    v = os.getxattr(target, n)
                else:
                    v = os.getxattr(target, n, follow_symlinks=follow)
            except OSError:
                continue  # removed meanwhile, or a namespace this process may not read
            out.append((os.fsencode(n), v))
        return out

    def inode_flags(self, fd, dev):
        """The inode flags (app/formats/fflags.py) of an open file or directory; 0 where its
        file system has none."""
        if dev in self.no_flags_devs:
            return 0
        try:
            return fflags.get(fd)
        except OSError as e:
            if e.errno in fflags.UNSUPPORTED:
                self.no_flags_devs.add(dev)
            return 0

    def directory_flags(self, dfd, name, dev):
        if dev in self.no_flags_devs:
            return 0
        try:
            fd = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError:
            return 0  # the walk into it reports what is wrong
        try:
            return self.inode_flags(fd, dev)
        finally:
            os.close(fd)

    def left_out(self, flags):
        """Whether an entry with these inode flags is left out (marked nodump)."""
        if self.skip_nodump and flags & fflags.NODUMP:
            self.nodump += 1
            return True
        return False
