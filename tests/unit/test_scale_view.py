"""The console's shaping of a Storage Scale cluster (app/scale_view.py), on plain dicts in the
form cluster_info() gives them."""

import copy

import pytest

from app import scale_view as sv

CLUSTER = {
    "cluster_name": "hpc.example.com", "cluster_id": "16014213318453722105",
    "version": "5.1.9.0",
    "nodes": [
        {"number": 1, "name": "gpfs-1.example.com", "admin_name": "gpfs-1.example.com",
         "ip": "10.0.0.1", "designation": "quorumManager", "quorum": True, "manager": True,
         "roles": ["perfmon"], "role_letters": "", "state": "active"},
        {"number": 2, "name": "gpfs-2.example.com", "admin_name": "gpfs-2-adm.example.com",
         "ip": "10.0.0.2", "designation": "quorum", "quorum": True, "manager": False,
         "roles": [], "role_letters": "", "state": "arbitrating"},
        {"number": 3, "name": "client-3.example.com", "admin_name": "client-3.example.com",
         "ip": "10.0.0.3", "designation": "", "quorum": False, "manager": False,
         "roles": ["perfmon", "ces"], "role_letters": "", "state": "down"},
    ],
    "filesystems": [
        {"device": "fs1", "mount_point": "/gpfs/fs1", "block_size": 4194304,
         "mounted_on": [{"node": "gpfs-1.example.com", "mode": "RW"},
                        {"node": "gpfs-2.example.com", "mode": "RO"}],
         "size": 100 << 30, "free": 25 << 30,
         "inodes": {"usedInodes": 4038, "freeInodes": 496954, "allocatedInodes": 500992,
                    "maxInodes": 1000000},
         "filesets": [{"name": "root"}, {"name": "projects"}], "snapshots": []},
        {"device": "scratch", "mount_point": "/gpfs/scratch", "block_size": 1048576,
         "mounted_on": [{"node": "gpfs-1.example.com", "mode": "RW"},
                        {"node": "remote-9", "mode": "RW", "cluster": "far.example.com"}],
         "size": 100 << 30, "free": 3 << 30, "inodes": None,
         "filesets": [], "snapshots": []},
    ],
}


def cluster(**changes):
    c = copy.deepcopy(CLUSTER)
    c.update(changes)
    return c


# ---- problems ---------------------------------------------------------------------------------

def test_no_storage_scale_and_each_error_kind_say_what_and_what_to_do():
    absent = sv.problem(None, "h1")
    assert absent["kind"] == "absent" and "No Storage Scale on host h1" == absent["title"]
    assert "CAIRN_MMFS_BIN" in absent["hint"]

    down = sv.problem({"error": "the Storage Scale daemon is not running on this host (...)",
                       "hint": "start it with `mmstartup`", "kind": "daemon_down"}, "h1")
    assert down["title"] == "The Storage Scale daemon is not running on host h1"
    assert down["hint"] == "start it with `mmstartup`"
    assert "not running" in down["message"]

    perm = sv.problem({"error": "not allowed", "hint": "sudo rule …", "kind":
                       "permission_denied"}, "h1")
    assert perm["kind"] == "permission_denied" and "may not read" in perm["title"]
    assert perm["hint"] == "sudo rule …"
    assert "not a node" in sv.problem({"error": "x", "kind": "not_in_cluster"}, "h1")["title"]
    assert "cannot reach" in sv.problem({"error": "x", "kind": "node_unreachable"},
                                        "h1")["title"]
    # An agent's error without a kind (an unexpected exception) still reads as a failure.
    odd = sv.problem({"error": "boom", "hint": None}, "h1")
    assert odd["kind"] == "failed" and "could not be read" in odd["title"]
    assert sv.problem(CLUSTER, "h1") is None


# ---- nodes ------------------------------------------------------------------------------------

def test_local_node_from_the_agent_or_by_short_host_name():
    assert sv.local_node(cluster(local_node="gpfs-2.example.com")) == "gpfs-2.example.com"
    # Older agents do not say: the probe's host name is matched by short name, either the
    # daemon or the admin name, case-insensitively.
    assert sv.local_node(CLUSTER, "GPFS-1") == "gpfs-1.example.com"
    assert sv.local_node(CLUSTER, "gpfs-2-adm.other.net") == "gpfs-2.example.com"
    assert sv.local_node(CLUSTER, "elsewhere.example.com") is None
    assert sv.local_node(CLUSTER, None) is None
    assert sv.local_node(cluster(local_node=None), "client-3") == "client-3.example.com"


