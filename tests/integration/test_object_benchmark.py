"""The object storage benchmark of a cloud server's bucket as a job (`cairn storage-server
benchmark NAME` on a cloud server, app/jobs/object_benchmark.py), against the loopback S3
server: run by the dispatcher on the storage host's agent, a step per thread count in the
job's result and log, the run kept in the catalog beside the disk runs, nothing of it left in
the bucket, the bucket's secret key nowhere in the job or the catalog; refused while a backup
uses the pool unless forced; the pool's backups held while it runs; a cancel mid-run ends
it and removes its objects; the CLI's --json, table and CSV; --workload stgpool still
measures the cache's disks."""

import csv
import io
import json
import os
import threading
import time

import pytest

from app import status
from app.errors import CairnError, ValidationError
from app.master import Master
from clihelp import cairn, cairn_json

MiB = 1 << 20
# multipart uploads (a part is 5 MiB), one object a thread, a few ranged reads
SMALL = dict(min_threads=1, max_threads=2, step=1, object_size=6 * MiB,
             objects_per_thread=1, ranged_size=64 << 10, ranged_per_thread=4,
             part_size=5 * MiB)


def keys(s3, bucket):
    """Every object's key in the bucket, and every unfinished multipart upload's."""
    c = s3.client()
    objects = sorted(o["Key"] for page in c.get_paginator("list_objects_v2").paginate(
        Bucket=bucket) for o in page.get("Contents") or [])
    uploads = [u["Key"] for u in c.list_multipart_uploads(Bucket=bucket).get("Uploads") or []]
    return objects, uploads


def site(tmp_path, s3, bucket, sshd=None):
    """A cloud pool on this host, or on the host "store" reached over SSH."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(os.urandom(100_000))
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    if sshd is not None:
        m.add_host("store", address=sshd.host, port=sshd.port, user=sshd.user,
                   key_file=sshd.key_file, trust_host_key=True)
    m.create_storage_server("cs1", type="cloud", host="store" if sshd else "me",
                            path=str(tmp_path / "cache"),
                            options={"endpoint": s3.endpoint, "bucket": bucket},
                            credentials={"access_key": s3.access_key,
                                         "secret_key": s3.secret_key})
    m.create_disk_pool("cp1", server="cs1", volumes=[])
    m.config.add_storage_unit("cu1", pool="cp1")
    m.config.add_policy("p1", storage_unit="cu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    m.config.add_schedule("p1", "full", type="full", retention="1w")
    return m


def log_text(m, jid):
    return "\n".join(x["message"] for x in m.job_logs(jid))


def secret_nowhere(m, s3, jid):
    """The secret key is in no part of the job, its log, the recorded runs, nor anywhere in
    the catalog's files."""
    job = m.job(jid)
    secret = s3.secret_key
    assert secret not in json.dumps(job, default=str)
    assert secret not in log_text(m, jid)
    for r in m.db.all("SELECT * FROM benchmark_runs"):
        assert secret not in json.dumps(dict(r), default=str)
    for r in m.db.all("SELECT * FROM jobs"):
        assert secret not in json.dumps(dict(r), default=str)
    path = m.home.catalog
    for f in (path, path + "-wal"):
        if os.path.exists(f):
            with open(f, "rb") as fh:
                assert secret.encode() not in fh.read(), f


def test_the_job_measures_the_bucket_keeps_the_run_and_leaves_nothing(
        tmp_path, s3_server, s3_bucket):
    m = site(tmp_path, s3_server, s3_bucket)
    try:
        [b] = m.wait_for(m.start_backup("p1"), timeout=120)
        assert b["status"] == status.OK, log_text(m, b["id"])
        before = keys(s3_server, s3_bucket)
        assert before[0], "the pool's own objects are there"
        # no workload named: a server with a bucket runs the object benchmark
        jid = m.start_storage_benchmark("cs1", **SMALL)
        assert m.job(jid)["params"]["workload"] == "object"
        [job] = m.wait_for([jid], timeout=120)
        log = log_text(m, jid)
        assert job["status"] == status.OK, log
        assert job["type"] == "benchmark" and job["bytes"] > 0
        r = job["result"]
        label = f"{s3_bucket}@{s3_server.endpoint}"
        assert r["volumes"] == [label] and r["workload"] == "object"
        steps = r["steps"]
        assert [s["threads"] for s in steps] == [1, 2] == r["thread_counts"]
        for s in steps:
            assert s["object_size"] == 6 * MiB and s["multipart"] and s["parts"] >= 2
            assert s["objects"] == s["threads"]
            for k in ("write_mb_s", "read_mb_s", "ranged_read_mb_s", "ranged_ops_s"):
                assert s[k] > 0, (k, s)
            assert f"{s['threads']} thread(s), objects of 6 MiB: write {s['write_mb_s']} " \
                   f"MiB/s, read {s['read_mb_s']} MiB/s" in log
        assert r["max_write_mb_s"] == max(s["write_mb_s"] for s in steps)
        assert "best write" in log and f"object benchmark of bucket {label}" in log
        [run] = m.storage_benchmarks("cs1")
        assert run["job_id"] == jid and run["status"] == status.OK
        assert run["workload"] == "object" and run["io_size"] == 6 * MiB
        assert run["volumes"] == [label] and run["steps"] == steps
        assert run["stopped"] == "max" and run["max_combined_mb_s"] is None
        assert run["max_write_mb_s"] == max(s["write_mb_s"] for s in steps)
        assert run["max_read_mb_s"] == max(s["read_mb_s"] for s in steps)
        assert run["sizing"] == []
        assert keys(s3_server, s3_bucket) == before
        secret_nowhere(m, s3_server, jid)
    finally:
        m.close()


