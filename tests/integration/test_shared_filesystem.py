"""Several storage servers on one Storage Scale file system, through the CLI, with the test
double of the mm commands (tests/scale_double) standing in for the cluster: its file system
`shared` is a directory of this machine. Host gpfs-1 is this machine (its agent inherits the
double's environment); host gpfs-2 is the loopback sshd reached as "localhost", whose agent
finds the double through its agent environment, describing the same cluster seen from node
gpfs-2.

A pool on a file system its storage server's node has not mounted is created with a warning
(on stderr, and in --json as "warnings"), `disk-pool show` and `host probe` flag it, and a
pool whose volume is another host's pool's directory on the shared file system, or inside
or around it, is refused."""

import json
import os
from pathlib import Path

import pytest

from clihelp import cairn, cairn_json

pytestmark = pytest.mark.ssh

DOUBLE_BIN = Path(__file__).resolve().parent.parent / "scale_double" / "bin"


def spec(mount, local_node, mounted_on, **extra):
    return dict({
        "cluster": {"name": "hpc.example.com", "id": "16014213318453722105"},
        "version": "5.1.9.0 ",
        "local_node": local_node,
        "nodes": [{"number": 1, "name": "gpfs-1.example.com", "ip": "10.0.0.1",
                   "designation": "quorumManager", "state": "active"},
                  {"number": 2, "name": "gpfs-2.example.com", "ip": "10.0.0.2",
                   "designation": "quorum", "state": "active"}],
        "filesystems": [{"device": "shared", "mount_point": str(mount), "block_size": 4194304,
                         "size_kib": 10485760, "free_kib": 8388608, "mounted_on": mounted_on,
                         "filesets": [], "snapshots": []}],
    }, **extra)


@pytest.fixture
def site(tmp_path, sshd_as_localhost, monkeypatch):
    mount = tmp_path / "gpfs" / "shared"
    for d in ("ss1", "ss2", "ss1/inner"):
        (mount / d).mkdir(parents=True)
    specs = {n: tmp_path / f"cluster-{n}.json" for n in ("gpfs-1", "gpfs-2")}

    def describe(mounted_on, **extra):
        for node, f in specs.items():
            f.write_text(json.dumps(spec(mount, f"{node}.example.com", mounted_on, **extra)))

    describe(["gpfs-1"])
    monkeypatch.setenv("CAIRN_MMFS_BIN", str(DOUBLE_BIN))
    monkeypatch.setenv("CAIRN_SCALE_DOUBLE", str(specs["gpfs-1"]))
    monkeypatch.delenv("CAIRN_MMFS_SUDO", raising=False)
    home = tmp_path / "home"
    s = sshd_as_localhost
    cairn(home, "host", "add", "gpfs-1", "--local")
    cairn(home, "host", "add", "gpfs-2", "--address", "localhost", "--port", s.port,
          "--user", s.user, "--key", s.key_file, "--trust-host-key")
    cairn(home, "host", "set", "gpfs-2", "agent_env",
          f"CAIRN_MMFS_BIN={DOUBLE_BIN},CAIRN_SCALE_DOUBLE={specs['gpfs-2']}")
    for n in (1, 2):
        cairn(home, "storage-server", "create", f"ss{n}", "--type", "advanced-disk",
              "--host", f"gpfs-{n}")
    return {"home": home, "mount": mount, "describe": describe, "tmp": tmp_path}


NOT_ON_2 = ("shared is not mounted on gpfs-2 (the storage server's node): mount it there "
            "(mmmount shared -N gpfs-2) before using it for backups.")