def test_state_colours_and_node_texts():
    assert [sv.state_colour(n["state"]) for n in CLUSTER["nodes"]] == ["green", "amber", "red"]
    assert sv.state_colour("unknown") == sv.state_colour(None) == "grey"
    assert [sv.designation_text(n) for n in CLUSTER["nodes"]] == [
        "quorum, manager", "quorum", "client"]
    assert sv.roles_text(CLUSTER["nodes"][2]) == "perfmon, ces"
    assert sv.node_counts(CLUSTER["nodes"]) == "3 nodes: 1 active, 1 arbitrating, 1 down"
    assert sv.node_counts([{"state": "unknown"}]) == "1 node: 1 unknown"


# ---- file systems -----------------------------------------------------------------------------

def test_capacity_fraction_and_level():
    fs1, scratch = CLUSTER["filesystems"]
    c = sv.capacity(fs1)
    assert c["used"] == 75 << 30 and c["fraction"] == pytest.approx(0.75)
    assert c["level"] == "normal"
    assert sv.capacity(scratch)["level"] == "full"
    assert sv.capacity({"size": 100, "free": 10})["level"] == "high"
    unknown = sv.capacity({"size": None, "free": None})
    assert unknown["fraction"] is None and unknown["level"] is None
    assert sv.capacity({"size": 0, "free": 0})["fraction"] is None
    assert sv.inodes(fs1) == (4038, 1000000)
    assert sv.inodes(scratch) == (None, None)


def test_mounted_here_prefers_the_agent_then_the_mount_list():
    fs1 = CLUSTER["filesystems"][0]
    assert sv.mounted_here(fs1, "gpfs-2.example.com") is True
    assert sv.mounted_here(fs1, "client-3.example.com") is False
    assert sv.mounted_here(fs1, None) is None
    assert sv.mounted_here(dict(fs1, mounted_here=False), "gpfs-2.example.com") is False


def test_mount_map_matrix_local_column_and_flags():
    mm = sv.mount_map(CLUSTER, "client-3.example.com")
    assert [n["label"] for n in mm["nodes"]] == [
        "gpfs-1", "gpfs-2", "client-3", "remote-9 (far.example.com)"]
    assert mm["nodes"][3]["remote"] and not mm["nodes"][0]["remote"]
    assert mm["local_index"] == 2 and mm["nodes"][2]["local"]
    fs1, scratch = mm["rows"]
    assert fs1["device"] == "fs1"
    assert fs1["cells"] == ["RW", "RO", None, None]
    assert scratch["cells"] == ["RW", None, None, "RW"]
    assert fs1["flags"] == ["not mounted on client-3 (this host)"]
    assert scratch["flags"] == ["not mounted on client-3 (this host)", "97% full"]
    assert sv.flags(CLUSTER["filesystems"][1], "client-3.example.com", fill=False) == [
        "not mounted on client-3 (this host)"]
    # Mounted on the local node: nothing to flag about fs1.
    assert sv.mount_map(CLUSTER, "gpfs-1.example.com")["rows"][0]["flags"] == []
    assert sv.mount_map(CLUSTER, None)["local_index"] is None


def test_flags_for_unreadable_and_unmounted_file_systems():
    fs = {"device": "fs9", "mounted_on": [], "size": None, "free": None,
          "error": {"error": "mmdf fs9 failed: disk down", "hint": None, "kind": "failed"}}
    assert sv.flags(fs, "gpfs-1") == ["could not be read: mmdf fs9 failed: disk down",
                                      "not mounted on any node"]
    told = {"device": "fs1", "mounted_on": [{"node": "gpfs-1"}], "mounted_here": False}
    assert sv.flags(told, None) == ["not mounted on this host's node"]
    # A cell without a mode from the cluster still shows the mount.
    c = cluster(filesystems=[{"device": "fs1", "mounted_on": [{"node": "gpfs-1.example.com",
                                                                "mode": None}]}])
    assert sv.mount_map(c, None)["rows"][0]["cells"][0] == "yes"


# ---- the disk pool wizard ---------------------------------------------------------------------

