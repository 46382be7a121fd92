"""A cloud pool against a local deduplication pool on the same data in the same run: the first
full (the upload overlapped with the ingest), what an unchanged second full adds to the
bucket, and a restore whose cache lost every container against a restore from the local pool.

    .venv/bin/python bench/bench_cloud.py [--size-mib 1024] [--rounds 3] [--work DIR] [--json]
                                          [--kinds local,cloud,cloud-cache]

The data set: files of 64 MiB, half of each random bytes and half text-like (a slice of a
pool of words), made once. The S3 server is the tests' loopback one (scripts/s3-test-server.sh,
versitygw), on this machine: it shares the cores with Cairn, so the ratios are what a storage
host with a slow, nearby object store would see, not a remote service's.

Each round: a first full into a new local dedup pool, one into a new cloud pool (a new
bucket, an empty cache) and one into a cloud pool whose backups end once the cache holds
them (--commit-at cache; its queued uploads are waited for, untimed, before anything else
runs), the order rotating round by round; then, in the same order, a restore of each to a
new directory, a cloud pool's after its cache's containers were removed (every chunk comes
from the bucket). After the last round an unchanged second
full runs into the cloud pool and the bucket's bytes are summed before and after. Each job
is a whole job through the master API (bench/benchlib.py's embedded master); every restore
is compared with the source (SHA-256 per file). Medians of the rounds, and each round, are
printed; targets (reported, not enforced): first full >= 0.8x the local pool's rate, restore
>= 0.7x, second full adds < 1% to the bucket."""

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from app import status as st  # noqa: E402
from app.master import Master  # noqa: E402
from s3server import S3Server  # noqa: E402

MiB = 1 << 20
FILE = 64 * MiB
SIGN = None  # the cloud pools' sign_payload (--sign-payload)
WORDS = [bytes(random.Random(i).choices(b"abcdefghijklmnopqrstuvwxyz", k=2 + i % 9))
         for i in range(4000)]


