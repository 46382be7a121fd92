#!/usr/bin/env python3
"""TEST DOUBLE of IBM Storage Scale's proprietary mm administration commands (mmlscluster,
mmgetstate, mmlsfs, mmlsmount, mmdiag, mmdf, mmlsfileset, mmlssnapshot, mmcrsnapshot,
mmdelsnapshot, mmapplypolicy). It is not Storage Scale: it prints, for the `-Y` forms the
product runs, output in the documented colon-delimited format (HEADER lines, percent-escaped
values) for a cluster described in a JSON file, keeps snapshots as copies of directory trees,
writes policy-engine file lists from a walk of a directory, and reproduces the failure modes
with their messages and exit statuses.

`bin/` holds one symlink per command name pointing here; the name it is called by selects
the command. The JSON file is named by the environment variable CAIRN_SCALE_DOUBLE:

  {"cluster": {"name": "c1.example.com", "id": "1234"},
   "version": "5.1.9.0 ",
   "local_node": "n1",     # the node mmgetstate without -a reports (default: the first)
   "failure": null,        # or "daemon_down", "not_in_cluster", "permission_denied", "hang",
                           #    "node_unreachable", "failed"
   "failing": ["mmlsmount"],   # optional: the commands the failure applies to
   "fail_count": 1,        # optional, "failed" only: fail this many invocations, then work
   "unreachable": ["n2"],  # node_unreachable: the nodes that cannot be reached
   "log": "/tmp/calls.jsonl",  # optional: each invocation appended as {"cmd", "args"}
   "after_snapshot": {"write": {"/gpfs/fs1/f": "text"}, "remove": ["/gpfs/fs1/g"]},
                           # optional: how mmcrsnapshot changes the live tree once the
                           # snapshot is taken, as users writing on go on doing
   "scan_omits": ["name"], # optional: names mmapplypolicy leaves out of its lists
   "nodes": [{"number": 1, "name": "n1.example.com", "ip": "10.0.0.1",
              "designation": "quorumManager", "roles": "perfmon", "state": "active"}],
   "filesystems": [{"device": "fs1", "mount_point": "/gpfs/fs1", "block_size": 4194304,
                    "size_kib": 1048576, "free_kib": 524288, "mounted_on": ["n1"],
                    "snapdir": ".snapshots",   # optional: where snapshots appear
                    "filesets": [{"name": "root", "id": 0, "path": "/gpfs/fs1"}],
                    "snapshots": [{"name": "s1", "id": 1, "fileset": ""}]}]}

Each failure mode, like the real commands, fails only the commands it affects when
"failing" is absent: a stopped daemon leaves mmlscluster, mmlsfs and mmgetstate working, and
unreachable nodes only show as state "unknown" and leave the mount list. The commands that
change the cluster (mmcrsnapshot, mmdelsnapshot, a counted failure) write the JSON file back
under an exclusive lock on `<file>.lock`, replacing it whole, so concurrent invocations
neither corrupt it nor lose an update.
"""

import fcntl
import json
import os
import re
import shutil
import subprocess
import stat
import sys
import time
from contextlib import contextmanager

DAEMON_FREE = {"mmlscluster", "mmlsfs", "mmgetstate"}
BOILERPLATE = "Command failed. Examine previous error messages to determine cause."


def esc(value):
    # Storage Scale escapes these; spaces are never escaped.
    out = str(value)
    if out == "--":
        return "%2D%2D"  # an unlinked fileset's path
    for ch, code in (("%", "%25"), (":", "%3A"), ("/", "%2F"), (",", "%2C"), (";", "%3B"),
                     ("=", "%3D")):
        out = out.replace(ch, code)
    return out


def header(cmd, rtype, names):
    return f"{cmd}:{rtype}:HEADER:version:reserved:reserved:{':'.join(names)}:"


def row(cmd, rtype, values):
    return f"{cmd}:{rtype}:0:1:::{':'.join(esc(v) for v in values)}:"


def fail(cmd, lines, status):
    sys.stdout.flush()
    sys.stderr.write("".join(line + "\n" for line in lines))
    sys.exit(status)


# ---- the cluster description ----------------------------------------------------------------

def spec_path():
    return os.environ["CAIRN_SCALE_DOUBLE"]


def load():
    with open(spec_path()) as f:
        return json.load(f)


