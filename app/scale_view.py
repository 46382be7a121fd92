"""How the console shows a Storage Scale (GPFS) cluster, without Qt: what went wrong reading
it, which node the probed host is, capacity fractions, the mount map of file systems by node,
the flags worth an administrator's attention, and the disk pool wizard's view of a host's
file systems marked with the cluster's GPFS file systems.

The input is the "storage_scale" part of a host's probe (plugins/filesystems/storage_scale/
cluster_info(), or its error dict, or None). Keys added over time ("local_node",
"mounted_here", node state "unknown") are optional here, so an older agent still shows."""

#: node states (mmgetstate) to the colour the console shows them in
STATE_COLOURS = {"active": "green", "arbitrating": "amber", "down": "red"}
UNKNOWN_COLOUR = "grey"

#: used fractions from which a file system shows as filling up, and as full
HIGH_FILL, FULL_FILL = 0.85, 0.95

_TITLES = {
    "daemon_down": "The Storage Scale daemon is not running on host {host}",
    "not_in_cluster": "Host {host} is not a node of a Storage Scale cluster",
    "permission_denied": "Host {host} may not read the Storage Scale cluster",
    "timeout": "The Storage Scale cluster did not answer on host {host}",
    "node_unreachable": "Host {host} cannot reach the other nodes of its Storage Scale "
                        "cluster",
}


def short(name):
    """A node's name without its domain, as admins type it (mmmount -N gpfs-2)."""
    return (name or "").split(".")[0]


def _key(name):
    return short(name).lower()


# ---- what went wrong ---------------------------------------------------------------------------

def problem(scale, host):
    """Why the cluster cannot be shown, as {"kind", "title", "message", "hint"}, or None when
    `scale` is a readable cluster."""
    if scale is None:
        return {"kind": "absent",
                "title": f"No Storage Scale on host {host}",
                "message": "The Storage Scale commands (mmlscluster, mmgetstate, …) are not "
                           "installed on this host.",
                "hint": "Choose a host that is a node of the cluster. If the commands are "
                        "installed elsewhere than /usr/lpp/mmfs/bin, name their directory in "
                        "the host's agent environment (its properties, or `cairn host set "
                        f"{host} agent_env CAIRN_MMFS_BIN=DIR`)."}
    if not isinstance(scale, dict):
        return {"kind": "failed", "title": f"The cluster could not be read on host {host}",
                "message": f"unexpected answer from the host's agent: {scale!r}", "hint": None}
    if scale.get("error"):
        kind = scale.get("kind") or "failed"
        title = _TITLES.get(kind, "The Storage Scale cluster could not be read on host {host}")
        return {"kind": kind, "title": title.format(host=host),
                "message": scale["error"], "hint": scale.get("hint")}
    return None


# ---- nodes -------------------------------------------------------------------------------------

def local_node(scale, hostname=None):
    """The cluster's name of the probed host's node: the agent's "local_node" when it says,
    else the node whose short name is the host name's; None when not known."""
    nodes = scale.get("nodes") or []
    named = scale.get("local_node")
    if named:
        for n in nodes:
            if named in (n.get("name"), n.get("admin_name")):
                return n.get("name")
        return named
    want = _key(hostname)
    if not want:
        return None
    for n in nodes:
        if want in (_key(n.get("name")), _key(n.get("admin_name"))):
            return n.get("name")
    return None


def state_colour(state):
    return STATE_COLOURS.get((state or "").lower(), UNKNOWN_COLOUR)


def designation_text(node):
    parts = [p for p, on in (("quorum", node.get("quorum")), ("manager", node.get("manager")))
             if on]
    return ", ".join(parts) if parts else "client"


def roles_text(node):
    return ", ".join(node.get("roles") or [])


