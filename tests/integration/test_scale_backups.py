"""Backups of a client on IBM Storage Scale, reached over SSH, with the test double of the mm
commands (tests/scale_double) standing in for the cluster: its file system is a directory of
this machine. The client's agent finds the double through the host's agent environment, as
an admin would set CAIRN_MMFS_SUDO or CAIRN_MMFS_BIN.

Snapshot-consistent backups (taken, read from, always deleted, recorded in the image) and file
lists from the policy engine (feeding fulls and incrementals, with the tree walk where it does
not apply)."""

import contextlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from app import status as st
from clihelp import cairn, cairn_json
from treegen import assert_trees_equal, make_tree

DOUBLE_BIN = Path(__file__).resolve().parent.parent / "scale_double" / "bin"


def calls(spec_file):
    """The mm commands the double ran, in order: [(command, args)]."""
    log = json.loads(Path(spec_file).read_text())["log"]
    if not os.path.exists(log):
        return []
    return [(c["cmd"], c["args"]) for c in map(json.loads, Path(log).read_text().splitlines())]


def snapshots_listed(spec_file):
    spec = json.loads(Path(spec_file).read_text())
    return [s["name"] for fs in spec["filesystems"] for s in fs.get("snapshots", [])]


def job_log(home, job_id):
    return cairn(home, "jobs", "log", str(job_id)).stdout


@pytest.fixture
def site(tmp_path, sshd):
    """A cluster with file system fs1 (an independent fileset `projects`), a client on it
    over SSH, and an advanced-disk pool on this machine."""
    mount = tmp_path / "gpfs" / "fs1"
    data = mount / "data"
    make_tree(str(data))
    (mount / "projects" / "a").mkdir(parents=True)
    (mount / "projects" / "a" / "result.txt").write_text("fileset content\n")
    spec_file = tmp_path / "cluster.json"
    spec = {
        "cluster": {"name": "hpc.example.com", "id": "16014213318453722105"},
        "local_node": "gpfs-1.example.com",
        "log": str(tmp_path / "mm-calls.jsonl"),
        "nodes": [{"number": 1, "name": "gpfs-1.example.com", "ip": "10.0.0.1",
                   "designation": "quorumManager", "state": "active"}],
        "filesystems": [{
            "device": "fs1", "mount_point": str(mount), "mounted_on": ["gpfs-1"],
            "filesets": [{"name": "root", "id": 0, "path": str(mount)},
                         {"name": "projects", "id": 1, "path": str(mount / "projects"),
                          "independent": True}],
            "snapshots": []}],
    }
    spec_file.write_text(json.dumps(spec))
    home, vol = tmp_path / "home", tmp_path / "vol"
    vol.mkdir()
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "host", "add", "client1", "--address", sshd.host, "--port", sshd.port,
          "--user", sshd.user, "--key", sshd.key_file, "--trust-host-key")
    cairn(home, "host", "set", "client1", "agent_env",
          f"CAIRN_MMFS_BIN={DOUBLE_BIN},CAIRN_SCALE_DOUBLE={spec_file}")
    cairn(home, "storage-server", "create", "ss1", "--type", "advanced-disk", "--host", "me")
    cairn(home, "disk-pool", "create", "dp1", "--server", "ss1", "--volume", str(vol))
    cairn(home, "storage-unit", "create", "stu1", "--pool", "dp1")
    return {"home": home, "mount": mount, "data": data, "spec": spec_file,
            "tmp": tmp_path}


def make_policy(site, name, *selections, snapshot="none", file_list="auto"):
    home = site["home"]
    cairn(home, "policy", "create", name, "--storage-unit", "stu1", "--snapshot", snapshot,
          "--file-list", file_list)
    cairn(home, "policy", "add-client", name, "client1")
    for s in selections:
        cairn(home, "policy", "add-selection", name, str(s))
    cairn(home, "policy", "add-schedule", name, "full", "--type", "full")
    cairn(home, "policy", "add-schedule", name, "diff", "--type", "differential")


def run_backup(site, policy, schedule="full", expect=st.OK):
    doc, _ = cairn_json(site["home"], "backup", policy, "--schedule", schedule, "--wait",
                        check=False)
    [job] = doc["jobs"]
    assert job["status"] == expect, job_log(site["home"], job["id"])
    return job


def restore(site, image_id, path, dst):
    doc, _ = cairn_json(site["home"], "restore", image_id, "--path", str(path), "--to",
                        str(dst), "--wait")
    assert doc["status"] == st.OK, doc


