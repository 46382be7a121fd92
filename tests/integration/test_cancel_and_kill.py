"""A cancelled and a killed backup leave no committed image: no catalog entry, no image file,
no partial file, no index."""

import os
import threading
import time

import pytest

from app import status
from app.master import Master
from clihelp import cairn, cairn_json

BIG = 4 << 30  # enough data that the job is still copying when it is stopped


def big_tree(root):
    os.makedirs(root)
    block = os.urandom(64 << 20)
    with open(os.path.join(root, "big.bin"), "wb") as f:
        for _ in range(BIG // len(block)):
            f.write(block)


@pytest.fixture(scope="module")
def bigsrc(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("big") / "src")
    big_tree(root)
    return root


def configure(m, vol, src):
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[vol])
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", src)


def nothing_committed(m, vol):
    assert m.images() == []
    leftovers = [os.path.join(d, f) for d, _, fs in os.walk(vol) for f in fs]
    assert leftovers == []
    assert os.listdir(m.home.indexes) == []


def wait_active_with_bytes(m, jid, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        j = m.jobs.get(jid)
        if j["state"] == "done":
            raise AssertionError(f"job ended before it could be stopped: {j}")
        if j["state"] == "active" and j["bytes"] > 0:
            return j
        time.sleep(0.02)
    raise AssertionError("the job never got going")


def test_cancelled_backup_through_the_cli_commits_nothing(tmp_path, bigsrc):
    vol = str(tmp_path / "vol")
    os.mkdir(vol)
    home = tmp_path / "home"
    m = Master(str(home))
    configure(m, vol, bigsrc)
    doc, _ = cairn_json(home, "backup", "p1")  # no --wait: a headless master picks it up
    jid = doc["jobs"][0]["id"]
    wait_active_with_bytes(m, jid)
    cairn(home, "jobs", "cancel", jid)
    deadline = time.time() + 60
    while m.jobs.get(jid)["state"] != "done" and time.time() < deadline:
        time.sleep(0.1)
    job = m.jobs.get(jid)
    assert job["status"] == status.CANCELED, job
    assert 0 < job["bytes"] < BIG, "the cancel should have stopped the copy under way"
    nothing_committed(m, vol)
    m.close()


def test_killed_client_agent_commits_nothing_and_says_why(tmp_path, bigsrc):
    vol = str(tmp_path / "vol")
    os.mkdir(vol)
    m = Master(str(tmp_path / "home"))
    configure(m, vol, bigsrc)
    [jid] = m.start_backup("p1")
    runner = threading.Thread(target=m.wait_for, args=([jid],), daemon=True)
    runner.start()
    wait_active_with_bytes(m, jid)
    pid = m.hosts._conns["me"].info["pid"]
    os.kill(pid, 9)
    runner.join(60)
    job = m.jobs.get(jid)
    assert job["state"] == "done" and job["status"] == status.AGENT_FAILED, job
    assert "stopped" in m.jobs.logs(jid)[-1]["message"]
    nothing_committed(m, vol)
    # and the next backup works
    [jid2] = m.start_backup("p1")
    [job2] = m.wait_for([jid2])
    assert job2["status"] == status.OK, m.jobs.logs(jid2)
    assert len(m.images()) == 1
    m.close()


def test_queued_job_waits_for_the_storage_unit_limit_and_says_why(tmp_path):
    vol = str(tmp_path / "vol")
    os.mkdir(vol)
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x" * 1000)
    m = Master(str(tmp_path / "home"))
    configure(m, vol, str(src))
    ids = [m.start_backup("p1")[0], m.start_backup("p1")[0]]
    d = m.dispatcher
    assert d.acquire_lease()
    d.tick()
    waiting = m.jobs.get(ids[1])
    assert waiting["state"] == "queued"
    assert "storage unit stu1 is at its limit of 1 concurrent job" in waiting["wait_reason"]
    d.release_lease()
    jobs = m.wait_for(ids)
    assert [j["status"] for j in jobs] == [0, 0]
    # they did not overlap
    assert jobs[1]["started"] >= jobs[0]["ended"]
    m.close()


def test_queued_jobs_wait_for_the_disk_pool_streams_and_say_why(tmp_path):
    vol = str(tmp_path / "vol")
    os.mkdir(vol)
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x" * 1000)
    m = Master(str(tmp_path / "home"))
    configure(m, vol, str(src))
    m.update_object("storage-unit", "stu1", max_concurrent_jobs=5)
    m.update_object("disk-pool", "dp1", max_io_streams=1)
    [first] = m.start_backup("p1")
    [done] = m.wait_for([first])
    ids = [m.start_backup("p1")[0],
           m.start_restore(done["image_id"], [str(src)], str(tmp_path / "out"))]
    d = m.dispatcher
    assert d.acquire_lease()
    d.tick()
    running, waiting = m.jobs.get(ids[0]), m.jobs.get(ids[1])
    assert running["state"] == "active"
    assert waiting["state"] == "queued" and waiting["type"] == "restore"
    assert waiting["wait_reason"] == "disk pool dp1 is at its limit of 1 I/O stream"
    d.release_lease()
    jobs = m.wait_for(ids)
    assert [j["status"] for j in jobs] == [0, 0]
    assert jobs[1]["started"] >= jobs[0]["ended"]
    m.close()


def test_second_dispatcher_cannot_take_the_lease(tmp_path):
    m1 = Master(str(tmp_path / "home"))
    m2 = Master(str(tmp_path / "home"))
    assert m1.dispatcher.acquire_lease()
    assert not m2.dispatcher.acquire_lease()
    m1.dispatcher.release_lease()
    assert m2.dispatcher.acquire_lease()
