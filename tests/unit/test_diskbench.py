"""The storage host's disk benchmark (app/agent/diskbench.py) on real folders: thread pairs
spread round-robin over the volumes, a step per pair count with throughput, IOPS and latency
percentiles, its files removed whatever ends the run (an end, a cancel, a refusal), and the
folder of a run whose agent was killed removed by the next one. Steps are short and files
small so that each test takes seconds."""

import os
import subprocess
import sys
import threading
import time

import pytest

from app import status
from app.agent import diskbench
from app.agent.diskbench import DiskBenchmark, percentile_ms
from app.errors import Canceled, CairnError

FAST = dict(step_seconds=0.4, file_size=4 << 20)


def left(*folders):
    return [n for f in folders for n in os.listdir(f) if n.startswith(diskbench.PREFIX)]


def test_steps_add_a_pair_each_round_robin_over_the_volumes(tmp_path):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    seen = []
    run = DiskBenchmark([str(v1), str(v2)], max_pairs=3, emit=lambda e, d: seen.append((e, d)),
                        **FAST)
    r = run.run()
    steps = r["steps"]
    assert [s["threads"] for s in steps] == list(range(1, len(steps) + 1))
    assert r["stopped"] in ("stable", "max_pairs")
    if r["stopped"] == "max_pairs":
        assert len(steps) == 3
    for s in steps:
        assert s["io_size"] == 256 << 10
        assert s["write_mb_s"] > 0 and s["read_mb_s"] > 0 and s["write_iops"] > 0
        assert s["combined_mb_s"] == pytest.approx(s["write_mb_s"] + s["read_mb_s"], abs=0.02)
        assert s["max_combined_mb_s"] >= s["combined_mb_s"] * 0.5
        for k in ("write", "read"):
            assert 0 < s[f"{k}_p50_ms"] <= s[f"{k}_p95_ms"] <= s[f"{k}_p99_ms"]
        # an IOPS figure and a throughput figure of the same I/O size agree
        assert s["write_iops"] * s["io_size"] / (1 << 20) == pytest.approx(s["write_mb_s"],
                                                                           rel=0.02, abs=0.05)
    last = steps[-1]["directories"]
    roots = [os.path.dirname(d) for d in last]
    # pair 1 on the first volume, pair 2 on the second, pair 3 on the first again
    assert [os.path.dirname(r) for r in roots] == [str(v1), str(v2), str(v1)][:len(last)]
    assert r["best"]["combined_mb_s"] == max(s["combined_mb_s"] for s in steps)
    assert [d for e, d in seen if e == "step"] == steps
    assert any(e == "progress" and d["bytes"] > 0 for e, d in seen)
    assert r["cache_bypass"] == "direct"  # tmp_path is on a disk file system here
    assert left(v1, v2) == []


def test_db_workload_moves_8k_at_random_offsets(tmp_path):
    r = DiskBenchmark([str(tmp_path)], workload="db", max_pairs=1, **FAST).run()
    [s] = r["steps"]
    assert s["io_size"] == 8192 and r["io_size"] == 8192
    assert s["read_iops"] > 0 and s["write_iops"] > 0
    assert left(tmp_path) == []


def test_without_direct_io_it_syncs_and_drops_the_cache_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(DiskBenchmark, "_takes_direct", staticmethod(lambda folder: False))
    r = DiskBenchmark([str(tmp_path)], max_pairs=1, **FAST).run()
    assert r["cache_bypass"] == "fadvise"
    assert any("does not take direct I/O" in n for n in r["notes"])
    assert r["steps"][0]["write_mb_s"] > 0 and r["steps"][0]["read_mb_s"] > 0
    assert left(tmp_path) == []


def test_cancel_mid_run_stops_the_threads_and_removes_the_files(tmp_path):
    stop = threading.Event()
    steps = []
    # steps long enough that the run cannot stop by itself (at its third step at the
    # earliest) before it is canceled
    run = DiskBenchmark([str(tmp_path)], max_pairs=50, step_seconds=1, file_size=4 << 20,
                        emit=lambda e, d: steps.append(d) if e == "step" else None,
                        is_cancelled=stop.is_set)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", _catch(run.run)))
    before = threading.active_count()
    t.start()
    deadline = time.monotonic() + 30
    while not steps and time.monotonic() < deadline:
        time.sleep(0.02)
    assert steps, "no step ended"
    [root] = left(tmp_path)
    assert os.listdir(tmp_path / root), "the pairs' folders are there while it runs"
    stop.set()
    t.join(30)
    assert not t.is_alive()
    assert isinstance(box["r"], Canceled)
    assert left(tmp_path) == []
    time.sleep(0.1)
    assert threading.active_count() <= before


def _catch(fn):
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001
        return e


def test_too_little_space_is_refused_and_leaves_nothing(small_tmpfs):
    vol = small_tmpfs("8m")
    with pytest.raises(CairnError) as e:
        DiskBenchmark([str(vol)], max_pairs=2, step_seconds=0.3, file_size=4 << 20).run()
    assert e.value.status == status.POOL_FULL
    assert "--max-pairs" in e.value.hint
    assert os.listdir(vol) == []


def test_a_folder_left_by_a_killed_agent_is_removed_by_the_next_run(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    dead = tmp_path / f"{diskbench.PREFIX}{os.uname().nodename}-{p.pid}-0123abcd"
    (dead / "pair-1").mkdir(parents=True)
    (dead / "pair-1" / "read").write_bytes(b"x" * 4096)
    live = tmp_path / f"{diskbench.PREFIX}{os.uname().nodename}-{os.getpid()}-0123abcd"
    live.mkdir()
    r = DiskBenchmark([str(tmp_path)], max_pairs=1, **FAST).run()
    assert r["removed_stale"] == [str(dead)]
    assert not dead.exists() and live.exists()


def test_settings_that_cannot_work_are_refused(tmp_path):
    for kw in (dict(workload="tape"), dict(max_pairs=0), dict(max_pairs=101),
               dict(file_size=1024), dict(step_seconds=1, max_step_seconds=0.5)):
        with pytest.raises(CairnError):
            DiskBenchmark([str(tmp_path)], **kw)
    with pytest.raises(CairnError):
        DiskBenchmark(["relative/path"])


def test_percentiles_of_the_latency_histogram():
    hist = [0] * diskbench.BUCKETS
    assert percentile_ms(hist, 50) is None
    hist[10] = 98          # 10 µs
    s = (5000).bit_length() - 6
    hist[s * 32 + (5000 >> s)] = 2     # 5 ms, within 3%
    assert percentile_ms(hist, 50) == pytest.approx(0.0105, abs=0.001)
    assert percentile_ms(hist, 99) == pytest.approx(5.0, rel=0.04)
