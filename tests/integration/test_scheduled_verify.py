"""Verify on a schedule (`cairn disk-pool set POOL verify_every 7d`): the dispatcher queues a
verify of the whole pool when its interval has passed since the last one, never two at once,
behind every other job; the interval is checked, shown and can be turned off."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clihelp import cairn, cairn_json  # noqa: E402

from app import timeutil  # noqa: E402
from app.errors import ValidationError  # noqa: E402
from app.jobs import pool_jobs  # noqa: E402
from app.jobs.store import DONE  # noqa: E402
from app.master import Master  # noqa: E402

DAY = 86400


@pytest.fixture
def m(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.ensure_local_host()
    vol = tmp_path / "vol"
    vol.mkdir()
    m.create_storage_server("ss", type="advanced-disk", host=m.host_list()[0]["name"])
    m.create_disk_pool("dp", server="ss", volumes=[str(vol)])
    (tmp_path / "vol2").mkdir()
    m.create_disk_pool("dp2", server="ss", volumes=[str(tmp_path / "vol2")])
    yield m
    m.close()


def verify_jobs(m):
    return [j for j in m.job_list() if j["type"] == "verify"]


def test_a_pool_is_verified_when_its_interval_has_passed_and_never_twice_at_once(m):
    assert m.verify_due() == []  # no pool has an interval
    m.update_object("disk-pool", "dp", verify_every="7d")
    assert m.config.disk_pool("dp")["verify_every"] == 7 * DAY
    now = 1_900_000_000.0
    first = m.verify_due(now)
    assert len(first) == 1  # never verified: due now
    job = m.job(first[0])
    assert job["params"] == {"pool": "dp", "scheduled": True}
    assert job["priority"] == pool_jobs.SCHEDULED_VERIFY_PRIORITY
    assert "scheduled, every 1w" in m.job_logs(first[0])[0]["message"]
    assert m.verify_due(now + 8 * DAY) == []  # still queued: not a second one
    m.jobs.finish(first[0], 0, "done")
    created = timeutil.parse_iso(m.job(first[0])["created"])
    assert m.verify_due(created + 6 * DAY) == []  # the interval has not passed
    again = m.verify_due(created + 7 * DAY + 1)
    assert len(again) == 1 and m.job(again[0])["params"]["pool"] == "dp"
    # a verify started by hand counts as the pool's last verify too
    m.jobs.finish(again[0], 0, "done")
    by_hand = m.start_verify(pool="dp")
    m.jobs.finish(by_hand, 0, "done")
    assert m.verify_due(timeutil.parse_iso(m.job(by_hand)["created"]) + DAY) == []
    assert all(j["params"].get("pool") == "dp" for j in verify_jobs(m))  # dp2 has none


def test_the_interval_is_checked_and_can_be_turned_off(m):
    with pytest.raises(ValidationError) as e:
        m.update_object("disk-pool", "dp", verify_every="10m")
    assert "too often" in e.value.message
    with pytest.raises(ValidationError):
        m.update_object("disk-pool", "dp", verify_every="often")
    m.update_object("disk-pool", "dp", verify_every="12h")
    assert m.config.disk_pool("dp")["verify_every"] == 12 * 3600
    m.update_object("disk-pool", "dp", verify_every="never")
    assert m.config.disk_pool("dp")["verify_every"] is None
    assert m.verify_due() == []


def test_the_dispatcher_runs_a_scheduled_verify_behind_queued_backups(m, tmp_path):
    """Through the dispatcher's own housekeeping: the verify is queued, runs to its end, reads
    the pool back, and a backup queued before it runs first."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(os.urandom(5000))
    host = m.host_list()[0]["name"]
    m.create_storage_unit("stu", pool="dp")
    m.create_policy("p", storage_unit="stu")
    m.add_policy_client("p", host)
    m.add_policy_selection("p", str(src))
    backup = m.start_backup("p")[0]
    m.update_object("disk-pool", "dp", verify_every="1d")
    d = m.dispatcher
    d.acquire_lease()
    d.housekeeping()
    [verify] = [j["id"] for j in verify_jobs(m)]
    by_hand = m.start_verify(pool="dp")
    d.tick()  # the backup starts; the scheduled verify waits for the pool to be quiet
    assert m.job(by_hand)["state"] != "queued"  # one started by hand does not wait
    v = m.job(verify)
    assert v["state"] == "queued"
    assert v["wait_reason"] == ("a scheduled verify waits until no backup or restore uses or "
                                "waits for pool dp")
    m.dispatcher.run_until_done([backup, verify, by_hand])
    b, v = m.job(backup), m.job(verify)
    assert b["state"] == v["state"] == DONE
    assert b["status"] == 0 and v["status"] == 0, m.job_logs(verify)
    assert b["ended"] <= v["started"]
    # it read the backup's image back
    assert any("verify of the whole pool dp (1 image file" in line["message"]
               for line in m.job_logs(verify)), m.job_logs(verify)
    assert m.verify_due() == []  # verified just now: nothing new
    assert sorted(j["id"] for j in verify_jobs(m)) == sorted([verify, by_hand])


