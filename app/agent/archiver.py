"""Backup data mover: writes one advanced-disk image, a POSIX pax tar that GNU tar can list and
extract by itself (see docs/image-format.md).

Image order: `.cairn/image.json`, then the backed-up entries, then `.cairn/index.jsonl` (one
row per entry, see app/formats/entry.py), then the end-of-archive marker. Entries are written
directory by directory: all direct children of a directory form one contiguous run sorted by
name bytes, then each child directory follows in the same order. The catalog's directory
index depends on that.

Standard library only: this runs on client hosts.
"""

import errno
import grp
import json
import os
import pwd
import stat
import tempfile
import threading
import time
from collections import deque

from app.errors import Canceled, NothingToBackup, StorageError, ValidationError
from app.formats import entry, fflags, tarfmt
from app.formats.changes import PreviousState, state_digest

CHUNK = 1 << 20
NBUF = 8
ROW_BATCH = 5000
PROGRESS_EVERY = 0.25
ROWS_EVERY = 1.0
MAX_SPARSE_SEGMENTS = 200000
FADVISE_MIN = 8 << 20

_ZEROS = memoryview(bytes(CHUNK))
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_NOATIME = getattr(os, "O_NOATIME", 0)
_SEEK_DATA = getattr(os, "SEEK_DATA", None)
_SEEK_HOLE = getattr(os, "SEEK_HOLE", None)


def _why(e):
    return (e.strerror or str(e)).lower() if isinstance(e, OSError) else str(e)


def _join(parent, name):
    return parent + name if parent == b"/" else parent + b"/" + name


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


class _Output:
    """The image byte stream: coalesces headers and file data into large writes, counts
    offsets (`out` need not be seekable) and feeds the hash worker.

    Data is read straight into the free part of the current ring buffer (space/data), so each
    byte is copied once in and once out, as with tar. An `out` that offers its own memory
    (space(limit) and advance(n), as a deduplication pool's ingest does) is filled in place
    instead: nothing is copied out."""

    def __init__(self, out, worker):
        self.out = out
        self.worker = worker
        self.in_place = hasattr(out, "space") and hasattr(out, "advance")
        self.bufsize = len(worker.views[0])
        self.idx = None
        self._next_buffer()
        self.fill = 0
        self.jobs = []
        self.pos = 0       # bytes of the image produced so far (== the next member's offset)
        self.written = 0   # bytes of the image `out` has accepted
        self.ref = None    # [source, offset, length]: a reference not yet passed to `out`

    def reference(self, source, offset, length):
        """The next `length` bytes of the image are those at `offset` of a base image's
        stream (a files cache): `out` gets the reference instead of the bytes. References to
        adjoining members are passed on as one."""
        ref = self.ref
        if ref is not None and not self.fill and ref[0] == source and ref[1] + ref[2] == offset:
            ref[2] += length
        else:
            self.flush()
            self.ref = [source, offset, length]
        self.pos += length

    def put(self, data):
        n = len(data)
        fill = self.fill
        if fill + n < self.size:
            self.buf[fill:fill + n] = data
            self.fill = fill + n
            self.pos += n
            return
        mv = memoryview(data)
        while mv:
            space = self.space()
            k = min(len(space), len(mv))
            space[:k] = mv[:k]
            self.fill += k
            self.pos += k
            mv = mv[k:]

    def zeros(self, n, h=None):
        while n > 0:
            space = self.space()
            k = min(len(space), n)
            space[:k] = _ZEROS[:k]
            if h is not None:
                self.jobs.extend(h.jobs(space[:k]))
            self.fill += k
            self.pos += k
            n -= k

    def space(self):
        if self.fill >= self.size:
            self.flush()
        return self.buf[self.fill:]

    def data(self, n, h):
        """`n` bytes were read into space(): account for them and queue them for hashing."""
        fill = self.fill
        self.jobs.extend(h.jobs(self.buf[fill:fill + n]))
        self.fill = fill + n
        self.pos += n

    def finish(self, h, row):
        self.jobs.extend(h.close(lambda digest, r=row: r.__setitem__(entry.CHECKSUM, digest)))

    def flush(self):
        if self.ref is not None:
            ref, self.ref = self.ref, None
            try:
                self.out.reference(*ref)
            except OSError as e:
                raise StorageError("writing the backup image failed: %s" % _why(e))
            self.written += ref[2]
        if not self.fill:
            return
        self.worker.put(self.jobs)
        self.jobs = []
        try:
            if self.in_place:
                self.out.advance(self.fill)
            else:
                self.out.write(self.buf[:self.fill])
        except OSError as e:
            raise StorageError("writing the backup image failed: %s" % _why(e))
        self.written += self.fill
        self.fill = 0
        self._next_buffer()

    def _next_buffer(self):
        if self.in_place:
            # a view of the sink's memory; hash jobs still to run on it keep it from reuse
            self.buf = self.out.space(self.bufsize)
        else:
            if self.idx is not None:
                self.worker.release(self.idx)
            self.idx = self.worker.acquire()
            self.buf = self.worker.views[self.idx]
        self.size = len(self.buf)