def node_counts(nodes):
    """'3 nodes: 1 active, 1 arbitrating, 1 down' (states in a fixed order)."""
    counts = {}
    for n in nodes:
        s = n.get("state") or "unknown"
        counts[s] = counts.get(s, 0) + 1
    order = ["active", "arbitrating", "down", "unknown"]
    order += sorted(s for s in counts if s not in order)
    parts = [f"{counts[s]} {s}" for s in order if counts.get(s)]
    noun = "node" if len(nodes) == 1 else "nodes"
    return f"{len(nodes)} {noun}" + (": " + ", ".join(parts) if parts else "")


# ---- file systems ------------------------------------------------------------------------------

def mounted_here(fs, local):
    """Whether `fs` is mounted on the local node: the agent's "mounted_here" when it says,
    else from where the cluster reports it mounted; None when the local node is unknown."""
    if fs.get("mounted_here") is not None:
        return bool(fs["mounted_here"])
    if not local:
        return None
    return any(_key(m.get("node")) == _key(local) for m in fs.get("mounted_on") or [])


def capacity(fs):
    """{"size", "free", "used", "fraction", "level"}; fraction (used/size, 0..1) and level
    ("normal", "high", "full") are None when the size is not known."""
    size, free = fs.get("size"), fs.get("free")
    if not size or free is None:
        return {"size": size, "free": free, "used": None, "fraction": None, "level": None}
    used = max(0, size - free)
    fraction = min(1.0, used / size)
    level = "full" if fraction >= FULL_FILL else "high" if fraction >= HIGH_FILL else "normal"
    return {"size": size, "free": free, "used": used, "fraction": fraction, "level": level}


def inodes(fs):
    """(used, maximum) inodes; either is None when not known."""
    i = fs.get("inodes") or {}
    return i.get("usedInodes"), i.get("maxInodes")


def flags(fs, local, fill=True, found=None):
    """What an administrator should look at about one file system, as short texts; `fill`
    False leaves out its fill level (for a place that shows the capacity already). found
    (members()): nodes of storage servers writing to it that have not mounted it are named
    (member_flags), the local one among them in place of the plain "not mounted" text."""
    out = []
    err = fs.get("error")
    if err:
        out.append("could not be read: " + (err.get("error") if isinstance(err, dict)
                                            else str(err)))
    writers = member_flags(fs, found)
    if not fs.get("mounted_on"):
        out.append("not mounted on any node")
    elif mounted_here(fs, local) is False and not any(
            f.startswith(f"not mounted on {short(local)},") for f in writers if local):
        out.append(f"not mounted on {short(local)} (this host)" if local
                   else "not mounted on this host's node")
    out += writers
    cap = capacity(fs)
    if fill and cap["level"] in ("high", "full"):
        out.append(f"{cap['fraction'] * 100:.0f}% full")
    return out


# ---- storage servers on the cluster's file systems ----------------------------------------------

def host_node(scale, host, probed=None):
    """The cluster's name of a registered host's node (a dict as host_list gives it), or
    None: for the probed host (probed: (host name, its probe's hostname)) as local_node
    finds it, for another by its name, address or data address against the nodes' names
    and IP addresses."""
    if probed and host.get("name") == probed[0]:
        return local_node(scale, probed[1])
    names = [host.get(k) for k in ("name", "address", "data_address") if host.get(k)]
    for n in scale.get("nodes") or []:
        for want in names:
            if want == n.get("ip") or _key(want) in (_key(n.get("name")),
                                                     _key(n.get("admin_name"))):
                return n.get("name")
    return None


def members(scale, pools, hosts, probed=None):
    """The disk pools whose volumes are on the cluster's file systems, with the node of
    their storage server's host: [{"device", "pool", "server", "host", "volume", "node"}]
    (node None when the host is not matched to a node). pools: as disk_pools gives them;
    hosts: as host_list gives them."""
    by_name = {h["name"]: h for h in hosts or []}
    out = []
    for pool in pools or []:
        host = by_name.get(pool.get("host")) or {"name": pool.get("host")}
        seen = set()
        for vol in pool.get("volumes") or []:
            fs = mount_of(vol, scale.get("filesystems"))
            if fs is None or fs.get("device") in seen:
                continue
            seen.add(fs.get("device"))
            out.append({"device": fs.get("device"), "pool": pool["name"],
                        "server": pool.get("server"), "host": host["name"],
                        "volume": vol, "node": host_node(scale, host, probed)})
    return out


