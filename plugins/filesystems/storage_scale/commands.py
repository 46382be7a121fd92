"""Finding and running the Storage Scale mm administration commands, and telling their failures
apart by their messages and exit status.

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
import time

from plugins.filesystems.storage_scale.errors import CommandFailed, CommandTimeout, \
    DaemonDown, Interrupted, NodeUnreachable, NotInCluster, PermissionDenied, SnapshotNotFound

ENV_BIN = "CAIRN_MMFS_BIN"
ENV_SUDO = "CAIRN_MMFS_SUDO"
DEFAULT_BIN = "/usr/lpp/mmfs/bin"
# mmlsfileset and mmdf can hang on a troubled cluster; a probe must come back regardless.
DEFAULT_TIMEOUT = 60

COMMANDS = ("mmlscluster", "mmgetstate", "mmlsfs", "mmlsmount", "mmdiag", "mmdf",
            "mmlsfileset", "mmlssnapshot", "mmcrsnapshot", "mmdelsnapshot", "mmapplypolicy")

SUDO_HINT = ("run the agent as root, or set CAIRN_MMFS_SUDO=1 for the agent and add a sudo "
             "rule such as `cairn ALL=(root) NOPASSWD: "
             + ", ".join(f"{DEFAULT_BIN}/{c}" for c in COMMANDS)
             + f"` with `Defaults!{DEFAULT_BIN}/* !requiretty`")


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