class _Node:
    __slots__ = ("children", "selected")

    def __init__(self):
        self.children = {}
        self.selected = False


class _Counted:
    """Totals known before the copy starts (from a file list)."""

    def __init__(self, result):
        self.result = result
        self.stop = False


class _Totals(threading.Thread):
    """Counts what the selections hold, beside the copy, so that percent done and an ETA can
    be shown long before the copy is over."""

    def __init__(self, roots, excludes=frozenset()):
        super().__init__(name="cairn-totals", daemon=True)
        self.roots = roots
        self.excludes = excludes
        self.stop = False
        self.result = None

    def run(self):
        files = 0
        nbytes = 0
        seen = set()
        stack = []
        for r in self.roots:
            try:
                st = os.lstat(r)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(r)
            elif not stat.S_ISSOCK(st.st_mode):
                files += 1
                if stat.S_ISREG(st.st_mode):
                    nbytes += min(st.st_size, st.st_blocks * 512)
        while stack:
            if self.stop:
                return
            try:
                it = os.scandir(stack.pop())
            except OSError:
                continue
            with it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if e.path not in self.excludes:
                                stack.append(e.path)
                            continue
                        if e.is_file(follow_symlinks=False):
                            st = e.stat(follow_symlinks=False)
                            if st.st_nlink > 1:
                                key = (st.st_dev, st.st_ino)
                                if key in seen:
                                    files += 1
                                    continue
                                seen.add(key)
                            nbytes += min(st.st_size, st.st_blocks * 512)
                        elif not e.is_symlink() and stat.S_ISSOCK(
                                e.stat(follow_symlinks=False).st_mode):
                            continue
                    except OSError:
                        continue
                    files += 1
        self.result = {"files": files, "bytes": nbytes}


