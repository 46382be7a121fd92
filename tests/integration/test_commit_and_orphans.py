"""Nothing pins pool space forever. A backup killed (SIGKILL) at its commit leaves either a
recorded image or nothing once the next master run has looked; pool files no catalog image owns
are listed by verify, removed by `cairn disk-pool cleanup` and not kept alive by space reclaim;
a retention too long to date is refused when it is given, and a schedule that holds one from
before fails its backups before anything is written.

The kill is real: `cairn backup --wait` runs in a process of its own whose agent client kills
that process (SIGKILL) right before or right after the storage server's agent renames the
image into place, so nothing of it runs past that point. A minute of waiting for the
dispatcher to notice is played by ageing the dead process's lease and heartbeat in the
catalog. An expire job killed the same way between the images it removes is resolved too."""

import json
import os
import sqlite3
import sys
import time

import pytest

from app import status as st
from app.master import Master
from clihelp import ROOT, cairn, cairn_json
from treegen import assert_trees_equal

KILL_AT = """
import os, signal, sys
sys.path.insert(0, {root!r})
from app.transport import agent_client
at, when = sys.argv[1], sys.argv[2]
call = agent_client.AgentConnection.call
def killing_call(self, op, args=None, **kw):
    if op == at and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    result = call(self, op, args, **kw)
    if op == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return result
agent_client.AgentConnection.call = killing_call
from app.cli import main
sys.exit(main(sys.argv[3:]))
"""


