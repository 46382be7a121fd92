"""Cairn's disk benchmark (app/agent/diskbench.py, `cairn storage-server benchmark`) against
fio running the same pattern: per pair count N, N writers and N readers, each on a file of its
own in a folder of its own, folders round-robin over the volumes, 256 KiB sequential I/O
(stgpool) or 8 KiB random I/O (db), direct I/O, pread/pwrite one I/O at a time (fio's psync
engine: the system calls Cairn makes).

Rounds alternate: Cairn's run (steps of 1 to --pairs pairs, each measured --seconds after a
first interval that is not), then fio once per pair count (--seconds of runtime after a ramp
of the same first interval). Medians per pair count over the rounds, and the ratio of Cairn's
combined throughput to fio's; the issue wants them within a factor of two.

    .venv/bin/python bench/bench_diskperf.py [--volume DIR ...] [--pairs 4] [--seconds 4]
        [--rounds 3] [--file-size 256M] [--workload stgpool db]

Needs fio (Debian package fio; `scripts/setup.sh --test` installs it). Prints a table per
workload and exits 1 if a ratio is outside 0.5-2."""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from app.agent import diskbench  # noqa: E402
from app.agent.diskbench import WORKLOADS, DiskBenchmark  # noqa: E402

MiB = 1 << 20


def size_arg(text):
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(t.rstrip("KMG")) * mult


def cairn_round(volumes, workload, pairs, seconds, file_size):
    """{pairs: combined MiB/s} of one run of Cairn's benchmark through every step."""
    # every step runs: the bench compares pair counts, not where the run would stop
    diskbench.PATIENCE = 10 ** 6
    r = DiskBenchmark(volumes, workload=workload, max_pairs=pairs, step_seconds=seconds,
                      max_step_seconds=seconds, interval=1.0, file_size=file_size).run()
    assert r["cache_bypass"] == "direct", r["notes"]
    return {s["threads"]: s for s in r["steps"]}


def fio_round(volumes, workload, pairs, seconds, file_size):
    """fio with `pairs` writer/reader pairs: {"combined_mb_s", "write_mb_s", "read_mb_s",
    "write_iops", "read_iops"}."""
    io = WORKLOADS[workload]["io_size"]
    rnd = WORKLOADS[workload]["random"]
    roots = [tempfile.mkdtemp(prefix="fio-bench-", dir=v) for v in volumes]
    try:
        lines = ["[global]", "ioengine=psync", "direct=1", f"bs={io}",
                 f"size={file_size}", "time_based=1", f"runtime={seconds}", "ramp_time=1",
                 "thread=1", "randrepeat=0", "fallocate=posix"]
        for i in range(pairs):
            d = os.path.join(roots[i % len(roots)], f"pair-{i + 1}")
            os.mkdir(d)
            for kind in ("write", "read"):
                lines += [f"[{kind}{i + 1}]", f"rw={'rand' if rnd else ''}{kind}",
                          f"filename={os.path.join(d, kind)}"]
        job = os.path.join(roots[0], "job.fio")
        with open(job, "w") as f:
            f.write("\n".join(lines) + "\n")
        p = subprocess.run(["fio", "--output-format=json", job], capture_output=True,
                           text=True, check=True)
        doc = json.loads(p.stdout[p.stdout.index("{"):])
        out = {"write_mb_s": 0.0, "read_mb_s": 0.0, "write_iops": 0.0, "read_iops": 0.0}
        for j in doc["jobs"]:
            for kind in ("write", "read"):
                out[f"{kind}_mb_s"] += j[kind]["bw_bytes"] / MiB
                out[f"{kind}_iops"] += j[kind]["iops"]
        out["combined_mb_s"] = out["write_mb_s"] + out["read_mb_s"]
        return out
    finally:
        for r in roots:
            shutil.rmtree(r, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--volume", action="append", default=[])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--file-size", type=size_arg, default=256 * MiB)
    ap.add_argument("--workload", nargs="+", default=["stgpool", "db"], choices=WORKLOADS)
    a = ap.parse_args()
    if shutil.which("fio") is None:
        sys.exit("fio is missing: apt-get install fio (scripts/setup.sh --test)")
    made = None
    volumes = a.volume
    if not volumes:
        made = tempfile.mkdtemp(prefix="bench-diskperf-", dir=os.environ.get("TMPDIR", "/var/tmp"))
        volumes = [made]
    ok = True
    try:
        for workload in a.workload:
            cairn = {n: [] for n in range(1, a.pairs + 1)}
            fio = {n: [] for n in range(1, a.pairs + 1)}
            for rnd in range(a.rounds):
                for n, s in cairn_round(volumes, workload, a.pairs, a.seconds,
                                        a.file_size).items():
                    cairn[n].append(s)
                for n in range(1, a.pairs + 1):
                    fio[n].append(fio_round(volumes, workload, n, int(a.seconds), a.file_size))
                print(f"{workload}: round {rnd + 1} of {a.rounds} done", file=sys.stderr)
            print(f"\n{workload} ({WORKLOADS[workload]['io_size'] >> 10} KiB, "
                  f"{'random' if WORKLOADS[workload]['random'] else 'sequential'}), "
                  f"medians of {a.rounds} rounds, MiB/s:")
            print(f"{'pairs':>5} {'cairn write':>11} {'read':>8} {'combined':>9} "
                  f"{'fio write':>10} {'read':>8} {'combined':>9} {'ratio':>6}")
            for n in range(1, a.pairs + 1):
                c = {k: statistics.median(s[k] for s in cairn[n])
                     for k in ("write_mb_s", "read_mb_s", "combined_mb_s")}
                f = {k: statistics.median(s[k] for s in fio[n])
                     for k in ("write_mb_s", "read_mb_s", "combined_mb_s")}
                ratio = c["combined_mb_s"] / f["combined_mb_s"] if f["combined_mb_s"] else 0
                ok = ok and 0.5 <= ratio <= 2.0
                print(f"{n:>5} {c['write_mb_s']:>11.1f} {c['read_mb_s']:>8.1f} "
                      f"{c['combined_mb_s']:>9.1f} {f['write_mb_s']:>10.1f} "
                      f"{f['read_mb_s']:>8.1f} {f['combined_mb_s']:>9.1f} {ratio:>6.2f}")
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
    print("\nwithin a factor of two of fio" if ok else "\nOUTSIDE a factor of two of fio")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
