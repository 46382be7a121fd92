"""IBM Storage Scale (GPFS) provider: the cluster a host belongs to, its nodes and their
states, its file systems with where each is mounted, their capacity, filesets and snapshots;
which file system and fileset hold a path; taking and deleting snapshots; listing a tree with
the policy engine (mmapplypolicy) instead of walking it.

It runs the mm administration commands with `-Y` (machine-readable, colon-delimited output)
where they have it and parses them leniently, since columns are added between releases. Runs
inside the agent: standard library only, Python 3.9+.

Where the commands are looked for, in order:
- the directory named by the environment variable CAIRN_MMFS_BIN, if set (and only there:
  this is how a site points at a wrapper directory, and how tests point at a test double);
- /usr/lpp/mmfs/bin, where Storage Scale installs them;
- the directories on PATH.
When CAIRN_MMFS_SUDO is set to 1 and the agent does not run as root, every command runs
through `sudo -n` (which needs a NOPASSWD rule for the mm commands).
"""

import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections import namedtuple
from urllib.parse import unquote, unquote_to_bytes

from app.errors import CairnError

ENV_BIN = "CAIRN_MMFS_BIN"
ENV_SUDO = "CAIRN_MMFS_SUDO"
DEFAULT_BIN = "/usr/lpp/mmfs/bin"
# mmlsfileset and mmdf can hang on a troubled cluster; a probe must come back regardless.
DEFAULT_TIMEOUT = 60
# Taking or deleting a snapshot quiesces the file system, which waits for its busy nodes.
SNAPSHOT_TIMEOUT = 900
PROC_MOUNTS = "/proc/self/mounts"
SNAPDIR = ".snapshots"

COMMANDS = ("mmlscluster", "mmgetstate", "mmlsfs", "mmlsmount", "mmdiag", "mmdf",
            "mmlsfileset", "mmlssnapshot", "mmcrsnapshot", "mmdelsnapshot", "mmapplypolicy")

SUDO_HINT = ("run the agent as root, or set CAIRN_MMFS_SUDO=1 for the agent and add a sudo "
             "rule such as `cairn ALL=(root) NOPASSWD: "
             + ", ".join(f"{DEFAULT_BIN}/{c}" for c in COMMANDS)
             + f"` with `Defaults!{DEFAULT_BIN}/* !requiretty`")


class ScaleError(CairnError):
    """A Storage Scale command failed; `message` says what, `hint` what to do about it, and
    `kind` which of the cases below it is."""
    kind = "failed"

    def __init__(self, message, hint=None, command=None):
        super().__init__(message, hint=hint)
        self.command = command

    def to_dict(self):
        return {"error": self.message, "hint": self.hint, "kind": self.kind,
                "command": self.command}


class DaemonDown(ScaleError):
    kind = "daemon_down"


class NotInCluster(ScaleError):
    kind = "not_in_cluster"


class PermissionDenied(ScaleError):
    kind = "permission_denied"


class CommandTimeout(ScaleError):
    kind = "timeout"


class CommandFailed(ScaleError):
    kind = "failed"


class NodeUnreachable(ScaleError):
    """A command needed another node of the cluster and could not reach it."""
    kind = "node_unreachable"


class SnapshotNotFound(CommandFailed):
    kind = "snapshot_not_found"


class InvalidArgument(ScaleError, ValueError):
    """A request this module refuses before running anything (a relative path, a snapshot
    name the commands would misread)."""
    kind = "invalid"


# ---- finding and running the commands ------------------------------------------------------

def find_bin():
    """The directory holding the mm commands, or None when this host has none."""
    override = os.environ.get(ENV_BIN)
    if override:
        return override if os.path.isfile(os.path.join(override, "mmlscluster")) else None
    if os.path.isfile(os.path.join(DEFAULT_BIN, "mmlscluster")):
        return DEFAULT_BIN
    found = shutil.which("mmlscluster")
    return os.path.dirname(found) if found else None


_NOT_IN_CLUSTER = re.compile(r"6027-1382|does not belong to a GPFS cluster", re.I)
_DAEMON_DOWN = re.compile(
    r"GPFS is down|Failed to connect to file system daemon|not ready to handle commands|"
    r"daemon is not running|GPFS daemon .*not running", re.I)
