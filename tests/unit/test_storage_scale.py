"""The Storage Scale provider: its -Y parser on literal output, and cluster_info() against the
test double of the mm commands (tests/scale_double) for a healthy cluster and each failure."""

import json
import time
from pathlib import Path

import pytest

from plugins.filesystems import storage_scale as ss
from plugins.filesystems.storage_scale.cluster import _local_name

DOUBLE_BIN = Path(__file__).resolve().parent.parent / "scale_double" / "bin"

CLUSTER = {
    "cluster": {"name": "hpc.example.com", "id": "16014213318453722105"},
    "version": "5.1.9.0 ",
    "nodes": [
        {"number": 1, "name": "gpfs-1.example.com", "ip": "10.0.0.1",
         "designation": "quorumManager", "roles": "perfmon", "state": "active"},
        {"number": 2, "name": "gpfs-2.example.com", "ip": "10.0.0.2",
         "designation": "quorum", "state": "arbitrating"},
        {"number": 3, "name": "client-3.example.com", "ip": "10.0.0.3",
         "designation": "", "state": "down"},
    ],
    "filesystems": [
        {"device": "fs1", "mount_point": "/gpfs/fs1", "block_size": 4194304,
         "size_kib": 10485760, "free_kib": 2621440,
         "mounted_on": ["gpfs-1", "gpfs-2", "client-3"],
         "filesets": [{"name": "root", "id": 0, "path": "/gpfs/fs1"},
                      {"name": "projects", "id": 1, "path": "/gpfs/fs1/projects",
                       "independent": True, "comment": "team a, b"},
                      {"name": "old", "id": 2, "path": None}],
         "snapshots": [{"name": "daily-1", "id": 1},
                       {"name": "proj snap", "id": 2, "fileset": "projects",
                        "status": "DeleteRequired"}]},
        {"device": "scratch", "mount_point": "/ibm/scratch data:2", "block_size": 1048576,
         "size_kib": 2097152, "free_kib": 2097000, "mounted_on": ["gpfs-1", "gpfs-2"],
         "filesets": [{"name": "root", "id": 0, "path": "/ibm/scratch data:2"}],
         "snapshots": []},
    ],
}


@pytest.fixture
def double(tmp_path, monkeypatch):
    """Points the provider at the test double; returns a function that (re)writes the cluster
    description it serves."""
    spec_file = tmp_path / "cluster.json"
    monkeypatch.setenv(ss.ENV_BIN, str(DOUBLE_BIN))
    monkeypatch.setenv("CAIRN_SCALE_DOUBLE", str(spec_file))
    monkeypatch.delenv(ss.ENV_SUDO, raising=False)

    def describe(**changes):
        spec = json.loads(json.dumps(CLUSTER))
        spec.update(changes)
        spec_file.write_text(json.dumps(spec))
        return spec

    describe()
    return describe


# ---- the -Y parser --------------------------------------------------------------------------

MMLSCLUSTER = """\
mmlscluster:clusterSummary:HEADER:version:reserved:reserved:clusterName:clusterId:uidDomain:rshPath:
mmlscluster:clusterNode:HEADER:version:reserved:reserved:nodeNumber:daemonNodeName:ipAddress:adminNodeName:designation:otherNodeRoles:adminLoginName:otherNodeRolesAlias:
mmlscluster:cnfsSummary:HEADER:version:reserved:reserved:cnfsSharedRoot:
mmlscluster:clusterSummary:0:1:::c1.example.com:42:c1.example.com:%2Fusr%2Fbin%2Fssh:
mmlscluster:clusterNode:0:1:::1:server-1.domain.com:10.0.0.1:server-1.domain.com:quorum:Z::perfmon:
mmlscluster:clusterNode:0:1:::2:server-2.domain.com:10.0.0.2:server-2.domain.com::::perfmon%2Cces:
"""