HOST_FS = [
    {"mount_point": "/", "type": "ext4", "class": "local", "device": "/dev/sda1",
     "size": 1 << 36, "free": 1 << 35, "read_only": False},
    {"mount_point": "/gpfs/fs1", "type": "gpfs", "class": "parallel", "device": "fs1",
     "size": 100 << 30, "free": 25 << 30, "read_only": False},
]


def test_mark_volumes_marks_mounted_gpfs_and_adds_the_missing_ones():
    rows = sv.mark_volumes(HOST_FS, cluster(local_node="gpfs-2.example.com"))
    assert [r["mount_point"] for r in rows] == ["/", "/gpfs/fs1", "/gpfs/scratch"]
    root, fs1, scratch = rows
    assert "gpfs" not in root and root["mounted"] is True
    assert fs1["gpfs"] == {"device": "fs1", "cluster": "hpc.example.com",
                           "mounted_here": True,
                           "mounted_on": ["gpfs-1.example.com", "gpfs-2.example.com"],
                           "local_node": "gpfs-2.example.com"}
    assert fs1["mounted"] is True and fs1["size"] == 100 << 30
    assert scratch["mounted"] is False and scratch["type"] == "gpfs"
    assert scratch["class"] == "parallel" and scratch["size"] == 100 << 30
    assert scratch["gpfs"]["mounted_here"] is False
    assert "gpfs" not in HOST_FS[1] and "mounted" not in HOST_FS[0], "input unchanged"


def test_mark_volumes_matches_by_device_when_mounted_elsewhere():
    moved = [dict(HOST_FS[1], mount_point="/mnt/fs1")]
    rows = sv.mark_volumes(moved, cluster(local_node="client-3.example.com"))
    # The kernel has fs1 mounted at /mnt/fs1 although the cluster does not list this node.
    assert [r["mount_point"] for r in rows] == ["/gpfs/scratch", "/mnt/fs1"]
    assert rows[1]["gpfs"]["device"] == "fs1" and rows[1]["gpfs"]["mounted_here"] is True
    assert rows[0]["gpfs"]["mounted_here"] is False


def test_mark_volumes_leaves_the_rows_alone_without_a_readable_cluster():
    for scale in (None, {"error": "down", "hint": "mmstartup", "kind": "daemon_down"}):
        rows = sv.mark_volumes(HOST_FS, scale)
        assert [r.get("gpfs") for r in rows] == [None, None]
        assert all(r["mounted"] for r in rows)


def test_wizard_texts_and_the_warning_for_an_unmounted_gpfs():
    rows = sv.mark_volumes(HOST_FS, cluster(local_node="gpfs-2.example.com"))
    root, fs1, scratch = rows
    assert sv.gpfs_type_text(fs1) == "GPFS fs1 — Storage Scale"
    assert sv.gpfs_type_text(root) is None
    assert sv.mounted_text(root) == "yes"
    assert sv.mounted_text(dict(root, read_only=True)) == "yes, read-only"
    assert sv.mounted_text(dict(root, error="Permission denied")) == \
        "unavailable: Permission denied"
    assert sv.mounted_text(scratch) == "no — not mounted on node gpfs-2"
    assert sv.volume_warning(root, "h1") is None
    assert sv.volume_warning(fs1, "h1") is None
    assert sv.volume_warning(scratch, "h1") == (
        "scratch is not mounted on gpfs-2 (the storage server's node): mount it there "
        "(mmmount scratch -N gpfs-2) before using it for backups.")

    # The storage server's node is not known: the host is named instead.
    unknown = sv.mark_volumes([], CLUSTER)
    assert sv.mounted_text(unknown[0]) == "no"
    assert "not mounted on host h1" in sv.volume_warning(unknown[0], "h1")
    # The cluster lists it mounted on the node, the mount table does not have it.
    here = sv.mark_volumes([], cluster(local_node="gpfs-1.example.com"))
    assert sv.mounted_text(here[0]) == "yes (per Storage Scale)"
    assert "no entry at /gpfs/fs1" in sv.mounted_note(here[0])
    assert sv.volume_warning(here[0], "h1") is None
    assert sv.mounted_note(fs1) is None and sv.mounted_note(scratch) is None


# ---- storage servers on the cluster's file systems ---------------------------------------------

HOSTS = [{"name": "media-1", "address": "gpfs-1.example.com"},
         {"name": "media-2", "address": "10.9.9.9", "data_address": "10.0.0.2"},
         {"name": "client-3", "address": None},
         {"name": "here", "address": None, "kind": "local"},
         {"name": "elsewhere", "address": "backup.example.org"}]
