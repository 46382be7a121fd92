"""A backup that ends with status 0 must be restorable: no expiry may remove an image that a
running backup reads from (its incremental base, its files cache), and a base that vanishes
anyway fails the backup before it commits.

The race is played for real: a client reached over the loopback sshd, the storage on this
host, and the client's agent process stopped (SIGSTOP) once the backup has chosen its base, so
the backup is held at a known point while `cairn images expire` runs in another process. On
the code before holds, the expire went through, the differential committed with status 0 and
its restore failed with 62 ("needs image ... no longer in the catalog")."""

import os
import signal
import threading
import time
from contextlib import contextmanager

import pytest

from app import status as st
from app.jobs import expire
from app.master import Master
from clihelp import cairn
from treegen import assert_trees_equal

pytestmark = pytest.mark.ssh


def write_tree(root, nfiles=24, size=20_000):
    for i in range(nfiles):
        d = os.path.join(root, f"d{i % 4}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.bin"), "wb") as f:
            f.write(os.urandom(size // 2) + bytes([i]) * (size // 2))


def setup(tmp_path, sshd, pool_type):
    home, src = str(tmp_path / "home"), str(tmp_path / "src")
    write_tree(src)
    m = Master(home)
    m.config.add_host("me", local=True)
    m.add_host("cl", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    if pool_type == "dedup":
        m.create_storage_server("ss", type="dedup", host="me", path=str(tmp_path / "pool"))
        m.create_disk_pool("dp", server="ss", volumes=[])
    else:
        vol = tmp_path / "vol"
        vol.mkdir()
        m.config.add_storage_server("ss", type="advanced-disk", host="me")
        m.create_disk_pool("dp", server="ss", volumes=[str(vol)])
    m.config.add_storage_unit("stu", pool="dp", max_concurrent_jobs=4)
    m.config.add_policy("p", storage_unit="stu")
    m.config.add_policy_client("p", "cl")
    m.config.add_policy_selection("p", src)
    m.config.add_schedule("p", "full", type="full", retention="1w")
    m.config.add_schedule("p", "diff", type="differential", retention="1w")
    return m, home, src


def backup(m, schedule):
    [job] = m.wait_for(m.start_backup("p", schedule=schedule))
    assert job["status"] == st.OK, log_of(m, job["id"])
    return job


def log_of(m, jid):
    return "\n".join(x["message"] for x in m.jobs.logs(jid))


def restored_equal(m, tmp_path, image_id, src, name):
    to = str(tmp_path / name)
    [job] = m.wait_for([m.start_restore(image_id, [src], to, to_host="me")])
    assert job["status"] == st.OK, log_of(m, job["id"])
    assert_trees_equal(src, to + src)


@contextmanager
def client_stopped(m):
    """The client's agent process stopped: a backup started now chooses its base and then
    waits, held, until the block ends."""
    pid = m.hosts.connect(m.config.host("cl")).call("ping")["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def start_held(m, schedule, mark):
    """Starts a backup in a thread and waits until its log shows `mark` (its base chosen)."""
    [jid] = m.start_backup("p", schedule=schedule)
    box = {}
    t = threading.Thread(target=lambda: box.update(job=m.wait_for([jid])[0]), daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while mark not in log_of(m, jid):
        assert time.monotonic() < deadline, log_of(m, jid)
        assert m.jobs.get(jid)["state"] != "done", log_of(m, jid)
        time.sleep(0.05)
    return jid, t, box


@pytest.mark.parametrize("pool_type", ["advanced-disk", "dedup"])
def test_the_base_of_a_running_differential_cannot_be_expired(tmp_path, sshd, pool_type):
    m, home, src = setup(tmp_path, sshd, pool_type)
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


def test_the_files_cache_of_a_running_full_cannot_be_expired(tmp_path, sshd):
    m, home, src = setup(tmp_path, sshd, "dedup")
    try:
        first = backup(m, "full")["image_id"]
        with client_stopped(m):
            jid, t, box = start_held(m, "full", f"files cache: image {first}")
            p = cairn(home, "images", "expire", first, check=False, timeout=120)
        t.join(120)
        assert box["job"]["status"] == st.OK, log_of(m, jid)
        assert p.returncode == st.INVALID_REQUEST, (p.stdout, p.stderr)
        assert f"backup job {jid}" in p.stderr and "as its files cache" in p.stderr
        restored_equal(m, tmp_path, box["job"]["image_id"], src, "restored")
        cairn(home, "images", "expire", first)
        restored_equal(m, tmp_path, box["job"]["image_id"], src, "restored-again")
    finally:
        m.close()


def test_retention_postpones_an_image_a_running_backup_reads(tmp_path, sshd):
    m, home, src = setup(tmp_path, sshd, "advanced-disk")
    try:
        full = backup(m, "full")["image_id"]
        later = time.time() + 30 * 86400  # past the week of retention
        with client_stopped(m):
            jid, t, box = start_held(m, "diff", f"compared with image {full}")
            # the scheduler's expiry run: nothing is queued while the backup reads the image
            assert m.expire_due(later) == []
            assert f"the retention of image {full} has ended" in log_of(m, jid)
            # an expiry queued before the backup started, running now: the image is kept
            ej = expire.make_job(m, [full], expire.RETENTION)
            deadline = time.monotonic() + 60
            while m.jobs.get(ej)["state"] != "done":
                assert time.monotonic() < deadline
                time.sleep(0.05)
        t.join(120)
        assert box["job"]["status"] == st.OK, log_of(m, jid)
        assert m.jobs.get(ej)["status"] == st.OK
        assert f"image {full} is kept for now" in log_of(m, ej)
        assert f"backup job {jid} still reads it" in log_of(m, ej)
        assert m.image(full)["expiring"] is None
        restored_equal(m, tmp_path, box["job"]["image_id"], src, "restored")
        # the next run, after the backup: the full goes with the differential that reads it
        # (whose own retention has ended by then too)
        jobs = m.expire_due(later)
        assert len(jobs) == 1
        m.wait_for(jobs)
        assert m.images() == []
    finally:
        m.close()


@pytest.mark.parametrize("pool_type", ["advanced-disk", "dedup"])
def test_a_base_removed_behind_cairns_back_fails_the_backup_before_it_commits(
        tmp_path, sshd, pool_type):
    m, home, src = setup(tmp_path, sshd, pool_type)
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
        pool_dir = os.path.dirname(full["path"])
        assert os.listdir(pool_dir) == [], os.listdir(pool_dir)
        assert sorted(os.listdir(m.home.indexes)) == [f"{full['id']}.cidx"]
        assert m.db.all("SELECT * FROM image_commits") == []
        # the next differential does not trust the broken full: it is taken as a full
        job = backup(m, "diff")
        assert "taken as a full backup" in log_of(m, job["id"])
        assert m.image(job["image_id"])["schedule_type"] == "full"
        restored_equal(m, tmp_path, job["image_id"], src, "restored")
    finally:
        m.close()
