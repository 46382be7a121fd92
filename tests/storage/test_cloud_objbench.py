"""The object storage benchmark of a cloud pool's storage host (plugins/storage/cloud/
objbench.py) against the real S3 server the tests start on loopback: steps of uploads, whole
reads and ranged reads per thread count, multipart uploads for objects of a part or more,
every object gone when the run ends (an end, a cancel), the leftovers of a killed run removed
by the next one, wrong keys said as such, and the agent's object_benchmark request. Objects
are a few MiB and threads few, so that each test takes seconds."""

import os
import subprocess
import sys
import threading
import time

import pytest

from app import status as st
from app.errors import Canceled, ValidationError
from app.formats import protocol
from plugins.storage.cloud import objbench
from plugins.storage.cloud.bucket import BucketError
from plugins.storage.cloud.objbench import ObjectBenchmark, csv_rows, thread_counts

MIB = 1 << 20
SMALL = dict(object_size=1 * MIB, objects_per_thread=2, ranged_size=64 << 10,
             ranged_per_thread=4)


def spec(server, bucket, **more):
    s = {"endpoint": server.endpoint, "bucket": bucket, "access_key": server.access_key,
         "secret_key": server.secret_key, "region": server.region}
    s.update(more)
    return s


def keys(server, bucket):
    """Every object's key in the bucket, and every unfinished multipart upload's."""
    c = server.client()
    objects = [o["Key"] for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket)
               for o in page.get("Contents") or []]
    uploads = [u["Key"] for u in c.list_multipart_uploads(Bucket=bucket).get("Uploads") or []]
    return objects, uploads


def dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_each_thread_count_uploads_reads_and_reads_ranges_then_nothing_is_left(
        s3_server, s3_bucket):
    events, during = [], {}

    def emit(event, data):
        events.append((event, data))
        if event == "step":
            # the step's objects are in the bucket when it reports
            during[data["threads"]] = keys(s3_server, s3_bucket)[0]
    r = ObjectBenchmark(spec(s3_server, s3_bucket, prefix="pool1/"), min_threads=1,
                        max_threads=3, step=2, emit=emit, **SMALL).run()
    steps = r["steps"]
    assert [s["threads"] for s in steps] == [1, 2, 3] and r["stopped"] == "max"
    for s in steps:
        n = s["threads"]
        assert s["object_size"] == MIB and s["objects"] == 2 * n
        assert not s["multipart"] and s["parts"] == 0
        for k in ("write_mb_s", "read_mb_s", "ranged_read_mb_s", "ranged_ops_s"):
            assert s[k] > 0, (k, s)
        for phase in ("put", "get", "ranged"):
            assert 0 < s[f"{phase}_p50_ms"] <= s[f"{phase}_p95_ms"], s
        # 64 KiB a ranged read: the two figures are one measurement
        assert s["ranged_read_mb_s"] == pytest.approx(s["ranged_ops_s"] / 16, rel=0.02)
        seen = during[n]
        assert len(seen) == 2 * n, seen
        assert all(k.startswith(r["prefix"] + f"t{n:03d}/") for k in seen), seen
    assert r["prefix"].startswith("pool1/cairn-benchmark/" + os.uname().nodename + "-")
    assert r["max_write_mb_s"] == max(s["write_mb_s"] for s in steps)
    assert r["max_read_mb_s"] == max(s["read_mb_s"] for s in steps)
    assert r["removed"] == 0 and r["removed_runs"] == []
    assert [d for e, d in events if e == "step"] == steps
    assert [d["phase"] for e, d in events if e == "progress"][:3] == ["put", "get", "ranged"]
    assert csv_rows(r) == [["Thread Count", "Object Size (bytes)", "Write Throughput (MB/s)",
                            "Read Throughput (MB/s)"]] + \
        [[s["threads"], MIB, s["write_mb_s"], s["read_mb_s"]] for s in steps]
    assert keys(s3_server, s3_bucket) == ([], [])


