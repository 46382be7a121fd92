"""What a restore sets beside the data: owners, extended attributes, exactly the ACLs the
image holds, inode flags, and directories' modes and times, the last of them last
(_Metadata, a part of app/agent/extract.py's _Restore).

Standard library only: this runs on client hosts."""

import errno
import os
import stat

from app.agent.restore_target import _CLOEXEC, _Chain, _made_mode, _Refused, _why
from app.errors import Canceled
from app.formats import fflags


_ACCESS_ACL = (b"system.posix_acl_access",)
_DEFAULT_ACL = (b"system.posix_acl_default",)


class _Metadata:
    """The metadata steps of a restore (see app/agent/extract.py, _Restore)."""

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
                self.tally.warn(path, "owners are not restored: this agent may not change them "
                                      "(run it as root to restore owners)")
            else:
                self.tally.warn(path, "cannot set the owner: %s" % _why(e))

    def set_xattrs(self, target, m, path, follow=True):
        for k, v in m.xattrs:
            try:
                if isinstance(target, int) or follow:
                    os.setxattr(target, k, v)
                else:
                    os.setxattr(target, k, v, follow_symlinks=False)
            except OSError as e:
                if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                    self.tally.warn_once("xattr-unsupported", path,
                                         "extended attributes are not restored: the target file "
                                         "system does not support them")
                elif e.errno in (errno.EPERM, errno.EACCES):
                    self.tally.warn_once("xattr-perm", path,
                                         "some extended attributes are not restored: %s (%s)"
                                         % (_why(e), os.fsdecode(k)))
                else:
                    self.tally.warn(path, "cannot set extended attribute %s: %s"
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
                    self.tally.errors += 1
                    self.tally.warn(path, "an ACL inherited from the target directory could "
                                          "not be removed: %s" % _why(e))

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
                    self.tally.warn(path, "cannot set its inode flags: %s" % (
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
                self.tally.warn_once("fflags-unsupported", path, "inode flags (chattr) are not "
                                     "restored: the target file system does not have them")
            elif e.errno == errno.EPERM:
                self.tally.warn_once("fflags-perm", path, "inode flags such as immutable and "
                                     "append-only are not restored: only root may set them")
            else:
                self.tally.warn(path, "cannot set its inode flags: %s" % _why(e))

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
                    self.tally.warn(path, "cannot set the directory's metadata: %s" % e)
                    continue
                except OSError as e:
                    self.tally.warn(path, "cannot set the directory's metadata: %s" % _why(e))
                    continue
                self.set_owner(fd, None, None, m, path)
                try:
                    os.fchmod(fd, m.mode & 0o7777)
                    os.utime(fd, ns=(self.now_ns, m.mtime_ns))
                except OSError as e:
                    self.tally.warn(path, "cannot set the directory's metadata: %s" % _why(e))
                flags = member_flags(m)
                if flags:
                    self.set_flags(fd, flags, path)
        finally:
            chain.close()


def member_flags(m):
    """The inode flags a member carries (SCHILY.fflags), 0 for none."""
    text = m.pax.get(b"SCHILY.fflags") if m.pax else None
    return fflags.from_text(text) if text else 0