def test_parser_maps_values_by_header_per_record_type():
    rec = ss.parse_y(MMLSCLUSTER, "mmlscluster")
    assert rec["clusterSummary"] == [{"clusterName": "c1.example.com", "clusterId": "42",
                                      "uidDomain": "c1.example.com",
                                      "rshPath": "/usr/bin/ssh"}]
    assert [n["daemonNodeName"] for n in rec["clusterNode"]] == [
        "server-1.domain.com", "server-2.domain.com"]
    assert rec["clusterNode"][0]["designation"] == "quorum"
    assert rec["clusterNode"][0]["otherNodeRoles"] == "Z"
    assert rec["clusterNode"][1]["designation"] == ""
    assert rec["clusterNode"][1]["otherNodeRolesAlias"] == "perfmon,ces"
    assert rec["cnfsSummary"] == []


def test_parser_decodes_percent_escapes_leniently():
    text = ("mmlsfs::HEADER:version:reserved:reserved:deviceName:fieldName:data:remarks:\n"
            "mmlsfs::0:1:::fs1:defaultMountPoint:%2Fgpfs%2Fmy fs%3A1:Default mount point:\n"
            "mmlsfs::0:1:::fs1:disks:nsd1%3Bnsd2:50% used %zz 100%:\n"
            "mmlsfs::0:1:::fs1:comment:a+b %C3%A9t%C3%A9:%2D%2D:\n")
    rows = ss.parse_y(text, "mmlsfs")[""]
    assert rows[0]["data"] == "/gpfs/my fs:1"
    assert rows[1]["data"] == "nsd1;nsd2"
    assert rows[1]["remarks"] == "50% used %zz 100%"  # malformed escapes stay as they are
    assert rows[2]["data"] == "a+b été"  # '+' is not a space
    assert rows[2]["remarks"] == "--"


def test_parser_keeps_unknown_fields_and_tolerates_extra_and_missing_values():
    text = ("mmgetstate::HEADER:version:reserved:reserved:nodeName:nodeNumber:state:"
            "brandNewField\n"  # no trailing colon
            "mmgetstate::0:1:::n1:1:active:x:surplus1:surplus2:\n"
            "mmgetstate::0:1:::n2:2:\n")
    rows = ss.parse_y(text, "mmgetstate")[""]
    assert rows[0] == {"nodeName": "n1", "nodeNumber": "1", "state": "active",
                       "brandNewField": "x", "_extra": ["surplus1", "surplus2"]}
    assert rows[1] == {"nodeName": "n2", "nodeNumber": "2"}


def test_parser_skips_foreign_lines_and_headerless_rows_and_rereads_repeated_headers():
    text = ("Warning: something from the shell\n"
            "mmdf:nsd:0:1:::orphan:\n"  # no header for this record type yet
            "mmdf:fsTotal:HEADER:version:reserved:reserved:fsSize:freeBlocks:\n"
            "mmlsfs::0:1:::fs1:blockSize:1:\n"
            "\n"
            "mmdf:fsTotal:0:1:::100:50:\n"
            "mmdf:fsTotal:HEADER:version:reserved:reserved:freeBlocks:fsSize:\n"
            "mmdf:fsTotal:0:1:::7:9:\n")
    rec = ss.parse_y(text, "mmdf")
    assert "nsd" not in rec
    assert rec["fsTotal"] == [{"fsSize": "100", "freeBlocks": "50"},
                              {"freeBlocks": "7", "fsSize": "9"}]


# ---- cluster_info against the test double ---------------------------------------------------

def test_cluster_info_is_none_without_storage_scale(tmp_path, monkeypatch):
    monkeypatch.setenv(ss.ENV_BIN, str(tmp_path))  # a directory without the commands
    assert ss.find_bin() is None
    assert ss.cluster_info() is None


