"""The member of each entry of a backup: what kind the entry is, whether an incremental lists
it unchanged or a files cache refers to the base image instead, and the member and row of a
directory, symbolic link, hard link or special file. A regular file's member, with its data,
is written by filedata.py."""

import errno
import os
import stat

from app.agent.archiver.common import FS_ENCODING, FS_ERRORS, why
from app.formats import entry, fflags, tarfmt
from app.formats.changes import file_digest, state_digest

# a path as JSON text, as the rows' encoder writes it (the C version when there is one)
from json.encoder import encode_basestring_ascii as _json_text  # noqa: E402

# a files cache's row (app/formats/entry.py: path, kind, mode, uid, gid, size, mtime, offset,
# length, checksum, link target, ctime, inode), written as index.py's encoder writes a row
_CACHED_ROW = "[%%s,%s,%%d,%%d,%%d,%%d,%%d,%%d,%%d,%%s,\"\",%%d,%%d]" % _json_text(entry.KIND_FILE)


class Members:
    """Part of a backup (app/agent/archiver/backup.py): one entry at a time, as the walk
    finds it."""

    def entry(self, dfd, name, path, st):
        """Write one entry's member and queue its row. Returns False when it was skipped.
        (A files cache's unchanged file never comes here: the walk takes it to cached_file.)"""
        mode = st.st_mode
        spath = path.decode(FS_ENCODING, FS_ERRORS)
        self.current = spath
        prev = self.prev_names
        if prev is not None and not self.files_cache and not stat.S_ISDIR(mode):
            known = prev.get(name)
            if known is not None and self.unchanged_entry(dfd, name, spath, st, known):
                return True
        member = path[1:]
        uid = st.st_uid
        gid = st.st_gid
        if stat.S_ISREG(mode):
            if st.st_nlink > 1:
                first = self.links.get((st.st_dev, st.st_ino))
                # A group whose first link was unchanged has no member in this image to link
                # to: this one is stored with its data (and the group's later links to it).
                if first is not None and first[0] is not None:
                    return self.hardlink(path, spath, st, first)
            return self.regular(dfd, name, path, spath, st)
        flags = 0
        if stat.S_ISDIR(mode):
            flags = self.directory_flags(dfd, name, st.st_dev)
            if self.left_out(flags):
                return False  # nor anything below it
            kind = entry.KIND_DIR
            typeflag = tarfmt.DIRTYPE
            member += b"/"
            self.dirs += 1
        else:
            if st.st_nlink > 1:
                first = self.links.get((st.st_dev, st.st_ino))
                if first is not None:
                    return self.hardlink(path, spath, st, first)
            if stat.S_ISLNK(mode):
                kind = entry.KIND_SYMLINK
                typeflag = tarfmt.SYMTYPE
            elif stat.S_ISFIFO(mode):
                kind = entry.KIND_FIFO
                typeflag = tarfmt.FIFOTYPE
            elif stat.S_ISCHR(mode):
                kind = entry.KIND_CHAR
                typeflag = tarfmt.CHRTYPE
            elif stat.S_ISBLK(mode):
                kind = entry.KIND_BLOCK
                typeflag = tarfmt.BLKTYPE
            elif stat.S_ISSOCK(mode):
                self.log("skipped socket %s: sockets cannot be backed up" % spath)
                return False
            else:
                self.log("skipped %s: unknown file type %o" % (spath, stat.S_IFMT(mode)))
                return False
            self.files += 1
        link = b""
        if kind == entry.KIND_SYMLINK:
            try:
                link = os.readlink(name, dir_fd=dfd)
            except OSError as e:
                self.files -= 1
                if e.errno == errno.ENOENT:
                    self.warn(path, "vanished during backup")
                else:
                    self.warn(path, "cannot be read: %s" % why(e))
                return False
        dev = 0
        if kind in (entry.KIND_CHAR, entry.KIND_BLOCK):
            dev = st.st_rdev
        xattrs = self.xattrs(path, st.st_dev, dfd=dfd, name=name)
        offset = self.out.pos
        self.out.put(tarfmt.member_header(
            member, typeflag, stat.S_IMODE(mode), uid, gid, 0, st.st_mtime_ns, link,
            self.uname(uid), self.gname(gid), os.major(dev) if dev else 0,
            os.minor(dev) if dev else 0, xattrs, fflags=fflags.to_text(flags) if flags else None))
        if kind != entry.KIND_DIR and st.st_nlink > 1:
            self.links[(st.st_dev, st.st_ino)] = (member, spath)
        self.add_row([spath, kind, stat.S_IMODE(mode), uid, gid, 0, st.st_mtime_ns, offset,
                      self.out.pos - offset, "", os.fsdecode(link), st.st_ctime_ns, st.st_ino])
        return True

    def unchanged_entry(self, dfd, name, spath, st, digest):
        """List an entry without sending it when its state matches the previous image's: a
        short row (app/formats/entry.py) the master completes from the base image's index.
        Returns False when it must be sent."""
        mode = st.st_mode
        size = 0
        if stat.S_ISREG(mode):
            size = st.st_size
            if st.st_nlink > 1:
                first = self.links.get((st.st_dev, st.st_ino))
                if first is not None:
                    if first[0] is not None:
                        return False  # the group's data is in this image: link to it
                    # a later link of a group whose first link was unchanged: as the base
                    # lists it, a hard link to that first link
                    now = state_digest(entry.KIND_HARDLINK, mode & 0o7777, st.st_uid,
                                       st.st_gid, 0, st.st_mtime_ns, st.st_ctime_ns,
                                       st.st_ino, first[1])
                    if now != digest:
                        return False
                    return self._unchanged(spath, st, 0)
                if file_digest(mode & 0o7777, st.st_uid, st.st_gid, size, st.st_mtime_ns,
                               st.st_ctime_ns, st.st_ino) != digest:
                    return False
                self.links[(st.st_dev, st.st_ino)] = (None, spath)
                return self._unchanged(spath, st, size)
            if file_digest(mode & 0o7777, st.st_uid, st.st_gid, size, st.st_mtime_ns,
                           st.st_ctime_ns, st.st_ino) != digest:
                return False
            return self._unchanged(spath, st, size)
        if st.st_nlink > 1:
            return False
        link = ""
        if stat.S_ISLNK(mode):
            kind = entry.KIND_SYMLINK
            try:
                link = os.readlink(name, dir_fd=dfd)
            except OSError:
                return False  # the normal path reports it
        elif stat.S_ISFIFO(mode):
            kind = entry.KIND_FIFO
        elif stat.S_ISCHR(mode):
            kind = entry.KIND_CHAR
        elif stat.S_ISBLK(mode):
            kind = entry.KIND_BLOCK
        else:
            return False
        if state_digest(kind, mode & 0o7777, st.st_uid, st.st_gid, size, st.st_mtime_ns,
                        st.st_ctime_ns, st.st_ino, link) != digest:
            return False
        return self._unchanged(spath, st, size)

    def _unchanged(self, spath, st, size):
        self.unchanged += 1
        self.unchanged_bytes += size
        # the owners of every entry are named in the image's summary, unchanged ones too
        self.owner_uids.add(st.st_uid)
        self.owner_gids.add(st.st_gid)
        self.pending.append((self.out.pos, "[%s,-1]" % _json_text(spath)))
        return True

    def cached_file(self, path, st, known):
        """A full with a files cache: an unchanged single-link regular file (`known`: its
        digest and reference in the previous state) is written as a reference to its member
        in the base image. Returns False when it must be read."""
        mode = st.st_mode
        if not stat.S_ISREG(mode) or st.st_nlink != 1:
            return False
        digest, (source, base_offset, length, checksum) = known
        if not checksum:
            return False
        perm = mode & 0o7777
        size = st.st_size
        if file_digest(perm, st.st_uid, st.st_gid, size, st.st_mtime_ns, st.st_ctime_ns,
                       st.st_ino) != digest:
            return False
        spath = path.decode(FS_ENCODING, FS_ERRORS)
        self.current = spath
        offset = self.out.pos
        self.out.reference(source, base_offset, length)
        # counted as the normal path counts a file: its data, not the holes of a sparse one
        data = min(size, st.st_blocks * 512)
        self.files += 1
        self.bytes += data
        self.reused += 1
        self.reused_bytes += data
        uid = st.st_uid
        gid = st.st_gid
        self.owner_uids.add(uid)
        self.owner_gids.add(gid)
        # the row as its JSON text at once, as the rows' encoder would write the list: the
        # encoder's work per row was a seventh of a walk of unchanged files
        self.pending.append((self.out.pos, _CACHED_ROW % (
            _json_text(spath), perm, uid, gid, size, st.st_mtime_ns, offset, length,
            _json_text(checksum), st.st_ctime_ns, st.st_ino)))
        return True

    def listed_unchanged(self, path, st):
        """An incremental's entry the file list shows unchanged since the previous backup's
        scan: listed from the list alone, not looked at again. Only single-link regular files:
        a hard link group or a symlink target needs the file system itself."""
        if (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1
                or st.st_ctime_ns >= self.unchanged_before_ns):
            return False
        spath = os.fsdecode(path)
        self.current = spath
        self.unchanged += 1
        self.unchanged_bytes += st.st_size
        # The list's times have microseconds; the master takes the exact ones from the
        # previous image's index.
        self.add_row([spath, entry.KIND_FILE, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
                      st.st_size, st.st_mtime_ns, -1, 0, "", "", st.st_ctime_ns, st.st_ino])
        return True

    def hardlink(self, path, spath, st, first):
        target_member, target_path = first
        offset = self.out.pos
        self.out.put(tarfmt.member_header(
            path[1:], tarfmt.LNKTYPE, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, 0,
            st.st_mtime_ns, target_member, self.uname(st.st_uid), self.gname(st.st_gid)))
        self.files += 1
        self.add_row([spath, entry.KIND_HARDLINK, stat.S_IMODE(st.st_mode), st.st_uid,
                      st.st_gid, 0, st.st_mtime_ns, offset, self.out.pos - offset, "",
                      target_path, st.st_ctime_ns, st.st_ino])
        return True
