"""How a restore puts files in place: written under a temporary name, finished in batches
behind the hash worker once their checksums are known, renamed without replacing a name
taken meanwhile (_Finishing, a part of app/agent/extract.py's _Restore).

Standard library only: this runs on client hosts."""

import errno
import os
from collections import deque

from app.agent.restore_meta import _ACCESS_ACL, member_flags
from app.agent.restore_tally import damage_note
from app.agent.restore_target import _why, rename_noreplace
from app.errors import RestoreTargetInvalid


# A full or read-only target makes every following file fail too: the restore stops.
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


class _Finishing:
    """The finishing steps of a restore (see app/agent/extract.py, _Restore)."""

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
        tally = self.tally
        try:
            if p.writer.refused:
                self.direct_io.refused()
            tally.direct_bytes += p.writer.direct_bytes
            e = p.writer.error
            if e is not None:
                self.discard(fd, p.dfd, p.tmp)
                self.full(e)
                tally.errors += 1
                tally.warn(p.path, "not restored: cannot write the file: %s" % _why(e))
                return
            if p.expected and p.digest != p.expected:
                self.discard(fd, p.dfd, p.tmp)
                tally.lost(p.path, "checksum mismatch: the file was not restored, its data in "
                           "the image is damaged%s" % damage_note(p.reader, *p.span))
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
                    tally.warn(p.path, "cannot set the permissions: %s" % _why(e))
            self.set_xattrs(fd, m, p.path)
            try:
                os.utime(fd, ns=(self.now_ns, m.mtime_ns))
            except OSError as e:
                tally.warn(p.path, "cannot set the modification time: %s" % _why(e))
            try:
                if not self.put_in_place(p):
                    self.discard(fd, p.dfd, p.tmp)
                    return
            except OSError as e:
                tally.errors += 1
                tally.warn(p.path, "cannot put the file in place: %s" % _why(e))
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
                self.tally.skipped += 1
                self.tally.log("skipped %s: %s was made while it was restored"
                               % (p.path, os.fsdecode(taken)))
                return False
            names = self.fresh.get(p.key[:-1])
            p.final = self.free_name(p.dfd, p.key[-1], names)
            if names is not None:
                names.add(p.final)
            self.tally.log("restored %s as %s: %s was taken while it was restored"
                           % (p.path, os.fsdecode(p.final), os.fsdecode(taken)))