# mmdsh, which runs a command's parts on other nodes, reports a node it cannot reach with
# 6027-1617 (no node left to run on) or the remote shell's own words.
_UNREACHABLE = re.compile(
    r"6027-1617|6027-1637|no available nodes|No route to host|Connection timed out|"
    r"\bunreachable\b|Host is down", re.I)
_PERMISSION = re.compile(
    r"Permission denied|must be root|root authority|Operation not permitted|"
    r"a password is required|not in the sudoers|not allowed to execute", re.I)
# 6027-2683/6027-2684: mmdelsnapshot of a fileset/global snapshot that is not there;
# 6027-2612: a named snapshot does not exist. "No snapshots in file system" is not an error.
_NO_SNAPSHOT = re.compile(
    r"6027-268[34]|6027-2612|does not contain (?:global )?snapshot|"
    r"\bsnapshot\b[^\n]*\b(?:does not exist|not found)|No such snapshot", re.I)
_BOILERPLATE = re.compile(r"Command failed\.\s+Examine previous error messages", re.I)


def classify(command, returncode, stderr, stdout=""):
    """The error a failed command stands for, from its messages and exit status."""
    text = "\n".join(t for t in (stderr, stdout) if t)
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not _BOILERPLATE.search(ln)]
    detail = lines[0] if lines else f"exit status {returncode}"
    if _NOT_IN_CLUSTER.search(text):
        return NotInCluster(
            "this host is not a member of a Storage Scale cluster",
            hint="add the node to the cluster (mmaddnode) or probe a node that belongs to it",
            command=command)
    if _DAEMON_DOWN.search(text):
        return DaemonDown(
            f"the Storage Scale daemon is not running on this host ({command}: {detail})",
            hint="start it with `mmstartup` (check with `mmgetstate`), or probe another node "
                 "of the cluster",
            command=command)
    if _UNREACHABLE.search(text):
        hits = [ln for ln in lines if _UNREACHABLE.search(ln)] or [detail]
        # mmdsh's numbered summary first, then the first node's own failure.
        hits.sort(key=lambda ln: "6027-" not in ln)
        said = hits[0] if len(hits) == 1 else f"{hits[0]} ({hits[1]})"
        return NodeUnreachable(
            f"{command} could not reach a node of the cluster it needs: {said}",
            hint="check `mmgetstate -a` for nodes in state unknown or down, and the network "
                 "and remote shell (ssh) between this node and them",
            command=command)
    if returncode == 126 or _PERMISSION.search(text):
        return PermissionDenied(
            f"not allowed to run the Storage Scale command {command}: {detail}",
            hint=SUDO_HINT, command=command)
    if _NO_SNAPSHOT.search(text):
        m = _NO_SNAPSHOT.search(text)
        line = next((ln for ln in lines if m.group(0) in ln), detail)
        return SnapshotNotFound(f"{command}: {line}", command=command)
    return CommandFailed(f"{command} failed: {detail}", command=command)


def _kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.communicate()


class Interrupted(ScaleError):
    """is_cancelled() turned true while a command ran; the command was stopped."""
    kind = "canceled"


