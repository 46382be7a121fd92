#!/usr/bin/env python3
"""Memory and load time of a deduplication pool's chunk index (plugins/storage/dedup/store.py).

The storage host's agent keeps the whole index in memory (fingerprint -> container, offset,
stored length), so the memory per chunk bounds how large a pool one host can serve. This
writes an index log of N entries (--chunks, default 1,000,000) as a pool would, opens the
store the way an agent does, and reports:

    bytes per chunk      Python heap held by the index after loading (tracemalloc)
    load rate            entries read from index/chunks.log per second
    lookups              has() of known and unknown fingerprints per second

and, for scale, the memory a pool of 100 TB in 512 KiB chunks would need. No peer does
this the same way, so there is no ratio; the figure to watch is bytes per chunk.

Usage: bench/bench_chunk_index.py [--chunks N] [--keep DIR]
"""

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plugins.storage.dedup import store as st  # noqa: E402

CHUNK = 512 * 1024


def write_log(store, n):
    """An index log of n entries as sealed containers leave it (about 128 chunks each)."""
    per = st.DEFAULT_CONTAINER_SIZE // (CHUNK // 2)
    with store._locked():
        batch = []
        for i in range(n):
            fp = i.to_bytes(8, "big") + os.urandom(24)
            number, k = divmod(i, per)
            batch.append((fp, st.Location(number + 1, 16 + k * (CHUNK // 2), CHUNK // 2)))
            if len(batch) == 100_000:
                store._append_index(batch)
                batch = []
        if batch:
            store._append_index(batch)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--keep", help="build the pool in DIR and keep it")
    a = ap.parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="cairn-bench-chunk-index-")
    try:
        write_log(st.ChunkStore(root), a.chunks)
        gc.collect()
        t0 = time.perf_counter()
        store = st.ChunkStore(root)
        load_s = time.perf_counter() - t0
        del store
        gc.collect()
        # a second load, traced (tracemalloc slows it down, so it is not the one timed)
        tracemalloc.start()
        store = st.ChunkStore(root)
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(store) == a.chunks
        known = list(store._index)[:: max(1, a.chunks // 100_000)]
        unknown = [os.urandom(32) for _ in range(len(known))]
        t0 = time.perf_counter()
        hits = sum(store.has(fp) for fp in known) + sum(store.has(fp) for fp in unknown)
        lookup_s = time.perf_counter() - t0
        assert hits == len(known)
        per = held / a.chunks
        print(f"chunks                {a.chunks:,}")
        print(f"bytes per chunk       {per:.0f}")
        print(f"load rate             {a.chunks / load_s:,.0f} entries/s ({load_s:.2f} s)")
        print(f"lookups               {2 * len(known) / lookup_s:,.0f} has()/s")
        print(f"100 TB of 512 KiB     {per * (100e12 / CHUNK) / 2**30:,.1f} GiB of memory")
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
