"""Listing a tree with the policy engine (mmapplypolicy) instead of walking it: the rules, the
scan, and the list file it writes, read as a stream."""

import os
import re
import shutil
import stat
import tempfile
import time
from collections import namedtuple
from urllib.parse import unquote, unquote_to_bytes

from plugins.filesystems.storage_scale.commands import run
from plugins.filesystems.storage_scale.errors import InvalidArgument
from plugins.filesystems.storage_scale.location import absolute
from plugins.filesystems.storage_scale.snapshots import check_name


ScanStat = namedtuple("ScanStat", "st_mode st_ino st_uid st_gid st_size st_mtime_ns "
                                  "st_ctime_ns st_nlink")

LIST_NAME = "cairn"
# NLINK is there to keep the link count pass small: only inodes with several links need
# counting. ESCAPE '%/' percent-encodes every byte of path and SHOW output except
# a-zA-Z0-9-_.~ and '/', so a name with a space, ' -- ' or a line break stays on its line.
SHOW_FIELDS = ("MODE", "NLINK", "USER_ID", "GROUP_ID", "FILE_SIZE", "MODIFICATION_TIME",
               "CHANGE_TIME")
SCAN_RULES = (
    f"RULE EXTERNAL LIST '{LIST_NAME}' EXEC '' ESCAPE '%/'\n"
    f"RULE 'cairn-all' LIST '{LIST_NAME}' DIRECTORIES_PLUS\n"
    "  SHOW(" + " || ' ' ||\n       ".join(f"VARCHAR({f})" for f in SHOW_FIELDS) + ")\n"
    "  WHERE PATH_NAME NOT LIKE '%/.snapshots/%'\n")

_FILE_TYPES = {"-": stat.S_IFREG, "d": stat.S_IFDIR, "l": stat.S_IFLNK, "c": stat.S_IFCHR,
               "b": stat.S_IFBLK, "p": stat.S_IFIFO, "s": stat.S_IFSOCK}
_PERMS = ((stat.S_IRUSR, stat.S_IWUSR, stat.S_IXUSR, stat.S_ISUID),
          (stat.S_IRGRP, stat.S_IWGRP, stat.S_IXGRP, stat.S_ISGID),
          (stat.S_IROTH, stat.S_IWOTH, stat.S_IXOTH, stat.S_ISVTX))
_SPECIAL = ("sS", "sS", "tT")  # with and without the execute bit
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ @T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?$")


def parse_mode(text):
    """st_mode (file type and permission bits) of an ls-style mode string such as
    `drwxr-xr-x`, `-rwsr-S--T` or `lrwxrwxrwx`, or None when it is not one. Characters after
    the tenth (an ACL mark) are ignored."""
    if len(text) < 10 or text[0] not in _FILE_TYPES:
        return None
    mode = _FILE_TYPES[text[0]]
    for group, (r, w, x, special) in enumerate(_PERMS):
        cr, cw, cx = text[1 + 3 * group:4 + 3 * group]
        if cr not in "r-" or cw not in "w-":
            return None
        mode |= (r if cr == "r" else 0) | (w if cw == "w" else 0)
        with_x, without_x = _SPECIAL[group]
        if cx == "x":
            mode |= x
        elif cx == with_x:
            mode |= x | special
        elif cx == without_x:
            mode |= special
        elif cx != "-":
            return None
    return mode


def parse_time_ns(text, cache=None):
    """Nanoseconds since the epoch of a policy-engine time stamp `YYYY-MM-DD HH:MM:SS[.f]`
    in this host's local time zone, or None when it is not one. `cache` (a dict) keeps the
    conversion of each minute, which makes millions of stamps cheap."""
    m = _TIME.match(text)
    if not m:
        return None
    key = text[:16]
    base = cache.get(key) if cache is not None else None
    if base is None:
        y, mo, d, h, mi = (int(g) for g in m.groups()[:5])
        if not (1 <= mo <= 12 and 1 <= d <= 31 and h <= 23 and mi <= 59):
            return None
        try:
            # Time zone offsets change on whole minutes, so the minute's start carries it.
            base = int(time.mktime((y, mo, d, h, mi, 0, 0, 0, -1)))
        except (OverflowError, ValueError):
            return None
        if cache is not None:
            if len(cache) > 100000:
                cache.clear()
            cache[key] = base
    if int(m.group(6)) > 60:
        return None
    frac = m.group(7) or "0"
    return (base + int(m.group(6))) * 1_000_000_000 + int(frac.ljust(9, "0"))


def _split_line(line):
    """(inode, [SHOW values], escaped path) of one list line, or None."""
    head, sep, path = line.partition(b" -- ")
    fields = head.split()
    if not sep or not path or len(fields) < 4:
        return None
    try:
        ino = int(fields[0])
        int(fields[1]), int(fields[2])
        # SHOW output is percent-encoded under ESCAPE (spaces as %20); decoding first reads
        # it whether it is encoded or not.
        show = unquote(b" ".join(fields[3:]).decode("ascii")).split()
    except (ValueError, UnicodeDecodeError):
        return None
    return ino, show, path