def _communicate(p, timeout, is_cancelled):
    if is_cancelled is None:
        return p.communicate(timeout=timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
        try:
            return p.communicate(timeout=step)
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                raise
            if is_cancelled():
                raise Interrupted("stopped: the job was canceled") from None


def run(command, *args, bin_dir=None, timeout=DEFAULT_TIMEOUT, is_cancelled=None):
    """The standard output of one mm command; raises a ScaleError on any failure. A timeout
    of None waits as long as the command runs; is_cancelled() turning true stops the
    command (Interrupted)."""
    bin_dir = bin_dir or find_bin()
    if bin_dir is None:
        raise CommandFailed(f"{command}: the Storage Scale commands are not installed",
                            hint=f"install Storage Scale, or set {ENV_BIN}", command=command)
    argv = [os.path.join(bin_dir, command)] + list(args)
    if os.environ.get(ENV_SUDO) == "1" and os.getuid() != 0:
        argv = ["sudo", "-n"] + argv
    # English messages, since failures are told apart by their text.
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, close_fds=True,
                             start_new_session=True)
    except PermissionError as e:
        raise PermissionDenied(f"not allowed to run {argv[0]}: {e.strerror}",
                               hint=SUDO_HINT, command=command) from None
    except OSError as e:
        raise CommandFailed(f"cannot run {argv[0]}: {e.strerror}", command=command) from None
    try:
        out, err = _communicate(p, timeout, is_cancelled)
    except subprocess.TimeoutExpired:
        # The commands are shell scripts that start helpers: kill the whole group.
        _kill_group(p)
        raise CommandTimeout(
            f"{command} {' '.join(args)} did not answer within {timeout:g} seconds",
            hint="the cluster may be busy or a node unreachable; check `mmgetstate -a` and "
                 "`mmhealth node show` on the cluster",
            command=command) from None
    except BaseException:
        # Interrupted (a cancelled backup): leave no scan or snapshot command running.
        _kill_group(p)
        raise
    out = out.decode("utf-8", "replace")
    err = err.decode("utf-8", "replace")
    if p.returncode != 0:
        raise classify(command, p.returncode, err, out)
    return out


# ---- the -Y format ------------------------------------------------------------------------

PREFIX = 6  # command, record type, HEADER or 0, version, reserved, reserved


def decode(value):
    """A -Y value with its %XX escapes decoded; malformed escapes and '+' stay as they are."""
    return unquote(value, errors="replace") if "%" in value else value


def parse_y(text, command=None):
    """{record type: [row]} of -Y output. Each HEADER line names the fields of its record
    type; a row maps those names to decoded values. Values past the header's end are kept
    under "_extra", fields missing at the end are absent, lines of another command (or not
    in -Y form) and rows of a record type without a header are skipped."""
    headers = {}
    records = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) < 3 or (command and parts[0] != command):
            continue
        if parts[-1] == "":
            parts.pop()  # the trailing colon
        rtype = parts[1]
        if parts[2] == "HEADER":
            headers[rtype] = parts[PREFIX:]
            records.setdefault(rtype, [])
            continue
        names = headers.get(rtype)
        if names is None:
            continue
        row = {}
        values = parts[PREFIX:]
        for i, value in enumerate(values):
            if i < len(names) and names[i]:
                row[names[i]] = decode(value)
            else:
                row.setdefault("_extra", []).append(decode(value))
        records.setdefault(rtype, []).append(row)
    return records


def first_values(text, command=None):
    """The value fields of each data line (for output whose header names are not known)."""
    out = []
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) <= PREFIX or (command and parts[0] != command) or parts[2] == "HEADER":
            continue
        out.append([decode(v) for v in parts[PREFIX:]])
    return out


# ---- the cluster --------------------------------------------------------------------------

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


def _filesets(out):
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
            fs["filesets"] = _filesets(y("mmlsfileset", dev))
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


# ---- where a path is ------------------------------------------------------------------------

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
    for f in _filesets(run("mmlsfileset", device, "-Y", bin_dir=bin_dir, timeout=timeout)):
        path = f["path"]
        if path:
            path = os.path.normpath(path)
            if default and mount_point != default and _under(path, default):
                path = mount_point + path[len(default):] if default != "/" else \
                    os.path.normpath(mount_point + "/" + path)
        out.append({"name": f["name"], "path": path, "independent": f["independent"],
                    "status": f["status"]})
    return out


def _absolute(path, what="path"):
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
    path = _absolute(path)
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


# ---- snapshots ------------------------------------------------------------------------------

def _check_name(what, name):
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
    _check_name("snapshot", name)
    if fileset is not None:
        _check_name("fileset", fileset)
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
    _check_name("snapshot", name)
    if fileset is not None:
        _check_name("fileset", fileset)
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


# ---- listing a tree with the policy engine --------------------------------------------------

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
    directory = _absolute(directory, "directory to scan")
    if snapshot is not None:
        _check_name("snapshot", snapshot)
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