def member_flags(fs, found):
    """What is wrong for the storage servers writing to `fs`: a host whose node has not
    mounted it. found: members()."""
    mounted = {_key(m.get("node")) for m in fs.get("mounted_on") or []}
    out = []
    for m in found or []:
        if m["device"] != fs.get("device") or not m["node"] or _key(m["node"]) in mounted:
            continue
        text = (f"not mounted on {short(m['node'])}, the node of host {m['host']}, where "
                f"storage server {m['server']} writes disk pool {m['pool']}")
        if text not in out:
            out.append(text)
    return out


def unmatched_text(fs, found):
    """The storage servers writing to `fs` whose host is not matched to a node, as one
    text, or None."""
    hosts = sorted({m["host"] for m in found or []
                    if m["device"] == fs.get("device") and not m["node"]})
    if not hosts:
        return None
    if len(hosts) == 1:
        return (f"host {hosts[0]} has a disk pool on {fs.get('device')} but is not matched "
                "to a node of the cluster by its name or address")
    return (f"hosts {', '.join(hosts)} have disk pools on {fs.get('device')} but are not "
            "matched to nodes of the cluster by their names or addresses")


def mount_map(scale, local, found=None):
    """File systems by nodes: {"nodes": [{"name", "label", "local", "state", "remote"}],
    "local_index": column of the local node or None, "rows": [{"device", "mount_point",
    "cells": [mode or None per node], "flags": [...], "members": {column: [texts]},
    "unmatched": text or None}]}. A cell holds the mount mode ("RW", "RO", or "yes" when the
    cluster did not say); nodes of other clusters that mount a file system come after the
    cluster's own. found (members()): the storage servers writing to each file system;
    "members" says per node column which of them write there, and a node that has not
    mounted the file system although one does is flagged."""
    nodes = [{"name": n.get("name"), "label": short(n.get("name")),
              "local": bool(local) and _key(n.get("name")) == _key(local),
              "state": n.get("state") or "unknown", "remote": False}
             for n in scale.get("nodes") or []]
    index = {_key(n["name"]): i for i, n in enumerate(nodes)}
    for fs in scale.get("filesystems") or []:
        for m in fs.get("mounted_on") or []:
            k = _key(m.get("node"))
            if k and k not in index:
                index[k] = len(nodes)
                label = short(m.get("node"))
                if m.get("cluster"):
                    label += f" ({m['cluster']})"
                nodes.append({"name": m.get("node"), "label": label, "local": False,
                              "state": "unknown", "remote": True})
    rows = []
    for fs in scale.get("filesystems") or []:
        cells = [None] * len(nodes)
        for m in fs.get("mounted_on") or []:
            i = index.get(_key(m.get("node")))
            if i is not None:
                cells[i] = m["mode"].upper() if m.get("mode") else "yes"
        cols = {}
        for m in found or []:
            i = index.get(_key(m["node"])) if m["node"] else None
            if m["device"] == fs.get("device") and i is not None:
                text = (f"host {m['host']}: storage server {m['server']}, disk pool "
                        f"{m['pool']} ({m['volume']})")
                cols.setdefault(i, []).append(text)
        rows.append({"device": fs.get("device"), "mount_point": fs.get("mount_point"),
                     "cells": cells, "flags": flags(fs, local, found=found),
                     "members": cols, "unmatched": unmatched_text(fs, found)})
    local_index = next((i for i, n in enumerate(nodes) if n["local"]), None)
    return {"nodes": nodes, "local_index": local_index, "rows": rows}


# ---- the disk pool wizard ----------------------------------------------------------------------

