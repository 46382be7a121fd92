"""A lifecycle's duplication, measured: (a) the streamed copy of an AdvancedDisk image into a
second AdvancedDisk pool against the backup that made it, on the same data in the same run;
(b) between two deduplicating pools, the copy of an unchanged second full, which sends only
the chunks the target pool lacks.

    .venv/bin/python bench/bench_duplicate.py           # 1 GiB of 64 MiB files, ~3 minutes
    .venv/bin/python bench/bench_duplicate.py --quick   # 128 MiB

Both pools are on this host, as the embedded default has them: the copy runs in one agent,
no network (the data plane's TLS is what a copy to another host adds, as a backup to another
host does). Three rounds; each round backs up into the first pool, then copies to the
second (the two alternate), and the medians of the rounds count. Targets: streamed duplication >= 0.8x the backup's rate; the
second full's copy between two deduplicating pools sends < 1% of the image's bytes. Exits
1 when a target is missed."""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from app import status  # noqa: E402 - after the path is set
from app.jobs.duplicate_queue import queue_after_backup  # noqa: E402
from app.master import Master  # noqa: E402

FILE_BYTES = 64 << 20


def make_data(root, total):
    os.makedirs(root, exist_ok=True)
    for i in range(max(1, total // FILE_BYTES)):
        with open(os.path.join(root, f"f{i:04d}.bin"), "wb") as f:
            for _ in range(FILE_BYTES >> 20):
                f.write(os.urandom(1 << 20))


def master(work, types, src):
    """A master with two pools of `types` (p1 the backups', p2 the copies'), lifecycle gold
    and policy p backing up to p1."""
    m = Master(os.path.join(work, "home"))
    m.config.add_host("me", local=True)
    for n, t in enumerate(types, 1):
        where = os.path.join(work, f"pool{n}")
        if t == "dedup":
            m.create_storage_server(f"s{n}", type=t, host="me", path=where)
            m.create_disk_pool(f"p{n}", server=f"s{n}", volumes=[], high_water=100,
                               low_water=99)
        else:
            os.makedirs(where)
            m.create_storage_server(f"s{n}", type=t, host="me")
            m.create_disk_pool(f"p{n}", server=f"s{n}", volumes=[where], high_water=100,
                               low_water=99)
        m.create_storage_unit(f"stu{n}", pool=f"p{n}")
    m.create_lifecycle("gold", ["backup:stu1:1w", "duplicate:stu2:1w"])
    m.create_policy("p", storage_unit="stu1", clients=["me"], selections=[src])
    m.hosts.connect(m.config.host("me"))
    return m


def backup_then_copy(m):
    """(backup job, its time, duplicate job, its time), each run alone: the policy backs up
    to stu1, then the copy a backup under lifecycle gold gets is queued. Each time runs from a
    quiet page cache (everything written before is synced first, untimed) until what the job
    wrote is on the disk (a sync, timed): a job that leaves its data in the page cache would
    otherwise look as fast as memory, and the next one would pay for its write-back."""
    os.sync()
    t0 = time.monotonic()
    [job] = m.wait_for(m.start_backup("p"))
    os.sync()
    backup_s = time.monotonic() - t0
    with m.db.tx() as c:
        [jid] = queue_after_backup(m, c, dict(m.image(job["image_id"]), lifecycle="gold"))
    os.sync()
    t0 = time.monotonic()
    [dup] = m.wait_for([jid])
    os.sync()
    copy_s = time.monotonic() - t0
    for j in (job, dup):
        if j["status"] != status.OK:
            raise SystemExit(f"job {j['id']} failed: {j['status_text']}")
    return job, backup_s, dup, copy_s


def streamed(src, work, rounds):
    """Median backup rate, median copy rate and median of the rounds' copy/backup ratios."""
    backups, copies, ratios = [], [], []
    for r in range(rounds):
        w = os.path.join(work, f"stream{r}")
        m = master(w, ("advanced-disk", "advanced-disk"), src)
        try:
            job, backup_s, dup, copy_s = backup_then_copy(m)
            size = dup["result"]["image_bytes"]
            backups.append(job["bytes"] / backup_s)
            copies.append(size / copy_s)
            ratios.append(copies[-1] / backups[-1])
            print(f"round {r + 1}: backup {backups[-1] / (1 << 20):.1f} MiB/s, copy "
                  f"{copies[-1] / (1 << 20):.1f} MiB/s ({ratios[-1]:.2f}x)", flush=True)
        finally:
            m.close()
            shutil.rmtree(w, ignore_errors=True)
    return statistics.median(backups), statistics.median(copies), statistics.median(ratios)


def chunks(src, work):
    m = master(os.path.join(work, "dedup"), ("dedup", "dedup"), src)
    try:
        backup_then_copy(m)
        _job, _b, dup, copy_s = backup_then_copy(m)
        return dup["result"], copy_s
    finally:
        m.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="128 MiB instead of 1 GiB")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    total = (128 << 20) if args.quick else (1 << 30)
    work = tempfile.mkdtemp(prefix="cairn-bench-dup-")
    try:
        src = os.path.join(work, "src")
        make_data(src, total)
        backup_rate, copy_rate, ratio = streamed(src, work, args.rounds)
        result, copy_s = chunks(src, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sent = result["sent_bytes"] / result["image_bytes"]
    mib = 1 << 20
    print(f"data: {total / mib:.0f} MiB in {FILE_BYTES / mib:.0f} MiB files; load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"backup into AdvancedDisk:          {backup_rate / mib:8.1f} MiB/s (median)")
    print(f"streamed duplication, AD -> AD:    {copy_rate / mib:8.1f} MiB/s (median); "
          f"median ratio {ratio:.2f}x the backup; target >= 0.8x")
    print(f"dedup -> dedup, unchanged 2nd full: {result['sent_bytes'] / mib:8.2f} MiB of "
          f"{result['image_bytes'] / mib:.1f} MiB sent ({100 * sent:.3f}%; target < 1%), "
          f"{copy_s:.1f} s")
    return 0 if ratio >= 0.8 and sent < 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
