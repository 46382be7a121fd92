"""An unchanged second full as an admin runs it: the whole `cairn backup POLICY --wait --json`
command (process start, catalog, agent, walk, files cache, commit) against kopia's
`kopia snapshot create SRC` of the same unchanged tree, tools alternating round by round.

  .venv/bin/python bench/bench_unchanged.py [--rounds 5] [--sets large,small,mixed] [--work DIR]

Sets: "large", 16 files of 64 MiB; "small", 20,000 files of 100 KiB in 200 directories;
"mixed", both the 20,000 small files and 4 files of 64 MiB. Random data. For each set, Cairn
gets a dedup pool on the embedded local host (catalog and pool in the work directory) and
kopia a filesystem repository (scripts/kopia-build.sh builds it, once per machine); each backs
the tree up once untimed, then the unchanged tree --rounds times, a `sync` before each. Reports
medians and every round. Target (issue: no-change backups): Cairn's median <= kopia's."""

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.dedup_peers import kopia_binary, _kopia  # noqa: E402

CAIRN = os.path.join(ROOT, ".venv", "bin", "cairn")
SETS = {"large": (0, 16), "small": (20000, 0), "mixed": (20000, 4)}


def make_tree(src, small, large, seed=1):
    rnd = random.Random(seed)
    for i in range(small):
        d = os.path.join(src, f"d{i % 200:03d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05d}"), "wb") as f:
            f.write(rnd.randbytes(100 << 10))
    for i in range(large):
        os.makedirs(os.path.join(src, "big"), exist_ok=True)
        with open(os.path.join(src, "big", f"L{i}"), "wb") as f:
            f.write(os.urandom(64 << 20))


def run(cmd, env):
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def set_up(work, name, src, kopia):
    """(cairn command line, kopia command line) that back `src` up, each done once."""
    home, pool = os.path.join(work, name + "-home"), os.path.join(work, name + "-pool")
    os.makedirs(pool)
    env = dict(os.environ, CAIRN_HOME=home)
    for args in (["host", "add", "me", "--local"],
                 ["storage-server", "create", "dd", "--type", "dedup", "--host", "me",
                  "--path", pool],
                 ["disk-pool", "create", "ddp", "--server", "dd"],
                 ["storage-unit", "create", "stu", "--pool", "ddp"],
                 ["policy", "create", "p", "--storage-unit", "stu"],
                 ["policy", "add-client", "p", "me"], ["policy", "add-selection", "p", src],
                 ["policy", "add-schedule", "p", "full", "--type", "full"]):
        run([CAIRN] + args, env)
    cairn = ([CAIRN, "backup", "p", "--wait", "--json"], env)
    kenv = dict(os.environ, KOPIA_PASSWORD="bench", KOPIA_CHECK_FOR_UPDATES="false",
                KOPIA_USE_KEYRING="false")
    base = [kopia, "--config-file", os.path.join(work, name + "-kopia.config"),
            "--log-dir", os.path.join(work, name + "-kopia-logs")]
    run(base + ["repository", "create", "filesystem", "--path",
                os.path.join(work, name + "-kopia-repo"), "--cache-directory",
                os.path.join(work, name + "-kopia-cache")], kenv)
    peer = (base + ["snapshot", "create", "--no-progress", src], kenv)
    for cmd, env in (cairn, peer):
        run(cmd, env)
    return {"cairn": cairn, "kopia": peer}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--work", default="/var/tmp")
    args = ap.parse_args(argv)
    kopia = kopia_binary()
    if kopia is None:
        print(f"kopia: {_kopia.get('why')}", file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(prefix="cairn-bench-unchanged-", dir=args.work)
    failed = False
    try:
        for name in args.sets.split(","):
            src = os.path.join(work, name)
            make_tree(src, *SETS[name])
            tools = set_up(work, name, src, kopia)
            times = {t: [] for t in tools}
            for r in range(args.rounds):
                for tool in (("cairn", "kopia") if r % 2 == 0 else ("kopia", "cairn")):
                    subprocess.run(["sync"], check=True)
                    cmd, env = tools[tool]
                    started = time.perf_counter()
                    run(cmd, env)
                    times[tool].append(time.perf_counter() - started)
            med = {t: statistics.median(v) for t, v in times.items()}
            ok = med["cairn"] <= med["kopia"]
            failed |= not ok
            print(f"{name}: cairn {med['cairn']:.2f} s, kopia {med['kopia']:.2f} s "
                  f"({med['cairn'] / med['kopia']:.2f}x; target <= 1: "
                  f"{'met' if ok else 'NOT met'}); rounds: "
                  + "; ".join(f"{t} " + " / ".join(f"{x:.2f}" for x in v)
                              for t, v in times.items()), flush=True)
            shutil.rmtree(src)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