def test_cluster_info_reports_nodes_filesystems_mounts_filesets_snapshots(double):
    info = ss.cluster_info()
    assert json.loads(json.dumps(info)) == info  # JSON-able as it is
    assert info["cluster_name"] == "hpc.example.com"
    assert info["cluster_id"] == "16014213318453722105"
    assert info["version"] == "5.1.9.0"

    nodes = {n["name"]: n for n in info["nodes"]}
    assert list(nodes) == ["gpfs-1.example.com", "gpfs-2.example.com", "client-3.example.com"]
    assert nodes["gpfs-1.example.com"]["state"] == "active"
    assert nodes["gpfs-1.example.com"]["quorum"] and nodes["gpfs-1.example.com"]["manager"]
    assert nodes["gpfs-1.example.com"]["roles"] == ["perfmon"]
    assert nodes["gpfs-2.example.com"]["state"] == "arbitrating"
    assert nodes["gpfs-2.example.com"]["quorum"] and not nodes["gpfs-2.example.com"]["manager"]
    assert nodes["client-3.example.com"]["state"] == "down"
    assert not nodes["client-3.example.com"]["quorum"]
    assert nodes["client-3.example.com"]["ip"] == "10.0.0.3"

    fs1, scratch = info["filesystems"]
    assert fs1["device"] == "fs1" and fs1["mount_point"] == "/gpfs/fs1"
    assert fs1["block_size"] == 4194304  # the system pool's, not the other pools'
    assert fs1["size"] == 10485760 * 1024 and fs1["free"] == 2621440 * 1024
    assert fs1["inodes"]["maxInodes"] == 1000000
    # mmlsmount names nodes by their short names; the report uses the cluster's names
    assert [m["node"] for m in fs1["mounted_on"]] == [
        "gpfs-1.example.com", "gpfs-2.example.com", "client-3.example.com"]
    assert {m["mode"] for m in fs1["mounted_on"]} == {"RW"}
    fsets = {f["name"]: f for f in fs1["filesets"]}
    assert fsets["projects"]["path"] == "/gpfs/fs1/projects"
    assert fsets["projects"]["independent"] and fsets["projects"]["comment"] == "team a, b"
    assert fsets["projects"]["created"] == "Tue Dec  5 10:44:05 2023"
    assert fsets["old"]["status"] == "Unlinked" and fsets["old"]["path"] is None
    assert fsets["root"]["parent_id"] is None
    assert [(s["name"], s["fileset"], s["status"]) for s in fs1["snapshots"]] == [
        ("daily-1", None, "Valid"), ("proj snap", "projects", "DeleteRequired")]

    assert scratch["device"] == "scratch"
    assert scratch["mount_point"] == "/ibm/scratch data:2"  # escaped ':' decoded, space kept
    assert scratch["block_size"] == 1048576
    assert [m["node"] for m in scratch["mounted_on"]] == [
        "gpfs-1.example.com", "gpfs-2.example.com"]
    assert scratch["snapshots"] == []  # "No snapshots in file system"
    assert "error" not in fs1 and "error" not in scratch


def test_a_file_system_mounted_nowhere_has_an_empty_mount_list(double):
    spec = json.loads(json.dumps(CLUSTER))
    spec["filesystems"][1]["mounted_on"] = []
    double(filesystems=spec["filesystems"])
    info = ss.cluster_info()
    assert info["filesystems"][1]["mounted_on"] == []
    assert len(info["filesystems"][0]["mounted_on"]) == 3


def test_daemon_down_is_its_own_error(double):
    double(failure="daemon_down")
    with pytest.raises(ss.DaemonDown) as e:
        ss.cluster_info()
    assert "daemon is not running" in e.value.message
    assert "mmstartup" in e.value.hint
    assert e.value.to_dict()["kind"] == "daemon_down"


def test_not_in_cluster_is_its_own_error(double):
    double(failure="not_in_cluster")
    with pytest.raises(ss.NotInCluster) as e:
        ss.cluster_info()
    assert "not a member of a Storage Scale cluster" in e.value.message
    assert e.value.command == "mmlscluster"


def test_missing_rights_say_what_to_configure(double):
    double(failure="permission_denied")
    with pytest.raises(ss.PermissionDenied) as e:
        ss.cluster_info()
    assert "not allowed to run" in e.value.message
    assert "root" in e.value.hint and "NOPASSWD" in e.value.hint
    assert ss.ENV_SUDO in e.value.hint