def write_file(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture
def setup(tmp_path):
    def make(pool_type):
        home, src = str(tmp_path / "home"), str(tmp_path / "src")
        for i in range(8):
            write_file(f"{src}/d{i % 2}/f{i}.bin", os.urandom(30_000))
        m = Master(home)
        m.config.add_host("me", local=True)
        if pool_type == "dedup":
            m.create_storage_server("ss", type="dedup", host="me", path=str(tmp_path / "pool"))
            m.create_disk_pool("dp", server="ss", volumes=[])
        else:
            (tmp_path / "vol").mkdir()
            m.config.add_storage_server("ss", type="advanced-disk", host="me")
            m.create_disk_pool("dp", server="ss", volumes=[str(tmp_path / "vol")])
        m.config.add_storage_unit("stu", pool="dp", max_concurrent_jobs=2)
        m.config.add_policy("p", storage_unit="stu")
        m.config.add_policy_client("p", "me")
        m.config.add_policy_selection("p", src)
        m.config.add_schedule("p", "full", type="full", retention="1w")
        made.append(m)
        return m, home, src
    made = []
    yield make
    for m in made:
        m.close()


def killed_backup(home, when):
    """`cairn backup p --wait`, killed by SIGKILL before or after the commit's rename."""
    return killed(home, "commit_image", when, "backup", "p", "--wait")


def killed(home, op, when, *args):
    """A `cairn` command killed by SIGKILL right before or right after its first call of
    agent operation `op`; returns the newest job's id."""
    import subprocess
    env = dict(os.environ, CAIRN_HOME=home, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-c", KILL_AT.format(root=ROOT), op, when, *args],
                       env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == -9, (p.returncode, p.stdout, p.stderr)
    # a minute later, as far as the catalog can tell: the lease has run out, the job's
    # heartbeat has stopped
    with sqlite3.connect(os.path.join(home, "catalog.db")) as db:
        db.execute("UPDATE leases SET expires=0")
        db.execute("UPDATE jobs SET heartbeat=0 WHERE state='active'")
        [(jid,)] = db.execute("SELECT max(id) FROM jobs").fetchall()
    return jid


def forget_commit(home):
    """What a Cairn that did not record its commits left after such a kill: nothing in the
    catalog."""
    with sqlite3.connect(os.path.join(home, "catalog.db")) as db:
        db.execute("DELETE FROM image_commits")


def next_master_run(home):
    cairn(home, "master", "run", "--until-idle")


def pool_files(m):
    out = []
    for vol in m.config.disk_pool("dp")["volumes"]:
        for d, _, files in os.walk(vol):
            out += [os.path.join(d, f) for f in files
                    if f.endswith((".tar", ".recipe", ".partial"))]
    return sorted(out)


def age(path, seconds=3600):
    t = time.time() - seconds
    os.utime(path, (t, t))


def log_of(m, jid):
    return "\n".join(x["message"] for x in m.jobs.logs(jid))


@pytest.mark.parametrize("pool_type", ["advanced-disk", "dedup"])
def test_a_kill_after_the_rename_leaves_a_recorded_image(setup, tmp_path, pool_type):
    m, home, src = setup(pool_type)
    jid = killed_backup(home, "after")
    [left] = pool_files(m)
    assert not os.path.basename(left).startswith(".")      # renamed into place
    next_master_run(home)
    job = m.jobs.get(jid)
    assert job["status"] == st.INTERNAL                     # the process did stop
    img = m.image(job["image_id"])
    assert img["path"] == left and img["job_id"] == jid
    assert "it is recorded in the catalog now" in log_of(m, jid)
    assert m.db.all("SELECT * FROM image_commits") == []
    to = str(tmp_path / "restored")
    [r] = m.wait_for([m.start_restore(img["id"], [src], to)])
    assert r["status"] == st.OK, log_of(m, r["id"])
    assert_trees_equal(src, to + src)


@pytest.mark.parametrize("pool_type", ["advanced-disk", "dedup"])
def test_a_kill_before_the_rename_leaves_nothing(setup, pool_type):
    m, home, src = setup(pool_type)
    jid = killed_backup(home, "before")
    [left] = pool_files(m)
    assert os.path.basename(left).startswith(".") and left.endswith(".partial")
    next_master_run(home)
    assert m.jobs.get(jid)["status"] == st.INTERNAL
    assert m.images() == [] and pool_files(m) == []
    assert os.listdir(m.home.indexes) == []
    assert m.db.all("SELECT * FROM image_commits") == []
    assert "the unfinished commit of image" in log_of(m, jid)


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_expire_killed_midway_is_resolved_by_the_next_run(setup, tmp_path, when):
    m, home, src = setup("advanced-disk")
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


def test_advanced_disk_orphans_are_listed_and_removed_by_cleanup(setup):
    m, home, src = setup("advanced-disk")
    kept = cairn_json(home, "backup", "p", "--wait")[0]["jobs"][0]["image_id"]
    # orphans as a Cairn without recoverable commits left them: a committed image and a
    # partial one that the catalog never recorded
    killed_backup(home, "after")
    forget_commit(home)
    killed_backup(home, "before")
    forget_commit(home)
    next_master_run(home)
    kept_path = m.image(kept)["path"]
    orphans = [p for p in pool_files(m) if p != kept_path]
    assert len(orphans) == 2 and any(p.endswith(".tar.partial") for p in orphans)
    for p in orphans:
        age(p)
    folder = os.path.dirname(kept_path)
    young = os.path.join(folder, "young_1_1.tar")     # as a backup running now would write
    write_file(young, b"being written")
    foreign = os.path.join(folder, "notes.txt")
    write_file(foreign, b"not Cairn's")
    age(foreign)

    doc, _ = cairn_json(home, "disk-pool", "cleanup", "dp", "--dry-run", "--wait")
    [job] = doc["jobs"]
    assert job["status"] == st.OK and job["files"] == 2
    result = m.jobs.get(job["id"])["result"]
    assert sorted(result["orphans"]) == sorted(orphans) and result["removed"] == []
    unknown = {f["path"]: f for f in result["unknown"]}
    assert not unknown[young]["orphan"] and "running now" in unknown[young]["why"]
    assert not unknown[foreign]["orphan"] and "not a file name Cairn makes" in \
        unknown[foreign]["why"]
    assert all(os.path.exists(p) for p in orphans)

    doc, _ = cairn_json(home, "disk-pool", "cleanup", "dp", "--wait")
    [job] = doc["jobs"]
    assert job["status"] == st.OK and job["files"] == 2
    assert not any(os.path.exists(p) for p in orphans)
    assert os.path.exists(young) and os.path.exists(foreign) and os.path.exists(kept_path)
    assert [i["id"] for i in m.images()] == [kept]


def usage(home):
    return cairn_json(home, "disk-pool", "usage", "dp")[0]


def test_a_dedup_orphan_is_listed_by_verify_and_its_chunks_freed_after_cleanup(setup,
                                                                            tmp_path):
    m, home, src = setup("dedup")
    kept = cairn_json(home, "backup", "p", "--wait")[0]["jobs"][0]["image_id"]
    # data only the orphan holds
    write_file(f"{src}/unique.bin", os.urandom(3 << 20))
    killed_backup(home, "after")
    forget_commit(home)
    next_master_run(home)
    kept_path = m.image(kept)["path"]
    [orphan] = [p for p in pool_files(m) if p != kept_path]
    age(orphan)
    before = usage(home)

    doc, _ = cairn_json(home, "disk-pool", "verify", "dp", "--wait")
    [job] = doc["jobs"]
    assert job["status"] == st.OK, log_of(m, job["id"])
    [unknown] = m.jobs.get(job["id"])["result"]["unknown_files"]
    assert unknown["path"] == orphan and unknown["orphan"]
    assert "is not in the catalog" in unknown["why"]
    assert "cairn disk-pool cleanup dp" in log_of(m, job["id"])

    doc, _ = cairn_json(home, "disk-pool", "cleanup", "dp", "--wait")
    assert doc["jobs"][0]["status"] == st.OK and not os.path.exists(orphan)
    doc, _ = cairn_json(home, "disk-pool", "reclaim", "dp", "--wait")
    assert doc["jobs"][0]["status"] == st.OK
    after = usage(home)
    assert before["stored_bytes"] - after["stored_bytes"] >= 3 << 20, (before, after)
    # what the catalog holds is untouched
    os.unlink(f"{src}/unique.bin")
    to = str(tmp_path / "restored")
    [r] = m.wait_for([m.start_restore(kept, [src], to)])
    assert r["status"] == st.OK, log_of(m, r["id"])
    assert_trees_equal(src, to + src)


def test_reclaim_keeps_no_chunks_for_an_old_orphan_recipe_but_a_young_one_stays(setup):
    m, home, src = setup("dedup")
    write_file(f"{src}/unique.bin", os.urandom(2 << 20))
    killed_backup(home, "after")
    forget_commit(home)
    next_master_run(home)
    [orphan] = pool_files(m)
    # young: as the recipe of a backup that commits right now
    doc, _ = cairn_json(home, "disk-pool", "reclaim", "dp", "--wait")
    assert os.path.exists(orphan)
    assert usage(home)["stored_bytes"] >= 2 << 20
    age(orphan)
    doc, _ = cairn_json(home, "disk-pool", "reclaim", "dp", "--wait")
    [job] = doc["jobs"]
    assert job["status"] == st.OK
    assert m.jobs.get(job["id"])["result"]["orphan_recipes_removed"] == [orphan]
    assert "which no catalog image owns" in log_of(m, job["id"])
    assert not os.path.exists(orphan)
    assert usage(home)["stored_bytes"] < 1 << 20


def test_a_retention_of_10000_years_is_refused_at_once_and_nothing_is_written(setup):
    m, home, src = setup("advanced-disk")
    p = cairn(home, "policy", "add-schedule", "p", "long", "--type", "full", "--retention",
              "10000y", check=False)
    assert p.returncode == st.INVALID_REQUEST
    assert "retention '10000y' is longer than 100y" in p.stderr
    assert "use at most 100y, or 'infinite'" in p.stderr and "Traceback" not in p.stderr
    assert [s["name"] for s in m.config.policy("p")["schedules"]] == ["full"]
    cairn(home, "policy", "add-schedule", "p", "century", "--type", "full", "--retention",
          "100y")
    for args in (["policy", "add-schedule", "p", "often", "--type", "full", "--frequency",
                  "200y", "--window", "daily 22:00 8h"],
                 ["master", "set", "retry_delay", "101y"]):
        p = cairn(home, *args, check=False)
        assert p.returncode == st.INVALID_REQUEST and "longer than 100y" in p.stderr, p.stderr
    assert m.setting("retry_delay") == "10m"


def test_a_schedule_saved_with_an_undatable_retention_fails_before_writing(setup):
    m, home, src = setup("advanced-disk")
    # as a catalog written before retentions were limited holds it
    with m.db.tx() as c:
        c.execute("UPDATE schedules SET retention_s=? WHERE name='full'",
                  (10000 * 365 * 86400,))
    doc, p = cairn_json(home, "backup", "p", "--wait", check=False)
    [job] = doc["jobs"]
    assert job["status"] == st.INVALID_REQUEST, log_of(m, job["id"])
    text = log_of(m, job["id"])
    assert "keeps images for 10000y: their expiry date cannot be written" in text
    assert "nothing was backed up" in text and "Traceback" not in text
    assert m.images() == [] and pool_files(m) == [] and os.listdir(m.home.indexes) == []
    # the schedule mended, the next backup works
    with m.db.tx() as c:
        c.execute("UPDATE schedules SET retention_s=? WHERE name='full'", (86400,))
    doc, _ = cairn_json(home, "backup", "p", "--wait")
    assert doc["jobs"][0]["status"] == st.OK
    assert json.loads(json.dumps(m.images()))[0]["expires"] is not None