def make_data(src, total):
    rnd = random.Random(1)
    text = b" ".join(rnd.choice(WORDS) for _ in range(2_000_000))
    os.makedirs(src)
    for i in range(max(1, total // FILE)):
        with open(os.path.join(src, f"f{i:03d}.bin"), "wb") as f:
            for _ in range(FILE // (2 * MiB)):
                f.write(os.urandom(MiB))
                at = rnd.randrange(len(text) - MiB)
                f.write(text[at:at + MiB])


def digest(root):
    out = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(4 * MiB), b""):
                    h.update(block)
            out[os.path.relpath(p, root)] = h.hexdigest()
    return out


def master(home, kind, cache, src, s3):
    m = Master(home)
    m.config.add_host("me", local=True)
    if kind.startswith("cloud"):
        bucket = s3.new_bucket("bench")
        options = {"endpoint": s3.endpoint, "bucket": bucket}
        if kind == "cloud-cache":
            options["commit_at"] = "cache"
        if SIGN is not None:
            options["sign_payload"] = SIGN
        m.create_storage_server("ss", type="cloud", host="me", path=cache, options=options,
                                credentials={"access_key": s3.access_key,
                                             "secret_key": s3.secret_key})
    else:
        bucket = None
        m.create_storage_server("ss", type="dedup", host="me", path=cache)
    m.create_disk_pool("dp", server="ss", volumes=[], high_water=100, low_water=99)
    m.config.add_storage_unit("stu", pool="dp")
    m.config.add_policy("p", storage_unit="stu")
    m.config.add_policy_client("p", "me")
    m.config.add_policy_selection("p", src)
    m.config.add_schedule("p", "full", type="full")
    m.hosts.connect(m.config.host("me"))
    return m, bucket


def job(m, start):
    os.sync()
    t = time.perf_counter()
    [j] = m.wait_for(start())
    took = time.perf_counter() - t
    if j["status"] != st.OK:
        raise SystemExit(f"job {j['id']} failed: "
                         + "\n".join(x["message"] for x in m.jobs.logs(j["id"])))
    return took, j


def bucket_bytes(s3, bucket):
    total = 0
    for page in s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket):
        total += sum(o["Size"] for o in page.get("Contents") or [])
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/var/tmp")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sign-payload", choices=("auto", "on", "off"), default="auto",
                    help="the cloud pools' sign_payload (auto: signed over http, as the "
                         "loopback server is)")
    ap.add_argument("--kinds", default="local,cloud,cloud-cache",
                    help="local (a dedup pool), cloud, cloud-cache (a cloud pool whose "
                         "backups end once the cache holds them); local first")
    a = ap.parse_args()
    global SIGN
    SIGN = {"auto": None, "on": True, "off": False}[a.sign_payload]
    work = os.path.join(a.work, f"cairn-bench-cloud-{os.getpid()}")
    os.makedirs(work)
    s3 = S3Server(os.path.join(work, "s3"))
    s3.start()
    kinds = a.kinds.split(",")
    rows = {k: {"backup": [], "restore": []} for k in kinds}
    out = {}
    try:
        src = os.path.join(work, "src")
        make_data(src, a.size_mib * MiB)
        size = sum(os.path.getsize(os.path.join(src, n)) for n in os.listdir(src))
        expected = digest(src)
        last = None
        for r in range(a.rounds):
            order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
            made = {}
            for kind in order:
                base = os.path.join(work, f"{kind}-{r}")
                m, bucket = master(os.path.join(base, "home"), kind,
                                   os.path.join(base, "pool"), src, s3)
                took, j = job(m, lambda: m.start_backup("p"))
                rows[kind]["backup"].append(size / took / 1e6)
                made[kind] = (m, bucket, base, j)
                if kind == "cloud-cache":  # its uploads end before anything else is timed
                    while m.pool_usage("dp")["cloud"]["waiting_recipes"]:
                        time.sleep(0.2)
            for kind in order:
                m, bucket, base, j = made[kind]
                if kind.startswith("cloud"):
                    cdir = os.path.join(base, "pool", "containers")
                    for n in os.listdir(cdir):
                        if n.endswith(".ctr"):
                            os.unlink(os.path.join(cdir, n))
                to = os.path.join(base, "restored")
                took, _ = job(m, lambda: [m.start_restore(j["image_id"], [src], to)])
                rows[kind]["restore"].append(size / took / 1e6)
                if digest(to + src) != expected:
                    raise SystemExit(f"the {kind} restore differs from the source")
                shutil.rmtree(to)
            for kind in order:
                made[kind][0].close()
                if kind != "cloud" or r < a.rounds - 1:
                    shutil.rmtree(made[kind][2])  # the disk space of the next rounds
            last = made["cloud"]
        _, bucket, base, _ = last  # the last round's cloud pool
        m2 = Master(os.path.join(base, "home"))
        before = bucket_bytes(s3, bucket)
        took, j = job(m2, lambda: m2.start_backup("p"))
        after = bucket_bytes(s3, bucket)
        m2.close()
        out = {"bytes": size, "rounds": a.rounds,
               "first_full_mb_s": {k: rows[k]["backup"] for k in rows},
               "restore_mb_s": {k: rows[k]["restore"] for k in rows},
               "second_full_s": round(took, 2),
               "bucket_before": before, "bucket_after": after,
               "bucket_growth_pct": round(100.0 * (after - before) / before, 3)}
        med = {k: {s: statistics.median(rows[k][s]) for s in rows[k]} for k in rows}
        out["median"] = med
        for k in kinds[1:]:
            out[f"ratio_first_full_{k}"] = round(med[k]["backup"] / med["local"]["backup"], 2)
            out[f"ratio_restore_{k}"] = round(med[k]["restore"] / med["local"]["restore"], 2)
    finally:
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"data: {out['bytes'] / MiB:.0f} MiB, {a.rounds} rounds (MB/s, median and rounds)")
    for step, key in (("first full", "first_full_mb_s"), ("restore", "restore_mb_s")):
        for k in kinds:
            v = out[key][k]
            print(f"  {step:10} {k:11} {statistics.median(v):7.1f}   "
                  + " ".join(f"{x:.1f}" for x in v))
    for k in kinds[1:]:
        print(f"first full: {k}/local {out[f'ratio_first_full_{k}']:.2f}x (target >= 0.8x)")
        print(f"restore with the cache's containers gone: {k}/local "
              f"{out[f'ratio_restore_{k}']:.2f}x (target >= 0.7x)")
    print(f"unchanged second full: {out['second_full_s']} s, the bucket grew "
          f"{out['bucket_growth_pct']}% (target < 1%)")


if __name__ == "__main__":
    main()
