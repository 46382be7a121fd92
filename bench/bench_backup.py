"""Backup and restore throughput of Cairn on the embedded default, against `tar`, `restic`
and `kopia` on the same data in the same run, with warm caches.

  .venv/bin/python bench/bench_backup.py [--quick] [--dir DIR] [--sets large,small] [--no-kopia]

Data sets: (a) 2 GiB of 128 MiB files, (b) 20,000 files of 100 KiB; incompressible and
unique, so that nobody gains by deduplication. Three rounds, each running every tool once in
turn; the best round of each tool counts (the machine may be shared with other work).
Cairn's figure is the whole job: queueing, the agent's work, the fsync that makes the image
durable, the commit and the catalog; tar's pipeline does not sync. Prints MB/s and the ratios against the
targets: large-file backup >= 0.8x tar, small-file backup >= 0.6x tar, restore >= 0.8x
Cairn's own backup. restic (Debian) runs where it is installed; kopia with its default
settings, as in bench/bench_dedup.py (built by scripts/kopia-build.sh; left out where there is
no Go toolchain, or with --no-kopia)."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.benchlib import du, local_master  # noqa: E402
from bench.dedup_peers import Kopia, kopia_binary  # noqa: E402

MB = 1e6
RUNS = 3


def make_large(root, total, size):
    os.makedirs(root)
    for i in range(total // size):
        with open(os.path.join(root, f"large-{i:03d}.bin"), "wb") as f:
            left = size
            while left:
                n = min(left, 16 << 20)
                f.write(os.urandom(n))
                left -= n


def make_small(root, count, size):
    per_dir = 1000
    for i in range(count):
        d = os.path.join(root, f"d{i // per_dir:03d}")
        if i % per_dir == 0:
            os.makedirs(d)
        with open(os.path.join(d, f"f{i:05d}.dat"), "wb") as f:
            f.write(os.urandom(size))


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def sh(cmd, **kw):
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, **kw)


def drop(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


class Cairn:
    """Cairn on the embedded default, driven through the master API as the console does."""

    def __init__(self, src, work):
        self.home = os.path.join(work, "cairn-home")
        self.vol = os.path.join(work, "cairn-vol")
        self.src = src
        self.tgt = os.path.join(work, "cairn.restore")
        os.makedirs(self.vol)
        self.m = local_master(self.home, self.vol, src)

    def run(self):
        m = self.m
        t0 = time.perf_counter()
        [jid] = m.start_backup("p")
        [job] = m.wait_for([jid], poll=0.02)
        tb = time.perf_counter() - t0
        if job["status"] != 0:
            raise SystemExit(f"cairn backup failed: {m.jobs.logs(jid)[-3:]}")
        sh("sync")
        t0 = time.perf_counter()
        rid = m.start_restore(job["image_id"], [self.src], self.tgt)
        [rjob] = m.wait_for([rid], poll=0.02)
        tr = time.perf_counter() - t0
        if rjob["status"] != 0:
            raise SystemExit(f"cairn restore failed: {m.jobs.logs(rid)[-3:]}")
        drop(self.tgt)
        m.expire_image(job["image_id"])
        return tb, tr

    def close(self):
        self.m.close()
        drop(self.home)
        drop(self.vol)


TAR_SYNC = []


def run_tar(src, work):
    out = os.path.join(work, "tar.out")
    tgt = os.path.join(work, "tar.restore")
    tb = timed(lambda: sh(f"tar -cf - -C {src} . | cat > {out}"))
    # The same output made durable, as a committed Cairn image is: the disk write that the
    # plain pipeline leaves to the kernel for later.
    tsync = timed(lambda: sh(f"sync {out}"))
    TAR_SYNC.append(tb + tsync)
    os.makedirs(tgt)
    tr = timed(lambda: sh(f"tar -xf {out} -C {tgt}"))
    drop(tgt)
    drop(out)
    return tb, tr


def run_restic(src, work):
    repo = os.path.join(work, "restic-repo")
    tgt = os.path.join(work, "restic.restore")
    env = dict(os.environ, RESTIC_PASSWORD="bench", RESTIC_REPOSITORY=repo)
    sh("restic init", env=env)
    tb = timed(lambda: sh(f"restic backup -q {src}", env=env))
    sh("sync")
    tr = timed(lambda: sh(f"restic restore -q latest --target {tgt}", env=env))
    drop(tgt)
    drop(repo)
    return tb, tr


def run_kopia(src, work):
    kopia = Kopia(src, work)
    kopia.setup()
    tb = kopia.backup("first")["seconds"]
    sh("sync")
    tgt = os.path.join(work, "kopia.restore")
    tr = kopia.restore(tgt)
    drop(tgt)
    drop(kopia.repo)
    drop(os.path.dirname(kopia.cache))
    return tb, tr


def bench_set(name, src, work, kopia=False):
    """Each round runs every tool once, one after the other, so that load from elsewhere
    on the machine falls on all of them alike; the best round of each tool counts."""
    nbytes = du(src)
    sh(f"tar -cf - -C {src} . > /dev/null")  # warm the page cache
    cairn = Cairn(src, work)
    tools = [("tar", lambda: run_tar(src, work)), ("cairn", cairn.run)]
    if shutil.which("restic"):
        tools.append(("restic", lambda: run_restic(src, work)))
    if kopia:
        tools.append(("kopia", lambda: run_kopia(src, work)))
    times = {}
    try:
        for _ in range(RUNS):
            for tool, fn in tools:
                sh("sync")
                tb, tr = fn()
                times.setdefault(f"{tool} backup", []).append(tb)
                times.setdefault(f"{tool} restore", []).append(tr)
    finally:
        cairn.close()
    best = {k: min(v) for k, v in times.items()}
    best["tar backup + sync"] = min(TAR_SYNC)
    TAR_SYNC.clear()
    return nbytes, best


def report(name, nbytes, res, target_backup):
    print(f"\n## {name}: {nbytes / MB:.0f} MB")
    print(f"{'tool':18} {'seconds':>8} {'MB/s':>8}")
    for k, t in res.items():
        print(f"{k:18} {t:8.2f} {nbytes / MB / t:8.0f}")
    rate = {k: nbytes / t for k, t in res.items()}
    ok = True
    r = rate["cairn backup"] / rate["tar backup"]
    ok &= r >= target_backup
    print(f"cairn backup / tar backup       = {r:.2f}  (target >= {target_backup}) "
          f"{'PASS' if r >= target_backup else 'FAIL'}")
    r2 = rate["cairn restore"] / rate["cairn backup"]
    ok &= r2 >= 0.8
    print(f"cairn restore / cairn backup    = {r2:.2f}  (target >= 0.8) "
          f"{'PASS' if r2 >= 0.8 else 'FAIL'}")
    print(f"cairn backup / (tar + sync)     = "
          f"{rate['cairn backup'] / rate['tar backup + sync']:.2f}  (both durable)")
    print(f"cairn restore / tar restore     = {rate['cairn restore'] / rate['tar restore']:.2f}")
    for peer in ("restic", "kopia"):
        if f"{peer} backup" in rate:
            print(f"cairn backup / {peer} backup{' ' * (10 - len(peer))}= "
                  f"{rate['cairn backup'] / rate[f'{peer} backup']:.2f}")
            print(f"cairn restore / {peer} restore{' ' * (8 - len(peer))}= "
                  f"{rate['cairn restore'] / rate[f'{peer} restore']:.2f}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a tenth of the data")
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    ap.add_argument("--sets", default="large,small")
    ap.add_argument("--no-kopia", action="store_true",
                    help="leave kopia out (else built by scripts/kopia-build.sh if missing)")
    a = ap.parse_args()
    scale = 10 if a.quick else 1
    kopia = False
    if not a.no_kopia:
        kopia = kopia_binary() is not None
        print(Kopia.version() if kopia else f"kopia left out: {Kopia.why_missing()}")
    work = tempfile.mkdtemp(prefix="cairn-bench-", dir=a.dir)
    ok = True
    try:
        sets = a.sets.split(",")
        if "large" in sets:
            src = os.path.join(work, "large")
            make_large(src, (2 << 30) // scale, 128 << 20)
            n, res = bench_set("large", src, work, kopia)
            ok &= report("(a) 2 GiB of 128 MiB files" + (" (quick: /10)" if a.quick else ""),
                         n, res, 0.8)
            drop(src)
        if "small" in sets:
            src = os.path.join(work, "small")
            make_small(src, 20000 // scale, 100 << 10)
            n, res = bench_set("small", src, work, kopia)
            ok &= report("(b) 20,000 files of 100 KiB" + (" (quick: /10)" if a.quick else ""),
                         n, res, 0.6)
            drop(src)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
