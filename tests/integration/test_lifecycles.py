"""Second copies through lifecycles, end to end: a policy under a lifecycle backs up, its
duplicate job copies the image to a pool on another host over SSH and the data plane, `images
copies` lists both; with the primary pool's files gone a restore falls back to the copy (and
says so), `--copy 2` reads the copy; an unchanged second full between two deduplicating pools
sends under 1% of the image; an incremental's copy brings its base along; the master killed
mid-duplication leaves no copy recorded and the next master finishes or redoes it; the
primary copy expires and the image stays restorable from its copy until that one expires."""

import os
import shutil
import sqlite3
import sys
import time

import pytest

from app import status as st
from app.jobs import copies
from app.jobs.duplicate_queue import queue_after_backup
from app.master import Master
from clihelp import cairn, cairn_json
from killhelp import killed
from treegen import assert_trees_equal, make_tree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "storage"))
from storage_sites import damage_data  # noqa: E402 - the conformance suite's way to damage a file

PAIRS = [("advanced-disk", "dedup"), ("dedup", "dedup"), ("dedup", "advanced-disk")]


def log_text(m, job_id):
    return "\n".join(x["message"] for x in m.jobs.logs(job_id))


def cli_server(home, name, type_, host, where):
    """A storage server, its disk pool and storage unit, through the CLI."""
    if type_ == "dedup":
        cairn(home, "storage-server", "create", name, "--type", "dedup", "--host", host,
              "--path", where)
        cairn(home, "disk-pool", "create", f"{name}-pool", "--server", name)
    else:
        os.makedirs(where, exist_ok=True)
        cairn(home, "storage-server", "create", name, "--type", "advanced-disk", "--host", host)
        cairn(home, "disk-pool", "create", f"{name}-pool", "--server", name, "--volume", where)
    cairn(home, "storage-unit", "create", f"{name}-stu", "--pool", f"{name}-pool")


def lose(path):
    """Everything a pool keeps under `path`, gone."""
    for name in os.listdir(path):
        p = os.path.join(path, name)
        shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)


@pytest.mark.ssh
@pytest.mark.parametrize("source, target", PAIRS)
def test_a_copy_on_another_host_restores_when_the_primary_pool_is_lost(tmp_path, sshd, source,
                                                                       target):
    home, src = tmp_path / "home", tmp_path / "src"
    make_tree(str(src))
    (src / "bulk.bin").write_bytes(os.urandom(8 << 20))
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "host", "add", "far", "--address", sshd.host, "--port", sshd.port, "--user",
          sshd.user, "--key", sshd.key_file, "--trust-host-key")
    cli_server(home, "near", source, "me", str(tmp_path / "near"))
    cli_server(home, "away", target, "far", str(tmp_path / "away"))
    doc, _ = cairn_json(home, "lifecycle", "create", "gold", "--step", "backup:near-stu:2w",
                        "--step", "duplicate:away-stu:8w")
    assert [s["host"] for s in doc["steps"]] == ["me", "far"]
    cairn(home, "policy", "create", "p", "--lifecycle", "gold")
    cairn(home, "policy", "add-client", "p", "me")
    cairn(home, "policy", "add-selection", "p", str(src))

    def backup():
        doc, _ = cairn_json(home, "backup", "p", "--wait")
        assert doc["status"] == 0, doc
        [dup] = doc["duplicates"]
        done, _ = cairn_json(home, "jobs", "wait", str(dup["id"]))
        assert done["status"] == 0, cairn(home, "jobs", "log", str(dup["id"])).stdout
        return doc["jobs"][0]["image_id"], dup["id"]

    image, dup = backup()
    log = cairn(home, "jobs", "log", str(dup)).stdout
    assert "data plane: me -> far" in log and "TLS" in log
    listed, _ = cairn_json(home, "images", "copies", image)
    assert [(c["copy"], c["primary"], c["pool"], c["storage_host"], c["state"])
            for c in listed["copies"]] == [(1, True, "near-pool", "me", "ok"),
                                          (2, False, "away-pool", "far", "ok")]
    assert listed["copies"][1]["expires"] > listed["copies"][0]["expires"]
    if source == target == "dedup":
        # an unchanged second full: only what the far pool lacks goes over
        image, dup = backup()
        job, _ = cairn_json(home, "jobs", "show", str(dup))
        [c] = job["result"]["copies"]
        assert c["mode"] == "chunks" and c["sent_bytes"] < c["image_bytes"] / 100, job["result"]

    lose(str(tmp_path / "near"))
    doc, _ = cairn_json(home, "restore", image, "--path", str(src), "--to", tmp_path / "out",
                        "--wait")
    rid = doc["jobs"][0]["id"]
    log = cairn(home, "jobs", "log", str(rid)).stdout
    assert doc["status"] == 0, log
    assert "copy 1 (disk pool near-pool on me) cannot be read" in log
    assert "falling back to copy 2 (disk pool away-pool on far)" in log
    assert_trees_equal(str(src), str(tmp_path / "out") + str(src))

    doc, _ = cairn_json(home, "restore", image, "--path", str(src), "--to", tmp_path / "out2",
                        "--copy", "2", "--wait")
    assert doc["status"] == 0
    assert_trees_equal(str(src), str(tmp_path / "out2") + str(src))
    # copy 1 alone: no fallback, the job says why it failed
    doc, _ = cairn_json(home, "restore", image, "--path", str(src), "--to", tmp_path / "out3",
                        "--copy", "1", "--wait", check=False)
    assert doc["status"] == st.IMAGE_DAMAGED
    log = cairn(home, "jobs", "log", str(doc["jobs"][0]["id"])).stdout
    assert "copy 1 (disk pool near-pool on me) cannot be read" in log and "copy 2" not in log
    p = cairn(home, "restore", image, "--path", str(src), "--to", tmp_path / "out4",
              "--copy", "3", check=False)
    assert p.returncode == st.INVALID_REQUEST and "has no copy 3" in p.stderr