def test_the_job_runs_over_ssh(tmp_path, s3_server, s3_bucket, sshd):
    m = site(tmp_path, s3_server, s3_bucket, sshd)
    try:
        [job] = m.wait_for([m.start_storage_benchmark("cs1", **SMALL)], timeout=180)
        assert job["status"] == status.OK, log_text(m, job["id"])
        assert [s["threads"] for s in job["result"]["steps"]] == [1, 2]
        [run] = m.storage_benchmarks("cs1")
        assert run["host"] == "store" and run["workload"] == "object"
        assert keys(s3_server, s3_bucket) == ([], [])
        secret_nowhere(m, s3_server, job["id"])
    finally:
        m.close()


def test_settings_are_checked_when_queued(tmp_path, s3_server, s3_bucket):
    m = site(tmp_path, s3_server, s3_bucket)
    try:
        for kw, words in ((dict(max_threads=101), "max_threads"),
                          (dict(min_threads=3, max_threads=2), "max_threads"),
                          (dict(object_size=2 << 30), "object_size"),
                          (dict(volumes=[str(tmp_path)]), "volumes is for the disk"),
                          (dict(max_pairs=2), "max_pairs is for the disk"),
                          (dict(workload="stgpool", min_threads=2), "min_threads"),
                          (dict(step_seconds=1), "step_seconds")):
            with pytest.raises(ValidationError) as e:
                m.start_storage_benchmark("cs1", **kw)
            assert words in e.value.message, (kw, e.value.message)
        adv = tmp_path / "adv"
        adv.mkdir()
        m.create_storage_server("ss1", type="advanced-disk", host="me")
        with pytest.raises(ValidationError, match="for cloud storage servers"):
            m.start_storage_benchmark("ss1", workload="object")
        assert m.job_list() == []
    finally:
        m.close()


def _running_backup(m):
    jid = m.jobs.create("backup", client="me", storage_unit="cu1")
    assert m.jobs.claim(jid, "another-master")
    return jid


def test_refused_while_a_backup_uses_the_pool_unless_forced(tmp_path, s3_server, s3_bucket):
    m = site(tmp_path, s3_server, s3_bucket)
    try:
        backup = _running_backup(m)
        with pytest.raises(CairnError) as e:
            m.start_storage_benchmark("cs1", **SMALL)
        assert e.value.status == status.POOL_BUSY
        assert f"backup job {backup} on pool cp1" in e.value.message
        assert "--force" in e.value.hint
        forced = m.start_storage_benchmark("cs1", force=True, **SMALL)
        with pytest.raises(CairnError, match="queued or running already"):
            m.start_storage_benchmark("cs1", force=True, **SMALL)
        [job] = m.wait_for([forced], timeout=120)
        assert job["status"] == status.OK, log_text(m, forced)
        assert "the figures are lower than the bucket gives" in log_text(m, forced)
    finally:
        m.close()


def test_cancel_mid_run_removes_its_objects_and_backups_wait_meanwhile(
        tmp_path, s3_server, s3_bucket):
    m = site(tmp_path, s3_server, s3_bucket)
    try:
        # each phase a second at least: three thread counts cannot end before the cancel
        jid = m.start_storage_benchmark("cs1", min_threads=1, max_threads=3, step=1,
                                        object_size=6 * MiB, seconds=1,
                                        ranged_size=64 << 10, part_size=5 * MiB)
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("jobs", m.wait_for([jid], 120)))
        t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (m.job(jid).get("result") or {}).get("steps"):
            time.sleep(0.05)
        assert len(m.job(jid)["result"]["steps"]) >= 1
        [backup] = m.start_backup("p1")
        while time.monotonic() < deadline and not m.job(backup)["wait_reason"]:
            time.sleep(0.05)
        job = m.job(backup)
        assert job["state"] == "queued"
        assert job["wait_reason"].startswith(
            f"an object storage benchmark (job {jid}) measures pool cp1")
        assert any(k.startswith("cairn-benchmark/") for k in keys(s3_server, s3_bucket)[0])
        m.cancel_job(jid)
        t.join(60)
        [done] = box["jobs"]
        assert done["status"] == status.CANCELED
        # the held backup may be writing the pool's objects by now: none of the run's is left
        objects, uploads = keys(s3_server, s3_bucket)
        assert [k for k in objects if k.startswith("cairn-benchmark/")] == [] and uploads == []
        [run] = m.storage_benchmarks("cs1")
        assert run["status"] == status.CANCELED and run["stopped"] == "canceled"
        assert len(run["steps"]) >= 1
        secret_nowhere(m, s3_server, jid)
        [b] = m.wait_for([backup], timeout=120)
        assert b["status"] == status.OK, log_text(m, backup)
    finally:
        m.close()


