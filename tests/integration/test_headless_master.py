"""`cairn master run` is the headless master: its scheduler queues a backup whose start window
is open, its dispatcher runs it, and the run is recorded for `cairn schedule runs`."""

import time
from datetime import datetime, timedelta, timezone

from app import status as st
from app.master import Master
from clihelp import cairn, cairn_json


def test_master_run_queues_and_runs_a_due_schedule(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("scheduled\n")
    (tmp_path / "vol").mkdir()
    home = tmp_path / "home"
    m = Master(str(home))
    try:
        m.config.add_host("me", local=True)
        m.config.add_storage_server("ss1", type="advanced-disk", host="me")
        m.create_disk_pool("dp1", server="ss1", volumes=[str(tmp_path / "vol")])
        m.config.add_storage_unit("stu1", pool="dp1")
        m.config.add_policy("p1", storage_unit="stu1")
        m.config.add_policy_client("p1", "me")
        m.config.add_policy_selection("p1", str(src))
        # a window that opened an hour ago and is open for three hours
        start = datetime.now(timezone.utc) - timedelta(hours=1)
        m.config.add_schedule("p1", "nightly", type="full", frequency="1d",
                              windows=[{"day": start.weekday(),
                                        "start": start.strftime("%H:%M"), "hours": 3}])
        # created "a day ago", so the window is not older than the policy
        with m.db.tx() as c:
            c.execute("UPDATE policies SET created='2000-01-01T00:00:00Z'")
    finally:
        m.close()
    t0 = time.time()
    cairn(home, "master", "run", "--until-idle", timeout=300)
    doc, _ = cairn_json(home, "jobs", "list")
    [job] = doc["jobs"]
    assert (job["type"], job["schedule"], job["status"]) == ("backup", "nightly", st.OK)
    assert job["not_after"] > t0
    doc, _ = cairn_json(home, "schedule", "runs", "--policy", "p1")
    assert [(r["schedule"], r["outcome"], r["job_id"]) for r in doc["runs"]] == [
        ("nightly", "queued", job["id"])]
    doc, _ = cairn_json(home, "images", "list")
    assert len(doc["images"]) == 1
    # the next run of the same window is not queued again
    cairn(home, "master", "run", "--until-idle", timeout=300)
    doc, _ = cairn_json(home, "jobs", "list")
    assert len(doc["jobs"]) == 1