def test_a_hanging_command_times_out_and_is_killed(double):
    double(failure="hang", failing=["mmlscluster"])
    start = time.monotonic()
    with pytest.raises(ss.CommandTimeout) as e:
        ss.cluster_info(timeout=0.5)
    assert time.monotonic() - start < 5
    assert "did not answer within 0.5 seconds" in e.value.message


def test_a_slow_file_system_is_reported_on_that_file_system_only(double):
    double(failure="hang", failing=["mmlsfileset"])
    info = ss.cluster_info(timeout=0.5)
    for fs in info["filesystems"]:
        assert fs["error"]["kind"] == "timeout"
        assert fs["size"] is not None  # what came before the hang is kept
    assert len(info["nodes"]) == 3


def test_the_failures_are_distinct():
    classes = (ss.DaemonDown, ss.NotInCluster, ss.PermissionDenied, ss.CommandTimeout,
               ss.CommandFailed, ss.NodeUnreachable, ss.SnapshotNotFound, ss.InvalidArgument)
    assert len({cls.kind for cls in classes}) == len(classes)
    other = ss.classify("mmdf", 1, "mmdf: 6027-1011 File system x is not known.\n"
                        "mmdf: Command failed. Examine previous error messages to determine "
                        "cause.\n")
    assert type(other) is ss.CommandFailed
    assert "6027-1011 File system x is not known" in other.message


# ---- the local node, and nodes that cannot be reached --------------------------------------

def test_local_node_is_the_node_mmgetstate_reports_without_all(double):
    assert ss.local_node() == "gpfs-1.example.com"
    double(local_node="client-3.example.com")
    assert ss.local_node() == "client-3.example.com"
    double(local_node="not-a-member.example.com")  # mmgetstate names no node
    assert ss.local_node() is None


def test_local_node_is_none_without_storage_scale(tmp_path, monkeypatch):
    monkeypatch.setenv(ss.ENV_BIN, str(tmp_path))
    assert ss.local_node() is None


def test_the_local_node_is_matched_by_number_then_by_short_name():
    nodes = ss.parse_y(MMLSCLUSTER, "mmlscluster")["clusterNode"]
    assert _local_name({"nodeName": "whatever", "nodeNumber": "2"}, nodes) == \
        "server-2.domain.com"
    assert _local_name({"nodeName": "SERVER-1", "nodeNumber": ""}, nodes) == \
        "server-1.domain.com"
    assert _local_name({"nodeName": "x.y", "daemonShortName": "server-2"}, nodes) == \
        "server-2.domain.com"
    # Not in the cluster's list: mmgetstate's own name is all there is.
    assert _local_name({"nodeName": "lost.domain.com", "nodeNumber": "9"}, nodes) == \
        "lost.domain.com"


def test_cluster_info_says_which_node_this_is_and_what_is_mounted_on_it(double):
    info = ss.cluster_info()
    assert info["local_node"] == "gpfs-1.example.com"
    assert [(f["device"], f["mounted_here"]) for f in info["filesystems"]] == [
        ("fs1", True), ("scratch", True)]
    double(local_node="client-3.example.com")
    info = ss.cluster_info()
    assert info["local_node"] == "client-3.example.com"
    assert [f["mounted_here"] for f in info["filesystems"]] == [True, False]
    double(local_node="not-a-member.example.com")
    info = ss.cluster_info()
    assert info["local_node"] is None
    assert [f["mounted_here"] for f in info["filesystems"]] == [None, None]


def test_unreachable_nodes_show_as_unknown_and_leave_the_mount_list(double):
    double(failure="node_unreachable", unreachable=["gpfs-2"])
    info = ss.cluster_info()
    assert {n["name"]: n["state"] for n in info["nodes"]} == {
        "gpfs-1.example.com": "active", "gpfs-2.example.com": "unknown",
        "client-3.example.com": "down"}
    fs1, scratch = info["filesystems"]
    assert [m["node"] for m in fs1["mounted_on"]] == [
        "gpfs-1.example.com", "client-3.example.com"]
    assert [m["node"] for m in scratch["mounted_on"]] == ["gpfs-1.example.com"]
    assert "error" not in fs1 and "error" not in scratch


