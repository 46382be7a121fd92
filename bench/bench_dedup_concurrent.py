"""Concurrent backups of the same data into one deduplication pool: how much the pool's
containers hold after them, against the data stored once.

  .venv/bin/python bench/bench_dedup_concurrent.py [--jobs 4] [--size-mib 100] [--rounds 3]

Each round makes a fresh pool on the embedded local host, backs the data up once into it
(what the data takes stored once: "unique"), then makes another fresh pool and starts --jobs
backups of the same tree at once (one policy each, a storage unit that runs them all
together) and measures its containers. Target: containers <= 1.05x unique, before any space
reclaim. The tree is --size-mib of random data in 4 MiB files; medians of the rounds."""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from app import status  # noqa: E402
from bench.benchlib import local_master  # noqa: E402

TARGET = 1.05


def make_tree(src, size_mib):
    os.makedirs(src)
    for i in range(max(1, size_mib // 4)):
        with open(os.path.join(src, f"f{i:04d}"), "wb") as f:
            f.write(os.urandom(4 << 20))


def containers_bytes(pool):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(pool)
               for f in fs if f.endswith(".ctr"))


def run_round(work, src, jobs):
    """(unique bytes, bytes after `jobs` concurrent backups, their wall time)."""
    once = os.path.join(work, "once")
    os.makedirs(os.path.join(once, "pool"))
    m = local_master(os.path.join(once, "home"), os.path.join(once, "pool"), src,
                     schedules=[("full", "full")], storage_type="dedup")
    try:
        [job] = m.wait_for(m.start_backup("p"))
        assert job["status"] == status.OK, job
    finally:
        m.close()
    unique = containers_bytes(os.path.join(once, "pool"))

    many = os.path.join(work, "many")
    os.makedirs(os.path.join(many, "pool"))
    m = local_master(os.path.join(many, "home"), os.path.join(many, "pool"), src,
                     schedules=[("full", "full")], storage_type="dedup")
    try:
        m.update_object("storage-unit", "stu", max_concurrent_jobs=jobs)
        for k in range(1, jobs):
            m.config.add_policy(f"p{k}", storage_unit="stu")
            m.config.add_schedule(f"p{k}", "full", type="full")
            m.config.add_policy_client(f"p{k}", "me")
            m.config.add_policy_selection(f"p{k}", src)
        started = time.monotonic()
        ids = m.start_backup("p") + [j for k in range(1, jobs)
                                     for j in m.start_backup(f"p{k}")]
        done = m.wait_for(ids)
        wall = time.monotonic() - started
        assert all(j["status"] == status.OK for j in done), done
    finally:
        m.close()
    held = containers_bytes(os.path.join(many, "pool"))
    shutil.rmtree(once)
    shutil.rmtree(many)
    return unique, held, wall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--size-mib", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default=None, help="a directory for the data and the pools")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="cairn-bench-conc-", dir=args.work)
    try:
        src = os.path.join(work, "src")
        make_tree(src, args.size_mib)
        rows = []
        for r in range(args.rounds):
            unique, held, wall = run_round(work, src, args.jobs)
            rows.append((unique, held, wall))
            print(f"round {r + 1}: unique {unique / 2**20:.1f} MiB, after {args.jobs} "
                  f"concurrent backups {held / 2**20:.1f} MiB ({held / unique:.3f}x), "
                  f"{wall:.2f} s")
        ratio = statistics.median(h / u for u, h, _ in rows)
        wall = statistics.median(w for _, _, w in rows)
        print(f"median: containers {ratio:.3f}x unique, {args.jobs} backups of "
              f"{args.size_mib} MiB in {wall:.2f} s; target <= {TARGET}x: "
              f"{'met' if ratio <= TARGET else 'NOT met'}")
        return 0 if ratio <= TARGET else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