def two_pool_master(tmp_path, source="dedup", target="dedup"):
    """A master with two pools on this host (p1 the backups', p2 the copies'), lifecycle gold
    and policy p (full and differential schedules) writing to stu1 without it."""
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    for n, t in ((1, source), (2, target)):
        where = tmp_path / f"pool{n}"
        if t == "dedup":
            m.create_storage_server(f"s{n}", type=t, host="me", path=str(where))
            m.create_disk_pool(f"p{n}", server=f"s{n}", volumes=[])
        else:
            where.mkdir()
            m.create_storage_server(f"s{n}", type=t, host="me")
            m.create_disk_pool(f"p{n}", server=f"s{n}", volumes=[str(where)])
        m.create_storage_unit(f"stu{n}", pool=f"p{n}")
    m.create_lifecycle("gold", ["backup:stu1:1w", "duplicate:stu2:4w"])
    m.create_policy("p", storage_unit="stu1", clients=["me"],
                    selections=[str(tmp_path / "src")],
                    schedules=[{"name": "full", "type": "full"},
                               {"name": "incr", "type": "differential"}])
    return m


def backup(m, schedule):
    [job] = m.wait_for(m.start_backup("p", schedule=schedule))
    assert job["status"] == st.OK, log_text(m, job["id"])
    return job


def test_an_incremental_is_copied_with_its_base_and_restores_from_the_copy(tmp_path):
    src = tmp_path / "src"
    make_tree(str(src))
    m = two_pool_master(tmp_path, "advanced-disk", "dedup")
    try:
        full = backup(m, "full")["image_id"]      # before the lifecycle: no copy
        m.update_object("policy", "p", lifecycle="gold")
        (src / "new.txt").write_text("after the full\n")
        job = backup(m, "incr")
        incr = job["image_id"]
        [dup] = m.duplicate_jobs([job["id"]])
        [dup] = m.wait_for([dup["id"]])
        log = log_text(m, dup["id"])
        assert dup["status"] == st.OK, log
        assert f"the images it reads data from are copied first, oldest first: {full}" in log
        assert [c["pool"] for c in copies.copies(m.db, full)] == ["p1", "p2"]
        assert dup["files"] == 2 and len(dup["result"]["copies"]) == 2
        lose(str(tmp_path / "pool1"))
        [r] = m.wait_for([m.start_restore(incr, [str(src)], str(tmp_path / "out"))])
        assert r["status"] == st.OK, log_text(m, r["id"])
        assert "falling back to copy 2" in log_text(m, r["id"])
        assert_trees_equal(str(src), str(tmp_path / "out") + str(src))
    finally:
        m.close()


