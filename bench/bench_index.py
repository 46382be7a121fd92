#!/usr/bin/env python3
"""Benchmark of the catalog file index (app/catalog_index/) at image scale.

Builds the index of a synthetic image of 2,097,152 rows (32,768 leaf directories of about 60
files under three levels of 32 directories, plus one directory of 100,000 entries), then
measures against the targets:

    indexing rate        >= 100,000 files/s   rows already in Python lists -> finished file
    size on disk         <  150 bytes per file
    list_dir, cold       <  100 ms            page cache of the index dropped, open + list
    list_dir, first      <  100 ms            new reader (page cache warm), open + list
    list_dir, repeated   <  100 ms            same reader, directory listed before
    the same three for the 100,000-entry directory (median of 7 runs) < 300 ms: what the
    restore browser needs to expand such a directory at once

Prints a table and exits 1 if a target is missed. Usage: bench/bench_index.py [--rows N]
[--seed S] [--keep DIR]
"""

import argparse
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from app.catalog_index import IndexReader, IndexWriter  # noqa: E402

FANOUT = 32          # directories per level, three levels -> 32,768 leaf directories
BIG_DIR_ENTRIES = 100_000
SAMPLE_DIRS = 200
BIG_RUNS = 7
BATCH = 10_000       # rows per add_rows call, as the master receives them from the agent
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-."

TARGET_RATE = 100_000
TARGET_BYTES = 150
TARGET_LIST_MS = 100
TARGET_BIG_LIST_MS = 300


