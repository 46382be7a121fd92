"""A backup that ends with status 0 must be restorable: no expiry may remove an image that a
running backup reads from (its incremental base, its files cache), and a base that vanishes
anyway fails the backup before it commits.

The race is played for real: a client reached over the loopback sshd, the storage on this
host, and the client's agent process stopped (SIGSTOP) once the backup has chosen its base, so
the backup is held at a known point while `cairn images expire` runs in another process. On
the code before holds, the expire went through, the differential committed with status 0 and
its restore failed with 62 ("needs image ... no longer in the catalog"). What holds for every
storage type (a base held by a running differential, a base removed behind Cairn's back) is
in the conformance suite (tests/storage/test_storage_concurrency.py)."""

import time

import pytest

from app import status as st
from app.jobs import expire
from app.master import Master
from clihelp import cairn
from racehelp import backup, client_stopped, log_of, restored_equal, start_held, write_tree

pytestmark = pytest.mark.ssh


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