def test_cli_sets_shows_and_clears_the_interval(tmp_path):
    home = tmp_path / "home"
    vol = tmp_path / "vol"
    vol.mkdir()
    m = Master(str(home))
    m.ensure_local_host()
    m.create_storage_server("ss", type="advanced-disk", host=m.host_list()[0]["name"])
    m.create_disk_pool("dp", server="ss", volumes=[str(vol)])
    m.close()
    p = cairn(home, "disk-pool", "set", "dp", "verify_every", "7d")
    assert "verify_every changed" in p.stdout
    doc, _ = cairn_json(home, "disk-pool", "list")
    assert doc["disk_pools"][0]["verify_every"] == 7 * DAY
    p = cairn(home, "disk-pool", "set", "dp", "verify_every", "5m", check=False)
    assert p.returncode != 0 and "too often" in p.stderr
    cairn(home, "disk-pool", "set", "dp", "verify_every", "never")
    doc, _ = cairn_json(home, "disk-pool", "list")
    assert doc["disk_pools"][0]["verify_every"] is None


def test_a_verify_keeps_to_the_pools_pace(m, tmp_path):
    """At 1 MB/s, a verify of an image of 3 MB of data takes some 3 s (without a pace,
    a fraction of a second) and says so in its log; the pace is checked and shown."""
    import time as _time

    with pytest.raises(ValidationError):
        m.update_object("disk-pool", "dp", verify_max_mb_s="fast")
    m.update_object("disk-pool", "dp", verify_max_mb_s="1")
    assert m.config.disk_pool("dp")["verify_max_mb_s"] == 1
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}").write_bytes(os.urandom(1 << 20))
    m.create_storage_unit("stu", pool="dp")
    m.config.add_policy("p", storage_unit="stu")
    m.config.add_policy_client("p", m.host_list()[0]["name"])
    m.config.add_policy_selection("p", str(src))
    [b] = m.wait_for(m.start_backup("p"))
    assert b["status"] == 0
    t0 = _time.monotonic()
    [v] = m.wait_for([m.start_verify(image=b["image_id"])])
    paced = _time.monotonic() - t0
    assert v["status"] == 0
    assert any("at most 1 MB/s" in x["message"] for x in m.job_logs(v["id"]))
    assert paced >= 2.5, paced
    m.update_object("disk-pool", "dp", verify_max_mb_s="unlimited")
    assert m.config.disk_pool("dp")["verify_max_mb_s"] is None
    t0 = _time.monotonic()
    [v] = m.wait_for([m.start_verify(image=b["image_id"])])
    assert v["status"] == 0 and _time.monotonic() - t0 < paced
    assert not any("at most" in x["message"] for x in m.job_logs(v["id"]))
