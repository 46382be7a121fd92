"""What a backup does around its walk when its selections are on IBM Storage Scale: take the
snapshot the policy asks for and read the selections from it, make the file list with the
policy engine, leave the file systems' `.snapshots` directories out, and always delete the
snapshots it took, also when the backup fails or is canceled.

Standard library only: this runs on client hosts.
"""

import os
import shutil
import tempfile
import time

from app import status
from app.agent import filelist
from app.errors import CairnError, Canceled
from plugins.filesystems import storage_scale as ss

SNAPSHOT_PREFIX = "cairn-"
# A change time this close to the previous scan's start counts as a change: the kernel's file
# time stamps run on a coarser clock than time.time().
SCAN_MARGIN_S = 1.0


class SnapshotFailed(CairnError):
    status = status.SNAPSHOT_FAILED


def snapshot_name(job_id, when=None):
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(when or time.time()))
    return f"{SNAPSHOT_PREFIX}{job_id or 0}-{stamp}"


class Preparation:
    """Before the walk: locate, snapshot, file list; after it: delete the snapshots.

    snapshot: "none", "filesystem" or "fileset" (app/config.py SNAPSHOT_MODES);
    file_list: "auto" (policy engine on Storage Scale) or "walk";
    since: for an incremental, when the previous backup's scan started (epoch seconds, this
    host's clock), or None."""

    def __init__(self, selections, *, snapshot="none", file_list="walk", job_id=None,
                 since=None, emit=None, is_cancelled=None):
        self.selections = [s for s in selections if s.startswith("/")]
        self.mode = snapshot or "none"
        self.file_list = file_list or "walk"
        self.job_id = job_id
        self.since = since
        self.emit = emit or (lambda event, data: None)
        self.is_cancelled = is_cancelled or (lambda: False)
        self.read_from = {}
        self.excludes = {}
        self.listing = None
        self.unchanged_before_ns = None
        self.snapshots = []      # what create_snapshot returned, for each one taken
        self.scan = {"method": "walk", "started": None}
        self.locations = {}

    def log(self, message, level="info"):
        self.emit("log", {"message": message, "level": level})

    # ---- before ---------------------------------------------------------------------------

    def start(self):
        started = time.time()
        on_scale = self.mode != "none" or self.file_list == "auto"
        if on_scale and ss.find_bin() is not None:
            for sel in self.selections:
                try:
                    self.locations[sel] = ss.locate(sel)
                except ss.ScaleError as e:
                    if self.mode != "none":
                        raise SnapshotFailed(f"cannot tell which Storage Scale file system "
                                             f"holds {sel}: {e}") from None
                    self.log(f"Storage Scale could not be asked where {sel} is ({e.message}); "
                             f"its files are found by walking the tree", "warning")
                    self.locations[sel] = None
            for loc in self.locations.values():
                if loc:
                    snapdir = os.path.join(loc["mount_point"], ".snapshots")
                    self.excludes[snapdir] = "the Storage Scale snapshots directory"
                    fs = loc.get("fileset")
                    if fs and fs.get("path") and fs["path"] != loc["mount_point"]:
                        self.excludes[os.path.join(fs["path"], ".snapshots")] = \
                            "the Storage Scale snapshots directory"
        if self.mode != "none":
            self._take_snapshots(ss)
            started = min(s["created"] for s in self.snapshots)
        self.scan["started"] = started
        self._make_list(ss)

    def _take_snapshots(self, ss):
        if ss.find_bin() is None:
            raise SnapshotFailed(
                "the policy backs up from a snapshot, but this host has no Storage Scale "
                "commands", )
        name = snapshot_name(self.job_id)
        groups = {}
        for sel in self.selections:
            loc = self.locations.get(sel)
            if loc is None:
                raise SnapshotFailed(
                    f"the policy backs up from a snapshot, but {sel} is not on a Storage "
                    f"Scale file system")
            fileset = None
            base = loc["mount_point"]
            if self.mode == "fileset":
                fs = loc.get("fileset")
                if not fs or not fs.get("path"):
                    raise SnapshotFailed(f"{sel} is in no linked fileset of "
                                         f"{loc['device']}")
                if fs["name"] != "root":
                    if not fs.get("independent"):
                        raise SnapshotFailed(
                            f"fileset {fs['name']} (holding {sel}) is a dependent fileset, "
                            f"which has no snapshots of its own: set the policy's snapshot to "
                            f"filesystem, or make the fileset independent")
                    fileset, base = fs["name"], fs["path"]
            groups.setdefault((loc["device"], fileset), (base, []))[1].append(sel)
        for (device, fileset), (base, sels) in sorted(groups.items(),
                                                      key=lambda kv: (kv[0][0], kv[0][1] or "")):
            what = f"fileset {fileset} of {device}" if fileset else f"file system {device}"
            try:
                snap = ss.create_snapshot(device, name, fileset=fileset)
            except ss.ScaleError as e:
                raise SnapshotFailed(f"the snapshot {name} of {what} could not be taken: "
                                     f"{e}") from None
            self.snapshots.append(snap)
            self.emit("snapshot", {"name": snap["name"], "device": device, "fileset": fileset})
            self.log(f"snapshot {name} of {what} taken at "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(snap['created']))}; "
                     f"the backup reads {', '.join(sels)} from {snap['path']}")
            for sel in sels:
                rel = os.path.relpath(sel, base)
                self.read_from[sel] = os.path.normpath(os.path.join(snap["path"], rel))

    def _make_list(self, ss):
        if self.file_list != "auto":
            self.log("file list: walking the tree (the policy asks for it)")
            return
        on_scale = [s for s in self.selections if self.locations.get(s)]
        off = [s for s in self.selections if not self.locations.get(s)]
        if not on_scale:
            self.log("file list: walking the tree (the selections are not on Storage Scale)")
            return
        workdir = tempfile.mkdtemp(prefix="cairn-policy-")
        t0 = time.monotonic()
        snap_of = {}
        for s in self.snapshots:
            snap_of[(s["device"], s.get("fileset"))] = s["name"]
        roots = []
        for sel in on_scale:
            loc = self.locations[sel]
            fileset = (loc.get("fileset") or {}).get("name") if self.mode == "fileset" else None
            if fileset == "root":
                fileset = None
            snap = snap_of.get((loc["device"], fileset))
            roots.append((os.fsencode(sel), os.fsencode(self.read_from.get(sel, sel)), snap))

        def scan(root, read_root, snapshot):
            result = ss.policy_scan(os.fsdecode(root), workdir=workdir, snapshot=snapshot,
                                    is_cancelled=self.is_cancelled)
            return result.entries(), lambda: result.skipped

        try:
            listing = filelist.from_policy_scan(roots, scan)
        except ss.Interrupted:
            raise Canceled() from None
        except ss.ScaleError as e:
            self.log(f"file list: the Storage Scale policy engine failed ({e.message}); "
                     f"walking the tree instead", "warning")
            return
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        self.listing = listing
        self.scan["method"] = "policy"
        if self.since is not None:
            self.unchanged_before_ns = int((self.since - SCAN_MARGIN_S) * 1e9)
        how = f"{listing.entries} entries in {time.monotonic() - t0:.1f} s"
        if listing.skipped:
            how += f", {listing.skipped} lines not understood"
        self.log(f"file list: Storage Scale policy engine (mmapplypolicy) for "
                 f"{', '.join(on_scale)}: {how}"
                 + (f"; walking the tree for {', '.join(off)} (not on Storage Scale)"
                    if off else "")
                 + ("; files unchanged since the previous backup's scan are not read again"
                    if self.unchanged_before_ns is not None else ""))

    # ---- after ----------------------------------------------------------------------------

    def finish(self):
        """Delete every snapshot taken; a failure to delete is a warning naming it."""
        if not self.snapshots:
            return []
        left = []
        for snap in self.snapshots:
            try:
                ss.delete_snapshot(snap["device"], snap["name"], fileset=snap.get("fileset"))
                self.log(f"snapshot {snap['name']} of {snap['device']} deleted")
            except Exception as e:  # noqa: BLE001 - reported, never hides the backup's result
                left.append(snap)
                self.log(f"snapshot {snap['name']} of {snap['device']} could not be deleted "
                         f"({e}); delete it with: mmdelsnapshot {snap['device']} "
                         f"{(snap['fileset'] + ':') if snap.get('fileset') else ''}"
                         f"{snap['name']}", "warning")
        return left

    def report(self):
        """What the catalog records about the image."""
        return {"snapshots": [{"name": s["name"], "device": s["device"],
                               "fileset": s.get("fileset"), "created": s["created"],
                               "path": s["path"]} for s in self.snapshots],
                "scan": dict(self.scan)}


def delete_snapshots(snapshots):
    """Delete snapshots a backup left behind (its agent was killed): [(device, name,
    fileset)]. Returns [{"name", "deleted": bool, "error"}]."""
    out = []
    for device, name, fileset in snapshots:
        if not name.startswith(SNAPSHOT_PREFIX):
            out.append({"name": name, "deleted": False,
                        "error": "not a snapshot taken by a backup"})
            continue
        try:
            ss.delete_snapshot(device, name, fileset=fileset)
            out.append({"name": name, "deleted": True, "error": None})
        except ss.ScaleError as e:
            out.append({"name": name, "deleted": False, "error": str(e)})
    return out
