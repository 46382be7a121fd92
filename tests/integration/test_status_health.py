"""Health at a glance (`cairn status`) on real parts: a pool on a small tmpfs filled past its
high-water mark, an SSH host through the tests' sshd, an SSH host nobody listens for, a
backup that fails, scheduled backups that missed their windows, and the JSON the CLI
prints."""

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

from app import status as st
from app.master import Master
from app.scheduler import Scheduler
from sshd import free_port

MIB = 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAY = 86400


def fill(path, name, size):
    with open(os.path.join(path, name), "wb") as f:
        f.write(os.urandom(size))


@pytest.fixture
def site(tmp_path, small_tmpfs, sshd):
    tiny = small_tmpfs("4m")
    roomy = tmp_path / "roomy"
    roomy.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"a" * 4000)
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.add_host("up", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    m.add_host("down", address="127.0.0.1", port=free_port(), user="nobody", check=False)
    m.create_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("tiny", server="ss1", volumes=[str(tiny)], high_water=90, low_water=80)
    m.create_disk_pool("roomy", server="ss1", volumes=[str(roomy)])
    m.create_storage_server("ss2", type="advanced-disk", host="down", check=False)
    m.create_disk_pool("far", server="ss2", volumes=["/srv/far"], check=False)
    m.create_storage_unit("stu1", pool="roomy", max_concurrent_jobs=4)
    m.create_policy("good", storage_unit="stu1")
    m.add_policy_client("good", "me")
    m.add_policy_selection("good", str(src))
    m.create_policy("bad", storage_unit="stu1")
    m.add_policy_client("bad", "me")
    m.add_policy_selection("bad", str(tmp_path / "no-such-dir"))
    m.create_policy("nightly", storage_unit="stu1")
    m.add_policy_client("nightly", "down")
    m.add_policy_selection("nightly", "/data")
    m.add_schedule("nightly", "full", type="full", frequency="1d",
                   windows=[{"day": d, "start": "22:00", "hours": 8} for d in range(7)])
    yield m, tiny
    m.close()


def run_backup(m, policy):
    [jid] = m.start_backup(policy)
    [job] = m.wait_for([jid], timeout=120)
    return job


def miss_windows(m):
    """Three nightly windows close while no master runs (a scheduler ticking years ahead,
    as tests/unit/test_scheduler.py does): recorded as missed jobs, ended now."""
    mon = datetime(2031, 3, 3, tzinfo=timezone.utc).timestamp()
    s = Scheduler(m, clock=lambda: pytest.fail("every tick is given its time"),
                  tz=timezone.utc)
    assert s.tick(mon + 12 * 3600) == []
    s.tick(mon + 3 * DAY + 12 * 3600)
    assert len(s.last_missed) == 3
    return s.last_missed


def test_status_reports_a_full_pool_a_host_down_a_failed_and_missed_jobs(site):
    m, tiny = site
    good = run_backup(m, "good")
    assert good["status"] == st.OK
    bad = run_backup(m, "bad")
    assert bad["status"] not in (st.OK, st.PARTIAL, st.CANCELED)
    missed = miss_windows(m)

    fill(tiny, "first", int(2.4 * MIB))
    later = time.time()
    # a sample half a day back, then the pool fills past its high-water mark
    half = m.health(now=later - DAY / 2, timeout=5)
    assert [p["growth_bytes_per_day"] for p in half["pools"] if p["name"] == "tiny"] == [None]
    fill(tiny, "second", int(1.4 * MIB))
    t0 = time.monotonic()
    doc = m.health(now=later, timeout=5)
    took = time.monotonic() - t0
    assert took < 5 + 2, f"the host that does not answer held the summary {took:.1f} s"

    pools = {p["name"]: p for p in doc["pools"]}
    tiny_p = pools["tiny"]
    fs = os.statvfs(tiny)
    assert tiny_p["size_bytes"] == fs.f_blocks * fs.f_frsize
    assert tiny_p["free_bytes"] == pytest.approx(fs.f_bavail * fs.f_frsize, abs=64 * 1024)
    assert tiny_p["used_bytes"] == tiny_p["size_bytes"] - tiny_p["free_bytes"]
    assert tiny_p["used_percent"] >= 90 and tiny_p["above_high_water"] is True
    assert tiny_p["high_water"] == 90
    # 1.4 MiB more in half a day: about 2.8 MiB a day
    assert tiny_p["growth_bytes_per_day"] == pytest.approx(2.8 * MIB, rel=0.15)
    assert pools["roomy"]["above_high_water"] is False
    assert pools["far"]["size_bytes"] is None and "down" in pools["far"]["error"]

    hosts = {h["name"]: h for h in doc["hosts"]}
    assert hosts["me"]["reachable"] and hosts["up"]["reachable"]
    assert hosts["up"]["last_contact"] is not None and hosts["up"]["error"] is None
    assert hosts["down"]["reachable"] is False and hosts["down"]["error"]
    assert hosts["down"]["last_contact"] is None

    jobs = doc["jobs"]
    assert jobs["failed_24h"] == 1 and jobs["failed_ids"] == [bad["id"]]
    assert jobs["missed_24h"] == 3 and sorted(jobs["missed_ids"]) == sorted(missed)
    assert jobs["partial_24h"] == 0 and jobs["partial_ids"] == []

    clients = {c["name"]: c for c in doc["clients"]}
    assert clients["me"]["last_successful_backup"] == good["ended"]
    assert clients["down"]["last_successful_backup"] is None
    assert not clients["me"]["stale"] and not clients["down"]["stale"]

    kinds = {(w["severity"], w["kind"], w["name"]) for w in doc["warnings"]}
    assert ("error", "host", "down") in kinds
    assert ("error", "disk-pool", "tiny") in kinds
    assert ("error", "jobs", None) in kinds
    assert ("warning", "jobs", None) in kinds
    assert not any(w["name"] == "far" for w in doc["warnings"])   # its host's warning says it
    assert ("warning", "catalog", None) in kinds       # images, and no catalog backup
    assert doc["catalog_backup"]["last"] is None and doc["catalog_backup"]["overdue"]
    assert doc["ok"] is False
    assert not any(w["kind"] == "disk-pool" and w["name"] == "roomy" for w in doc["warnings"])

    # days later, with nothing new: both clients are stale, the day's jobs are gone
    m.set_setting("stale_client_days", "2")
    later_doc = m.health(now=later + 3 * DAY, timeout=5)
    assert all(c["stale"] for c in later_doc["clients"])
    assert later_doc["jobs"]["failed_24h"] == 0
    assert {w["name"] for w in later_doc["warnings"] if w["kind"] == "client"} == {"me", "down"}


def test_last_contact_is_recorded_as_the_master_talks_to_a_host(site):
    m, _ = site
    assert m.config.host("up")["last_contact"] is None
    before = time.time()
    m.probe_host("up")
    recorded = m.config.host("up")["last_contact"]
    assert recorded is not None
    from app import timeutil
    assert timeutil.parse_iso(recorded) >= int(before)
    assert m.config.host("down")["last_contact"] is None


def test_cairn_status_json_and_text(site, tmp_path):
    m, tiny = site
    run_backup(m, "bad")
    fill(tiny, "big", int(3.8 * MIB))
    home = m.home.root
    m.close()
    cli = [sys.executable, "-m", "app", "--home", str(home), "status", "--timeout", "4"]
    r = subprocess.run(cli + ["--json"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("pools", "hosts", "jobs", "clients", "catalog_backup", "warnings"):
        assert key in doc
    for p in doc["pools"]:
        assert {"name", "size_bytes", "used_bytes", "free_bytes", "used_percent",
                "high_water", "above_high_water", "growth_bytes_per_day"} <= set(p)
    tiny_p = next(p for p in doc["pools"] if p["name"] == "tiny")
    assert tiny_p["above_high_water"] is True
    down = next(h for h in doc["hosts"] if h["name"] == "down")
    assert down["reachable"] is False and down["error"]
    assert {"name", "reachable", "last_contact", "error"} <= set(down)
    assert doc["jobs"]["failed_24h"] == 1 and len(doc["jobs"]["failed_ids"]) == 1
    assert {"failed_24h", "partial_24h", "missed_24h"} <= set(doc["jobs"])
    assert all({"severity", "kind", "name", "message"} <= set(w) for w in doc["warnings"])

    r = subprocess.run(cli, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "not reachable" in r.stdout and "ABOVE" in r.stdout
    assert f"failed: {doc['jobs']['failed_ids'][0]}" in r.stdout
    assert "ERROR: Host down is not reachable" in r.stdout


def test_a_host_that_accepts_and_never_answers_does_not_hold_the_summary(tmp_path):
    import socket
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)          # connections are taken by the kernel, and never spoken to
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        m.add_host("mute", address="127.0.0.1", port=mute.getsockname()[1], user="nobody",
                   check=False)
        t0 = time.monotonic()
        doc = m.health(timeout=2)
        took = time.monotonic() - t0
        hosts = {h["name"]: h for h in doc["hosts"]}
        assert took < 2 + 2, f"the summary waited {took:.1f} s"
        assert hosts["me"]["reachable"] is True
        assert hosts["mute"]["reachable"] is False
        assert hosts["mute"]["error"]
    finally:
        m.close()
        mute.close()


def test_a_deduplicating_pool_reports_its_own_accounting(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):                # the same data three times: stored once
        (src / f"copy{i}").write_bytes(b"".join(os.urandom(1) * 4096 for _ in range(64))
                                       if i == 0 else (src / "copy0").read_bytes())
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        m.create_storage_server("dd", type="dedup", host="me", path=str(tmp_path / "pool"),
                                options={"encrypted": True})
        m.create_disk_pool("ddp", server="dd", volumes=[])
        m.create_storage_unit("dstu", pool="ddp")
        m.create_policy("dp", storage_unit="dstu")
        m.add_policy_client("dp", "me")
        m.add_policy_selection("dp", str(src))
        assert run_backup(m, "dp")["status"] == st.OK
        doc = m.health(timeout=10)
        ddp = next(p for p in doc["pools"] if p["name"] == "ddp")
        usage = m.pool_usage("ddp")
        assert ddp["dedup"] == {"stored_bytes": usage["stored_bytes"],
                                "container_bytes": usage["container_bytes"],
                                "chunks": usage["chunks"]}
        assert 0 < ddp["dedup"]["stored_bytes"] < 3 * 64 * 4096
        assert ddp["size_bytes"] > 0        # the file system under it, as for every pool
    finally:
        m.close()


def test_the_status_bar_reachability_asks_hosts_side_by_side(tmp_path):
    import socket
    mutes = [socket.socket() for _ in range(3)]
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        for i, s in enumerate(mutes):
            s.bind(("127.0.0.1", 0))
            s.listen(8)
            m.add_host(f"mute{i}", address="127.0.0.1", port=s.getsockname()[1],
                       user="nobody", check=False)
        t0 = time.monotonic()
        r = {h["name"]: h for h in m.host_reachability(timeout=2)}
        took = time.monotonic() - t0
        assert took < 2 + 2, f"three silent hosts took {took:.1f} s"
        assert r["me"]["reachable"] is True
        assert all(r[f"mute{i}"]["reachable"] is False and r[f"mute{i}"]["error"]
                   for i in range(3))
    finally:
        m.close()
        for s in mutes:
            s.close()


def test_a_deleted_pool_takes_its_usage_samples_with_it(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        m.create_storage_server("ss", type="advanced-disk", host="me")
        m.create_disk_pool("dp", server="ss", volumes=[str(vol)])
        m.health(timeout=5)
        assert m.db.one("SELECT count(*) FROM pool_usage")[0] == 1
        m.health(timeout=5)             # within the hour: no second sample
        assert m.db.one("SELECT count(*) FROM pool_usage")[0] == 1
        m.delete_object("disk-pool", "dp")
        assert m.db.one("SELECT count(*) FROM pool_usage")[0] == 0
    finally:
        m.close()
