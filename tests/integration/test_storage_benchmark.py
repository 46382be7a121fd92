"""The disk benchmark as a job (`cairn storage-server benchmark`, app/jobs/benchmark.py): run
by the dispatcher on the storage server's agent, on the local host and over real SSH, its run
kept in the catalog; a cancel mid-run ends it and leaves no file; refused while a backup uses
the pool unless forced, when queued and when it starts; the CLI's --json documents."""

import os
import threading
import time

import pytest

from app import status
from app.agent import diskbench
from app.errors import CairnError
from app.master import Master
from clihelp import cairn, cairn_json

FAST = dict(step_seconds=0.3, file_size=4 << 20)
LONGER = dict(step_seconds=2, file_size=4 << 20)


def left(*folders):
    return [n for f in folders for n in os.listdir(f) if n.startswith(diskbench.PREFIX)]


def site(tmp_path, host=None):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    m = Master(str(tmp_path / "home"))
    if host is None:
        m.config.add_host("me", local=True)
    else:
        host(m)
    name = "me" if host is None else "store"
    m.create_storage_server("ss1", type="advanced-disk", host=name)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(v1), str(v2)])
    m.config.add_storage_unit("stu1", pool="dp1")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"a" * 1000)
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", name)
    m.config.add_policy_selection("p1", str(src))
    return m, v1, v2


def check_run(m, job, v1, v2, pairs):
    assert job["status"] == status.OK, [x["message"] for x in m.job_logs(job["id"])]
    assert job["type"] == "benchmark"
    r = job["result"]
    assert [s["threads"] for s in r["steps"]] == list(range(1, len(r["steps"]) + 1))
    assert len(r["steps"]) == pairs or r["stopped"] == "stable"
    assert r["volumes"] == [str(v1), str(v2)]
    assert {lv["name"] for lv in r["sizing"]} == {"small", "medium", "large"}
    [run] = m.storage_benchmarks("ss1")
    assert run["job_id"] == job["id"] and run["status"] == status.OK
    assert run["steps"] == r["steps"]
    assert run["max_combined_mb_s"] == max(s["combined_mb_s"] for s in r["steps"])
    assert left(v1, v2) == []
    logs = "\n".join(x["message"] for x in m.job_logs(job["id"]))
    assert "1 pair(s): write" in logs and ("supports" in logs or "below" in logs)


def test_the_job_runs_on_the_local_host_and_is_kept(tmp_path):
    m, v1, v2 = site(tmp_path)
    try:
        jid = m.start_storage_benchmark("ss1", max_pairs=2, **FAST)
        [job] = m.wait_for([jid], timeout=120)
        check_run(m, job, v1, v2, 2)
        assert job["bytes"] > 0
        assert any(j["id"] == jid for j in m.job_list())
    finally:
        m.close()


def test_the_job_runs_over_ssh(tmp_path, sshd):
    def far(m):
        m.add_host("store", address=sshd.host, port=sshd.port, user=sshd.user,
                   key_file=sshd.key_file, trust_host_key=True)
    m, v1, v2 = site(tmp_path, far)
    try:
        jid = m.start_storage_benchmark("ss1", max_pairs=2, **FAST)
        [job] = m.wait_for([jid], timeout=180)
        check_run(m, job, v1, v2, 2)
        assert m.storage_benchmarks("ss1")[0]["host"] == "store"
    finally:
        m.close()


def test_cancel_mid_run_removes_the_files_and_records_the_run(tmp_path):
    m, v1, v2 = site(tmp_path)
    try:
        # steps long enough that the run cannot stop by itself (at its third step at the
        # earliest) before it is canceled
        jid = m.start_storage_benchmark("ss1", max_pairs=50, **LONGER)
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("jobs", m.wait_for([jid], 120)))
        t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = m.job(jid).get("result") or {}
            if r.get("steps"):
                break
            time.sleep(0.05)
        assert len(m.job(jid)["result"]["steps"]) >= 1
        assert left(v1) and left(v2), "the run's folders are there while it runs"
        m.cancel_job(jid)
        t.join(60)
        [job] = box["jobs"]
        assert job["status"] == status.CANCELED
        assert left(v1, v2) == []
        [run] = m.storage_benchmarks("ss1")
        assert run["status"] == status.CANCELED and run["stopped"] == "canceled"
        assert len(run["steps"]) >= 1
    finally:
        m.close()


def _running_backup(m):
    jid = m.jobs.create("backup", client="me", storage_unit="stu1")
    assert m.jobs.claim(jid, "another-master")
    return jid