class _Backup:
    def __init__(self, out, emit, is_cancelled, checksum, excludes=None, previous=None,
                 read_from=None, listing=None, unchanged_before_ns=None, references=None,
                 skip_nodump=False):
        self.checksum = checksum
        # Leave out what is marked nodump (chattr +d), as dump does.
        self.skip_nodump = skip_nodump
        self.nodump = 0
        # Selections read from elsewhere (a snapshot) but recorded under their own paths:
        # [(selection bytes, directory read instead)], longest first.
        self.read_from = sorted(((os.fsencode(k), os.fsencode(v))
                                 for k, v in (read_from or {}).items()),
                                key=lambda kv: -len(kv[0]))
        # A file list made beforehand (the Storage Scale policy engine, app/agent/filelist.py):
        # directories it covers are not read again, and in an incremental a file it shows
        # unchanged since the previous backup's scan (change time) is not looked at again.
        self.listing = listing
        self.unchanged_before_ns = unchanged_before_ns
        # An incremental: entries whose state matches the previous image's are listed, not
        # sent again (see app/formats/changes.py).
        try:
            self.previous = PreviousState(previous, references) if previous else None
        except ValueError as e:
            raise ValidationError(str(e))
        # A full with a files cache: an unchanged regular file becomes a reference to its
        # member in the base image (the sink must take references); other entries are sent.
        self.files_cache = self.previous is not None and self.previous.has_references
        if self.files_cache and not hasattr(out, "reference"):
            raise ValidationError("a files cache needs a deduplication pool as destination")
        self.prev_names = None
        self.unchanged = 0
        self.unchanged_bytes = 0
        self.reused = 0
        self.reused_bytes = 0
        # absolute path (bytes) -> why it is left out
        self.excludes = {os.fsencode(p.rstrip("/") or "/"): why
                         for p, why in (excludes or {}).items()}
        self.emit = emit
        self.is_cancelled = is_cancelled
        # CRC-32 runs inline: handing each MiB to a hash thread costs more than checking it.
        self.worker = tarfmt.HashWorker(NBUF, CHUNK,
                                        threads=0 if checksum == "crc32" else 2)
        self.out = _Output(out, self.worker)
        self.spool = tempfile.TemporaryFile(prefix="cairn-index-")
        self.pending = deque()
        self.links = {}
        self.users = {}
        self.groups = {}
        self.no_xattr_devs = set()
        self.no_flags_devs = set()
        self.files = 0
        self.dirs = 0
        self.bytes = 0
        self.warnings = 0
        self.totals = None
        self.totals_sent = False
        self.last_progress = 0.0
        self.last_rows = time.monotonic()
        self.current = ""

    def real(self, path):
        """Where a path (bytes) of the backup is read from."""
        for sel, src in self.read_from:
            if path == sel:
                return src
            if path.startswith(sel) and path[len(sel):len(sel) + 1] == b"/":
                return src + path[len(sel):]
        return path

    # -- events

    def warn(self, path, message):
        self.warnings += 1
        self.emit("warning", {"path": os.fsdecode(path) if isinstance(path, bytes) else path,
                              "message": message})

    def log(self, message):
        self.emit("log", {"message": message})

    def tick(self):
        """Between entries: cancel check, throttled progress, totals and row batches."""
        if self.is_cancelled():
            raise Canceled()
        if len(self.pending) >= ROW_BATCH:
            self.emit_rows()
        now = time.monotonic()
        if now - self.last_progress >= PROGRESS_EVERY:
            self.progress(now, extra=0)
            if self.pending and now - self.last_rows >= ROWS_EVERY:
                self.emit_rows()

    def progress(self, now, extra):
        """Progress, also from inside a large file (extra: its bytes copied so far)."""
        self.last_progress = now
        if not self.totals_sent and self.totals is not None and self.totals.result:
            self.totals_sent = True
            self.emit("totals", dict(self.totals.result))
        self.emit("progress", {"files": self.files, "bytes": self.bytes + extra,
                               "path": self.current})

    def add_row(self, row):
        self.pending.append((self.out.pos, row))

    def emit_rows(self, final=False):
        """Send the rows whose members `out` has accepted and whose checksum is known."""
        pending = self.pending
        written = self.out.written
        while pending:
            batch = []
            while pending and len(batch) < ROW_BATCH:
                end, row = pending[0]
                if not final and (end > written or row[entry.CHECKSUM] is None):
                    break
                pending.popleft()
                batch.append(row)
            if not batch:
                break
            self.spool.write("".join(
                json.dumps(r, separators=(",", ":")) + "\n" for r in batch).encode("ascii"))
            self.emit("rows", {"rows": batch})
            if len(batch) < ROW_BATCH:
                break
        self.last_rows = time.monotonic()

    # -- metadata helpers

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
            fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
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

    # -- the walk

    def run(self, selections, image_meta):
        roots = self.selected_roots(selections)
        if self.files_cache:
            self.log("files cache: the previous backup's %d entries are known; unchanged "
                     "files are taken from its image, not read again" % self.previous.entries)
        if (self.previous is None or self.files_cache) and self.listing is not None:
            self.totals = _Counted(self.listing.totals())
        elif self.previous is None or self.files_cache:
            self.totals = _Totals([self.real(r) for r in roots], self.excludes)
            self.totals.start()
        else:
            # What an incremental will send is known only at its end: no percentage.
            self.log("compared with the previous backup's %d entries: only new and changed "
                     "entries are sent" % self.previous.entries)
        meta = json.dumps(image_meta, indent=1, sort_keys=True).encode("utf-8") + b"\n"
        now_ns = time.time_ns()
        self.out.put(tarfmt.member_header(b".cairn/image.json", tarfmt.REGTYPE, 0o644, 0, 0,
                                          len(meta), now_ns - now_ns % 1000000000,
                                          uname=b"root", gname=b"root"))
        self.out.put(meta)
        self.out.zeros(tarfmt.padding(len(meta)))

        tree = _Node()
        for r in roots:
            node = tree
            for part in r.split(b"/")[1:]:
                if part:
                    node = node.children.setdefault(part, _Node())
            node.selected = True
        if tree.selected:
            stack = [(b"/", None)]
        else:
            stack = [(b"/", tree)]
        while stack:
            path, node = stack.pop()
            self.directory(path, node, stack)

        self.out.flush()
        self.worker.wait()
        self.emit_rows(final=True)
        return self.finish_image(now_ns)

    def selected_roots(self, selections):
        found = []
        missing = []
        for s in selections:
            b = os.fsencode(s)
            if not b.startswith(b"/"):
                self.warn(b, "not an absolute path: selections must start with /")
                missing.append(s)
                continue
            b = b"/" + os.path.normpath(b).lstrip(b"/")
            try:
                st = os.lstat(self.real(b))
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ENOTDIR):
                    self.warn(b, "does not exist")
                else:
                    self.warn(b, "cannot be read: %s" % _why(e))
                missing.append(s)
                continue
            if stat.S_ISLNK(st.st_mode) and b != b"/":
                self.log("%s is a symbolic link: the link itself is backed up, not what it "
                         "points to" % os.fsdecode(b))
            found.append(b)
        if not found:
            raise NothingToBackup("none of the backup selections exist on this host: %s"
                                  % ", ".join(str(m) for m in missing))
        found = sorted(set(found))
        roots = []
        for b in found:
            if any(b.startswith(_join(r, b"")) for r in roots if r != b):
                continue  # below another selection: already covered
            if b == b"/":
                return [b"/"]
            roots.append(b)
        return roots

    def open_dir(self, path, nofollow):
        flags = _DIR_FLAGS | (os.O_NOFOLLOW if nofollow else 0)
        try:
            return os.open(path, flags)
        except OSError as e:
            if e.errno != errno.ENAMETOOLONG:
                raise
        # deeper than PATH_MAX: walk down one component at a time
        fd = os.open(b"/", _DIR_FLAGS)
        try:
            for part in path.split(b"/"):
                if part:
                    nfd = os.open(part, flags, dir_fd=fd)
                    os.close(fd)
                    fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def directory(self, path, node, stack):
        """Write all direct children of one directory, then queue the child directories so
        that they follow in name order. `node` is the selection tree for directories above
        or at the selections (only the selected names are visited there), None below."""
        try:
            dfd = self.open_dir(self.real(path), node is None)
        except OSError as e:
            if e.errno == errno.ENOENT:
                self.warn(path, "vanished during backup")
            elif e.errno in (errno.ELOOP, errno.ENOTDIR):
                self.warn(path, "changed during backup: no longer a directory")
            else:
                self.warn(path, "cannot open directory: %s" % _why(e))
            return
        try:
            if self.previous is None:
                self.prev_names = None
            elif self.files_cache:
                self.prev_names = self.previous.directory_with_references(path)
            else:
                self.prev_names = self.previous.directory(path)
            listed = None
            if node is None and self.listing is not None:
                listed = self.listing.children(path)
            if listed is not None:
                names = sorted(listed)
            elif node is None:
                try:
                    # listing by fd gives str names; fsencode restores the exact bytes
                    names = [os.fsencode(n) for n in os.listdir(dfd)]
                except OSError as e:
                    self.warn(path, "cannot list directory: %s" % _why(e))
                    return
                names.sort()
            else:
                names = sorted(node.children)
            quick = (listed is not None and self.prev_names is not None
                     and self.unchanged_before_ns is not None)
            subdirs = []
            for name in names:
                self.tick()
                child = _join(path, name)
                if child in self.excludes:
                    self.log("%s is not backed up: it is excluded (%s)"
                             % (os.fsdecode(child), self.excludes[child]))
                    continue
                if quick and name in self.prev_names and self.listed_unchanged(
                        child, listed[name]):
                    continue
                cnode = None if node is None else node.children[name]
                try:
                    st = os.lstat(name, dir_fd=dfd)
                except OSError as e:
                    if e.errno == errno.ENOENT:
                        self.warn(child, "vanished during backup")
                    else:
                        self.warn(child, "cannot be read: %s" % _why(e))
                    continue
                if cnode is not None and not cnode.selected and stat.S_ISLNK(st.st_mode):
                    # a parent of a selection reached through a symlink: keep it as the
                    # directory it leads to, so the selection's path can be restored as is
                    try:
                        st = os.stat(name, dir_fd=dfd)
                    except OSError as e:
                        self.warn(child, "cannot be read: %s" % _why(e))
                        continue
                if self.entry(dfd, name, child, st) and stat.S_ISDIR(st.st_mode):
                    if cnode is None or cnode.selected:
                        subdirs.append((child, None))
                    else:
                        subdirs.append((child, cnode))
            stack.extend(reversed(subdirs))
        finally:
            os.close(dfd)

    def entry(self, dfd, name, path, st):
        """Write one entry's member and queue its row. Returns False when it was skipped."""
        mode = st.st_mode
        spath = os.fsdecode(path)
        self.current = spath
        prev = self.prev_names
        if prev is not None and not stat.S_ISDIR(mode):
            known = prev.get(name)
            if known is None:
                pass
            elif self.files_cache:
                if known[1] is not None and self.cached_file(spath, st, *known):
                    return True
            elif self.unchanged_entry(dfd, name, spath, st, known):
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
                    self.warn(path, "cannot be read: %s" % _why(e))
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
        """List an entry without sending it when its state matches the previous image's.
        Returns False when it must be sent."""
        mode = st.st_mode
        size = 0
        link = ""
        if stat.S_ISREG(mode):
            kind = entry.KIND_FILE
            size = st.st_size
            if st.st_nlink > 1:
                first = self.links.get((st.st_dev, st.st_ino))
                if first is not None:
                    if first[0] is not None:
                        return False  # the group's data is in this image: link to it
                    kind, size, link = entry.KIND_HARDLINK, 0, first[1]
        elif st.st_nlink > 1:
            return False
        elif stat.S_ISLNK(mode):
            kind = entry.KIND_SYMLINK
            try:
                link = os.fsdecode(os.readlink(name, dir_fd=dfd))
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
        perm = stat.S_IMODE(mode)
        if state_digest(kind, perm, st.st_uid, st.st_gid, size, st.st_mtime_ns,
                        st.st_ctime_ns, st.st_ino, link) != digest:
            return False
        if kind == entry.KIND_FILE and st.st_nlink > 1:
            self.links[(st.st_dev, st.st_ino)] = (None, spath)
        self.unchanged += 1
        self.unchanged_bytes += size
        # offset -1: the member is in an earlier image; the master fills in where.
        self.add_row([spath, kind, perm, st.st_uid, st.st_gid, size, st.st_mtime_ns, -1, 0, "",
                      link, st.st_ctime_ns, st.st_ino])
        return True

    def cached_file(self, spath, st, digest, ref):
        """A full with a files cache: an unchanged single-link regular file is written as a
        reference to its member in the base image. Returns False when it must be read."""
        mode = st.st_mode
        if not stat.S_ISREG(mode) or st.st_nlink != 1:
            return False
        perm = stat.S_IMODE(mode)
        size = st.st_size
        if state_digest(entry.KIND_FILE, perm, st.st_uid, st.st_gid, size, st.st_mtime_ns,
                        st.st_ctime_ns, st.st_ino, "") != digest:
            return False
        source, base_offset, length, checksum = ref
        if not checksum:
            return False
        offset = self.out.pos
        self.out.reference(source, base_offset, length)
        self.files += 1
        self.bytes += size
        self.reused += 1
        self.reused_bytes += size
        self.add_row([spath, entry.KIND_FILE, perm, st.st_uid, st.st_gid, size,
                      st.st_mtime_ns, offset, length, checksum, "", st.st_ctime_ns, st.st_ino])
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

    def open_file(self, dfd, name, path):
        flags = _FILE_FLAGS | _NOATIME
        while True:
            try:
                return os.open(name, flags, dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.EPERM and flags & _NOATIME:
                    flags &= ~_NOATIME  # O_NOATIME needs ownership; the read matters more
                    continue
                if e.errno == errno.ENOENT:
                    self.warn(path, "vanished during backup")
                elif e.errno == errno.ELOOP:
                    self.warn(path, "changed during backup: replaced by a symbolic link")
                else:
                    self.warn(path, "cannot be read: %s" % _why(e))
                return None

    def data_segments(self, fd, size):
        """(offset, length) of the data regions of a file with holes, or None when it has
        none worth keeping (or the file system cannot tell)."""
        if _SEEK_DATA is None:
            return None
        segs = []
        off = 0
        try:
            while off < size:
                try:
                    d = os.lseek(fd, off, _SEEK_DATA)
                except OSError as e:
                    if e.errno == errno.ENXIO:
                        break  # only a hole from here to the end
                    raise
                if d >= size:
                    break
                h = min(os.lseek(fd, d, _SEEK_HOLE), size)
                segs.append((d, h - d))
                off = h
                if len(segs) > MAX_SPARSE_SEGMENTS:
                    return None
        except OSError:
            return None
        finally:
            try:
                os.lseek(fd, 0, os.SEEK_SET)
            except OSError:
                pass
        if len(segs) == 1 and segs[0] == (0, size):
            return None
        return segs

    def regular(self, dfd, name, path, spath, st0):
        fd = self.open_file(dfd, name, path)
        if fd is None:
            return False
        out = self.out
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.warn(path, "changed during backup: no longer a regular file")
                return False
            flags = self.inode_flags(fd, st.st_dev)
            if flags and self.left_out(flags):
                return False
            ftext = fflags.to_text(flags) if flags else None
            size = st.st_size
            segs = None
            if size and st.st_blocks * 512 < size:
                segs = self.data_segments(fd, size)
            uid = st.st_uid
            gid = st.st_gid
            mode = stat.S_IMODE(st.st_mode)
            xattrs = self.xattrs(fd, st.st_dev)
            if segs is None:
                area = size
                header = tarfmt.member_header(
                    path[1:], tarfmt.REGTYPE, mode, uid, gid, size, st.st_mtime_ns, b"",
                    self.uname(uid), self.gname(gid), 0, 0, xattrs, fflags=ftext)
            else:
                smap = tarfmt.sparse_map_bytes(segs, size)
                area = len(smap) + sum(ln for _, ln in segs)
                header = tarfmt.member_header(
                    path[1:], tarfmt.REGTYPE, mode, uid, gid, area, st.st_mtime_ns, b"",
                    self.uname(uid), self.gname(gid), 0, 0, xattrs, sparse_realsize=size,
                    fflags=ftext)
            if size >= FADVISE_MIN:
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                except (OSError, AttributeError):
                    pass
            offset = out.pos
            out.put(header)
            h = tarfmt.TreeHash(self.checksum)
            problem = None
            if segs is None:
                problem = self.copy(fd, path, None, size, h)
            else:
                out.put(smap)
                for off, ln in segs:
                    p = self.copy(fd, path, off, ln, h)
                    problem = problem or p
            out.zeros(tarfmt.padding(area))
            if problem is None:
                try:
                    st2 = os.fstat(fd)
                    if st2.st_size != size or st2.st_mtime_ns != st.st_mtime_ns:
                        problem = "changed during backup"
                except OSError:
                    pass
            if problem:
                self.warn(path, problem)
            self.files += 1
            self.bytes += area - (len(smap) if segs is not None else 0)
            row = [spath, entry.KIND_FILE, mode, uid, gid, size, st.st_mtime_ns, offset,
                   out.pos - offset, None, "", st.st_ctime_ns, st.st_ino]
            out.finish(h, row)
            self.add_row(row)
            if st.st_nlink > 1:
                self.links[(st0.st_dev, st0.st_ino)] = (path[1:], spath)
            return True
        finally:
            os.close(fd)

    def copy(self, fd, path, off, length, h):
        """Copy `length` bytes of the file (from `off` with pread, or sequentially) into the
        image. A short file is padded with zeros so the member keeps its announced size.
        Returns a warning text, or None."""
        out = self.out
        remaining = length
        copied = 0
        first = True
        problem = None
        while remaining > 0:
            if not first and self.is_cancelled():
                raise Canceled()
            first = False
            space = out.space()
            n = len(space)
            if n > remaining:
                n = remaining
            try:
                if off is None:
                    got = os.readv(fd, [space[:n]])
                else:
                    got = os.preadv(fd, [space[:n]], off)
                    off += got
            except OSError as e:
                problem = "read error: %s (the rest of the file is stored as zeros)" % _why(e)
                break
            if not got:
                problem = "changed during backup"
                break
            out.data(got, h)
            remaining -= got
            now = time.monotonic()
            if now - self.last_progress >= PROGRESS_EVERY:
                self.progress(now, extra=copied + got)
            copied += got
        if remaining:
            out.zeros(remaining, h)
        return problem

    def finish_image(self, start_ns):
        out = self.out
        spool = self.spool
        spool.flush()
        length = spool.seek(0, os.SEEK_END)
        spool.seek(0)
        index_offset = out.pos
        out.put(tarfmt.member_header(b".cairn/index.jsonl", tarfmt.REGTYPE, 0o644, 0, 0,
                                     length, start_ns - start_ns % 1000000000,
                                     uname=b"root", gname=b"root"))
        remaining = length
        while remaining > 0:
            space = out.space()
            n = spool.readinto(space[:min(len(space), remaining)])
            if not n:
                raise StorageError("the spooled file index could not be read back")
            out.fill += n
            out.pos += n
            remaining -= n
        out.zeros(tarfmt.padding(length))
        out.put(tarfmt.EOF_MARKER)
        out.flush()
        if self.nodump:
            self.log("%d file(s) and director(ies) marked nodump were left out, with "
                     "everything below them (the policy skips what is marked nodump)"
                     % self.nodump)
        if not self.totals_sent:
            self.totals_sent = True
            result = self.totals.result if self.totals is not None else None
            self.emit("totals", dict(result) if result else {"files": self.files,
                                                              "bytes": self.bytes})
        self.emit("progress", {"files": self.files, "bytes": self.bytes, "path": ""})
        return {"files": self.files, "dirs": self.dirs, "bytes": self.bytes,
                "warnings": self.warnings, "image_bytes": out.pos,
                "unchanged": self.unchanged, "unchanged_bytes": self.unchanged_bytes,
                "reused": self.reused, "reused_bytes": self.reused_bytes,
                "index_offset": index_offset, "index_length": out.pos - 1024 - index_offset}

    def close(self):
        if self.totals is not None:
            self.totals.stop = True
        try:
            self.worker.close()
        finally:
            self.spool.close()


def backup_to(out, selections, *, emit, is_cancelled, image_meta,
              checksum=tarfmt.DEFAULT_CHECKSUM, excludes=None, previous=None,
              read_from=None, listing=None, unchanged_before_ns=None, references=None,
              skip_nodump=False):
    """Write one image of `selections` (absolute paths, str; surrogate escapes allowed) to
    `out`, which needs only write(buf) that consumes all of buf before returning (the buffer
    is reused afterwards).

    Events via emit(event, payload): "totals" once, "progress" a few times a second, "rows"
    in batches of at most 5000 (each row after its member was written), "warning", "log".
    Problems with single files are warnings; no selection existing raises NothingToBackup;
    a failing `out` raises StorageError; is_cancelled() returning true raises Canceled.

    checksum names the piece algorithm of the file checksums (tarfmt.PIECE_HASHES).
    excludes: {absolute path: reason}; those directories or files and everything below them
    are left out (logged once each).

    previous: the state of the image an incremental compares with (app/formats/changes.py);
    unchanged entries get rows with offset -1 and no member.
    references: with previous, a files cache for a full (app/formats/changes.py): an unchanged
    regular file is passed to out.reference(source, offset, length) instead of being read,
    and gets a row of this image as usual.

    skip_nodump: leave out files and directories marked nodump (chattr +d), as dump does.
    Every file's and directory's inode flags (append-only, immutable, ...) are kept in its
    member (app/formats/fflags.py).

    read_from: {selection: directory}: read that selection from the directory (a snapshot)
    while recording its own paths.
    listing: a file list made beforehand (app/agent/filelist.py) that replaces reading the
    directories it covers; with previous and unchanged_before_ns, a single-link regular file
    it shows with a change time before that is unchanged without being looked at.

    Returns {"files", "dirs", "bytes", "warnings", "image_bytes", "unchanged",
    "unchanged_bytes", "reused", "reused_bytes", "index_offset", "index_length"}; the last two locate the
    `.cairn/index.jsonl` member in the image.
    """
    try:
        tarfmt.piece_hash(checksum)
    except ValueError as e:
        raise ValidationError(str(e))
    b = _Backup(out, emit, is_cancelled, checksum, excludes, previous, read_from, listing,
                unchanged_before_ns, references, skip_nodump)
    try:
        return b.run(selections, image_meta)
    finally:
        b.close()
