"""Where a path is: which Storage Scale file system and fileset hold it, and the directory
whose `.snapshots` holds a file system's or fileset's snapshots on this host."""

import os
import re

from plugins.filesystems.storage_scale.cluster import parse_filesets
from plugins.filesystems.storage_scale.commands import DEFAULT_TIMEOUT, ENV_BIN, find_bin, run
from plugins.filesystems.storage_scale.errors import CommandFailed, InvalidArgument
from plugins.filesystems.storage_scale.yformat import parse_y

PROC_MOUNTS = "/proc/self/mounts"


def _under(path, top):
    """Whether `path` is `top` or below it, comparing whole components: /gpfs/fs10 is not
    below /gpfs/fs1."""
    return top == "/" or path == top or path.startswith(top + "/")


def _unescape_mount(field):
    # The kernel writes space, tab, newline and backslash in mount points as \040 and so on.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _gpfs_mounts(mounts_file=None):
    """{device: [mount point]} of the file systems of type gpfs the kernel has mounted."""
    out = {}
    try:
        with open(mounts_file or PROC_MOUNTS, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.readlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "gpfs":
            # The device field names the file system, sometimes as /dev/<name>.
            dev = os.path.basename(parts[0].rstrip("/"))
            out.setdefault(dev, []).append(os.path.normpath(_unescape_mount(parts[1])))
    return out


def _mount_table(bin_dir, timeout, mounts_file=None):
    """{device: (default mount point or None, [mount points on this host])}. A file system
    the kernel has mounted is where the kernel says; any other is assumed at its default
    mount point."""
    rows = parse_y(run("mmlsfs", "all", "-T", "-Y", bin_dir=bin_dir, timeout=timeout),
                   "mmlsfs").get("", [])
    defaults = {}
    for r in rows:
        if r.get("fieldName") == "defaultMountPoint" and r.get("deviceName") and r.get("data"):
            defaults[r["deviceName"]] = os.path.normpath(r["data"])
    kernel = _gpfs_mounts(mounts_file)
    table = {dev: (mp, kernel.get(dev) or [mp]) for dev, mp in defaults.items()}
    for dev, mps in kernel.items():
        # A file system of another cluster mounted here, which mmlsfs may not list.
        table.setdefault(dev, (None, mps))
    return table


def _all_filesets(device, default, mount_point, bin_dir, timeout):
    """The filesets of `device` ({"name", "path", "independent", "status"}), with the
    junction paths moved to where the file system is mounted on this host when that is not
    its default mount point."""
    out = []
    for f in parse_filesets(run("mmlsfileset", device, "-Y", bin_dir=bin_dir,
                                timeout=timeout)):
        path = f["path"]
        if path:
            path = os.path.normpath(path)
            if default and mount_point != default and _under(path, default):
                path = mount_point + path[len(default):] if default != "/" else \
                    os.path.normpath(mount_point + "/" + path)
        out.append({"name": f["name"], "path": path, "independent": f["independent"],
                    "status": f["status"]})
    return out


def absolute(path, what="path"):
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not os.path.isabs(path):
        raise InvalidArgument(f"the {what} {path!r} is not an absolute path",
                              hint="give the full path, starting with /")
    return os.path.normpath(path)


def locate(path, bin_dir=None, timeout=DEFAULT_TIMEOUT, *, mounts_file=None):
    """Which Storage Scale file system and fileset hold the absolute `path`:
    {"device", "mount_point", "fileset": {"name", "path", "independent"} or None}, or None
    when this host has no Storage Scale commands or the path is on none of its file systems.

    The path is taken as written (symbolic links in it are not followed), so that the mount
    point and fileset junction are prefixes of it. The file system is the one whose mount
    point is the longest prefix; the fileset is the linked one whose junction is the longest
    prefix (the root fileset's junction is the mount point). `mounts_file` replaces
    /proc/self/mounts. Raises a ScaleError when the commands fail."""
    path = absolute(path)
    bin_dir = bin_dir or find_bin()
    if bin_dir is None:
        return None
    best = None
    for dev, (default, mps) in _mount_table(bin_dir, timeout, mounts_file).items():
        for mp in mps:
            if _under(path, mp) and (best is None or len(mp) > len(best[1])):
                best = (dev, mp, default)
    if best is None:
        return None
    dev, mp, default = best
    fileset = None
    if default is not None:
        for f in _all_filesets(dev, default, mp, bin_dir, timeout):
            if f["path"] and _under(path, f["path"]) and \
                    (fileset is None or len(f["path"]) > len(fileset["path"])):
                fileset = {"name": f["name"], "path": f["path"],
                           "independent": f["independent"]}
    return {"device": dev, "mount_point": mp, "fileset": fileset}


def snapshot_base(device, fileset=None, bin_dir=None, timeout=DEFAULT_TIMEOUT, *,
                  mounts_file=None):
    """The directory whose `.snapshots` holds the snapshots of `device` (its mount point on
    this host) or, with `fileset`, of that fileset (its junction). Raises a ScaleError when
    the file system is unknown, or the fileset unknown, unlinked or dependent (a dependent
    fileset has no snapshots of its own)."""
    bin_dir = bin_dir or find_bin()
    if bin_dir is None:
        raise CommandFailed("the Storage Scale commands are not installed on this host",
                            hint=f"install Storage Scale, or set {ENV_BIN}")
    table = _mount_table(bin_dir, timeout, mounts_file)
    if device not in table:
        raise CommandFailed(f"file system {device} is not known to this Storage Scale cluster",
                            hint=f"`mmlsfs all` lists the file systems: "
                                 f"{', '.join(sorted(table)) or 'none'}", command="mmlsfs")
    default, mps = table[device]
    if fileset is None:
        return mps[0]
    sets = {f["name"]: f for f in _all_filesets(device, default, mps[0], bin_dir, timeout)}
    f = sets.get(fileset)
    if f is None:
        raise CommandFailed(f"fileset {fileset} does not exist in file system {device}",
                            hint=f"`mmlsfileset {device}` lists its filesets: "
                                 f"{', '.join(sorted(sets)) or 'none'}", command="mmlsfileset")
    if not f["path"]:
        raise CommandFailed(f"fileset {fileset} of {device} is not linked, so its snapshots "
                            f"cannot be reached",
                            hint=f"link it with `mmlinkfileset {device} {fileset} -J <path>`",
                            command="mmlsfileset")
    if fileset != "root" and not f["independent"]:
        raise CommandFailed(f"fileset {fileset} of {device} is a dependent fileset, which has "
                            f"no snapshots of its own",
                            hint="take a snapshot of the whole file system instead, or use an "
                                 "independent fileset", command="mmlsfileset")
    return f["path"]