def test_refused_while_a_backup_uses_the_pool_unless_forced(tmp_path):
    m, v1, v2 = site(tmp_path)
    try:
        backup = _running_backup(m)
        with pytest.raises(CairnError) as e:
            m.start_storage_benchmark("ss1", **FAST)
        assert e.value.status == status.POOL_BUSY
        assert f"backup job {backup} on pool dp1" in e.value.message
        assert "--force" in e.value.hint
        # a directory that no pool uses is not the pool's
        other = tmp_path / "new"
        other.mkdir()
        jid = m.start_storage_benchmark("ss1", volumes=[str(other)], max_pairs=1, **FAST)
        # one benchmark of a server at a time: two would measure each other
        with pytest.raises(CairnError, match="queued or running already"):
            m.start_storage_benchmark("ss1", volumes=[str(other)], **FAST)
        [a] = m.wait_for([jid], timeout=120)
        forced = m.start_storage_benchmark("ss1", max_pairs=1, force=True, **FAST)
        [b] = m.wait_for([forced], timeout=120)
        assert a["status"] == status.OK and b["status"] == status.OK
        assert any("forced" in x["message"] for x in m.job_logs(forced))
    finally:
        m.close()


def test_refused_when_it_starts_if_a_backup_began_meanwhile(tmp_path):
    m, v1, v2 = site(tmp_path)
    try:
        jid = m.start_storage_benchmark("ss1", **FAST)
        _running_backup(m)
        [job] = m.wait_for([jid], timeout=60)
        assert job["status"] == status.POOL_BUSY
        assert left(v1, v2) == []
        assert m.storage_benchmarks("ss1") == []  # nothing ran: no run to compare
    finally:
        m.close()


def test_cli_json_documents(tmp_path):
    m, v1, v2 = site(tmp_path)
    m.close()
    home = tmp_path / "home"
    doc, _ = cairn_json(home, "storage-server", "benchmark", "ss1", "--volume", str(v1),
                        "--workload", "db", "--max-pairs", "2", "--step-seconds", "0.3",
                        "--file-size", "2M", "--wait")
    assert doc["status"] == 0 and doc["jobs"][0]["type"] == "benchmark"
    assert doc["workload"] == "db" and doc["io_size"] == 8192 and doc["volumes"] == [str(v1)]
    for s in doc["steps"]:
        assert {"io_size", "threads", "write_mb_s", "read_mb_s", "combined_mb_s",
                "max_combined_mb_s", "write_iops", "read_iops", "write_p50_ms",
                "write_p95_ms", "write_p99_ms", "read_p50_ms", "read_p95_ms",
                "read_p99_ms"} <= set(s)
        assert s["io_size"] == 8192
    assert [lv["supported"] in ("yes", "low end", "no") for lv in doc["sizing"]] == [True] * 3
    runs, _ = cairn_json(home, "storage-server", "benchmark-results", "ss1")
    [run] = runs["runs"]
    assert run["workload"] == "db" and run["steps"] == doc["steps"]
    one, _ = cairn_json(home, "storage-server", "benchmark-results", "ss1", "--run",
                        str(run["id"]))
    assert one["id"] == run["id"]
    text = cairn(home, "storage-server", "benchmark-results", "ss1", "--run",
                 str(run["id"])).stdout
    assert "WRITE MIB/S" in text and "sizing:" in text
    bad = cairn(home, "storage-server", "benchmark", "ss1", "--workload", "db",
                "--max-pairs", "0", check=False)
    assert bad.returncode != 0 and "1 to 100" in bad.stderr and "Traceback" not in bad.stderr


def test_backups_of_the_pool_wait_while_it_runs(tmp_path):
    m, v1, v2 = site(tmp_path)
    try:
        jid = m.start_storage_benchmark("ss1", max_pairs=50, **LONGER)
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("jobs", m.wait_for([jid], 120)))
        t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (m.job(jid).get("result") or {}).get("steps"):
            time.sleep(0.05)
        [backup] = m.start_backup("p1")
        while time.monotonic() < deadline and not m.job(backup)["wait_reason"]:
            time.sleep(0.05)
        job = m.job(backup)
        assert job["state"] == "queued"
        assert job["wait_reason"].startswith(f"a disk benchmark (job {jid}) measures pool dp1")
        m.cancel_job(jid)
        t.join(60)
        assert box["jobs"][0]["status"] == status.CANCELED
        [done] = m.wait_for([backup], timeout=120)
        assert done["status"] == status.OK
    finally:
        m.close()