def test_snapshot_backup_reads_the_snapshot_records_it_and_deletes_it(site):
    spec = json.loads(site["spec"].read_text())
    # The double changes the live tree right after it takes a snapshot: the image must hold
    # the tree as it was at the snapshot.
    spec["after_snapshot"] = {"write": {str(site["data"] / "small.txt"): "changed later\n"},
                              "remove": [str(site["data"] / "empty")]}
    site["spec"].write_text(json.dumps(spec))
    expected = site["tmp"] / "expected"
    # cp -a keeps hard links, FIFOs, times and modes: the expected tree.
    subprocess.run(["cp", "-a", str(site["data"]), str(expected)], check=True)
    make_policy(site, "snap", site["data"], snapshot="filesystem")

    job = run_backup(site, "snap")

    ran = [c for c, _ in calls(site["spec"])]
    assert "mmcrsnapshot" in ran and "mmdelsnapshot" in ran
    assert ran.index("mmcrsnapshot") < ran.index("mmdelsnapshot")
    [(_, cr)] = [(c, a) for c, a in calls(site["spec"]) if c == "mmcrsnapshot"]
    name = cr[-1]
    assert cr == ["fs1", name] and name.startswith(f"cairn-{job['id']}-")
    assert snapshots_listed(site["spec"]) == []
    assert not (site["mount"] / ".snapshots" / name).exists()
    log = job_log(site["home"], job["id"])
    assert f"snapshot {name} of file system fs1 taken" in log
    assert f"snapshot {name} of fs1 deleted" in log

    image, _ = cairn_json(site["home"], "images", "show", job["image_id"])
    [snap] = image["snapshot"]
    assert (snap["name"], snap["device"], snap["fileset"]) == (name, "fs1", None)
    assert abs(snap["created"] - time.time()) < 600
    # paths are the live ones; the content is the snapshot's
    dst = site["tmp"] / "dst"
    restore(site, job["image_id"], site["data"], dst)
    assert_trees_equal(str(expected), str(dst) + str(site["data"]), check_owner=False)
    assert (site["data"] / "small.txt").read_text() == "changed later\n"


def test_fileset_snapshot_is_taken_of_the_fileset(site):
    make_policy(site, "fset", site["mount"] / "projects" / "a", snapshot="fileset")
    job = run_backup(site, "fset")
    [(_, cr)] = [(c, a) for c, a in calls(site["spec"]) if c == "mmcrsnapshot"]
    assert cr[0] == "fs1" and cr[1].startswith("projects:cairn-")
    image, _ = cairn_json(site["home"], "images", "show", job["image_id"])
    assert image["snapshot"][0]["fileset"] == "projects"
    dst = site["tmp"] / "dst"
    restore(site, job["image_id"], site["mount"] / "projects" / "a", dst)
    assert (dst / str(site["mount"] / "projects" / "a" / "result.txt").lstrip("/")
            ).read_text() == "fileset content\n"
    assert snapshots_listed(site["spec"]) == []


def test_failed_backup_deletes_its_snapshot(site):
    make_policy(site, "gone", site["mount"] / "no-such-dir", snapshot="filesystem")
    job = run_backup(site, "gone", expect=st.NOTHING_TO_BACKUP)
    ran = [c for c, _ in calls(site["spec"])]
    assert ran.count("mmcrsnapshot") == 1 and ran.count("mmdelsnapshot") >= 1
    assert snapshots_listed(site["spec"]) == []
    assert not any((site["mount"] / ".snapshots").glob("cairn-*"))
    assert "deleted" in job_log(site["home"], job["id"])


def test_snapshot_of_a_path_off_storage_scale_is_refused_clearly(site):
    other = site["tmp"] / "plain"
    other.mkdir()
    (other / "f").write_text("x")
    make_policy(site, "off", other, snapshot="filesystem")
    job = run_backup(site, "off", expect=st.SNAPSHOT_FAILED)
    assert "is not on a Storage Scale file system" in job_log(site["home"], job["id"])
    assert "mmcrsnapshot" not in [c for c, _ in calls(site["spec"])]


def test_policy_engine_lists_the_files_of_fulls_and_incrementals(site):
    make_policy(site, "scan", site["data"])
    full = run_backup(site, "scan")
    log = job_log(site["home"], full["id"])
    assert "file list: Storage Scale policy engine (mmapplypolicy)" in log
    assert "mmapplypolicy" in [c for c, _ in calls(site["spec"])]
    # Changes: one file rewritten, one added, one removed.
    time.sleep(1.1)
    (site["data"] / "small.txt").write_text("new content, new size\n")
    (site["data"] / "added.txt").write_text("added\n")
    os.unlink(site["data"] / "big.bin")
    diff = run_backup(site, "scan", "diff")
    log = job_log(site["home"], diff["id"])
    assert "file list: Storage Scale policy engine" in log
    assert "not read again" in log
    image, _ = cairn_json(site["home"], "images", "show", diff["image_id"])
    assert image["scan"]["method"] == "policy"
    assert image["files"] == 2  # the rewritten and the added file; the rest listed unchanged
    dst = site["tmp"] / "dst"
    restore(site, diff["image_id"], site["data"], dst)
    assert_trees_equal(str(site["data"]), str(dst) + str(site["data"]), check_owner=False)


