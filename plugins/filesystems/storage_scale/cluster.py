"""The cluster a host belongs to: its nodes and their states, its file systems with where each
is mounted, their capacity, filesets and snapshots, and which node this host is."""

import re

from plugins.filesystems.storage_scale.commands import DEFAULT_TIMEOUT, find_bin, run
from plugins.filesystems.storage_scale.errors import CommandFailed, CommandTimeout, \
    DaemonDown, NodeUnreachable, NotInCluster, PermissionDenied, ScaleError
from plugins.filesystems.storage_scale.yformat import first_values, parse_y


def _int(value):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _short(name):
    return (name or "").split(".")[0].lower()


STATES = {"active", "arbitrating", "down"}


def _version(bin_dir, timeout):
    out = run("mmdiag", "--version", "-Y", bin_dir=bin_dir, timeout=timeout)
    rows = first_values(out, "mmdiag")
    if rows and rows[0]:
        return rows[0][0].strip()
    m = re.search(r'Current GPFS build:\s*"([^"]*)"', out)
    return m.group(1).strip() if m else None


def _nodes(cluster, states):
    by_number = {}
    by_name = {}
    for s in states:
        if s.get("nodeNumber"):
            by_number[s["nodeNumber"]] = s
        by_name[_short(s.get("nodeName"))] = s
    nodes = []
    for n in cluster.get("clusterNode", []):
        s = by_number.get(n.get("nodeNumber")) or by_name.get(_short(n.get("daemonNodeName"))) \
            or by_name.get(_short(n.get("adminNodeName"))) or {}
        state = (s.get("state") or "").strip().lower()
        roles = [r for r in (n.get("otherNodeRolesAlias") or "").split(",") if r]
        nodes.append({
            "number": _int(n.get("nodeNumber")),
            "name": n.get("daemonNodeName") or n.get("adminNodeName"),
            "admin_name": n.get("adminNodeName"),
            "ip": n.get("ipAddress"),
            "designation": n.get("designation") or "",
            "quorum": "quorum" in (n.get("designation") or "").lower(),
            "manager": "manager" in (n.get("designation") or "").lower(),
            "roles": roles,
            "role_letters": n.get("otherNodeRoles") or "",
            "state": state if state in STATES else "unknown",
        })
    return nodes


def _filesystems(fs_rows):
    fss = {}
    for r in fs_rows:
        dev = r.get("deviceName")
        if not dev:
            continue
        fs = fss.setdefault(dev, {"device": dev, "mount_point": None, "block_size": None,
                                  "version": None, "mounted_on": [], "size": None,
                                  "free": None, "inodes": None, "filesets": [],
                                  "snapshots": []})
        field, data, remarks = r.get("fieldName"), r.get("data", ""), r.get("remarks", "")
        if field == "defaultMountPoint":
            fs["mount_point"] = data
        elif field == "blockSize":
            # Given twice when data pools differ; the system pool's is the file system's.
            if fs["block_size"] is None or "system" in remarks:
                fs["block_size"] = _int(data)
        elif field == "filesystemVersion":
            fs["version"] = data
    return fss


def _mounts(mount_rows, nodes):
    names = {}
    for n in nodes:
        for key in (n["name"], n["admin_name"]):
            if key:
                names[_short(key)] = n["name"]
        if n["ip"]:
            names[n["ip"]] = n["name"]
    out = {}
    for r in mount_rows:
        dev = r.get("realDevName") or r.get("localDevName")
        node = r.get("nodeName") or ""
        name = names.get(_short(node)) or names.get(r.get("nodeIP") or "") or node
        entry = {"node": name, "mode": r.get("mountMode") or None}
        if r.get("clusterName"):
            entry["cluster"] = r["clusterName"]
        out.setdefault(dev, []).append(entry)
        if r.get("localDevName") and r.get("localDevName") != dev:
            out.setdefault(r["localDevName"], out[dev])
    return out


def _capacity(fs, out):
    df = parse_y(out, "mmdf")
    total = (df.get("fsTotal") or [{}])[0]
    size, free = _int(total.get("fsSize")), _int(total.get("freeBlocks"))
    fs["size"] = size * 1024 if size is not None else None  # mmdf counts KiB
    fs["free"] = free * 1024 if free is not None else None
    inode = (df.get("inode") or [None])[0]
    if inode:
        fs["inodes"] = {k: _int(inode.get(k)) for k in
                        ("usedInodes", "freeInodes", "allocatedInodes", "maxInodes")}


def parse_filesets(out):
    """The filesets in the output of `mmlsfileset DEVICE -Y`."""
    result = []
    for r in parse_y(out, "mmlsfileset").get("", []):
        path = r.get("path") or ""
        result.append({
            "name": r.get("filesetName"),
            "id": _int(r.get("id")),
            "status": r.get("status"),
            "path": None if path in ("", "--") else path,
            "parent_id": _int(r.get("parentId")),
            "created": r.get("created"),
            "independent": r.get("isInodeSpaceOwner") == "1",
            "comment": r.get("comment") or "",
        })
    return result


