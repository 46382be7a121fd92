"""Chunker of the dedup pool: throughput of both implementations and of SHA-256, and the
dedup ratio each average chunk size gets on a "5% changed" copy of a data set.

The data set is seeded random bytes (incompressible, no internal duplicates, so every
duplicate found is one the edits left). The variant applies edits of 1..16 KiB (a third each
inserts, deletes and overwrites) at random places until 5% of the bytes are touched:
  scattered   edits anywhere in the data set;
  clustered   edits inside 16 regions of 1 MiB, like a few files or database pages changing.
For each setting both copies are chunked and fingerprinted; "new" is the variant's bytes in
chunks the base does not have, ratio = (base + variant) / unique chunk bytes.

    .venv/bin/python bench/bench_chunker.py            # 96 MiB, about 6 s on 2 cores
    .venv/bin/python bench/bench_chunker.py --size 256 # about 15 s, 1 GB of RAM
"""

import argparse
import hashlib
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plugins.storage.dedup import chunker as cdc  # noqa: E402

KiB = 1024
MiB = 1024 * KiB


def make_variant(base, fraction, rnd, clustered):
    n = len(base)
    budget = int(n * fraction)
    if clustered:
        regions = [rnd.randrange(0, n - MiB) for _ in range(16)]

        def place():
            return rnd.choice(regions) + rnd.randrange(MiB)
    else:
        def place():
            return rnd.randrange(n)
    edits = []
    touched = 0
    while touched < budget:
        length = rnd.randint(1, 16 * KiB)
        edits.append((place(), rnd.choice("ido"), length))
        touched += length
    edits.sort()
    out = []
    pos = 0
    for at, op, length in edits:
        if at < pos:  # overlaps the previous edit: apply right after it
            at = pos
        out.append(base[pos:at])
        if op == "i":
            out.append(rnd.randbytes(length))
            pos = at
        elif op == "d":
            pos = min(n, at + length)
        else:
            out.append(rnd.randbytes(min(length, n - at)))
            pos = min(n, at + length)
    out.append(base[pos:])
    return b"".join(out)


def chunk_and_fingerprint(data, params, implementation=None):
    sha = hashlib.sha256
    view = memoryview(data)
    return [(c.length, sha(view[c.offset:c.offset + c.length]).digest())
            for c in cdc.chunks(data, params, implementation=implementation)]


def rate(nbytes, seconds):
    return nbytes / seconds / 1e6


def speeds(data):
    p = cdc.Params()
    sample = data[:4 * MiB]
    t = time.perf_counter()
    cdc.chunks(sample, p, implementation="reference")
    ref = rate(len(sample), time.perf_counter() - t)
    print(f"reference (pure Python)     {ref:8.1f} MB/s   (4 MiB, default sizes)")
    if cdc.ACCELERATOR:
        t = time.perf_counter()
        cdc.chunks(data, p, implementation="pyfastcdc")
        acc = rate(len(data), time.perf_counter() - t)
        print(f"accelerator ({cdc.ACCELERATOR})     {acc:8.1f} MB/s   "
              f"({len(data) // MiB} MiB, default sizes)")
        ch = cdc.Chunker(p)
        t = time.perf_counter()
        for i in range(0, len(data), 4 * MiB):
            ch.feed(memoryview(data)[i:i + 4 * MiB])
        ch.finish()
        print(f"accelerator, streamed 4 MiB {rate(len(data), time.perf_counter() - t):8.1f} MB/s")
    else:
        print("accelerator                 not installed (pip install pyfastcdc)")
    t = time.perf_counter()
    for i in range(0, len(data), MiB):
        hashlib.sha256(memoryview(data)[i:i + MiB]).digest()
    print(f"sha256 (hashlib)            {rate(len(data), time.perf_counter() - t):8.1f} MB/s")
    try:
        import blake3
    except ImportError:
        print("blake3                      not installed (for comparison only)")
    else:
        t = time.perf_counter()
        for i in range(0, len(data), MiB):
            blake3.blake3(memoryview(data)[i:i + MiB]).digest()
        print(f"blake3 (one thread)         {rate(len(data), time.perf_counter() - t):8.1f} MB/s")


def dedup_table(base, variants, normalizations):
    print()
    print(f"{'variant':10} {'avg':>6} {'nc':>2} {'chunks':>7} {'mean KiB':>9} {'new MiB':>8} "
          f"{'new %':>6} {'ratio':>6} {'MB/s':>7}")
    for avg in (256 * KiB, 512 * KiB, MiB, 2 * MiB):
        for nc in normalizations:
            p = cdc.Params(avg // 4, avg, avg * 4, nc)
            t = time.perf_counter()
            base_chunks = chunk_and_fingerprint(base, p)
            base_time = time.perf_counter() - t
            stored = {f: n for n, f in base_chunks}
            for name, variant in variants:
                t = time.perf_counter()
                var_chunks = chunk_and_fingerprint(variant, p)
                seconds = base_time + time.perf_counter() - t
                unique = dict(stored)
                new = 0
                for n, f in var_chunks:
                    if f not in stored:
                        new += n
                    unique[f] = n
                ratio = (len(base) + len(variant)) / sum(unique.values())
                print(f"{name:10} {avg // KiB:5}K {nc:2} {len(base_chunks):7} "
                      f"{len(base) / len(base_chunks) / KiB:9.0f} {new / MiB:8.1f} "
                      f"{100 * new / len(variant):5.1f}% {ratio:6.3f} "
                      f"{rate(len(base) + len(variant), seconds):7.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=96, help="data set size in MiB (default 96)")
    ap.add_argument("--changed", type=float, default=0.05, help="fraction edited (0.05)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nc", default="1,2", help="normalization levels to compare (1,2)")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    # randbytes() refuses sizes of 256 MiB and more in one call
    base = b"".join(rnd.randbytes(MiB) for _ in range(args.size))
    print(f"data set {args.size} MiB random, {args.changed:.0%} changed; "
          f"accelerator: {cdc.ACCELERATOR or 'none'}; {os.cpu_count()} CPUs")
    speeds(base)
    variants = [("scattered", make_variant(base, args.changed, rnd, False)),
                ("clustered", make_variant(base, args.changed, rnd, True))]
    dedup_table(base, variants, [int(x) for x in args.nc.split(",")])


if __name__ == "__main__":
    main()