def test_the_primary_copy_expires_first_and_the_image_stays_restorable(tmp_path):
    src = tmp_path / "src"
    make_tree(str(src))
    m = two_pool_master(tmp_path, "advanced-disk", "advanced-disk")
    try:
        m.update_object("policy", "p", lifecycle="gold")
        job = backup(m, "full")
        image = job["image_id"]
        m.wait_for([d["id"] for d in m.duplicate_jobs([job["id"]])])
        [c1, c2] = copies.copies(m.db, image)
        # ten days on: copy 1 (1w) has ended, copy 2 (4w) has not
        jobs = m.expire_due(time.time() + 10 * 86400)
        [ej] = m.wait_for(jobs)
        assert ej["status"] == st.OK, log_text(m, ej["id"])
        assert not os.path.exists(c1["path"]) and os.path.exists(c2["path"])
        [left] = m.image_copies(image)["copies"]
        assert (left["copy"], left["primary"], left["pool"]) == (2, True, "p2")
        assert m.image(image)["expires"] == c2["expires"]
        [r] = m.wait_for([m.start_restore(image, [str(src)], str(tmp_path / "out"))])
        assert r["status"] == st.OK, log_text(m, r["id"])
        assert_trees_equal(str(src), str(tmp_path / "out") + str(src))
        # five weeks on: its last copy has ended, and the image is gone
        [ej] = m.wait_for(m.expire_due(time.time() + 35 * 86400))
        assert ej["status"] == st.OK, log_text(m, ej["id"])
        assert m.images() == [] and not os.path.exists(c2["path"])
        assert not os.path.exists(m.home.index_path(image))
        assert m.db.one("SELECT count(*) FROM image_copies")[0] == 0
    finally:
        m.close()


def queued_copy(home):
    """A backup of policy p (no lifecycle: nothing copies it yet) and the duplicate job a
    backup under lifecycle gold queues; the master closed. Returns (image, its source dir)."""
    m = two_pool_master(home.parent)
    try:
        image = backup(m, "full")["image_id"]
        m.set_setting("retry_delay", "1s")
        with m.db.tx() as c:
            queue_after_backup(m, c, dict(m.image(image), lifecycle="gold"))
        return image
    finally:
        m.close()


def partials(root):
    return [f for d, _, fs in os.walk(root) for f in fs if f.endswith(".partial")]


@pytest.mark.parametrize("op, when, outcome", [("copy_image", "sent", "removed"),
                                               ("commit_image", "before", "removed"),
                                               ("commit_image", "after", "recorded")])
def test_a_master_killed_mid_duplication_leaves_no_half_copy(tmp_path, op, when, outcome):
    """kill -9 of a real master process while its duplicate job copies, before the copy's
    rename and after it: nothing half-made is recorded; the next master records a renamed
    copy, removes anything else, and tries the duplication again."""
    make_tree(str(tmp_path / "src"))
    home = tmp_path / "home"
    image = queued_copy(home)
    jid = killed(str(home), op, when, "master", "run", "--until-idle")
    with sqlite3.connect(home / "catalog.db") as db:
        assert db.execute("SELECT count(*) FROM image_copies").fetchone()[0] == 0
        assert db.execute("SELECT phase FROM copy_commits").fetchall() == \
            [("committing" if op == "commit_image" else "writing",)]
    cairn(home, "master", "run", "--until-idle")
    m = Master(str(home))
    try:
        assert [c["copy"] for c in copies.copies(m.db, image)] == [1, 2]
        assert m.db.one("SELECT count(*) FROM copy_commits")[0] == 0
        assert partials(tmp_path / "pool2") == []
        killed_log = log_text(m, jid)
        assert ("is recorded in the catalog now" if outcome == "recorded"
                else "the unfinished copy of image") in killed_log, killed_log
        again = m.db.one("SELECT id FROM jobs WHERE retry_of=?", (jid,))[0]
        assert m.job(again)["status"] == st.OK, log_text(m, again)
        if outcome == "recorded":
            assert "has copy 2 in disk pool p2 already" in log_text(m, again)
        out = tmp_path / "out"
        [r] = m.wait_for([m.start_restore(image, [str(tmp_path / "src")], str(out), copy=2)])
        assert r["status"] == st.OK, log_text(m, r["id"])
        assert_trees_equal(str(tmp_path / "src"), str(out) + str(tmp_path / "src"))
    finally:
        m.close()