def test_a_command_that_cannot_reach_a_node_is_reported_as_such(double):
    double(failure="node_unreachable", unreachable=["gpfs-2", "client-3"], failing=["mmdf"])
    info = ss.cluster_info()
    assert [n["state"] for n in info["nodes"]] == ["active", "unknown", "unknown"]
    for fs in info["filesystems"]:
        assert fs["error"]["kind"] == "node_unreachable"
        assert "6027-1617 There are no available nodes" in fs["error"]["error"]
        assert "mmgetstate -a" in fs["error"]["hint"]
    with pytest.raises(ss.NodeUnreachable) as e:
        ss.run("mmdf", "fs1", "-Y")
    assert e.value.to_dict()["kind"] == "node_unreachable"
    assert e.value.command == "mmdf"


@pytest.mark.parametrize("text", [
    "mmdsh: 6027-1617 There are no available nodes on which to run the command.\n"
    "mmdf: Command failed. Examine previous error messages to determine cause.\n",
    "gpfs-2: ssh: connect to host gpfs-2 port 22: No route to host\n",
    "gpfs-2: ssh: connect to host gpfs-2 port 22: Connection timed out\n",
    "mmcommon: 6027-1637 mmdf quitting.  None of the specified nodes are valid.\n",
    "gpfs-2: Network is unreachable\n",
])
def test_unreachable_nodes_are_told_apart_from_other_failures(text):
    e = ss.classify("mmdf", 1, text)
    assert type(e) is ss.NodeUnreachable
    assert "Command failed. Examine" not in e.message


def test_a_remote_command_that_merely_failed_is_not_an_unreachable_node():
    e = ss.classify("mmdf", 1, "mmdsh: gpfs-2 remote shell process had return code 1.\n")
    assert type(e) is ss.CommandFailed


# ---- the agent's probe, through the master --------------------------------------------------

@pytest.fixture
def master(tmp_path):
    from app.master import Master
    m = Master(str(tmp_path / "home"))
    m.ensure_local_host()
    yield m
    m.close()


def _probe(m):
    return m.probe_host(m.config.local_host()["name"])


def test_probe_reports_the_cluster_through_the_local_agent(double, master):
    scale = _probe(master)["storage_scale"]
    assert scale["cluster_name"] == "hpc.example.com"
    assert [n["state"] for n in scale["nodes"]] == ["active", "arbitrating", "down"]
    assert [f["device"] for f in scale["filesystems"]] == ["fs1", "scratch"]
    assert len(scale["filesystems"][1]["mounted_on"]) == 2


def test_probe_reports_a_cluster_error_without_failing(double, master):
    double(failure="not_in_cluster")
    info = _probe(master)
    assert info["filesystems"]  # the rest of the probe is there
    assert info["storage_scale"]["kind"] == "not_in_cluster"
    assert "not a member" in info["storage_scale"]["error"]
    assert info["storage_scale"]["hint"]


def test_probe_without_storage_scale_reports_none(tmp_path, monkeypatch, master):
    monkeypatch.setenv(ss.ENV_BIN, str(tmp_path))
    assert _probe(master)["storage_scale"] is None


def test_cli_probe_prints_the_cluster(double, tmp_path):
    from clihelp import cairn
    home = tmp_path / "clihome"
    cairn(home, "host", "add", "me", "--local")
    out = cairn(home, "host", "probe", "me").stdout
    assert "Storage Scale cluster hpc.example.com (id 16014213318453722105" in out
    assert "arbitrating" in out
    assert "/ibm/scratch data:2" in out
    double(failure="daemon_down")
    out = cairn(home, "host", "probe", "me").stdout
    assert "Storage Scale: " in out and "mmstartup" in out
