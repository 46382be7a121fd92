"""A master killed (SIGKILL) at each step of a backup, and between the images an expire job
removes, for every storage type: the next master run leaves either a recorded image that
restores or nothing, no partial file pins pool space, and the pool takes the next backup.
The kill is real (tests/killhelp.py): nothing of the killed command runs past that point."""

import os

import pytest

from app import status as st
from app.master import Master
from clihelp import cairn, cairn_json
from killhelp import killed, killed_backup, next_master_run
from storage_sites import image_files, log_of, make_pool, wait_until
from treegen import assert_trees_equal


def write_file(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture
def site(tmp_path, storage_type):
    home, src = str(tmp_path / "home"), str(tmp_path / "src")
    for i in range(8):
        write_file(f"{src}/d{i % 2}/f{i}.bin", os.urandom(30_000))
    m = Master(home)
    m.config.add_host("me", local=True)
    make_pool(m, storage_type, tmp_path / "pool", server="ss", pool="dp")
    m.config.add_storage_unit("stu", pool="dp", max_concurrent_jobs=2)
    m.config.add_policy("p", storage_unit="stu")
    m.config.add_policy_client("p", "me")
    m.config.add_policy_selection("p", src)
    m.config.add_schedule("p", "full", type="full", retention="1w")
    yield m, home, src
    m.close()


def restores(m, image_id, src, to):
    [r] = m.wait_for([m.start_restore(image_id, [src], to)])
    assert r["status"] == st.OK, log_of(m, r["id"])
    assert_trees_equal(src, to + src)


def takes_the_next_backup(m, home, src, tmp_path):
    doc, _ = cairn_json(home, "backup", "p", "--wait")
    [job] = doc["jobs"]
    assert job["status"] == st.OK, log_of(m, job["id"])
    restores(m, job["image_id"], src, str(tmp_path / "next"))


def test_a_kill_after_the_rename_leaves_a_recorded_image(site, tmp_path):
    m, home, src = site
    jid = killed_backup(home, "after")
    [left] = image_files(m, "dp")
    assert not os.path.basename(left).startswith(".")      # renamed into place
    next_master_run(home)
    job = m.jobs.get(jid)
    assert job["status"] == st.INTERNAL                     # the process did stop
    img = m.image(job["image_id"])
    assert img["path"] == left and img["job_id"] == jid
    assert "it is recorded in the catalog now" in log_of(m, jid)
    assert m.db.all("SELECT * FROM image_commits") == []
    restores(m, img["id"], src, str(tmp_path / "restored"))


def test_a_kill_before_the_rename_leaves_nothing(site, tmp_path):
    m, home, src = site
    jid = killed_backup(home, "before")
    [left] = image_files(m, "dp")
    assert os.path.basename(left).startswith(".") and left.endswith(".partial")
    next_master_run(home)
    assert m.jobs.get(jid)["status"] == st.INTERNAL
    assert m.images() == [] and image_files(m, "dp") == []
    assert os.listdir(m.home.indexes) == []
    assert m.db.all("SELECT * FROM image_commits") == []
    assert "the unfinished commit of image" in log_of(m, jid)
    takes_the_next_backup(m, home, src, tmp_path)


@pytest.mark.parametrize("op, when", [("check_volumes", "before"), ("backup", "sent")])
def test_a_kill_before_the_commit_leaves_nothing(site, tmp_path, op, when):
    """Killed while the volume is chosen, or once the client's agent writes the image: that
    agent loses its master, stops the backup and removes what it wrote."""
    m, home, src = site
    jid = killed(home, op, when, "backup", "p", "--wait")
    next_master_run(home)
    job = m.jobs.get(jid)
    assert job["status"] == st.INTERNAL and job["image_id"] is None
    assert m.images() == [] and m.db.all("SELECT * FROM image_commits") == []
    wait_until(lambda: image_files(m, "dp") == [], what="the partial image's removal")
    # the catalog index being written is left under its temporary name only
    assert [n for n in os.listdir(m.home.indexes) if not n.endswith(".tmp")] == []
    takes_the_next_backup(m, home, src, tmp_path)


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_expire_killed_midway_is_resolved_by_the_next_run(site, tmp_path, when):
    m, home, src = site
    m.config.add_schedule("p", "diff", type="differential", retention="1w")
    full = m.image(cairn_json(home, "backup", "p", "--wait")[0]["jobs"][0]["image_id"])
    write_file(f"{src}/d0/f0.bin", b"changed")
    diff = m.image(cairn_json(home, "backup", "p", "--schedule", "diff", "--wait")[0]
                   ["jobs"][0]["image_id"])
    # the newest goes first: killed before or after the differential's file is removed
    jid = killed(home, "remove_image", when, "images", "expire", full["id"],
                 "--with-dependents")
    assert {i["id"]: i["expiring"] for i in m.images()} == {full["id"]: jid, diff["id"]: jid}
    assert os.path.exists(diff["path"]) == (when == "before")
    next_master_run(home)
    assert m.jobs.get(jid)["status"] == st.INTERNAL
    if when == "after":
        assert [i["id"] for i in m.images()] == [full["id"]]
        assert not os.path.exists(m.home.index_path(diff["id"]))
        assert "its catalog entry is removed now" in log_of(m, jid)
    else:
        assert {i["id"] for i in m.images()} == {full["id"], diff["id"]}
        assert "was not expired" in log_of(m, jid)
    assert all(i["expiring"] is None for i in m.images())
    to = str(tmp_path / "restored")
    [r] = m.wait_for([m.start_restore(full["id"], [src], to)])
    assert r["status"] == st.OK, log_of(m, r["id"])
    # and the expire by hand goes through now
    cairn(home, "images", "expire", full["id"], "--with-dependents")
    assert m.images() == []
