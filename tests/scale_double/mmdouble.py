#!/usr/bin/env python3
"""TEST DOUBLE of IBM Storage Scale's proprietary mm administration commands (mmlscluster,
mmgetstate, mmlsfs, mmlsmount, mmdiag, mmdf, mmlsfileset, mmlssnapshot). It is not Storage
Scale: it prints, for the `-Y` forms the product runs, output in the documented
colon-delimited format (HEADER lines, percent-escaped values) for a cluster described in a
JSON file, and reproduces the failure modes with their messages and exit statuses.

`bin/` holds one symlink per command name pointing here; the name it is called by selects
the command. The JSON file is named by the environment variable CAIRN_SCALE_DOUBLE:

  {"cluster": {"name": "c1.example.com", "id": "1234"},
   "version": "5.1.9.0 ",
   "failure": null,        # or "daemon_down", "not_in_cluster", "permission_denied", "hang"
   "failing": ["mmlsmount"],   # optional: the commands the failure applies to
   "nodes": [{"number": 1, "name": "n1.example.com", "ip": "10.0.0.1",
              "designation": "quorumManager", "roles": "perfmon", "state": "active"}],
   "filesystems": [{"device": "fs1", "mount_point": "/gpfs/fs1", "block_size": 4194304,
                    "size_kib": 1048576, "free_kib": 524288, "mounted_on": ["n1"],
                    "filesets": [{"name": "root", "id": 0, "path": "/gpfs/fs1"}],
                    "snapshots": [{"name": "s1", "id": 1, "fileset": ""}]}]}

Each failure mode, like the real commands, fails only the commands it affects when
"failing" is absent: a stopped daemon leaves mmlscluster, mmlsfs and mmgetstate working.
"""

import json
import os
import sys
import time

DAEMON_FREE = {"mmlscluster", "mmlsfs", "mmgetstate"}


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
    sys.stderr.write("".join(line + "\n" for line in lines))
    sys.exit(status)


def failure(cmd, spec):
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
                   f"{cmd}: 6027-1639 Command failed. Examine previous error messages to "
                   "determine cause."], 1)
    if mode == "daemon_down":
        if failing is None and cmd in DAEMON_FREE:
            return
        fail(cmd, ["Failed to connect to file system daemon: No such process",
                   f"{cmd}: GPFS is down on this node.",
                   f"{cmd}: Command failed. Examine previous error messages to determine "
                   "cause."], 19)
    if mode == "permission_denied":
        # As a shell reports a root-only script run by another user.
        fail(cmd, [f"/bin/sh: /usr/lpp/mmfs/bin/{cmd}: Permission denied"], 126)


def node(spec, name):
    for n in spec["nodes"]:
        if n["name"] == name or n["name"].split(".")[0] == name:
            return n
    raise SystemExit(f"double: unknown node {name}")


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
    up = sum(1 for n in nodes if n.get("state", "active") == "active")
    quorum = sum(1 for n in nodes if "quorum" in n.get("designation", ""))
    print(header(cmd, "", ["nodeName", "nodeNumber", "state", "quorum", "nodesUp",
                           "totalNodes", "remarks", "cnfsState", "daemonShortName"]))
    local = spec.get("local_node", nodes[0]["name"])
    for n in nodes:
        if "-a" not in args and n["name"] != local:
            continue
        state = n.get("state", "active")
        if spec.get("failure") == "daemon_down" and n["name"] == local:
            state = "down"
        print(row(cmd, "", [n["name"], n["number"], state, f"{quorum}*", up, len(nodes),
                            "quorum node" if "quorum" in n.get("designation", "") else "",
                            "(undefined)", n["name"].split(".")[0]]))


def mmlsfs(spec, args):
    cmd = "mmlsfs"
    print(header(cmd, "", ["deviceName", "fieldName", "data", "remarks"]))
    wanted = args[0] if args else "all"
    for fs in spec["filesystems"]:
        if wanted not in ("all", fs["device"]):
            continue
        dev = fs["device"]
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
        mounted = fs.get("mounted_on", [])
        for name in mounted:
            n = node(spec, name)
            print(row(cmd, "", [fs["device"], fs["device"], spec["cluster"]["name"],
                                len(mounted), n["ip"], n["name"].split(".")[0],
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
        if fs["device"] == dev:
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


COMMANDS = {f.__name__: f for f in (mmlscluster, mmgetstate, mmlsfs, mmlsmount, mmdiag, mmdf,
                                     mmlsfileset, mmlssnapshot)}


def main():
    cmd = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    with open(os.environ["CAIRN_SCALE_DOUBLE"]) as f:
        spec = json.load(f)
    failure(cmd, spec)
    if cmd not in COMMANDS:
        fail(cmd, [f"{cmd}: not reproduced by the test double"], 2)
    COMMANDS[cmd](spec, [a for a in args if a != "-Y"] if cmd != "mmdiag" else args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
