"""The walk of a backup: the selections as a tree of names, then directory by directory, all
direct children of a directory as one run sorted by name bytes, each child directory after
them in the same order (the order the catalog's directory index depends on)."""

import errno
import fnmatch
import os
import re
import stat

from app.agent.archiver.common import DIR_FLAGS, FS_ENCODING, FS_ERRORS, TICK_EVERY, why
from app.errors import NothingToBackup


def _join(parent, name):
    return parent + name if parent == b"/" else parent + b"/" + name


class NamePatterns:
    """Exclude globs on entry names (`*.tmp`), compiled once; counts what they left out."""

    def __init__(self, patterns):
        self.texts = [str(p) for p in patterns or ()]
        # fnmatch on bytes: names that are not UTF-8 are matched as they are
        self.regex = re.compile(b"|".join(
            b"(?:" + fnmatch.translate(p).encode("utf-8", "surrogateescape") + b")"
            for p in self.texts)) if self.texts else None
        self.left_out = 0

    def match(self, name):
        if self.regex is not None and self.regex.match(name):
            self.left_out += 1
            return True
        return False


class _Node:
    __slots__ = ("children", "selected")

    def __init__(self):
        self.children = {}
        self.selected = False


class Walk:
    """Part of a backup (app/agent/archiver/backup.py): finds the selections and visits their
    directories, handing each entry to entry() (app/agent/archiver/members.py)."""

    def walk(self, roots):
        """Write the entries of every selection (`roots`, from selected_roots)."""
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
                    self.warn(b, "cannot be read: %s" % why(e))
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
        flags = DIR_FLAGS | (os.O_NOFOLLOW if nofollow else 0)
        try:
            return os.open(path, flags)
        except OSError as e:
            if e.errno != errno.ENAMETOOLONG:
                raise
        # deeper than PATH_MAX: walk down one component at a time
        fd = os.open(b"/", DIR_FLAGS)
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
                self.warn(path, "cannot open directory: %s" % why(e))
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
                    # listing by fd gives str names; encoding them restores the exact bytes
                    names = [n.encode(FS_ENCODING, FS_ERRORS) for n in os.listdir(dfd)]
                except OSError as e:
                    self.warn(path, "cannot list directory: %s" % why(e))
                    return
                names.sort()
            else:
                names = sorted(node.children)
            quick = (listed is not None and self.prev_names is not None
                     and self.unchanged_before_ns is not None)
            subdirs = []
            self.tick()
            # per entry: what each one needs, looked up once per directory
            prefix = path if path == b"/" else path + b"/"
            excludes = self.excludes or None
            match = self.exclude_names.match if self.exclude_names.regex is not None else None
            lstat, entry, is_dir, is_link = os.lstat, self.entry, stat.S_ISDIR, stat.S_ISLNK
            # a files cache: {name: (digest, reference or None)} of the previous state
            cache = self.prev_names if self.files_cache else None
            cached = self.cached_file
            count = self.entries_seen
            for name in names:
                count += 1
                if not count % TICK_EVERY:
                    self.entries_seen = count
                    self.tick()
                child = prefix + name
                if excludes is not None and child in excludes:
                    self.log("%s is not backed up: it is excluded (%s)"
                             % (os.fsdecode(child), excludes[child]))
                    continue
                if match is not None and match(name):
                    continue
                if quick and name in self.prev_names and self.listed_unchanged(
                        child, listed[name]):
                    continue
                cnode = None if node is None else node.children[name]
                try:
                    st = lstat(name, dir_fd=dfd)
                except OSError as e:
                    if e.errno == errno.ENOENT:
                        self.warn(child, "vanished during backup")
                    else:
                        self.warn(child, "cannot be read: %s" % why(e))
                    continue
                if cache is not None:
                    known = cache.get(name)
                    if known is not None and known[1] is not None and cached(child, st, known):
                        continue
                if cnode is not None and not cnode.selected and is_link(st.st_mode):
                    # a parent of a selection reached through a symlink: keep it as the
                    # directory it leads to, so the selection's path can be restored as is
                    try:
                        st = os.stat(name, dir_fd=dfd)
                    except OSError as e:
                        self.warn(child, "cannot be read: %s" % why(e))
                        continue
                if entry(dfd, name, child, st) and is_dir(st.st_mode):
                    if cnode is None or cnode.selected:
                        subdirs.append((child, None))
                    else:
                        subdirs.append((child, cnode))
            self.entries_seen = count
            stack.extend(reversed(subdirs))
        finally:
            os.close(dfd)
