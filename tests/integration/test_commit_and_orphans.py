"""Nothing pins pool space forever. Pool files no catalog image owns (left by a Cairn whose
commits were not recoverable: a backup killed at its commit, tests/killhelp.py) are listed by
verify, removed by `cairn disk-pool cleanup` and not kept alive by space reclaim; a retention
too long to date is refused when it is given, and a schedule that holds one from before fails
its backups before anything is written. A master killed at each step of a backup or an expire,
for every storage type, is in the conformance suite (tests/storage/test_storage_crash.py)."""

import json
import os

import pytest

from app import status as st
from app.master import Master
from clihelp import cairn, cairn_json
from killhelp import age, forget_commit, killed_backup, next_master_run
from treegen import assert_trees_equal


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


def pool_files(m):
    out = []
    for vol in m.config.disk_pool("dp")["volumes"]:
        for d, _, files in os.walk(vol):
            out += [os.path.join(d, f) for f in files
                    if f.endswith((".tar", ".recipe", ".partial"))]
    return sorted(out)


def log_of(m, jid):
    return "\n".join(x["message"] for x in m.jobs.logs(jid))


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


def test_an_index_file_a_killed_master_left_is_removed_once_no_running_job_may_own_it(
        tmp_path):
    from app.jobs import cleanup
    m = Master(str(tmp_path / "home"))
    try:
        os.makedirs(m.home.indexes, exist_ok=True)
        stale = os.path.join(m.home.indexes, "me_1_5.cidx.tmp")
        young = os.path.join(m.home.indexes, "me_1_6.cidx.tmp")
        done = os.path.join(m.home.indexes, "me_1_4.cidx")
        for p in (stale, young, done):
            write_file(p, b"x")
        age(stale, 3600)
        age(done, 3600)
        # a job running since before the stale file was written may still own it
        jid = m.jobs.create("verify", params={"pool": "dp"})
        assert m.jobs.claim(jid, "test")
        with m.db.tx() as c:
            c.execute("UPDATE jobs SET started=? WHERE id=?",
                      ("2000-01-01T00:00:00Z", jid))
        assert cleanup.remove_stale_index_temps(m) == []
        m.jobs.finish(jid, 0)
        assert cleanup.remove_stale_index_temps(m) == ["me_1_5.cidx.tmp"]
        assert sorted(os.listdir(m.home.indexes)) == ["me_1_4.cidx", "me_1_6.cidx.tmp"]
    finally:
        m.close()
