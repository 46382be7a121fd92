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

import os
import stat
import time
from collections import deque

from app.agent.restore_finish import _Finishing
from app.agent.restore_io import (_DIRECT_REFUSED, _O_DIRECT, CHUNK, DIRECT_MIN, NBUF,
                                  WRITE_THREADS, WRITE_THREADS_DIRECT, _damaged, _DirectChoice,
                                  _Pending, _Source, _Writer)
from app.agent.restore_meta import _ACCESS_ACL, _DEFAULT_ACL, _Metadata
from app.agent.restore_tally import _Tally, damage_note
from app.agent.restore_target import (_CLOEXEC, _DIR_FLAGS, NAME_MAX, _Chain, _Links, _member_key,
                                      _plain_dir, _plan_components, _Refused, _umask, _why, opened)
from app.errors import Canceled, ValidationError
from app.formats import entry, tarfmt


MAX_PENDING = 64
OVERWRITE_MODES = ("skip", "overwrite", "rename")
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


class _Restore(_Finishing, _Metadata):
    """The restore of a member stream into one target: the plan's checks and the ways to the
    items (here), the finishing of written files (_Finishing) and their metadata (_Metadata);
    its counts and events in `tally` (restore_tally._Tally), which files are written with
    O_DIRECT in `direct_io` (restore_io._DirectChoice)."""

    def __init__(self, src, target, overwrite, emit, is_cancelled, plan, checksum, direct,
                 direct_for=None):
        self.checksum = checksum
        self.tally = _Tally(emit)
        self.is_cancelled = is_cancelled
        self.overwrite = overwrite
        self.root = os.dup(target.fd)
        self.now_ns = time.time_ns()
        self.links = _Links(self.now_ns, target.from_root)
        self.direct_io = _DirectChoice(direct, direct_for, self.root, target.path)
        self.worker = tarfmt.HashWorker(
            NBUF, CHUNK, threads=WRITE_THREADS_DIRECT if self.direct_io.on else WRITE_THREADS)
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
        self.counter = 0  # numbers the temporary names (tmp_name)
        self.span = (0, 0)  # where the member of the item being restored is in the stream
        self.can_chown = True

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
        tally = self.tally
        for k, item in enumerate(plan):
            if self.is_cancelled():
                raise Canceled()
            tally.progress()
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
                tally.lost(path, "not restored: its header in the image is damaged (%s)%s"
                           % (e, damage_note(src.src, start, stop)))
                src.skip(stop - src.offset)
                continue
            self.span = (start, end)
            try:
                self.item(item, m)
            except _Refused as e:
                tally.errors += 1
                tally.warn(path, "not restored: %s" % e)
            except OSError as e:
                self.full(e)
                tally.errors += 1
                tally.warn(path, "not restored: %s" % _why(e))
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

    def complete(self):
        """Directory metadata, the last progress event, and the summary."""
        self.publish_implicit()
        self.apply_file_flags()
        self.apply_dirs()
        self.tally.progress(force=True)
        return self.tally.counts()

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
        self.direct_io.devices = other.direct_io.devices
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
            self.tally.skipped += 1
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
            self.direct_io.enter(self.chain.fds[-1] if self.chain.fds else self.root, key)
            for made in self.chain.made:
                self.implicit.append(made)
                self.fresh[made] = set()
                if made[:-1] in self.plain:
                    self.plain.add(made)
                self.note_made(made[:-1], made[-1])
            del self.chain.made[:]
        return self.chain.fds[-1] if self.chain.fds else self.root

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
            self.tally.skipped += 1
            self.tally.log("skipped %s: it already exists" % path)
            return None, False
        if self.overwrite == "rename":
            new = self.free_name(dfd, name, names)
            self.tally.log("restored %s as %s: the original name is taken"
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
        direct = self.direct_io.here and m.size >= DIRECT_MIN
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
                self.direct_io.refused()
                direct = False
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
        tally = self.tally
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
            tally.bytes += n
            if length:
                tally.progress()

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
        self.tally.files += 1
        if path in self.link_targets:
            self.restored[path] = where

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
                self.tally.skipped += 1
                self.blocked.add(tuple(comps))
                self.tally.log("skipped %s and everything below it: a file of another type "
                               "is in the way" % path)
                return
            if self.overwrite == "rename":
                real = self.free_name(dfd, name)
                self.tally.log("restored %s as %s: the original name is taken"
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
        self.tally.dirs += 1
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
            self.tally.warn(path, "cannot set its metadata: %s" % _why(e))
        self.note_made(parent, final)
        self.restored_one(path, tuple(parent) + (final,))

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
    _Writer), for targets on the host's own devices (restore_io.suits_target). direct_for(path):
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
            r.tally.progress_at_end()
            raise
        finally:
            r.close()
        if own:
            target.publish()
        return summary
    finally:
        if own:
            target.close()