def test_a_file_the_policy_engine_does_not_list_is_not_backed_up(site):
    """The list, not a walk, names what the backup holds."""
    spec = json.loads(site["spec"].read_text())
    spec["scan_omits"] = ["small.txt"]
    site["spec"].write_text(json.dumps(spec))
    make_policy(site, "omit", site["data"])
    job = run_backup(site, "omit")
    files, _ = cairn_json(site["home"], "browse", job["image_id"], str(site["data"]))
    names = {e["name"] for e in files["entries"]}
    assert "small.txt" not in names and "big.bin" in names


def test_walk_where_the_policy_engine_does_not_apply_or_fails(site):
    make_policy(site, "walk", site["data"], file_list="walk")
    job = run_backup(site, "walk")
    assert "file list: walking the tree (the policy asks for it)" in \
        job_log(site["home"], job["id"])
    spec = json.loads(site["spec"].read_text())
    spec.update(failure="failed", failing=["mmapplypolicy"])
    site["spec"].write_text(json.dumps(spec))
    make_policy(site, "fails", site["data"])
    job = run_backup(site, "fails")
    log = job_log(site["home"], job["id"])
    assert "the Storage Scale policy engine failed" in log and "walking the tree" in log
    other = site["tmp"] / "plain"
    other.mkdir()
    (other / "f").write_text("x")
    make_policy(site, "plain", other)
    job = run_backup(site, "plain")
    assert "walking the tree (the selections are not on Storage Scale)" in \
        job_log(site["home"], job["id"])


def test_probe_over_ssh_reports_the_cluster(site):
    doc, _ = cairn_json(site["home"], "host", "probe", "client1")
    scale = doc["storage_scale"]
    assert scale["cluster_name"] == "hpc.example.com"
    assert scale["local_node"] == "gpfs-1.example.com"
    [fs] = scale["filesystems"]
    assert (fs["device"], fs["mount_point"], fs["mounted_here"]) == ("fs1",
                                                                     str(site["mount"]), True)
    assert [f["name"] for f in fs["filesets"]] == ["root", "projects"]
    text = cairn(site["home"], "host", "probe", "client1").stdout
    assert "Storage Scale cluster hpc.example.com" in text
    # the daemon stopped on the node: reported with its hint, the probe itself succeeds
    spec = json.loads(site["spec"].read_text())
    spec["failure"] = "daemon_down"
    site["spec"].write_text(json.dumps(spec))
    doc, _ = cairn_json(site["home"], "host", "probe", "client1")
    assert doc["storage_scale"]["kind"] == "daemon_down"
    assert "mmstartup" in doc["storage_scale"]["hint"]


def _hang_policy_scan(site):
    spec = json.loads(site["spec"].read_text())
    spec.update(failure="hang", failing=["mmapplypolicy"])
    site["spec"].write_text(json.dumps(spec))


def _wait_for_call(site, command, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if command in [c for c, _ in calls(site["spec"])]:
            return
        time.sleep(0.1)
    raise AssertionError(f"{command} was never run")


def _stop_double(site):
    # A hanging command of the double outlives a killed agent: end those of this test.
    mark = f"CAIRN_SCALE_DOUBLE={site['spec']}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    os.kill(int(pid), 9)
        except OSError:
            pass


@contextlib.contextmanager
def _snapshot_backup_stuck_in_its_scan(site, policy):
    """A snapshot backup started with a master of the test's own, held in the policy scan
    (the snapshot is taken by then): yields (master, job id, the thread waiting for it)."""
    from app.master import Master
    make_policy(site, policy, site["data"], snapshot="filesystem")
    _hang_policy_scan(site)
    m = Master(str(site["home"]))
    try:
        [jid] = m.start_backup(policy)
        runner = threading.Thread(target=m.wait_for, args=([jid],), daemon=True)
        runner.start()
        _wait_for_call(site, "mmapplypolicy")
        yield m, jid, runner
    finally:
        m.close()
        _stop_double(site)


def test_cancel_during_the_scan_deletes_the_snapshot(site):
    with _snapshot_backup_stuck_in_its_scan(site, "cancel") as (m, jid, runner):
        m.jobs.request_cancel(jid)
        runner.join(60)
        job = m.jobs.get(jid)
        assert job["status"] == st.CANCELED, m.jobs.logs(jid)
        assert snapshots_listed(site["spec"]) == []
        ran = [c for c, _ in calls(site["spec"])]
        assert ran.index("mmcrsnapshot") < ran.index("mmdelsnapshot")


def test_killed_client_agent_leaves_no_snapshot_behind(site):
    with _snapshot_backup_stuck_in_its_scan(site, "kill") as (m, jid, runner):
        assert len(snapshots_listed(site["spec"])) == 1
        os.kill(m.hosts._conns["client1"].info["pid"], 9)
        runner.join(90)
        job = m.jobs.get(jid)
        assert job["state"] == "done" and job["status"] == st.AGENT_FAILED, job
        # the master asked a new agent to delete what the killed one had taken
        assert snapshots_listed(site["spec"]) == []
        assert not any((site["mount"] / ".snapshots").glob("cairn-*"))