def test_objects_of_a_part_or_more_go_up_in_parts(s3_server, s3_bucket):
    etags = {}

    def emit(event, data):
        if event == "step":
            c = s3_server.client()
            etags[data["object_size"]] = {c.head_object(Bucket=s3_bucket, Key=k)["ETag"]
                                          for k in keys(s3_server, s3_bucket)[0]}
    common = dict(min_threads=2, max_threads=2, objects_per_thread=1, ranged_size=MIB,
                  part_size=5 * MIB, emit=emit)
    big = ObjectBenchmark(spec(s3_server, s3_bucket), object_size=6 * MIB, **common).run()
    small = ObjectBenchmark(spec(s3_server, s3_bucket), object_size=4 * MIB, **common).run()
    [b], [s] = big["steps"], small["steps"]
    # 6 MiB in parts of 5 MiB: two parts an object, as the service saw them (a multipart
    # object's ETag ends in -parts)
    assert b["multipart"] and b["parts"] == 4 and b["part_size"] == 5 * MIB
    assert etags[6 * MIB] and all(e.strip('"').endswith("-2") for e in etags[6 * MIB])
    assert not s["multipart"] and s["parts"] == 0
    assert etags[4 * MIB] and all("-" not in e for e in etags[4 * MIB])
    assert b["read_mb_s"] > 0 and s["read_mb_s"] > 0
    assert keys(s3_server, s3_bucket) == ([], [])


def test_a_cancel_mid_step_removes_every_object_and_raises_canceled(s3_server, s3_bucket):
    stop = threading.Event()
    seen = []

    def emit(event, data):
        # the second step's uploads are done: its objects are in the bucket
        if event == "progress" and data["threads"] == 2 and data["phase"] == "put":
            seen.extend(keys(s3_server, s3_bucket)[0])
            stop.set()
    run = ObjectBenchmark(spec(s3_server, s3_bucket), min_threads=1, max_threads=3,
                          object_size=6 * MIB, part_size=5 * MIB, objects_per_thread=1,
                          ranged_size=MIB, emit=emit, is_cancelled=stop.is_set)
    before = threading.active_count()
    with pytest.raises(Canceled):
        run.run()
    assert len(seen) == 2, "the canceled step had written its objects"
    assert keys(s3_server, s3_bucket) == ([], [])
    assert threading.active_count() <= before


def test_a_failure_mid_step_still_removes_every_object(s3_server, s3_bucket):
    gone = []

    def emit(event, data):
        # an object taken away between the uploads and the reads: the reads fail
        if event == "progress" and data["phase"] == "put" and not gone:
            gone.append(keys(s3_server, s3_bucket)[0][0])
            s3_server.client().delete_object(Bucket=s3_bucket, Key=gone[0])
    run = ObjectBenchmark(spec(s3_server, s3_bucket), min_threads=2, max_threads=2, emit=emit,
                          **SMALL)
    with pytest.raises(BucketError) as e:
        run.run()
    assert e.value.status == st.IMAGE_DAMAGED and "not in the bucket" in e.value.message
    assert gone[0].rsplit("/", 1)[1] in e.value.message
    assert keys(s3_server, s3_bucket) == ([], [])


def test_a_cancel_ends_a_phase_that_runs_by_the_clock(s3_server, s3_bucket):
    stop = threading.Event()
    started = []

    def cancel_soon(event, data):
        if event == "progress" and data["phase"] == "put":
            started.append(time.monotonic())
            threading.Timer(0.05, stop.set).start()
    # phases of 2 s each: uncanceled, the reads alone would take 2 s
    run = ObjectBenchmark(spec(s3_server, s3_bucket), max_threads=1, object_size=64 << 10,
                          seconds=2, ranged_size=16 << 10, emit=cancel_soon,
                          is_cancelled=stop.is_set)
    with pytest.raises(Canceled):
        run.run()
    assert started and time.monotonic() - started[0] < 1, "the phase ran on after the cancel"
    assert keys(s3_server, s3_bucket) == ([], [])


def test_the_leftovers_of_a_killed_run_are_removed_by_the_next(s3_server, s3_bucket):
    c = s3_server.client()
    me, now = os.uname().nodename, int(time.time())
    dead = f"pool1/cairn-benchmark/{me}-{dead_pid()}-{now - 60}-0a0b0c/"
    old = f"pool1/cairn-benchmark/elsewhere-1-{now - 2 * objbench.STALE_AGE_S}-0d0e0f/"
    live = f"pool1/cairn-benchmark/{me}-{os.getpid()}-{now - 60}-101112/"
    other = f"pool1/cairn-benchmark/elsewhere-1-{now - 60}-131415/"
    for prefix in (dead, old, live, other):
        for n in ("t001/000-00000", "t001/000-00001"):
            c.put_object(Bucket=s3_bucket, Key=prefix + n, Body=b"x" * 100)
    c.put_object(Bucket=s3_bucket, Key="pool1/containers/00000001.ctr", Body=b"pool data")
    c.put_object(Bucket=s3_bucket, Key="cairn-benchmark/" + dead.split("/")[2] + "/t001/o",
                 Body=b"outside the pool's prefix")
    # a killed upload in parts: begun, one part sent, never completed
    u = c.create_multipart_upload(Bucket=s3_bucket, Key=dead + "t002/000-00000")
    c.upload_part(Bucket=s3_bucket, Key=dead + "t002/000-00000", UploadId=u["UploadId"],
                  PartNumber=1, Body=b"y" * (5 * MIB))
    r = ObjectBenchmark(spec(s3_server, s3_bucket, prefix="pool1/"), max_threads=1,
                        **SMALL).run()
    assert r["removed"] == 4 and r["aborted_uploads"] == 1
    assert sorted(r["removed_runs"]) == sorted([dead, old])
    objects, uploads = keys(s3_server, s3_bucket)
    assert sorted(objects) == sorted(
        [live + "t001/000-00000", live + "t001/000-00001", other + "t001/000-00000",
         other + "t001/000-00001", "pool1/containers/00000001.ctr",
         "cairn-benchmark/" + dead.split("/")[2] + "/t001/o"])
    assert uploads == []


