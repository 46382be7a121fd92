"""Taking and deleting the snapshots of a file system or of an independent fileset."""

import os
import re
import time

from plugins.filesystems.storage_scale.commands import DEFAULT_TIMEOUT, find_bin, run
from plugins.filesystems.storage_scale.errors import CommandFailed, CommandTimeout, \
    DaemonDown, InvalidArgument, NotInCluster, PermissionDenied, ScaleError, SnapshotNotFound
from plugins.filesystems.storage_scale.location import snapshot_base

# Taking or deleting a snapshot quiesces the file system, which waits for its busy nodes.
SNAPSHOT_TIMEOUT = 900
SNAPDIR = ".snapshots"


def check_name(what, name):
    # ':' separates fileset and snapshot and ',' separates several snapshots on the command
    # line; '/' and '.'/'..' would not name a directory under .snapshots.
    if not isinstance(name, str) or not name or name in (".", "..") or \
            re.search(r"[/:,\x00\n]", name):
        raise InvalidArgument(f"{name!r} cannot be used as a {what} name",
                              hint=f"a {what} name is a non-empty name without '/', ':', ',' "
                                   f"or a line break")


def _snapshot_arg(name, fileset):
    return f"{fileset}:{name}" if fileset else name


def create_snapshot(device, name, fileset=None, bin_dir=None, timeout=SNAPSHOT_TIMEOUT, *,
                    mounts_file=None):
    """Take the snapshot `name` of file system `device`, or of its independent `fileset`
    (`mmcrsnapshot DEV [FILESET:]NAME`). Returns {"name", "device", "fileset", "created":
    epoch seconds right after the command succeeded, "path": the directory showing the
    snapshot's content} (`<mount point>/.snapshots/<name>`, or `<fileset junction>/
    .snapshots/<name>`). Raises a ScaleError when the snapshot cannot be taken, or when its
    directory is not there afterwards (the snapshot is then deleted again)."""
    check_name("snapshot", name)
    if fileset is not None:
        check_name("fileset", fileset)
    bin_dir = bin_dir or find_bin()
    base = snapshot_base(device, fileset, bin_dir=bin_dir, mounts_file=mounts_file,
                         timeout=DEFAULT_TIMEOUT if timeout is None else
                         min(timeout, DEFAULT_TIMEOUT))
    what = f"fileset {fileset} of {device}" if fileset else f"file system {device}"
    try:
        run("mmcrsnapshot", device, _snapshot_arg(name, fileset), bin_dir=bin_dir,
            timeout=timeout)
    except CommandTimeout as e:
        e.hint = (f"the snapshot may have been taken all the same: check `mmlssnapshot "
                  f"{device}` and delete it with `mmdelsnapshot {device} "
                  f"{_snapshot_arg(name, fileset)}`")
        raise
    created = time.time()
    path = os.path.join(base, SNAPDIR, name)
    if not os.path.isdir(path):
        try:
            delete_snapshot(device, name, fileset, bin_dir=bin_dir, timeout=timeout)
            after = "it has been deleted again"
        except ScaleError as e:
            after = (f"deleting it again failed ({e.message}): delete it with "
                     f"`mmdelsnapshot {device} {_snapshot_arg(name, fileset)}`")
        raise CommandFailed(
            f"the snapshot {name} of {what} was taken, but its directory {path} does not "
            f"exist; {after}",
            hint=f"the snapshot directory may have been renamed or moved: `mmsnapdir {device} "
                 f"-q` shows its name and where it appears", command="mmcrsnapshot")
    return {"name": name, "device": device, "fileset": fileset, "created": created,
            "path": path}


def delete_snapshot(device, name, fileset=None, bin_dir=None, timeout=SNAPSHOT_TIMEOUT):
    """Delete the snapshot `name` of `device` (or of its `fileset`): `mmdelsnapshot DEV
    [FILESET:]NAME`. Returns True when it was deleted, False when there was no such snapshot.
    A failed delete is tried once more, since an interrupted one leaves the snapshot in state
    DeleteRequired and deleting it again finishes it; raises the ScaleError when that fails
    too."""
    check_name("snapshot", name)
    if fileset is not None:
        check_name("fileset", fileset)
    arg = _snapshot_arg(name, fileset)
    try:
        run("mmdelsnapshot", device, arg, bin_dir=bin_dir, timeout=timeout)
        return True
    except SnapshotNotFound:
        return False
    except (PermissionDenied, NotInCluster, DaemonDown):
        raise
    except ScaleError:
        pass
    try:
        run("mmdelsnapshot", device, arg, bin_dir=bin_dir, timeout=timeout)
    except SnapshotNotFound:
        return True  # the first attempt got far enough after all
    except ScaleError as e:
        e.message = f"{e.message} (tried twice)"
        if e.hint is None:
            e.hint = (f"`mmlssnapshot {device}` shows the snapshot's state; run `mmdelsnapshot "
                      f"{device} {arg}` again once the cause is fixed")
        raise
    return True
