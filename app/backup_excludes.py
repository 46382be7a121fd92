"""What a backup leaves out: a policy's exclude list (a glob on file names such as `*.tmp`, or
an absolute path whose subtree is left out; for every client or one), and what is left out by
default: the pseudo file systems and every pool's files where a selection reaches them.
The agent's walk (app/agent/archiver/walk.py) applies both; this module decides them on the
master and warns when a selection is one of them."""

from app import shared_volumes
from app.config import check_abs_path
from app.errors import ValidationError

# Files that are made up by the kernel or live only while the machine runs: reading /proc or
# /sys yields thousands of unreadable or endless "files", /dev holds devices, /run runtime
# state. Backing them up restores nothing useful.
PSEUDO_FILESYSTEMS = {"/proc": "a pseudo file system (process information)",
                      "/sys": "a pseudo file system (kernel objects)",
                      "/dev": "device files",
                      "/run": "runtime state that lives only while the machine runs"}
GLOB_CHARS = "*?["
MAX_PATTERN = 4096


def check_pattern(pattern):
    """An exclude pattern as stored: an absolute path (normalized) or a name glob."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise ValidationError("the exclude pattern is empty",
                              hint="give a name pattern such as *.tmp, or an absolute path "
                                   "such as /data/scratch")
    p = pattern.strip()
    if "\0" in p or "\n" in p or len(p) > MAX_PATTERN:
        raise ValidationError(f"exclude pattern {p[:80]!r} is not valid",
                              hint="one line of text without NUL bytes")
    if p.startswith("/"):
        path = check_abs_path("exclude path", p)
        if path == "/":
            raise ValidationError("excluding / would leave nothing to back up",
                                  hint="remove the backup selection instead")
        if any(ch in path for ch in GLOB_CHARS):
            raise ValidationError(
                f"exclude path {path} contains a wildcard",
                hint="an absolute path leaves out that one subtree; wildcards match file "
                     "names, e.g. *.tmp or cache-*")
        return path
    if "/" in p:
        raise ValidationError(
            f"exclude pattern {p!r} is neither a file name pattern nor an absolute path",
            hint="give a pattern matched against each file's name (*.tmp, core.*), or an "
                 "absolute path (/home/joe/.cache) whose subtree is left out")
    return p


def is_path(pattern):
    return pattern.startswith("/")


def _within(path, top):
    """Whether `path` is `top` or lies below it."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def default_excludes(db, selections):
    """{path: why} left out of a backup of `selections` by default: a pseudo file system
    that a selection holds or lies in, and every pool's files (on any host: a shared file
    system's other pools too) that a selection holds or lies in (app/shared_volumes.py)."""
    sels = [s for s in selections if s.startswith("/")]
    out = {}
    for path, why in PSEUDO_FILESYSTEMS.items():
        if any(_within(path, s) or _within(s, path) for s in sels):
            out[path] = why + ", left out by default"
    for path, why in shared_volumes.pool_folders(db).items():
        if any(_within(path, s) or _within(s, path) for s in sels):
            out[path] = why + ", left out by default"
    return out


def selection_warnings(db, selection, pools=None):
    """What an admin should know about a new selection: it is, lies in or holds a pseudo
    file system or a pool's files, which the backups leave out. pools:
    shared_volumes.pool_folders(db), when the caller has it already (db is then not
    read)."""
    if not selection.startswith("/"):
        return []
    if pools is None:
        pools = shared_volumes.pool_folders(db)
    out = []
    for path, why in list(PSEUDO_FILESYSTEMS.items()) + sorted(pools.items()):
        if _within(selection, path):
            where = "is" if selection == path else f"lies in {path},"
            out.append(f"{selection} {where} {why}: backups leave it out, so this selection "
                       "backs up nothing")
        elif _within(path, selection):
            out.append(f"{selection} holds {path} ({why}): backups leave it out")
    return out


def split(patterns):
    """(absolute paths, name patterns) of a list of exclude patterns."""
    return ([p for p in patterns if is_path(p)], [p for p in patterns if not is_path(p)])


def job_excludes(policy_excludes, client_excludes):
    """What a backup job of one client carries: {"paths": [...], "names": [...]}."""
    paths, names = split(list(policy_excludes) + list(client_excludes))
    return {"paths": sorted(set(paths)), "names": sorted(set(names))}
