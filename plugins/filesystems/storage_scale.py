"""IBM Storage Scale (GPFS) provider: the cluster a host belongs to, its nodes and their
states, its file systems with where each is mounted, their capacity, filesets and snapshots.

It runs the mm administration commands with `-Y` (machine-readable, colon-delimited output)
and parses them leniently, since columns are added between releases. Runs inside the agent:
standard library only, Python 3.9+.

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
import subprocess
from urllib.parse import unquote

ENV_BIN = "CAIRN_MMFS_BIN"
ENV_SUDO = "CAIRN_MMFS_SUDO"
DEFAULT_BIN = "/usr/lpp/mmfs/bin"
# mmlsfileset and mmdf can hang on a troubled cluster; a probe must come back regardless.
DEFAULT_TIMEOUT = 60

COMMANDS = ("mmlscluster", "mmgetstate", "mmlsfs", "mmlsmount", "mmdiag", "mmdf",
            "mmlsfileset", "mmlssnapshot")

SUDO_HINT = ("run the agent as root, or set CAIRN_MMFS_SUDO=1 for the agent and add a sudo "
             "rule such as `cairn ALL=(root) NOPASSWD: /usr/lpp/mmfs/bin/mmlscluster, "
             "/usr/lpp/mmfs/bin/mmgetstate, /usr/lpp/mmfs/bin/mmlsfs, "
             "/usr/lpp/mmfs/bin/mmlsmount, /usr/lpp/mmfs/bin/mmdiag, /usr/lpp/mmfs/bin/mmdf, "
             "/usr/lpp/mmfs/bin/mmlsfileset, /usr/lpp/mmfs/bin/mmlssnapshot` "
             "with `Defaults!/usr/lpp/mmfs/bin/* !requiretty`")


class ScaleError(Exception):
    """A Storage Scale command failed; `message` says what, `hint` what to do about it."""
    kind = "failed"

    def __init__(self, message, hint=None, command=None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.command = command

    def __str__(self):
        return self.message if not self.hint else f"{self.message}\n  {self.hint}"

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
_PERMISSION = re.compile(
    r"Permission denied|must be root|root authority|Operation not permitted|"
    r"a password is required|not in the sudoers|not allowed to execute", re.I)
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
    if returncode == 126 or _PERMISSION.search(text):
        return PermissionDenied(
            f"not allowed to run the Storage Scale command {command}: {detail}",
            hint=SUDO_HINT, command=command)
    return CommandFailed(f"{command} failed: {detail}", command=command)


def run(command, *args, bin_dir=None, timeout=DEFAULT_TIMEOUT):
    """The standard output of one mm command; raises a ScaleError on any failure."""
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
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The commands are shell scripts that start helpers: kill the whole group.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.communicate()
        raise CommandTimeout(
            f"{command} {' '.join(args)} did not answer within {timeout:g} seconds",
            hint="the cluster may be busy or a node unreachable; check `mmgetstate -a` and "
                 "`mmhealth node show` on the cluster",
            command=command) from None
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


def cluster_info(timeout=DEFAULT_TIMEOUT):
    """The Storage Scale cluster this host belongs to, as a JSON-able dict, or None when the
    host has no Storage Scale commands. Raises a ScaleError (DaemonDown, NotInCluster,
    PermissionDenied, CommandTimeout, CommandFailed) when the cluster cannot be read. A
    failure reading one file system's details is reported in that file system's "error"."""
    bin_dir = find_bin()
    if bin_dir is None:
        return None

    def y(command, *args):
        return run(command, *(args + ("-Y",)), bin_dir=bin_dir, timeout=timeout)

    cluster = parse_y(y("mmlscluster"), "mmlscluster")
    summary = (cluster.get("clusterSummary") or [{}])[0]
    states = parse_y(y("mmgetstate", "-a"), "mmgetstate").get("", [])
    nodes = _nodes(cluster, states)
    fss = _filesystems(parse_y(y("mmlsfs", "all"), "mmlsfs").get("", []))
    mounts = _mounts(parse_y(y("mmlsmount", "all", "-L"), "mmlsmount").get("", []), nodes)
    version = _version(bin_dir, timeout)

    for dev, fs in fss.items():
        fs["mounted_on"] = mounts.get(dev, [])
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
        "nodes": nodes,
        "filesystems": sorted(fss.values(), key=lambda f: f["device"]),
    }
