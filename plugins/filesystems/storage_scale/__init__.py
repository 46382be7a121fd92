"""IBM Storage Scale (GPFS) provider: the cluster a host belongs to, its nodes and their
states, its file systems with where each is mounted, their capacity, filesets and snapshots;
which file system and fileset hold a path; taking and deleting snapshots; listing a tree with
the policy engine (mmapplypolicy) instead of walking it.

It runs the mm administration commands with `-Y` (machine-readable, colon-delimited output)
where they have it and parses them leniently, since columns are added between releases. Runs
inside the agent: standard library only, Python 3.9+. Where the commands are looked for, and
how they run through sudo, is in commands.py.

The parts, one module each: errors.py (the error of each case), commands.py (finding and
running the commands, classifying their failures), yformat.py (the -Y format), cluster.py
(cluster_info, local_node), location.py (locate, snapshot_base), snapshots.py
(create_snapshot, delete_snapshot) and policy.py (policy_scan and its list file). Callers use
the names below, from this package.
"""

from plugins.filesystems.storage_scale.cluster import STATES, cluster_info, local_node
from plugins.filesystems.storage_scale.commands import COMMANDS, DEFAULT_BIN, \
    DEFAULT_TIMEOUT, ENV_BIN, ENV_SUDO, SUDO_HINT, classify, find_bin, run
from plugins.filesystems.storage_scale.errors import CommandFailed, CommandTimeout, \
    DaemonDown, Interrupted, InvalidArgument, NodeUnreachable, NotInCluster, \
    PermissionDenied, ScaleError, SnapshotNotFound
from plugins.filesystems.storage_scale.location import PROC_MOUNTS, locate, snapshot_base
from plugins.filesystems.storage_scale.policy import LIST_NAME, SCAN_RULES, SHOW_FIELDS, \
    PolicyList, ScanStat, parse_mode, parse_time_ns, policy_scan, read_policy_list
from plugins.filesystems.storage_scale.snapshots import SNAPDIR, SNAPSHOT_TIMEOUT, \
    create_snapshot, delete_snapshot
from plugins.filesystems.storage_scale.yformat import PREFIX, decode, first_values, parse_y

__all__ = [
    "COMMANDS", "DEFAULT_BIN", "DEFAULT_TIMEOUT", "ENV_BIN", "ENV_SUDO", "LIST_NAME", "PREFIX",
    "PROC_MOUNTS", "SCAN_RULES", "SHOW_FIELDS", "SNAPDIR", "SNAPSHOT_TIMEOUT", "STATES",
    "SUDO_HINT", "CommandFailed", "CommandTimeout", "DaemonDown", "Interrupted",
    "InvalidArgument", "NodeUnreachable", "NotInCluster", "PermissionDenied", "PolicyList",
    "ScaleError", "ScanStat", "SnapshotNotFound", "classify", "cluster_info",
    "create_snapshot", "decode", "delete_snapshot", "find_bin", "first_values", "local_node",
    "locate", "parse_mode", "parse_time_ns", "parse_y", "policy_scan", "read_policy_list",
    "run", "snapshot_base",
]