class Image:
    """Synthetic rows in walker order: a directory's children as one run, then its
    subdirectories depth first."""

    def __init__(self, total_rows, seed):
        self.rng = random.Random(seed)
        self.rows = []
        self.offset = 0
        self.leaf_dirs = []
        self.upper_dirs = []
        levels = 3
        n_leaves = FANOUT ** levels
        n_dir_rows = 1 + 1 + sum(FANOUT ** i for i in range(1, levels + 1))
        n_files = total_rows - n_dir_rows - BIG_DIR_ENTRIES
        if n_files < n_leaves:
            raise SystemExit(f"--rows must be at least {n_dir_rows + BIG_DIR_ENTRIES + n_leaves}")
        base, extra = divmod(n_files, n_leaves)
        counts = [base + (i < extra) for i in range(n_leaves)]
        # Uneven directories, same total.
        for _ in range(n_leaves):
            a, b = self.rng.randrange(n_leaves), self.rng.randrange(n_leaves)
            k = self.rng.randrange(0, max(1, counts[a] // 2))
            counts[a] -= k
            counts[b] += k
        self.leaf_counts = iter(counts)
        self.now = 1_700_000_000 * 10**9

        self._dir_row("/data")
        self._level("/data", levels, top=True)
        assert len(self.rows) == total_rows, (len(self.rows), total_rows)

    def _names(self, n):
        rng = self.rng
        names = set()
        while len(names) < n:
            name = "".join(rng.choices(ALPHABET, k=rng.randint(8, 30)))
            if rng.random() < 0.01:
                name = name[:4] + "\udcff\udce9" + name[4:]   # bytes that are not UTF-8
            names.add(name)
        return list(names)

    def _dir_row(self, path):
        self.rows.append([path, "d", 0o755, 1000, 1000, 0,
                          self.now - self.rng.randrange(10**17), self.offset, 512, "", ""])
        self.offset += 512

    def _files(self, parent, n):
        rng = self.rng
        digests = rng.randbytes(32 * n).hex()
        rows = self.rows
        off = self.offset
        for i, name in enumerate(self._names(n)):
            r = rng.random()
            if r < 0.97:
                size = int(rng.lognormvariate(9, 3)) % (1 << 40)
                length = 512 + (size + 511) // 512 * 512
                rows.append([f"{parent}/{name}", "f", 0o644, 1000, 100, size,
                             self.now - rng.randrange(10**17), off, length,
                             digests[64 * i:64 * i + 64], ""])
            elif r < 0.995:
                length = 512
                rows.append([f"{parent}/{name}", "l", 0o777, 1000, 100, 0,
                             self.now - rng.randrange(10**17), off, length, "",
                             "../" + name[::-1]])
            else:
                length = 512
                rows.append([f"{parent}/{name}", "h", 0o644, 1000, 100, 0,
                             self.now - rng.randrange(10**17), off, length, "",
                             f"{parent}/{name}.orig"])
            off += length
        self.offset = off

    def _level(self, parent, depth, top=False):
        subdirs = [f"{parent}/{name}" for name in self._names(FANOUT)]
        if top:
            subdirs.append(parent + "/big-directory")
        for d in subdirs:
            self._dir_row(d)
        for d in subdirs:
            if d.endswith("/big-directory"):
                self.big_dir = d
                self._files(d, BIG_DIR_ENTRIES)
            elif depth > 1:
                self.upper_dirs.append(d)
                self._level(d, depth - 1)
            else:
                self.leaf_dirs.append(d)
                self._files(d, next(self.leaf_counts))


def drop_cache(path):
    """Evict the index from the page cache so that a list reads from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed_open_list(path, d, cold):
    """Milliseconds to open the index and list d (freeing the listing afterwards is not
    counted: a browser keeps it while it is shown), and the number of entries."""
    if cold:
        drop_cache(path)
    t = time.perf_counter()
    r = IndexReader(path)
    entries = r.list_dir(d)
    ms = (time.perf_counter() - t) * 1000
    r.close()
    return ms, len(entries)


def timed_list(reader, d):
    t = time.perf_counter()
    entries = reader.list_dir(d)
    ms = (time.perf_counter() - t) * 1000
    del entries
    return ms


def main():
    # Long: the benchmark's script from arguments to report, read top to bottom like the run.
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_097_152)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="write the index here and keep it")
    args = ap.parse_args()

    t = time.perf_counter()
    img = Image(args.rows, args.seed)
    rows = img.rows
    print(f"generated {len(rows):,} rows in {time.perf_counter() - t:.1f} s "
          f"({len(img.leaf_dirs):,} leaf directories, one of {BIG_DIR_ENTRIES:,} entries)")
    load_before = os.getloadavg()[0]

    tmp = tempfile.mkdtemp(prefix="cairn-bench-index-")
    out_dir = args.keep or tmp
    path = os.path.join(out_dir, "image.idx")
    results = []   # (figure, value text, target text, ok)
    try:
        batches = [rows[i:i + BATCH] for i in range(0, len(rows), BATCH)]
        gc.collect()
        t = time.perf_counter()
        w = IndexWriter(path)
        try:
            for b in batches:
                w.add_rows(b)
        except BaseException:
            w.abort()
            raise
        stats = w.close()
        elapsed = time.perf_counter() - t
        n_rows = len(rows)
        if stats["files"] != n_rows:
            raise SystemExit(f"index holds {stats['files']:,} entries, expected {n_rows:,}")
        del batches, rows, img.rows
        gc.collect()
        size = os.path.getsize(path)
        rate = n_rows / elapsed
        per_file = size / n_rows
        results.append(("indexing rate", f"{rate:,.0f} files/s ({elapsed:.1f} s)",
                        f">= {TARGET_RATE:,} files/s", rate >= TARGET_RATE))
        results.append(("size on disk", f"{per_file:.1f} B/file ({size / 2**20:.0f} MiB)",
                        f"< {TARGET_BYTES} B/file", per_file < TARGET_BYTES))

        rng = random.Random(args.seed + 1)
        sample = rng.sample(img.leaf_dirs, SAMPLE_DIRS - 20) + rng.sample(img.upper_dirs, 20)

        for label, cold in (("cold", True), ("first", False)):
            times = [timed_open_list(path, d, cold)[0] for d in sample]
            med, mx = statistics.median(times), max(times)
            results.append((f"list_dir {label}, {SAMPLE_DIRS} dirs",
                            f"median {med:.2f} ms, max {mx:.2f} ms",
                            f"< {TARGET_LIST_MS} ms", mx < TARGET_LIST_MS))

        with IndexReader(path) as r:
            for d in sample:
                r.list_dir(d)
            times = [timed_list(r, d) for _ in range(3) for d in sample]
            med, mx = statistics.median(times), max(times)
            # 200 directories cycle through the reader's 16 kept listings: every list decodes.
            results.append((f"list_dir repeated, {SAMPLE_DIRS} dirs",
                            f"median {med:.2f} ms, max {mx:.2f} ms",
                            f"< {TARGET_LIST_MS} ms", mx < TARGET_LIST_MS))

            t = time.perf_counter()
            for d in sample:
                r.lookup(d + "/nonexistent")
                r.is_dir(d)
            per = (time.perf_counter() - t) * 1000 / (2 * len(sample))
            results.append(("lookup / is_dir", f"{per:.2f} ms each", "(no target)", True))

        with IndexReader(path) as r:
            t = time.perf_counter()
            walked = sum(1 for _ in r.walk("/"))
            secs = time.perf_counter() - t
        if walked != n_rows:
            raise SystemExit(f"walk yields {walked:,} entries, expected {n_rows:,}")
        results.append(("walk of the whole image", f"{walked / secs:,.0f} entries/s "
                        f"({secs:.1f} s)", "(no target)", True))

        # One listing of 100,000 entries allocates ~50 MB of Python objects, so a single
        # run on a shared 2-core machine is at the mercy of the scheduler: judge the median
        # of BIG_RUNS runs and show the worst next to it.
        for label, cold in (("cold", True), ("first", False)):
            runs = [timed_open_list(path, img.big_dir, cold) for _ in range(BIG_RUNS)]
            if any(n != BIG_DIR_ENTRIES for _, n in runs):
                raise SystemExit(f"big directory lists {runs[0][1]:,} entries, expected "
                                 f"{BIG_DIR_ENTRIES:,}")
            times = [ms for ms, _ in runs]
            med, mx = statistics.median(times), max(times)
            results.append((f"list_dir {label}, {BIG_DIR_ENTRIES:,} entries",
                            f"median {med:.1f} ms, max {mx:.1f} ms",
                            f"< {TARGET_BIG_LIST_MS} ms (median)", med < TARGET_BIG_LIST_MS))
        with IndexReader(path) as r:
            r.list_dir(img.big_dir)
            times = [timed_list(r, img.big_dir) for _ in range(BIG_RUNS)]
        med, mx = statistics.median(times), max(times)
        results.append((f"list_dir repeated (kept), {BIG_DIR_ENTRIES:,}",
                        f"median {med:.1f} ms, max {mx:.1f} ms",
                        f"< {TARGET_BIG_LIST_MS} ms (median)", med < TARGET_BIG_LIST_MS))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    w1 = max(len(r[0]) for r in results)
    w2 = max(len(r[1]) for r in results)
    w3 = max(len(r[2]) for r in results)
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after "
          f"({os.cpu_count()} CPUs)")
    print()
    print(f"{'figure':<{w1}}  {'measured':<{w2}}  {'target':<{w3}}  result")
    print(f"{'-' * w1}  {'-' * w2}  {'-' * w3}  ------")
    for name, value, target, ok in results:
        verdict = "" if target.startswith("(") else ("PASS" if ok else "FAIL")
        print(f"{name:<{w1}}  {value:<{w2}}  {target:<{w3}}  {verdict}")
    failed = [r[0] for r in results if not r[3]]
    if failed:
        print(f"\nmissed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