POOLS = [{"name": "dp1", "server": "ss1", "host": "media-1",
          "volumes": ["/gpfs/fs1/cairn/media-1"]},
         {"name": "dp2", "server": "ss2", "host": "media-2",
          "volumes": ["/gpfs/scratch/cairn/media-2", "/gpfs/fs1/cairn/media-2"]},
         {"name": "dp3", "server": "ss3", "host": "client-3",
          "volumes": ["/gpfs/fs1/cairn/client-3", "/gpfs/fs1/cairn/client-3b"]},
         {"name": "dp4", "server": "ss4", "host": "here", "volumes": ["/gpfs/scratch/x"]},
         {"name": "dp5", "server": "ss5", "host": "elsewhere", "volumes": ["/gpfs/fs1/e"]},
         {"name": "dp6", "server": "ss6", "host": "media-1", "volumes": ["/backup"]}]


def test_a_registered_host_is_matched_to_its_node():
    c = cluster()
    assert sv.host_node(c, HOSTS[0]) == "gpfs-1.example.com"       # by its address
    assert sv.host_node(c, HOSTS[1]) == "gpfs-2.example.com"       # by its data address (IP)
    assert sv.host_node(c, HOSTS[2]) == "client-3.example.com"     # by its name
    assert sv.host_node(c, HOSTS[4]) is None
    assert sv.host_node(c, HOSTS[3]) is None
    assert sv.host_node(c, HOSTS[3], probed=("here", "client-3.example.com")) == \
        "client-3.example.com"
    assert sv.host_node(dict(c, local_node="gpfs-2.example.com"), HOSTS[3],
                        probed=("here", "whatever")) == "gpfs-2.example.com"


def test_members_are_the_pools_on_each_file_system_with_their_node():
    found = sv.members(cluster(), POOLS, HOSTS, probed=("here", "gpfs-2.example.com"))
    assert [(f["device"], f["pool"], f["node"], f["volume"]) for f in found] == [
        ("fs1", "dp1", "gpfs-1.example.com", "/gpfs/fs1/cairn/media-1"),
        ("scratch", "dp2", "gpfs-2.example.com", "/gpfs/scratch/cairn/media-2"),
        ("fs1", "dp2", "gpfs-2.example.com", "/gpfs/fs1/cairn/media-2"),
        ("fs1", "dp3", "client-3.example.com", "/gpfs/fs1/cairn/client-3"),
        ("scratch", "dp4", "gpfs-2.example.com", "/gpfs/scratch/x"),
        ("fs1", "dp5", None, "/gpfs/fs1/e")]


def test_the_mount_map_flags_a_storage_servers_node_without_its_file_system():
    c = cluster()
    local = "gpfs-2.example.com"
    found = sv.members(c, POOLS, HOSTS, probed=("here", local))
    mm = sv.mount_map(c, local, found)
    fs1, scratch = mm["rows"]
    assert fs1["flags"] == ["not mounted on client-3, the node of host client-3, where storage "
                            "server ss3 writes disk pool dp3"]
    assert fs1["members"] == {
        0: ["host media-1: storage server ss1, disk pool dp1 (/gpfs/fs1/cairn/media-1)"],
        1: ["host media-2: storage server ss2, disk pool dp2 (/gpfs/fs1/cairn/media-2)"],
        2: ["host client-3: storage server ss3, disk pool dp3 (/gpfs/fs1/cairn/client-3)"]}
    assert fs1["unmatched"] == ("host elsewhere has a disk pool on fs1 but is not matched to "
                                "a node of the cluster by its name or address")
    # this host's node writes to scratch without it: named once, with the pools, not twice
    assert scratch["flags"] == [
        "not mounted on gpfs-2, the node of host media-2, where storage server ss2 writes "
        "disk pool dp2",
        "not mounted on gpfs-2, the node of host here, where storage server ss4 writes disk "
        "pool dp4",
        "97% full"]
    assert scratch["unmatched"] is None
    # without storage servers, as before
    plain = sv.mount_map(c, local)
    assert plain["rows"][1]["flags"] == ["not mounted on gpfs-2 (this host)", "97% full"]
    assert plain["rows"][0]["members"] == {} and plain["rows"][0]["unmatched"] is None
    assert sv.flags(c["filesystems"][0], local, found=found) == fs1["flags"]
