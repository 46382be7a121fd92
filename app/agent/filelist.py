"""A backup's file list made before the walk, by the Storage Scale policy engine: every entry
below the selections with its kind, permissions, owner, size, times and inode, read from the
file system's inode scan instead of from each directory.

The archiver (app/agent/archiver/) takes the names of a directory the list covers from the
list, and an incremental takes a single-link regular file whose change time is older than the
previous backup's scan as unchanged without looking at it: the policy engine scans inodes in
parallel and never reads the directories, which is what makes a list of billions of files
affordable.

Standard library only: this runs on client hosts.
"""


class Listing:
    """Entries by directory: {directory path bytes: {name bytes: stat-like}} for the
    directories at and below the roots it covers."""

    def __init__(self):
        self.roots = []
        self._dirs = {}
        self.entries = 0
        self.skipped = 0

    def add_root(self, root):
        self.roots.append(root)
        self._dirs.setdefault(root, {})

    def add(self, path, st):
        parent, _, name = path.rpartition(b"/")
        if not name:
            self.skipped += 1
            return
        self._dirs.setdefault(parent or b"/", {})[name] = st
        self.entries += 1

    def covers(self, path):
        return any(path == r or path.startswith(r.rstrip(b"/") + b"/") for r in self.roots)

    def children(self, path):
        """{name: stat} of a directory the list covers (empty when it lists nothing there),
        or None when the list does not cover it."""
        if not self.covers(path):
            return None
        return self._dirs.get(path, {})

    def totals(self):
        import stat
        files = nbytes = 0
        for names in self._dirs.values():
            for st in names.values():
                if stat.S_ISDIR(st.st_mode):
                    continue
                files += 1
                if stat.S_ISREG(st.st_mode):
                    nbytes += st.st_size
        return {"files": files, "bytes": nbytes}


def map_path(path, read_root, root):
    """A listed path as the backup names it: lists of a snapshot may name the snapshot's
    directory or the live one."""
    if read_root != root and (path == read_root or path.startswith(read_root + b"/")):
        return root + path[len(read_root):]
    if path == root or path.startswith(root.rstrip(b"/") + b"/"):
        return path
    return None


def from_policy_scan(roots, scan):
    """A Listing of roots [(root, read_root, snapshot name or None)] from
    scan(directory, snapshot) -> (entries iterator of (path bytes, stat), skipped count)."""
    listing = Listing()
    for root, read_root, snapshot in roots:
        listing.add_root(root)
        entries, skipped = scan(root, read_root, snapshot)
        for path, st in entries:
            p = map_path(path, read_root, root)
            if p is None:
                listing.skipped += 1
            elif p != root:
                listing.add(p, st)
        listing.skipped += skipped()
    return listing