def test_wrong_keys_are_said_as_such_and_nothing_is_written(s3_server, s3_bucket):
    events = []
    run = ObjectBenchmark(spec(s3_server, s3_bucket, secret_key="x" * 40, attempts=1),
                          emit=lambda e, d: events.append(e), **SMALL)
    with pytest.raises(BucketError) as e:
        run.run()
    assert e.value.status == st.AUTH_FAILED and "refused the credentials" in e.value.message
    assert "warning" not in events, "no cleanup of a run that never began"
    assert keys(s3_server, s3_bucket) == ([], [])


def test_the_agent_runs_it_as_a_request_and_refuses_settings_that_cannot_work(
        s3_server, s3_bucket):
    from app.agent import ops
    from app.agent.server import Server
    rin, win = os.pipe()
    rout, wout = os.pipe()
    server = Server(os.fdopen(rin, "rb"), os.fdopen(wout, "wb", buffering=0))
    t = threading.Thread(target=server.serve, daemon=True)
    t.start()
    replies = os.fdopen(rout, "rb")
    to_agent = os.fdopen(win, "wb", buffering=0)
    try:
        args = {"bucket": spec(s3_server, s3_bucket), "max_threads": 2, **SMALL}
        to_agent.write(protocol.encode({"id": 7, "op": "object_benchmark", "args": args}))
        events, answer = [], None
        while answer is None:
            msg = protocol.decode(replies.readline())
            if "event" in msg:
                events.append((msg["event"], msg["data"]))
            else:
                answer = msg
        assert "result" in answer, answer
        steps = answer["result"]["steps"]
        assert [s["threads"] for s in steps] == [1, 2]
        assert [d for e, d in events if e == "step"] == steps
        assert keys(s3_server, s3_bucket) == ([], [])
    finally:
        to_agent.close()
        t.join(30)
        replies.close()

    class Req:
        emit = staticmethod(lambda event, data: None)
        is_cancelled = staticmethod(lambda: False)
    good = spec(s3_server, s3_bucket)
    for kw, words in ((dict(min_threads=0), "min_threads"),
                      (dict(min_threads=3, max_threads=2), "max_threads"),
                      (dict(max_threads=101), "max_threads"),
                      (dict(step=True), "step"),
                      (dict(object_size=2 << 30), "object_size"),
                      (dict(object_size=MIB, ranged_size=2 * MIB), "ranged_size"),
                      (dict(part_size=MIB), "part_size"),
                      (dict(seconds=1, objects_per_thread=2), "not both"),
                      (dict(seconds=0), "seconds"),
                      (dict(objects_per_thread=0), "objects_per_thread")):
        with pytest.raises(ValidationError) as e:
            ops.object_benchmark(Req(), good, **kw)
        assert words in e.value.message, (kw, e.value.message)
    with pytest.raises(ValidationError) as e:
        ops.object_benchmark(Req(), {"endpoint": s3_server.endpoint, "bucket": s3_bucket})
    assert "access_key" in e.value.message
    assert keys(s3_server, s3_bucket) == ([], [])


def test_thread_counts_run_as_the_seed_runs_them():
    assert thread_counts(1, 100, 10) == [1] + list(range(10, 101, 10))
    assert thread_counts(1, 3, 1) == [1, 2, 3]
    assert thread_counts(2, 8, 3) == [2, 3, 6, 8]
    assert thread_counts(4, 4, 1) == [4]
    assert objbench.percentile_ms([], 50) is None
    assert objbench.percentile_ms([0.001 * i for i in range(1, 101)], 95) == 95.0