@contextmanager
def locked():
    with open(spec_path() + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextmanager
def changing():
    """The description, re-read under the lock and written back whole when the block ends
    without an exception."""
    with locked():
        spec = load()
        yield spec
        tmp = f"{spec_path()}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(spec, f, indent=1)
        os.replace(tmp, spec_path())


def record(spec, cmd, args):
    if not spec.get("log"):
        return
    with locked(), open(spec["log"], "a") as f:
        f.write(json.dumps({"cmd": cmd, "args": args}) + "\n")


def short(name):
    return name.split(".")[0]


def same_node(a, b):
    return a == b or short(a) == short(b)


def unreachable(spec, name):
    if spec.get("failure") != "node_unreachable":
        return False
    return any(same_node(name, u) for u in spec.get("unreachable", []))


# ---- failures -------------------------------------------------------------------------------

def failure(cmd, spec, args):
    mode = spec.get("failure")
    if not mode:
        return
    failing = spec.get("failing")
    if failing is not None and cmd not in failing:
        return
    if mode == "hang":
        time.sleep(3600)
    if mode == "not_in_cluster":
        fail(cmd, [f"{cmd}: 6027-1382 This node does not belong to a GPFS cluster.",
                   f"{cmd}: 6027-1639 {BOILERPLATE}"], 1)
    if mode == "daemon_down":
        if failing is None and cmd in DAEMON_FREE:
            return
        fail(cmd, ["Failed to connect to file system daemon: No such process",
                   f"{cmd}: GPFS is down on this node.",
                   f"{cmd}: {BOILERPLATE}"], 19)
    if mode == "permission_denied":
        # As a shell reports a root-only script run by another user.
        fail(cmd, [f"/bin/sh: /usr/lpp/mmfs/bin/{cmd}: Permission denied"], 126)
    if mode == "node_unreachable":
        if failing is None:
            return  # the nodes only show as unknown and leave the mount list
        lines = []
        for name in spec.get("unreachable", []):
            n = node(spec, name)["name"]
            lines += [f"{n}: ssh: connect to host {n} port 22: No route to host",
                      f"mmdsh: {n} remote shell process had return code 255."]
        fail(cmd, lines + ["mmdsh: 6027-1617 There are no available nodes on which to run "
                           "the command.", f"{cmd}: 6027-1639 {BOILERPLATE}"], 1)
    if mode == "failed":
        if "fail_count" in spec:
            with changing() as live:
                left = live.get("fail_count", 0)
                if left <= 0:
                    return
                live["fail_count"] = left - 1
                if cmd == "mmdelsnapshot":
                    # An interrupted delete leaves the snapshot to be deleted again.
                    found = find_snapshot(live, args)
                    if found:
                        found[1]["status"] = "DeleteRequired"
        elif cmd == "mmdelsnapshot":
            with changing() as live:
                found = find_snapshot(live, args)
                if found:
                    found[1]["status"] = "DeleteRequired"
        # Not the text of a real failure: the double's own, for a failure it was told of.
        fail(cmd, [f"{cmd}: the test double was told to fail this command.",
                   f"{cmd}: 6027-1639 {BOILERPLATE}"], 1)


def node(spec, name):
    for n in spec["nodes"]:
        if same_node(n["name"], name):
            return n
    raise SystemExit(f"double: unknown node {name}")


# ---- reading the cluster --------------------------------------------------------------------

def mmlscluster(spec, args):
    c = spec["cluster"]
    cmd = "mmlscluster"
    # All headers first, then all data, as the real command does.
    print(header(cmd, "clusterSummary", [
        "clusterName", "clusterId", "uidDomain", "rshPath", "rshSudoWrapper", "rcpPath",
        "rcpSudoWrapper", "repositoryType", "primaryServer", "secondaryServer"]))
    print(header(cmd, "clusterNode", [
        "nodeNumber", "daemonNodeName", "ipAddress", "adminNodeName", "designation",
        "otherNodeRoles", "adminLoginName", "otherNodeRolesAlias"]))
    print(header(cmd, "cnfsSummary", ["cnfsSharedRoot", "cnfsMoundPort", "cnfsNFSDprocs"]))
    print(row(cmd, "clusterSummary", [
        c["name"], c["id"], c.get("uid_domain", c["name"]), "/usr/bin/ssh", "", "/usr/bin/scp",
        "", "CCR", "", ""]))
    for n in spec["nodes"]:
        print(row(cmd, "clusterNode", [
            n["number"], n["name"], n["ip"], n["name"], n.get("designation", ""),
            n.get("role_letters", ""), "", n.get("roles", "")]))


def mmgetstate(spec, args):
    cmd = "mmgetstate"
    nodes = spec["nodes"]
    local = spec.get("local_node", nodes[0]["name"])

    def state(n):
        if unreachable(spec, n["name"]):
            return "unknown"
        if spec.get("failure") == "daemon_down" and same_node(n["name"], local):
            return "down"
        return n.get("state", "active")

    up = sum(1 for n in nodes if state(n) == "active")
    quorum = sum(1 for n in nodes if "quorum" in n.get("designation", ""))
    print(header(cmd, "", ["nodeName", "nodeNumber", "state", "quorum", "nodesUp",
                           "totalNodes", "remarks", "cnfsState", "daemonShortName"]))
    for n in nodes:
        # Without -a only the node it runs on.
        if "-a" not in args and not same_node(n["name"], local):
            continue
        print(row(cmd, "", [n["name"], n["number"], state(n), f"{quorum}*", up, len(nodes),
                            "quorum node" if "quorum" in n.get("designation", "") else "",
                            "(undefined)", short(n["name"])]))


def mmlsfs(spec, args):
    cmd = "mmlsfs"
    print(header(cmd, "", ["deviceName", "fieldName", "data", "remarks"]))
    wanted = args[0] if args else "all"
    for fs in spec["filesystems"]:
        if wanted not in ("all", fs["device"]):
            continue
        dev = fs["device"]
        if "-T" not in args:
            print(row(cmd, "", [dev, "minFragmentSize", 8192, "Minimum fragment size in bytes"]))
            print(row(cmd, "", [dev, "blockSize", fs.get("block_size", 4194304),
                                "Block size (system pool)"]))
            print(row(cmd, "", [dev, "blockSize", fs.get("data_block_size", 16777216),
                                "Block size (other pools)"]))
            print(row(cmd, "", [dev, "filesystemVersion", "33.00 (5.2.1.0)",
                                "Current file system version"]))
            print(row(cmd, "", [dev, "disks", ";".join(fs.get("disks", ["nsd1", "nsd2"])),
                                "Disks in file system"]))
            print(row(cmd, "", [dev, "automaticMountOption", "yes", "Automatic mount option"]))
        print(row(cmd, "", [dev, "defaultMountPoint", fs["mount_point"], "Default mount point"]))


def mmlsmount(spec, args):
    cmd = "mmlsmount"
    print(header(cmd, "", ["localDevName", "realDevName", "owningCluster", "totalNodes",
                           "nodeIP", "nodeName", "clusterName", "mountMode"]))
    for fs in spec["filesystems"]:
        mounted = [name for name in fs.get("mounted_on", []) if not unreachable(spec, name)]
        for name in mounted:
            n = node(spec, name)
            print(row(cmd, "", [fs["device"], fs["device"], spec["cluster"]["name"],
                                len(mounted), n["ip"], short(n["name"]),
                                spec["cluster"]["name"], "RW"]))


def mmdiag(spec, args):
    if "-Y" in args:
        print("mmdiag:version:HEADER:version:reserved:reserved:fullVersion:buildDate:")
        # The build string carries spaces, and its date colons arrive escaped.
        print(f"mmdiag:version:0:1:::{spec.get('version', '5.1.9.0 ')}:"
              f"{esc('Jan 10 2024 09:10:11')}:")
    else:
        print(f'Current GPFS build: "{spec.get("version", "5.1.9.0 ")}".')


def _fs(spec, dev):
    for fs in spec["filesystems"]:
        if fs["device"] == os.path.basename(dev):
            return fs
    fail("mm", [f"mmcommon: 6027-1011 File system {dev} is not known to the GPFS cluster."], 1)


def mmdf(spec, args):
    cmd = "mmdf"
    fs = _fs(spec, args[0])
    size, free = fs.get("size_kib", 1048576), fs.get("free_kib", 524288)
    print(header(cmd, "nsd", ["nsdName", "storagePool", "diskSize", "failureGroup",
                              "metadata", "data", "freeBlocks", "freeBlocksPct",
                              "freeFragments", "freeFragmentsPct", "diskAvailableForAlloc"]))
    print(row(cmd, "nsd", ["nsd1", "system", size, 1, "Yes", "Yes", free,
                           free * 100 // size, 0, 0, ""]))
    print(header(cmd, "poolTotal", ["poolName", "poolSize", "freeBlocks", "freeBlocksPct",
                                    "freeFragments", "freeFragmentsPct", "maxDiskSize"]))
    print(row(cmd, "poolTotal", ["system", size, free, free * 100 // size, 0, 0, size]))
    print(header(cmd, "fsTotal", ["fsSize", "freeBlocks", "freeBlocksPct", "freeFragments",
                                  "freeFragmentsPct"]))
    print(row(cmd, "fsTotal", [size, free, free * 100 // size, 0, 0]))
    print(header(cmd, "inode", ["usedInodes", "freeInodes", "allocatedInodes", "maxInodes"]))
    print(row(cmd, "inode", [4038, 496954, 500992, 1000000]))


AFM = ["afmTarget", "afmAsyncDelay", "afmMode", "afmFileLookupRefreshInterval",
       "afmFileOpenRefreshInterval", "afmDirLookupRefreshInterval", "afmDirOpenRefreshInterval"]


def mmlsfileset(spec, args):
    cmd = "mmlsfileset"
    fs = _fs(spec, args[0])
    names = ["filesystemName", "filesetName", "id", "rootInode", "status", "path", "parentId",
             "created", "inodes", "dataInKB", "comment", "filesetMode"] + AFM + [
             "inodeSpace", "isInodeSpaceOwner", "maxInodes", "allocInodes"]
    print(header(cmd, "", names))
    for f in fs.get("filesets", []):
        linked = f.get("path") is not None
        print(row(cmd, "", [
            fs["device"], f["name"], f["id"], 3 if f["id"] == 0 else 524291,
            "Linked" if linked else "Unlinked", f["path"] if linked else "--",
            f.get("parent_id", "--" if f["id"] == 0 else 0), "Tue Dec  5 10:44:05 2023",
            0, 0, f.get("comment", ""), "off"] + [""] * len(AFM) + [
            f["id"], 1 if f.get("independent", f["id"] == 0) else 0, 100000, 50000]))


def mmlssnapshot(spec, args):
    cmd = "mmlssnapshot"
    fs = _fs(spec, args[0])
    snaps = fs.get("snapshots", [])
    if not snaps:
        print(f"No snapshots in file system {fs['device']}")
        sys.exit(0)
    print(header(cmd, "", ["filesystemName", "directory", "snapID", "status", "created",
                           "quotas", "data", "metadata", "fileset", "snapType"]))
    for s in snaps:
        print(row(cmd, "", [fs["device"], s["name"], s["id"], s.get("status", "Valid"),
                            s.get("created", "Wed Jan 10 09:10:11 2024"), "", "", "",
                            s.get("fileset", ""), ""]))


# ---- snapshots ------------------------------------------------------------------------------

def snapshot_args(args):
    """(device, fileset or "", name) of `DEV [[FILESET]:]NAME` or the older
    `DEV NAME -j FILESET`."""
    rest = [a for a in args if a != "-Y"]
    fileset = ""
    if "-j" in rest:
        i = rest.index("-j")
        fileset = rest[i + 1]
        del rest[i:i + 2]
    if len(rest) < 2:
        fail("mm", ["Usage: mmcrsnapshot Device [[Fileset]:]Snapshot"], 1)
    dev, name = rest[0], rest[1]
    if ":" in name:
        fileset, name = name.split(":", 1)
    return dev, fileset, name


def fileset_of(fs, name):
    for f in fs.get("filesets", []):
        if f["name"] == name:
            return f
    return None


def snapdirs(fs):
    return {".snapshots", fs.get("snapdir", ".snapshots")}


def snapshot_home(fs, fileset):
    """The live directory a snapshot copies: the fileset's junction or the mount point."""
    if fileset:
        return fileset_of(fs, fileset)["path"]
    return fs["mount_point"]


def find_snapshot(spec, args):
    dev, fileset, name = snapshot_args(args)
    for fs in spec["filesystems"]:
        if fs["device"] == os.path.basename(dev):
            for s in fs.get("snapshots", []):
                if s["name"] == name and s.get("fileset", "") == fileset:
                    return fs, s
    return None


def copy_tree(src, dst, skip):
    """A copy of src at dst, keeping symbolic links as links and hard links as links."""
    first = {}

    def copy(s, d):
        st = os.lstat(s)
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in first:
            os.link(first[key], d)
            return d
        if stat.S_ISREG(st.st_mode) and st.st_blocks * 512 < st.st_size:
            # A snapshot keeps a file's holes: cp knows how to copy them.
            subprocess.run(["cp", "-a", "--sparse=always", s, d], check=True)
        elif stat.S_ISREG(st.st_mode):
            shutil.copy2(s, d, follow_symlinks=False)
        else:
            # FIFOs, sockets and devices, which copy2 refuses.
            try:
                os.mknod(d, st.st_mode, st.st_rdev)
            except PermissionError:
                return d  # a device without the right to make one: left out
            shutil.copystat(s, d, follow_symlinks=False)
        first[key] = d
        return d

    shutil.copytree(src, dst, symlinks=True, copy_function=copy,
                    ignore=lambda d, names: [n for n in names if n in skip])


def mmcrsnapshot(spec, args):
    cmd = "mmcrsnapshot"
    dev, fileset, name = snapshot_args(args)
    label = f"{fileset}:{name}" if fileset else name
    with changing() as live:
        fs = _fs(live, dev)
        if fileset:
            f = fileset_of(fs, fileset)
            if f is None:
                fail(cmd, [f"{cmd}: Fileset {fileset} does not exist in file system {dev}.",
                           f"{cmd}: 6027-1639 {BOILERPLATE}"], 1)
            if f.get("path") is None or not f.get("independent", f["id"] == 0):
                fail(cmd, [f"{cmd}: Fileset {fileset} must be an independent, linked "
                           f"fileset to have snapshots.", f"{cmd}: 6027-1639 {BOILERPLATE}"], 1)
        snaps = fs.setdefault("snapshots", [])
        if any(s["name"] == name and s.get("fileset", "") == fileset for s in snaps):
            fail(cmd, [f"{cmd}: 6027-2601 Snapshot name {name} already exists.",
                       f"{cmd}: 6027-1639 {BOILERPLATE}"], 1)
        home = snapshot_home(fs, fileset)
        print(f"Flushing dirty data for snapshot {label}...")
        print("Quiescing all file system operations.")
        copy_tree(home, os.path.join(home, fs.get("snapdir", ".snapshots"), name), snapdirs(fs))
        snap_id = max([fs.get("last_snap_id", 0)] + [s["id"] for s in snaps]) + 1
        fs["last_snap_id"] = snap_id
        snaps.append({"name": name, "id": snap_id, "fileset": fileset, "status": "Valid",
                      "created": time.asctime()})
        print(f"Snapshot {label} created with id {snap_id}.")
    change_live_tree(spec.get("after_snapshot") or {})


def change_live_tree(changes):
    for path, text in (changes.get("write") or {}).items():
        with open(path, "w") as f:
            f.write(text)
    for path in changes.get("remove") or []:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)


def mmdelsnapshot(spec, args):
    cmd = "mmdelsnapshot"
    dev, fileset, name = snapshot_args(args)
    label = f"{fileset}:{name}" if fileset else name
    with changing() as live:
        fs = _fs(live, dev)
        found = find_snapshot(live, args)
        if found is None:
            what = (f"6027-2683 Fileset {fileset} in file system {fs['device']} does not "
                    f"contain snapshot {name}." if fileset else
                    f"6027-2684 File system {fs['device']} does not contain global snapshot "
                    f"{name}.")
            fail(cmd, [f"{cmd}: {what}", f"{cmd}: 6027-1639 {BOILERPLATE}"], 1)
        snap = found[1]
        print(f"Invalidating snapshot files in {label}...")
        print(f"Deleting files in snapshot {label}...")
        where = os.path.join(snapshot_home(fs, fileset), fs.get("snapdir", ".snapshots"), name)
        shutil.rmtree(where, ignore_errors=True)
        fs["snapshots"] = [s for s in fs["snapshots"] if s is not snap]
        print(f" 100.00 % complete on {time.asctime()}")
        print(f"Delete snapshot {label} successful.")


# ---- the policy engine ----------------------------------------------------------------------

UNRESERVED = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
RULE_WORD = re.compile(r"\bRULE\b", re.I)
VALUE_OPTIONS = {"-P", "-I", "-f", "-s", "-S", "-L", "-N", "-g", "-B", "-m", "-n", "-a", "-A",
                 "-M", "-D", "-i", "-r", "--qos", "--scope", "--choice-algorithm"}


def escape(data, keep):
    """RFC 3986 percent encoding as ESCAPE '%<keep>' asks: every byte but a-zA-Z0-9-_.~ and
    the bytes of `keep`."""
    ok = UNRESERVED | set(keep)
    return b"".join(bytes([c]) if c in ok else b"%%%02X" % c for c in data)


def local_time(ns):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns // 10**9)) + \
        ".%06d" % (ns // 1000 % 10**6)


def attribute(name, path, st):
    values = {
        "MODE": lambda: stat.filemode(st.st_mode),
        "NLINK": lambda: st.st_nlink,
        "USER_ID": lambda: st.st_uid,
        "GROUP_ID": lambda: st.st_gid,
        "FILE_SIZE": lambda: st.st_size,
        "KB_ALLOCATED": lambda: st.st_blocks // 2,
        "INODE": lambda: st.st_ino,
        "GENERATION": lambda: 0,
        "MODIFICATION_TIME": lambda: local_time(st.st_mtime_ns),
        "CHANGE_TIME": lambda: local_time(st.st_ctime_ns),
        "ACCESS_TIME": lambda: local_time(st.st_atime_ns),
        "NAME": lambda: os.fsdecode(os.path.basename(path)),
        "PATH_NAME": lambda: os.fsdecode(path),
    }
    if name not in values:
        fail("mmapplypolicy", [f"[E] Error on policy rules: unknown attribute {name}."], 1)
    return str(values[name]())


def mmapplypolicy(spec, args):
    # Long: one pass of the command as IBM documents it (options, policy file, the list it
    # writes, the messages it prints), kept in one piece so it reads beside that documentation.
    cmd = "mmapplypolicy"
    opts, pos = {}, []
    i = 0
    while i < len(args):
        if args[i] in VALUE_OPTIONS:
            opts[args[i]] = args[i + 1]
            i += 2
        else:
            pos.append(args[i])
            i += 1
    if not pos or "-P" not in opts:
        fail(cmd, [f"Usage: {cmd} {{Device|Directory}} [-P PolicyFile] [-I defer] "
                   f"[-f FileListPrefix] [-S SnapshotName] [-s LocalWorkDirectory]"], 1)
    with open(opts["-P"]) as f:
        rules = f.read()
    m = re.search(r"EXTERNAL\s+LIST\s+'([^']*)'", rules, re.I)
    if not m:
        fail(cmd, ["[E] The policy has no EXTERNAL LIST rule the test double could follow."], 1)
    list_name = m.group(1)
    m = re.search(r"ESCAPE\s+'%([^']*)'", rules, re.I)
    keep = m.group(1).encode() if m else None
    attrs = [a.upper() for a in re.findall(r"VARCHAR\s*\(\s*([A-Za-z_]+)\s*\)", rules, re.I)]
    plus = "DIRECTORIES_PLUS" in rules.upper()

    target = pos[0]
    if target.startswith("/"):
        candidates = [fs for fs in spec["filesystems"]
                      if target == fs["mount_point"] or target.startswith(
                          fs["mount_point"].rstrip("/") + "/")]
        if not candidates:
            fail(cmd, [f"[E] {target} is not in a GPFS file system."], 1)
        fs = max(candidates, key=lambda f: len(f["mount_point"]))
        directory = target
    else:
        fs = _fs(spec, target)
        directory = fs["mount_point"]
    root, snap_id = directory, 0
    if "-S" in opts:
        snaps = [s for s in fs.get("snapshots", []) if s["name"] == opts["-S"]]
        snaps.sort(key=lambda s: s.get("fileset", "") != "")  # a global one first
        if not snaps:
            fail(cmd, [f"[E] 6027-2612 Snapshot named {opts['-S']} does not exist."], 1)
        snap = snaps[0]
        home = snapshot_home(fs, snap.get("fileset", ""))
        rel = os.path.relpath(directory, home)
        if rel.startswith(".."):
            fail(cmd, [f"[E] {directory} is not in snapshot {snap['name']}."], 1)
        root = os.path.normpath(os.path.join(home, fs.get("snapdir", ".snapshots"),
                                             snap["name"], rel))
        snap_id = snap["id"]
    if not os.path.isdir(root):
        fail(cmd, [f"[E] Directory {root} does not exist or is not a directory."], 1)

    now = time.strftime("%Y-%m-%d@%H:%M:%S")
    print("[I] GPFS Current Data Pool Utilization in KB and %")
    print("Pool_Name                   KB_Occupied        KB_Total  Percent_Occupied")
    print("system                           524288         1048576      50.000000000%")
    print(f"[I] Loaded policy rules from {opts['-P']}.")
    print(f"Evaluating policy rules with CURRENT_TIMESTAMP = {now} UTC")
    print(f"Parsed {len(RULE_WORD.findall(rules))} policy rules.")

    skip = {os.fsencode(d) for d in snapdirs(fs)}
    omit = {os.fsencode(n) for n in spec.get("scan_omits", [])}
    entries = []
    counts = {"files": 0, "dirs": 0, "other": 0}
    start = os.fsencode(root)
    paths = [start]
    for top, dirnames, filenames in os.walk(start):
        dirnames[:] = [d for d in dirnames if d not in skip]
        paths += [os.path.join(top, n) for n in dirnames + filenames]
    for path in paths:
        if os.path.basename(path) in omit:
            continue
        st = os.lstat(path)
        kind = "files" if stat.S_ISREG(st.st_mode) else \
            "dirs" if stat.S_ISDIR(st.st_mode) else "other"
        counts[kind] += 1
        if not plus and kind != "files":
            continue
        show = " ".join(attribute(a, path, st) for a in attrs).encode()
        shown_path = path
        if keep is not None:
            show, shown_path = escape(show, keep), escape(path, keep)
        line = b"%d 0 %d  %s -- %s\n" % (st.st_ino, snap_id, show, shown_path)
        entries.append((st.st_ino, line))
    print(f"[I] {now} Directory entries scanned: {len(paths)}.")
    print(f"[I] Directories scan: {counts['files']} files, {counts['dirs']} directories, "
          f"{counts['other']} other objects, 0 'skipped' files and/or errors.")
    # The engine sorts its records; inode order shows a reader that no directory order holds.
    entries.sort()
    print(f"[I] {now} Sorting {len(entries)} file list records.")
    if entries:
        with open(f"{opts.get('-f', os.path.join(opts.get('-s', '/tmp'), 'list'))}"
                  f".list.{list_name}", "wb") as f:
            f.writelines(line for _, line in entries)
    print(f"[I] Inodes scan: {counts['files']} files, {counts['dirs']} directories, "
          f"{counts['other']} other objects, 0 'skipped' files and/or errors.")
    print("[I] Summary of Rule Applicability and File Choices:")
    print(" Rule#      Hit_Cnt          KB_Hit          Chosen       KB_Chosen          KB_Ill"
          "     Rule")
    print(f"     0 {len(entries):12d}               0 {len(entries):15d}               0"
          f"               0     RULE 'cairn-all' LIST '{list_name}' DIRECTORIES_PLUS "
          f"SHOW(.) WHERE(.)")
    print("[I] Filesystem objects with no applicable rules: 0.")
    print(f"[I] {now} Policy execution. 0 files dispatched.")
    print("[I] A total of 0 files have been migrated, deleted or processed by an EXTERNAL "
          "EXEC/script;")
    print("        0 'skipped' files and/or errors.")


COMMANDS = {f.__name__: f for f in (mmlscluster, mmgetstate, mmlsfs, mmlsmount, mmdiag, mmdf,
                                     mmlsfileset, mmlssnapshot, mmcrsnapshot, mmdelsnapshot,
                                     mmapplypolicy)}


def main():
    cmd = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    spec = load()
    record(spec, cmd, args)
    failure(cmd, spec, args)
    if cmd not in COMMANDS:
        fail(cmd, [f"{cmd}: not reproduced by the test double"], 2)
    COMMANDS[cmd](spec, [a for a in args if a != "-Y"] if cmd != "mmdiag" else args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