def test_a_duplication_that_keeps_failing_is_a_warning_until_it_is_made(tmp_path):
    """Each failed attempt is tried again; once no try is left, the missing copy is listed
    (the console's status bar warns with it) until a restart makes it."""
    make_tree(str(tmp_path / "src"))
    home = tmp_path / "home"
    m = two_pool_master(tmp_path, "advanced-disk", "advanced-disk")
    try:
        m.update_object("policy", "p", lifecycle="gold")
        m.set_setting("retry_delay", "1s")
        os.rename(tmp_path / "pool2", tmp_path / "away")   # the copies' volume is gone
        job = backup(m, "full")
    finally:
        m.close()
    cairn(home, "master", "run", "--until-idle")
    doc, _ = cairn_json(home, "lifecycle", "list")
    [f] = doc["failing"]
    assert (f["image"], f["copy"], f["pool"], f["attempts"]) == (job["image_id"], 2, "p2", 2)
    assert f["status"] == st.VOLUME_UNAVAILABLE and "no volume of disk pool p2" in f["why"]
    assert "has no copy 2 in disk pool p2" in cairn(home, "lifecycle", "list").stdout
    os.rename(tmp_path / "away", tmp_path / "pool2")
    doc, _ = cairn_json(home, "jobs", "restart", str(f["job"]), "--wait")
    assert doc["status"] == 0
    doc, _ = cairn_json(home, "lifecycle", "list")
    assert doc["failing"] == []
    listed, _ = cairn_json(home, "images", "copies", job["image_id"])
    assert [c["copy"] for c in listed["copies"]] == [1, 2]


@pytest.mark.parametrize("source", ["advanced-disk", "dedup"])
def test_a_file_damaged_in_the_primary_copy_is_read_from_the_next_copy(tmp_path, source):
    """A byte of one file's data flipped in the primary copy: every other file comes from it,
    that one from copy 2, and the job says so; with --copy 1 the file is not restored."""
    src = tmp_path / "src"
    make_tree(str(src))
    data = os.urandom(1 << 20)
    (src / "precious.bin").write_bytes(data)
    m = two_pool_master(tmp_path, source, "advanced-disk")
    try:
        m.update_object("policy", "p", lifecycle="gold")
        job = backup(m, "full")
        image = job["image_id"]
        m.wait_for([d["id"] for d in m.duplicate_jobs([job["id"]])])
        damaged = damage_data(m, m.image(image), data)
        assert damaged.startswith(str(tmp_path / "pool1"))
        [r] = m.wait_for([m.start_restore(image, [str(src)], str(tmp_path / "out"))])
        log = log_text(m, r["id"])
        assert r["status"] == st.OK, log
        assert "1 item(s) whose data is damaged in the copy read first are read again from " \
               "copy 2 (disk pool p2 on me)" in log
        assert "1 of those 1 item(s) restored from copy 2" in log
        assert_trees_equal(str(src), str(tmp_path / "out") + str(src))
        [r] = m.wait_for([m.start_restore(image, [str(src)], str(tmp_path / "one"), copy=1)])
        assert r["status"] == st.CHECKSUM_MISMATCH, log_text(m, r["id"])
        assert not (tmp_path / "one" / str(src).lstrip("/") / "precious.bin").exists()
    finally:
        m.close()


def test_a_multi_stream_backup_is_copied_stream_by_stream_and_restores_from_the_copy(tmp_path):
    src = tmp_path / "src"
    make_tree(str(src))
    m = two_pool_master(tmp_path, "dedup", "advanced-disk")
    try:
        m.update_object("policy", "p", lifecycle="gold", multiple_streams=True)
        m.add_policy_selection("p", "NEW_STREAM")
        other = tmp_path / "src2"
        other.mkdir()
        (other / "x.bin").write_bytes(os.urandom(1 << 20))
        m.add_policy_selection("p", str(other))
        job = backup(m, "full")
        image = job["image_id"]
        [dup] = m.duplicate_jobs([job["id"]])
        [dup] = m.wait_for([dup["id"]])
        assert dup["status"] == st.OK, log_text(m, dup["id"])
        assert m.image(image)["copies"] == 2
        parts = m.image(image)["sources"]
        assert len(parts) == 2 and dup["files"] == 2  # the stream images; a set has no file
        for part in parts:
            assert [c["pool"] for c in copies.copies(m.db, part)] == ["p1", "p2"]
        lose(str(tmp_path / "pool1"))
        [r] = m.wait_for([m.start_restore(image, [str(src), str(other)],
                                          str(tmp_path / "out"), copy=2)])
        assert r["status"] == st.OK, log_text(m, r["id"])
        assert_trees_equal(str(src), str(tmp_path / "out") + str(src))
        assert_trees_equal(str(other), str(tmp_path / "out") + str(other))
    finally:
        m.close()


