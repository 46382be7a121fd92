"""Jobs at once, for every storage type: backups of three clients (this host and two reached
over the loopback sshd) into one pool run together and each restores byte for byte; and a
backup held at a known point (tests/racehelp.py) keeps the image it reads from: an expire by
hand is refused while it runs, and a base removed behind Cairn's back fails it before it
commits, leaving nothing."""

import os

import pytest

from app import status as st
from app.master import Master
from clihelp import cairn
from racehelp import backup, client_stopped, log_of, restored_equal, start_held, write_tree
from storage_sites import image_files, make_pool
from treegen import assert_trees_equal

pytestmark = pytest.mark.ssh


def setup(tmp_path, sshd, storage_type):
    home, src = str(tmp_path / "home"), str(tmp_path / "src")
    write_tree(src)
    m = Master(home)
    m.config.add_host("me", local=True)
    m.add_host("cl", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    make_pool(m, storage_type, tmp_path / "pool", server="ss", pool="dp")
    m.config.add_storage_unit("stu", pool="dp", max_concurrent_jobs=4)
    m.config.add_policy("p", storage_unit="stu")
    m.config.add_policy_client("p", "cl")
    m.config.add_policy_selection("p", src)
    m.config.add_schedule("p", "full", type="full", retention="1w")
    m.config.add_schedule("p", "diff", type="differential", retention="1w")
    return m, home, src


def test_backups_of_three_clients_into_one_pool_run_at_once(tmp_path, sshd, sshd_as_localhost,
                                                           storage_type):
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        for name, server, address in (("c1", sshd, sshd.host),
                                      ("c2", sshd_as_localhost, "localhost")):
            m.add_host(name, address=address, port=server.port, user=server.user,
                       key_file=server.key_file, trust_host_key=True)
        make_pool(m, storage_type, tmp_path / "pool")
        m.config.add_storage_unit("stu1", pool="dp1", max_concurrent_jobs=3)
        m.config.add_policy("p1", storage_unit="stu1")
        srcs = {}
        for n, host in enumerate(("me", "c1", "c2")):
            srcs[host] = str(tmp_path / f"src-{host}")
            write_tree(srcs[host], nfiles=8, size=1 << 20)
            m.config.add_policy_client("p1", host)
            m.config.add_policy_selection("p1", srcs[host])
        # one policy, three clients, each backing up all three trees
        jobs = m.wait_for(m.start_backup("p1"))
        assert all(j["status"] == st.OK for j in jobs), [log_of(m, j["id"]) for j in jobs]
        started = sorted(j["started"] for j in jobs)
        ended = sorted(j["ended"] for j in jobs)
        assert started[-1] <= ended[0], "the jobs did not run at the same time"
        assert len(image_files(m)) == 3
        [vj] = m.wait_for([m.start_verify(pool="dp1")])
        assert vj["status"] == st.OK, log_of(m, vj["id"])
        for j in jobs:
            dst = str(tmp_path / f"dst-{j['id']}")
            [r] = m.wait_for([m.start_restore(j["image_id"], [srcs["me"]], dst)])
            assert r["status"] == st.OK, log_of(m, r["id"])
            assert_trees_equal(srcs["me"], dst + srcs["me"])
    finally:
        m.close()


def test_the_base_of_a_running_differential_cannot_be_expired(tmp_path, sshd, storage_type):
    m, home, src = setup(tmp_path, sshd, storage_type)
    try:
        full = backup(m, "full")["image_id"]
        with open(os.path.join(src, "d1", "f1.bin"), "wb") as f:
            f.write(b"changed after the full\n")
        with client_stopped(m):
            jid, t, box = start_held(m, "diff", f"compared with image {full}")
            p = cairn(home, "images", "expire", full, "--with-dependents", check=False,
                      timeout=120)
        t.join(120)
        job = box["job"]
        assert job["status"] == st.OK, log_of(m, jid)
        # what the old code lost: every unchanged file of the differential
        restored_equal(m, tmp_path, job["image_id"], src, "restored")
        assert p.returncode == st.INVALID_REQUEST, (p.stdout, p.stderr)
        assert f"image {full} cannot be expired now" in p.stderr
        assert f"backup job {jid}" in p.stderr and "base of its differential" in p.stderr
        assert f"wait for job {jid} to end" in p.stderr
        assert m.image(full)["expiring"] is None
        # once the backup has ended the image goes, with the differential that reads it
        p = cairn(home, "images", "expire", full, "--with-dependents")
        assert {i["id"] for i in m.images()} == set()
    finally:
        m.close()


def test_a_base_removed_behind_cairns_back_fails_the_backup_before_it_commits(
        tmp_path, sshd, storage_type):
    m, home, src = setup(tmp_path, sshd, storage_type)
    try:
        full = m.image(backup(m, "full")["image_id"])
        with open(os.path.join(src, "d2", "f2.bin"), "wb") as f:
            f.write(b"changed\n")
        with client_stopped(m):
            jid, t, box = start_held(m, "diff", f"compared with image {full['id']}")
            os.unlink(full["path"])
        t.join(120)
        job = box["job"]
        assert job["status"] == st.IMAGE_DAMAGED, log_of(m, jid)
        text = log_of(m, jid)
        assert f"image {full['id']}: its file {full['path']} is missing" in text
        assert "the image was not committed" in text
        assert [i["id"] for i in m.images()] == [full["id"]]
        # nothing of the failed image is left: no pool file, no catalog index
        assert image_files(m, "dp") == []
        assert sorted(os.listdir(m.home.indexes)) == [f"{full['id']}.cidx"]
        assert m.db.all("SELECT * FROM image_commits") == []
        # the next differential does not trust the broken full: it is taken as a full
        job = backup(m, "diff")
        assert "taken as a full backup" in log_of(m, job["id"])
        assert m.image(job["image_id"])["schedule_type"] == "full"
        restored_equal(m, tmp_path, job["image_id"], src, "restored")
    finally:
        m.close()