def _parse_line(line, cache=None):
    """(path bytes, st_mode, inode, uid, gid, size, mtime ns, ctime ns, NLINK) or None."""
    parts = _split_line(line)
    if parts is None:
        return None
    ino, show, raw = parts
    if len(show) != 9:
        return None
    mode = parse_mode(show[0])
    try:
        nlink, uid, gid, size = (int(v) for v in show[1:5])
    except ValueError:
        return None
    mtime = parse_time_ns(f"{show[5]} {show[6]}", cache)
    ctime = parse_time_ns(f"{show[7]} {show[8]}", cache)
    path = unquote_to_bytes(raw)
    if mode is None or mtime is None or ctime is None or not path.startswith(b"/"):
        return None
    return path, mode, ino, uid, gid, size, mtime, ctime, nlink


def _lines(f):
    for line in f:
        if line.endswith(b"\n"):
            line = line[:-1]
        if line:
            yield line


class PolicyList:
    """The entries of a policy-engine list file, read as a stream, never whole.

    Iterate it (or `entries()`, the same generator) for (path bytes, ScanStat), in the
    file's order, which is not directory order. `skipped` counts the lines that could not be
    understood and `entries_read` the entries given, both final once the iteration has
    ended. `st_nlink` is the number of paths of the entry's inode in this list (a link
    outside the scanned tree does not count; a directory has 1). The file is read twice:
    first to count the paths of the inodes that have several links (the only ones kept in
    memory), then for the entries.

    The scan's files (`remove`, a directory) are deleted when the iteration ends or on
    close(); use it as a context manager when the iteration may be abandoned."""

    def __init__(self, list_file, remove=None, output=""):
        self.list_file = list_file
        self.output = output
        self.skipped = 0
        self.entries_read = 0
        self._remove = remove
        self._gen = None

    def entries(self):
        if self._gen is None:
            self._gen = self._read()
        return self._gen

    def __iter__(self):
        return self.entries()

    def __next__(self):
        return next(self.entries())

    def close(self):
        if self._gen is not None:
            self._gen.close()
        self._cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _cleanup(self):
        if self._remove:
            shutil.rmtree(self._remove, ignore_errors=True)
            self._remove = None

    def _count_links(self, f):
        counts = {}
        for line in _lines(f):
            parts = _split_line(line)
            if parts is None or len(parts[1]) < 2 or parts[1][0][:1] == "d":
                continue
            try:
                several = int(parts[1][1]) > 1
            except ValueError:
                continue
            if several:
                counts[parts[0]] = counts.get(parts[0], 0) + 1
        return counts

    def _read(self):
        try:
            try:
                f = open(self.list_file, "rb")
            except FileNotFoundError:
                return  # the policy engine writes no list when nothing matched
            with f:
                links = self._count_links(f)
                f.seek(0)
                cache = {}
                for line in _lines(f):
                    e = _parse_line(line, cache)
                    if e is None:
                        self.skipped += 1
                        continue
                    path, mode, ino, uid, gid, size, mtime, ctime, nlink = e
                    paths = links.get(ino, 1) if nlink > 1 and not stat.S_ISDIR(mode) else 1
                    self.entries_read += 1
                    yield path, ScanStat(mode, ino, uid, gid, size, mtime, ctime, paths)
        finally:
            self._cleanup()


def read_policy_list(list_file):
    """The entries of an existing list file (`<prefix>.list.<name>` of mmapplypolicy), left
    in place: a PolicyList."""
    return PolicyList(list_file)


def policy_scan(directory, *, workdir, snapshot=None, bin_dir=None, timeout=None,
                is_cancelled=None):
    """List `directory` and everything below it with the policy engine:
    `mmapplypolicy DIRECTORY -P RULES -I defer -f PREFIX -s SCANDIR [-S SNAPSHOT]`, with the
    rules of SCAN_RULES, in a directory of its own made inside `workdir` (which the caller
    owns and which must have room for the list: about 100 bytes per entry). `snapshot`
    scans that snapshot instead of the live file system; whether the listed paths then name
    the snapshot's directory or the live one is not established, so callers must accept
    both. `timeout` None waits as long as the scan runs.

    Returns a PolicyList: iterate it for (path bytes, ScanStat); its `skipped` counts the
    lines not understood. Raises a ScaleError when the scan fails (its files are removed)."""
    directory = absolute(directory, "directory to scan")
    if snapshot is not None:
        check_name("snapshot", snapshot)
    if not os.path.isdir(workdir):
        raise InvalidArgument(f"the work directory {workdir} for the policy scan does not exist",
                              hint="create it, or give another one")
    scan_dir = tempfile.mkdtemp(prefix="scan-", dir=workdir)
    try:
        rules = os.path.join(scan_dir, f"{LIST_NAME}.rules")
        with open(rules, "w") as f:
            f.write(SCAN_RULES)
        prefix = os.path.join(scan_dir, LIST_NAME)
        args = [directory, "-P", rules, "-I", "defer", "-f", prefix, "-s", scan_dir]
        if snapshot:
            args += ["-S", snapshot]
        out = run("mmapplypolicy", *args, bin_dir=bin_dir, timeout=timeout,
                  is_cancelled=is_cancelled)
    except BaseException:
        shutil.rmtree(scan_dir, ignore_errors=True)
        raise
    return PolicyList(f"{prefix}.list.{LIST_NAME}", remove=scan_dir, output=out)