def test_a_copy_between_two_encrypted_pools_goes_by_chunks_under_each_pool_s_key(tmp_path):
    """Each pool has its own key: the source decrypts a chunk, the target encrypts it again;
    only chunks the target lacks travel, and the copy restores byte for byte."""
    src = tmp_path / "src"
    make_tree(str(src))
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        for n in (1, 2):
            m.create_storage_server(f"s{n}", type="dedup", host="me",
                                    path=str(tmp_path / f"pool{n}"),
                                    options={"encrypted": True})
            m.create_disk_pool(f"p{n}", server=f"s{n}", volumes=[])
            m.create_storage_unit(f"stu{n}", pool=f"p{n}")
        m.create_lifecycle("gold", ["backup:stu1:1w", "duplicate:stu2:4w"])
        m.create_policy("p", lifecycle="gold", clients=["me"], selections=[str(src)])
        job = backup(m, None)
        [dup] = m.wait_for([d["id"] for d in m.duplicate_jobs([job["id"]])])
        assert dup["status"] == st.OK, log_text(m, dup["id"])
        assert dup["result"]["copies"][0]["mode"] == "chunks"
        plain = (src / "big.bin").read_bytes()[:4096]
        for root, _, files in os.walk(tmp_path / "pool2" / "containers"):
            for f in files:
                assert plain not in open(os.path.join(root, f), "rb").read()
        lose(str(tmp_path / "pool1"))
        [r] = m.wait_for([m.start_restore(job["image_id"], [str(src)], str(tmp_path / "out"))])
        assert r["status"] == st.OK, log_text(m, r["id"])
        assert_trees_equal(str(src), str(tmp_path / "out") + str(src))
    finally:
        m.close()


@pytest.mark.ssh
def test_a_restore_falls_back_when_the_primary_copy_s_host_does_not_answer(tmp_path, sshd):
    """The primary copy is on a host reached over SSH that no longer answers (its port
    closed): the restore reads the copy on this host, and says why."""
    src = tmp_path / "src"
    make_tree(str(src))
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        m.add_host("far", address=sshd.host, port=sshd.port, user=sshd.user,
                   key_file=sshd.key_file, trust_host_key=True)
        for name, host in (("away", "far"), ("near", "me")):
            (tmp_path / name).mkdir()
            m.create_storage_server(name, type="advanced-disk", host=host)
            m.create_disk_pool(f"{name}-pool", server=name, volumes=[str(tmp_path / name)])
            m.create_storage_unit(f"{name}-stu", pool=f"{name}-pool")
        m.create_lifecycle("gold", ["backup:away-stu:1w", "duplicate:near-stu:4w"])
        m.create_policy("p", lifecycle="gold", clients=["me"], selections=[str(src)])
        job = backup(m, None)
        [dup] = m.wait_for([d["id"] for d in m.duplicate_jobs([job["id"]])])
        assert dup["status"] == st.OK, log_text(m, dup["id"])
        assert "data plane: far -> me" in log_text(m, dup["id"])
    finally:
        m.close()
    m = Master(str(tmp_path / "home"))   # no connection to far is kept from before
    try:
        m.update_object("host", "far", port=1)
        [r] = m.wait_for([m.start_restore(job["image_id"], [str(src)],
                                          str(tmp_path / "out"))])
        log = log_text(m, r["id"])
        assert r["status"] == st.OK, log
        assert "copy 1 (disk pool away-pool on far) cannot be read" in log
        assert "falling back to copy 2 (disk pool near-pool on me)" in log
        assert_trees_equal(str(src), str(tmp_path / "out") + str(src))
    finally:
        m.close()