def test_cli_json_table_csv_and_the_cache_disks(tmp_path, s3_server, s3_bucket):
    m = site(tmp_path, s3_server, s3_bucket)
    backup = _running_backup(m)
    cache = m.storage_server("cs1")["path"]
    m.close()
    home = tmp_path / "home"
    before = keys(s3_server, s3_bucket)
    args = ("storage-server", "benchmark", "cs1", "--min-threads", "1", "--max-threads", "2",
            "--object-size", "6M", "--objects-per-thread", "1", "--wait")
    refused = cairn(home, *args, check=False)
    assert refused.returncode == status.POOL_BUSY, refused.stderr
    assert f"backup job {backup}" in refused.stderr and "--force" in refused.stderr
    doc, _ = cairn_json(home, *args, "--force")
    assert doc["status"] == 0 and doc["jobs"][0]["type"] == "benchmark"
    assert doc["workload"] == "object" and doc["io_size"] == 6 * MiB
    assert doc["volumes"] == [f"{s3_bucket}@{s3_server.endpoint}"]
    assert [s["threads"] for s in doc["steps"]] == [1, 2]
    for s in doc["steps"]:
        assert {"threads", "object_size", "write_mb_s", "read_mb_s", "ranged_read_mb_s",
                "ranged_ops_s", "put_p50_ms", "put_p95_ms", "get_p50_ms", "get_p95_ms"} <= set(s)
    assert doc["max_read_mb_s"] == max(s["read_mb_s"] for s in doc["steps"])
    assert s3_server.secret_key not in json.dumps(doc)
    assert keys(s3_server, s3_bucket) == before

    runs, _ = cairn_json(home, "storage-server", "benchmark-results", "cs1")
    [run] = runs["runs"]
    assert run["workload"] == "object" and run["steps"] == doc["steps"]
    text = cairn(home, "storage-server", "benchmark-results", "cs1", "--run",
                 str(run["id"])).stdout
    assert "WRITE MIB/S" in text and "RANGED OPS/S" in text and "best write" in text
    assert "6.0 MiB" in text and "sizing" not in text
    got = cairn(home, "storage-server", "benchmark-results", "cs1", "--run", str(run["id"]),
                "--csv").stdout
    rows = list(csv.reader(io.StringIO(got)))
    assert rows[0] == ["Thread Count", "Object Size (bytes)", "Write Throughput (MB/s)",
                       "Read Throughput (MB/s)"]
    assert [[int(r[0]), int(r[1]), float(r[2]), float(r[3])] for r in rows[1:]] == \
        [[s["threads"], s["object_size"], s["write_mb_s"], s["read_mb_s"]]
         for s in doc["steps"]]
    listed = cairn(home, "storage-server", "benchmark-results", "cs1").stdout
    assert f"{run['max_write_mb_s']:g}/{run['max_read_mb_s']:g} w/r" in listed

    # --csv on the run itself: only the CSV on stdout
    p = cairn(home, *args, "--force", "--csv")
    rows = list(csv.reader(io.StringIO(p.stdout)))
    assert rows[0][0] == "Thread Count" and [r[0] for r in rows[1:]] == ["1", "2"]
    assert "status 0" in p.stderr

    # the disk benchmark of its cache on request
    disk, _ = cairn_json(home, "storage-server", "benchmark", "cs1", "--workload", "stgpool",
                         "--max-pairs", "1", "--step-seconds", "0.3", "--file-size", "2M",
                         "--force", "--wait")
    assert disk["status"] == 0 and disk["workload"] == "stgpool"
    assert disk["volumes"] == [cache] and disk["steps"][0]["io_size"] == 256 << 10
    runs, _ = cairn_json(home, "storage-server", "benchmark-results", "cs1")
    assert [r["workload"] for r in runs["runs"]] == ["stgpool", "object", "object"]
    bad = cairn(home, "storage-server", "benchmark", "cs1", "--workload", "db", "--csv",
                check=False)
    assert bad.returncode != 0 and "--csv is for the object benchmark" in bad.stderr
    assert "Traceback" not in bad.stderr