def test_a_pool_on_a_file_system_its_node_has_not_mounted_warns_but_is_created(site):
    home, mount = site["home"], site["mount"]
    p = cairn(home, "disk-pool", "create", "dp1", "--server", "ss1", "--volume", mount / "ss1")
    assert "warning" not in p.stderr, p.stderr

    doc, p = cairn_json(home, "disk-pool", "create", "dp2", "--server", "ss2",
                        "--volume", mount / "ss2")
    assert doc["name"] == "dp2" and doc["volumes"] == [str(mount / "ss2")]
    assert doc["warnings"] == [NOT_ON_2]
    assert f"warning: {NOT_ON_2}" in p.stderr
    p = cairn(home, "disk-pool", "create", "dp3", "--server", "ss2",
              "--volume", mount / "ss2b", check=False)
    assert p.returncode != 0 and "does not exist" in p.stderr, "a missing directory still fails"

    # show flags the pool whose node lacks the file system, and not the other
    doc, p = cairn_json(home, "disk-pool", "show", "dp2")
    assert doc["warnings"] == [NOT_ON_2] and f"warning: {NOT_ON_2}" in p.stderr
    assert [c["ok"] for c in doc["checks"]] == [True]
    doc, p = cairn_json(home, "disk-pool", "show", "dp1")
    assert doc["warnings"] == [] and "warning" not in p.stderr
    text = cairn(home, "disk-pool", "show", "dp2")
    assert str(mount / "ss2") in text.stdout and NOT_ON_2 in text.stderr

    # list --check: each pool with its warnings
    doc, p = cairn_json(home, "disk-pool", "list", "--check")
    assert {d["name"]: d["warnings"] for d in doc["disk_pools"]} == {"dp1": [],
                                                                     "dp2": [NOT_ON_2]}
    assert f"warning: disk pool dp2: {NOT_ON_2}" in p.stderr and "dp1:" not in p.stderr
    text = cairn(home, "disk-pool", "list", "--check").stdout.splitlines()
    assert text[0].split()[-1] == "WARNINGS" and text[2].split()[-1] == "1"
    doc, p = cairn_json(home, "disk-pool", "list")
    assert "warnings" not in doc["disk_pools"][0] and "warning" not in p.stderr

    # the mount map on the CLI: the node of a storage server writing to it lacks it
    doc, p = cairn_json(home, "host", "probe", "gpfs-1")
    assert doc["warnings"] == ["shared: not mounted on gpfs-2, the node of host gpfs-2, where "
                               "storage server ss2 writes disk pool dp2"]
    assert "warning: shared: not mounted on gpfs-2" in p.stderr

    # mounted there now: no warning left
    site["describe"](["gpfs-1", "gpfs-2"])
    doc, _ = cairn_json(home, "disk-pool", "show", "dp2")
    assert doc["warnings"] == []
    doc, _ = cairn_json(home, "host", "probe", "gpfs-1")
    assert doc["warnings"] == []


def test_another_hosts_directory_on_the_shared_file_system_is_refused(site):
    home, mount = site["home"], site["mount"]
    cairn(home, "disk-pool", "create", "dp1", "--server", "ss1", "--volume", mount / "ss1")
    for volume, rel in ((mount / "ss1", "is the same directory as"),
                        (mount / "ss1" / "inner", "is inside"), (mount, "holds")):
        p = cairn(home, "disk-pool", "create", "dp2", "--server", "ss2", "--volume", volume,
                  check=False)
        assert p.returncode != 0
        assert (f"volume {volume} {rel} volume {mount / 'ss1'} of disk pool 'dp1' (storage "
                f"server 'ss1' on host gpfs-1); {volume} is on a shared file system, which "
                "host gpfs-1 sees too") in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    doc, _ = cairn_json(home, "disk-pool", "list")
    assert [d["name"] for d in doc["disk_pools"]] == ["dp1"]
    # a sibling directory is fine
    cairn(home, "disk-pool", "create", "dp2", "--server", "ss2", "--volume", mount / "ss2")


def test_a_host_outside_the_cluster_warns_about_the_shared_file_system_it_lacks(site):
    """gpfs-2 is no node of any cluster (its mm commands say so), yet the other storage
    server's pool is on GPFS file system `shared` there: a volume below its mount point on
    gpfs-2 is on the host's own disk."""
    home, mount = site["home"], site["mount"]
    cairn(home, "disk-pool", "create", "dp1", "--server", "ss1", "--volume", mount / "ss1")
    spec2 = site["tmp"] / "cluster-gpfs-2.json"
    spec2.write_text(json.dumps(dict(json.loads(spec2.read_text()),
                                     failure="not_in_cluster")))
    doc, p = cairn_json(home, "disk-pool", "create", "dp2", "--server", "ss2",
                        "--volume", mount / "ss2")
    [w] = doc["warnings"]
    assert w.startswith(f"volume {mount / 'ss2'} on host gpfs-2 is on ")
    assert (f"not on GPFS file system shared mounted at {mount}, which disk pool 'dp1' uses "
            "on host gpfs-1 (storage server 'ss1'): mount it on host gpfs-2 before using the "
            "volume for backups") in w
    assert f"warning: {w}" in p.stderr
    assert os.path.isdir(mount / "ss2")