def mount_of(path, filesystems):
    """The file system (a row of mark_volumes or of a host's mount table) holding path: the
    one with the longest mount point above it, or None."""
    best = None
    for fs in filesystems or []:
        mnt = fs.get("mount_point")
        if mnt and (path == mnt or mnt == "/" or path.startswith(mnt.rstrip("/") + "/")):
            if best is None or len(mnt) > len(best["mount_point"]):
                best = fs
    return best


def mark_volumes(filesystems, scale, hostname=None):
    """The host's file systems (its mount table, as host_volumes gives them) with the
    cluster's GPFS file systems marked: a row at a GPFS file system's mount point (or of
    type gpfs with its device) gets "gpfs": {"device", "cluster", "mounted_here",
    "mounted_on", "local_node"}; a GPFS file system missing from the mount table is added as
    a row with "mounted": False so the admin sees it. New dicts; the input is not changed."""
    rows = [dict(fs, mounted=fs.get("mounted", True)) for fs in filesystems or []]
    if problem(scale, None) is not None:
        return rows
    local = local_node(scale, hostname)
    for g in scale.get("filesystems") or []:
        dev, mnt = g.get("device"), g.get("mount_point")
        info = {"device": dev, "cluster": scale.get("cluster_name"),
                "mounted_here": mounted_here(g, local),
                "mounted_on": [m.get("node") for m in g.get("mounted_on") or []],
                "local_node": local}
        row = next((r for r in rows if r.get("type") == "gpfs"
                    and r.get("device") in (dev, f"/dev/{dev}")), None) \
            or next((r for r in rows if mnt and r.get("mount_point") == mnt), None)
        if row is not None:
            if row.get("type") == "gpfs" and row["mounted"]:
                # The host's kernel has it mounted: that settles it whatever the node.
                info["mounted_here"] = True
            row["gpfs"] = info
        elif mnt:
            rows.append({"mount_point": mnt, "type": "gpfs", "class": "parallel",
                         "device": dev, "size": g.get("size"), "free": g.get("free"),
                         "read_only": False, "mounted": False, "gpfs": info})
    rows.sort(key=lambda r: r.get("mount_point") or "")
    return rows


def gpfs_type_text(fs):
    """'GPFS fs1 — Storage Scale' for a marked row, else None."""
    g = fs.get("gpfs") if fs else None
    return f"GPFS {g['device']} — Storage Scale" if g else None


def mounted_text(fs):
    """The wizard's Mounted column for one file system row."""
    if fs.get("error"):
        return f"unavailable: {fs['error']}"
    if fs.get("mounted", True):
        return "yes, read-only" if fs.get("read_only") else "yes"
    g = fs.get("gpfs") or {}
    node = short(g.get("local_node"))
    if g.get("mounted_here") is False and node:
        return f"no — not mounted on node {node}"
    if g.get("mounted_here"):
        return "yes (per Storage Scale)"
    return "no"


def mounted_note(fs):
    """Why a GPFS row reads as it does when the cluster and the host's mount table disagree
    (the cluster lists it mounted on the node, the mount table does not have it), or None."""
    g = (fs or {}).get("gpfs") or {}
    if fs and not fs.get("mounted", True) and g.get("mounted_here"):
        return (f"Storage Scale reports {g['device']} mounted on node "
                f"{short(g.get('local_node'))}, but the host's mount table has no entry at "
                f"{fs['mount_point']}: the agent may see another mount namespace.")
    return None


def volume_warning(fs, host):
    """Why a volume on `fs` (a wizard row) may not be usable yet although it can be chosen:
    its GPFS file system is not mounted on the storage server's node. None when fine."""
    g = (fs or {}).get("gpfs")
    if not g or fs.get("mounted", True) or g.get("mounted_here"):
        return None
    dev, node = g["device"], short(g.get("local_node"))
    if node:
        return (f"{dev} is not mounted on {node} (the storage server's node): mount it "
                f"there (mmmount {dev} -N {node}) before using it for backups.")
    return (f"{dev} is not mounted on host {host} (the storage server's host): mount it "
            f"there (mmmount {dev}) before using it for backups.")
