"""Several storage servers on one shared file system, for every storage type: two storage
servers on two hosts (this machine, and the loopback sshd reached as "localhost") each keep
their pool in a directory of their own, side by side on one file system, as seed 000's media
servers share one GPFS file system (the test double of the mm commands, tests/scale_double,
says it is GPFS file system `shared`, mounted on both hosts' nodes). Backups into both pools
run at once, each pool's files stay in its own directory, and every image restores byte for
byte; a second server's pool in the first one's directory, or around it, is refused; and a
backup of the shared file system itself leaves both pools' images out."""

import json
import os
from pathlib import Path

import pytest

from app import status as st
from app.errors import ValidationError
from app.master import Master
from racehelp import log_of, write_tree
from storage_sites import make_pool, pool_files, where
from treegen import assert_trees_equal

pytestmark = pytest.mark.ssh

DOUBLE_BIN = Path(__file__).resolve().parent.parent / "scale_double" / "bin"


def cluster(tmp_path, shared, monkeypatch):
    """The double's description of the cluster seen from each node: {node: file}. This
    machine's agent (a subprocess of the master) reads gpfs-1's."""
    files = {}
    for node in ("gpfs-1", "gpfs-2"):
        files[node] = tmp_path / f"cluster-{node}.json"
        files[node].write_text(json.dumps({
            "cluster": {"name": "ess.example.com", "id": "1"}, "version": "5.1.9.0 ",
            "local_node": f"{node}.example.com",
            "nodes": [{"number": i, "name": f"gpfs-{i}.example.com", "ip": f"10.0.0.{i}",
                       "designation": "quorum", "state": "active"} for i in (1, 2)],
            "filesystems": [{"device": "shared", "mount_point": str(shared),
                             "size_kib": 1 << 30, "free_kib": 1 << 29,
                             "mounted_on": ["gpfs-1", "gpfs-2"]}]}))
    monkeypatch.setenv("CAIRN_MMFS_BIN", str(DOUBLE_BIN))
    monkeypatch.setenv("CAIRN_SCALE_DOUBLE", str(files["gpfs-1"]))
    monkeypatch.delenv("CAIRN_MMFS_SUDO", raising=False)
    return files


def overlapping(a, b):
    return a == b or a.startswith(b + os.sep) or b.startswith(a + os.sep)


def test_two_storage_servers_on_two_hosts_share_one_file_system(tmp_path, sshd,
                                                                sshd_as_localhost,
                                                                storage_type, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    specs = cluster(tmp_path, shared, monkeypatch)
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        s = sshd_as_localhost
        m.add_host("media-2", address="localhost", port=s.port, user=s.user,
                   key_file=s.key_file, trust_host_key=True)
        m.update_object("host", "media-2", agent_env=f"CAIRN_MMFS_BIN={DOUBLE_BIN},"
                                                     f"CAIRN_SCALE_DOUBLE={specs['gpfs-2']}")
        m.add_host("client-3", address=sshd.host, port=sshd.port, user=sshd.user,
                   key_file=sshd.key_file, trust_host_key=True)
        make_pool(m, storage_type, shared / "media-1", server="ss1", pool="dp1", host="me")
        make_pool(m, storage_type, shared / "media-2", server="ss2", pool="dp2",
                  host="media-2")

        # no pool of the second server in the first one's directory, or around it
        for bad in (shared / "media-1", shared / "media-1" / "x", shared):
            server_kw, volumes = where(storage_type, bad)
            # (the shared directory holds both pools: the same host's is named first)
            with pytest.raises(ValidationError, match=r"of (disk pool 'dp[12]'|storage "
                                                      r"server 'ss[12]') \(storage server "):
                m.create_storage_server("ss3", host="media-2", **server_kw)
                m.create_disk_pool("dp3", server="ss3", volumes=volumes)
            if "ss3" in {x["name"] for x in m.storage_servers()}:
                m.delete_object("storage-server", "ss3")
        assert [p["name"] for p in m.disk_pools()] == ["dp1", "dp2"]

        srcs = {}
        for n in (1, 2):
            m.config.add_storage_unit(f"stu{n}", pool=f"dp{n}", max_concurrent_jobs=3)
            m.config.add_policy(f"p{n}", storage_unit=f"stu{n}")
            srcs[n] = str(tmp_path / f"src-{n}")
            write_tree(srcs[n], nfiles=8, size=1 << 20)
            m.config.add_policy_selection(f"p{n}", srcs[n])
            for client in ("me", "media-2", "client-3"):
                m.config.add_policy_client(f"p{n}", client)
        jobs = m.wait_for(m.start_backup("p1") + m.start_backup("p2"))
        assert len(jobs) == 6
        assert all(j["status"] == st.OK for j in jobs), [log_of(m, j["id"]) for j in jobs]
        first = [j for j in jobs if j["policy"] == "p1"]
        second = [j for j in jobs if j["policy"] == "p2"]
        assert min(j["ended"] for j in first) >= max(j["started"] for j in second) or \
            min(j["ended"] for j in second) >= max(j["started"] for j in first), \
            "the two storage servers did not write at the same time"

        # each pool's files in its own directory, none of the other's
        files = {n: pool_files(m, f"dp{n}") for n in (1, 2)}
        for n, own in ((1, "media-1"), (2, "media-2")):
            assert files[n], f"pool dp{n} holds no files"
            assert all(f.startswith(str(shared / own) + os.sep) for f in files[n])
        assert not set(files[1]) & set(files[2])
        assert not any(overlapping(a, b) for a in m.disk_pools()[0]["volumes"]
                       for b in m.disk_pools()[1]["volumes"])

        for j in jobs:
            n = 1 if j["policy"] == "p1" else 2
            assert m.image(j["image_id"])["pool"] == f"dp{n}"
            dst = str(tmp_path / f"dst-{j['id']}")
            [r] = m.wait_for([m.start_restore(j["image_id"], [srcs[n]], dst)])
            assert r["status"] == st.OK, log_of(m, r["id"])
            assert_trees_equal(srcs[n], dst + srcs[n])

        # A backup of the shared file system itself leaves every pool's images out (they are
        # other storage servers' backups) and keeps the rest.
        data = shared / "data"
        write_tree(str(data), nfiles=4, size=1 << 16)
        m.config.add_policy("p3", storage_unit="stu1")
        m.config.add_policy_selection("p3", str(shared))
        m.config.add_policy_client("p3", "client-3")
        [j] = m.wait_for(m.start_backup("p3"))
        assert j["status"] == st.OK, log_of(m, j["id"])
        text = log_of(m, j["id"])
        assert "the images of disk pool 'dp2' (host media-2)" in text, text
        assert "the images of disk pool 'dp1' (host me)" in text, text
        dst = tmp_path / "dst-shared"
        [r] = m.wait_for([m.start_restore(j["image_id"], [str(shared)], str(dst))])
        assert r["status"] == st.OK, log_of(m, r["id"])
        assert_trees_equal(str(data), str(dst) + str(data))
        restored = [os.path.join(d, f) for d, _, fs in os.walk(str(dst) + str(shared))
                    for f in fs]
        assert restored and all(f.startswith(str(dst) + str(data) + os.sep)
                                for f in restored), restored
        # and no restore goes into a pool's files, whichever host's
        folder = os.path.dirname(pool_files(m, "dp2")[0])
        with pytest.raises(ValidationError, match=r"is inside the images of disk pool 'dp2' "
                                                  r"\(host media-2\)"):
            m.start_restore(j["image_id"], [str(data)], folder, to_host="me")
    finally:
        m.close()