def _snapshots(out):
    result = []
    for r in parse_y(out, "mmlssnapshot").get("", []):
        result.append({
            "name": r.get("directory"),
            "id": _int(r.get("snapID")),
            "status": r.get("status"),
            "created": r.get("created"),
            "fileset": r.get("fileset") or None,
        })
    return result


def _local_name(row, cluster_nodes):
    """The cluster's name of the node an `mmgetstate` row (without -a) describes: matched by
    node number, else by short name, since mmgetstate and mmlscluster may name it
    differently (short name, FQDN, admin name)."""
    number = (row.get("nodeNumber") or "").strip()
    shorts = {_short(row.get("nodeName")), _short(row.get("daemonShortName"))} - {""}
    for n in cluster_nodes:
        if number and n.get("nodeNumber") == number:
            return n.get("daemonNodeName") or n.get("adminNodeName") or row.get("nodeName")
    for n in cluster_nodes:
        if shorts & {_short(n.get("daemonNodeName")), _short(n.get("adminNodeName"))}:
            return n.get("daemonNodeName") or n.get("adminNodeName")
    return row.get("nodeName") or None


def local_node(bin_dir=None, timeout=DEFAULT_TIMEOUT):
    """The cluster node this host is: its daemon node name as mmlscluster gives it (the name
    mmgetstate gives when mmlscluster cannot be read or has no such node), or None when the
    host has no Storage Scale commands or mmgetstate names no node. Raises a ScaleError when
    mmgetstate fails."""
    bin_dir = bin_dir or find_bin()
    if bin_dir is None:
        return None
    # Without -a, mmgetstate reports the local node only.
    rows = parse_y(run("mmgetstate", "-Y", bin_dir=bin_dir, timeout=timeout),
                   "mmgetstate").get("", [])
    if not rows:
        return None
    try:
        cluster = parse_y(run("mmlscluster", "-Y", bin_dir=bin_dir, timeout=timeout),
                          "mmlscluster").get("clusterNode", [])
    except ScaleError:
        cluster = []
    return _local_name(rows[0], cluster)


def cluster_info(timeout=DEFAULT_TIMEOUT):
    """The Storage Scale cluster this host belongs to, as a JSON-able dict, or None when the
    host has no Storage Scale commands. Raises a ScaleError (DaemonDown, NotInCluster,
    PermissionDenied, NodeUnreachable, CommandTimeout, CommandFailed) when the cluster cannot
    be read. A failure reading one file system's details is reported in that file system's
    "error".

    "local_node" is the cluster's name of this host's node (None when it cannot be told);
    each file system's "mounted_here" says whether it is mounted on that node (None when the
    node is unknown). Nodes that cannot be reached have the state "unknown"."""
    bin_dir = find_bin()
    if bin_dir is None:
        return None

    def y(command, *args):
        return run(command, *(args + ("-Y",)), bin_dir=bin_dir, timeout=timeout)

    cluster = parse_y(y("mmlscluster"), "mmlscluster")
    summary = (cluster.get("clusterSummary") or [{}])[0]
    states = parse_y(y("mmgetstate", "-a"), "mmgetstate").get("", [])
    nodes = _nodes(cluster, states)
    try:
        here = parse_y(y("mmgetstate"), "mmgetstate").get("", [])
        local = _local_name(here[0], cluster.get("clusterNode", [])) if here else None
    except (DaemonDown, NodeUnreachable, CommandTimeout, CommandFailed):
        local = None
    fss = _filesystems(parse_y(y("mmlsfs", "all"), "mmlsfs").get("", []))
    mounts = _mounts(parse_y(y("mmlsmount", "all", "-L"), "mmlsmount").get("", []), nodes)
    version = _version(bin_dir, timeout)

    for dev, fs in fss.items():
        fs["mounted_on"] = mounts.get(dev, [])
        fs["mounted_here"] = (any(m["node"] == local for m in fs["mounted_on"])
                              if local else None)
        try:
            _capacity(fs, y("mmdf", dev))
            fs["filesets"] = parse_filesets(y("mmlsfileset", dev))
            try:
                snaps = y("mmlssnapshot", dev)
            except CommandFailed as e:
                if "No snapshots" not in e.message:
                    raise
                snaps = ""
            fs["snapshots"] = _snapshots(snaps)
        except ScaleError as e:
            if isinstance(e, (PermissionDenied, NotInCluster)):
                raise
            fs["error"] = {"error": e.message, "hint": e.hint, "kind": e.kind}

    return {
        "cluster_name": summary.get("clusterName"),
        "cluster_id": summary.get("clusterId"),
        "version": version,
        "local_node": local,
        "nodes": nodes,
        "filesystems": sorted(fss.values(), key=lambda f: f["device"]),
    }
