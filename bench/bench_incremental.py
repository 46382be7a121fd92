"""An incremental backup of a large tree of small files that did not change: Cairn's
differential against restic's second `restic backup`, on the same tree in the same run, with
warm caches.

  .venv/bin/python bench/bench_incremental.py [--files N] [--repeat R] [--full-rounds F]
                                               [--dir DIR] [--keep] [--json] [--profile]

The tree (default 200,000 files of 1-4 KiB of unique random data, 100 per directory, 40
directories under each of the top ones) is built once in a temporary directory. Then, after
one read of the whole tree to warm the page cache:

- Cairn on the embedded local host: a full backup, then a differential of the unchanged tree
  (each a whole job through the master API: queueing, the agent's walk against the previous
  image's state, the rows of the unchanged entries, the complete file index, the commit);
- restic: `restic init` and a first `restic backup`, then a second `restic backup` of the
  unchanged tree (its parent snapshot found by host and path, as a user's second run does).

With --repeat R the second backups run R times, one tool after the other; the fastest of each
counts. With --full-rounds F the first backups run F times, each tool from scratch, the
order alternating round by round; the medians count (target for 1,000,000 small files:
Cairn's full in at most 0.7x restic's time). Prints a table and the ratio restic / Cairn of the second backups, or JSON with
--json. Target: Cairn's differential finds nothing to send in under 10 s (exit status 1
when missed, or when it sends anything).

--profile also runs the differential again under cProfile on the master's side (every
thread of this process) and times the phases of the work in this process on the same base
image: the master's state for the agent, the agent decoding it, the agent's walk, and the
master completing and indexing the rows."""

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from app.agent import archiver  # noqa: E402
from app.catalog_index import IndexWriter  # noqa: E402
from app.formats import protocol
from app.formats.changes import PreviousState  # noqa: E402
from app.jobs import incremental  # noqa: E402
from bench.benchlib import local_master  # noqa: E402

TARGET_S = 10.0
FULL_TARGET_SHARE = 0.7
PER_DIR = 100
DIRS_PER_TOP = 40
TREE_DONE = ".complete"


# ---- the tree -------------------------------------------------------------------------------

def make_tree(root, count, seed=1):
    """count files of 1-4 KiB; a marker file records a complete tree so that --dir with a
    kept tree skips the minutes of building it again."""
    marker = root + TREE_DONE
    if os.path.exists(marker):
        with open(marker) as f:
            if f.read().strip() == str(count):
                return False
        raise SystemExit(f"{root} holds a tree of another size: remove it or use another --dir")
    if os.path.exists(root):
        shutil.rmtree(root)  # left half-built by an interrupted run
    rnd = random.Random(seed)
    # Random bytes drawn once and sliced at random offsets: every file differs (restic and
    # Cairn gain nothing by deduplication) without 200,000 calls to the kernel's generator.
    pool = os.urandom(8 << 20)
    d = None
    for i in range(count):
        if i % PER_DIR == 0:
            n = i // PER_DIR
            d = os.path.join(root, f"top{n // DIRS_PER_TOP:03d}", f"dir{n % DIRS_PER_TOP:02d}")
            os.makedirs(d)
        size = rnd.randint(1024, 4096)
        off = rnd.randrange(len(pool) - size)
        with open(os.path.join(d, f"file{i:07d}.dat"), "wb") as f:
            f.write(pool[off:off + size])
    # Beside the tree, not in it: it would be one more file backed up.
    with open(marker, "w") as f:
        f.write(f"{count}\n")
    return True


def tree_size(root):
    files = dirs = nbytes = 0
    for d, subdirs, names in os.walk(root):
        dirs += len(subdirs)
        for n in names:
            files += 1
            nbytes += os.lstat(os.path.join(d, n)).st_size
    return files, dirs, nbytes


def filesystem_of(path):
    """(mount point, type, device) of the file system holding path."""
    path = os.path.realpath(path)
    best = ("/", "?", "?")
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            mnt = mnt.replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and \
                    len(mnt) >= len(best[0]):
                best = (mnt, fstype, dev)
    return best


def sh(cmd, env=None, capture=False):
    p = subprocess.run(cmd, shell=True, env=env, stdout=subprocess.PIPE if capture else
                       subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p.returncode:
        raise SystemExit(f"{cmd} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p.stdout.decode() if capture else None


def warm(root):
    """Read every file once: the first backups of both tools then start from the same warm
    page cache. (tar writing to /dev/null itself would not read the data.)"""
    sh(f"tar -cf - -C {shlex.quote(root)} . | cat > /dev/null")


# ---- Cairn ----------------------------------------------------------------------------------

class Cairn:
    """Cairn on the embedded local host, driven through the master API as the console does."""

    def __init__(self, src, work):
        self.home = os.path.join(work, "cairn-home")
        self.vol = os.path.join(work, "cairn-vol")
        os.makedirs(self.vol)
        self.m = local_master(self.home, self.vol, src,
                              schedules=[("full", "full"), ("diff", "differential")])

    def backup(self, schedule):
        m = self.m
        t0 = time.perf_counter()
        [jid] = m.start_backup("p", schedule=schedule)
        [job] = m.wait_for([jid], poll=0.02)
        elapsed = time.perf_counter() - t0
        logs = m.jobs.logs(jid)
        if job["status"] != 0:
            raise SystemExit(f"cairn {schedule} backup failed (status {job['status']}): "
                             + "; ".join(r["message"] for r in logs[-3:]))
        img = m.image(job["image_id"])
        with m.open_index(img) as idx:
            listed = idx.count()
        return {"seconds": elapsed, "job": jid, "image": img["id"],
                "level": img["schedule_type"], "files_sent": job["files"],
                "bytes_sent": job["bytes"], "image_bytes": img["image_bytes"],
                "entries_in_index": listed,
                "incremental_log": next((r["message"] for r in logs
                                         if "unchanged (" in r["message"]), None)}

    def close(self):
        self.m.close()


# ---- restic ---------------------------------------------------------------------------------

def restic_env(work):
    return dict(os.environ, RESTIC_PASSWORD="bench",
                RESTIC_REPOSITORY=os.path.join(work, "restic-repo"),
                RESTIC_CACHE_DIR=os.path.join(work, "restic-cache"))


def restic_backup(src, env):
    t0 = time.perf_counter()
    out = sh(f"restic backup --json -q {shlex.quote(src)}", env=env, capture=True)
    elapsed = time.perf_counter() - t0
    summary = {}
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("message_type") == "summary":
            summary = msg
    return {"seconds": elapsed, "files_new": summary.get("files_new"),
            "files_changed": summary.get("files_changed"),
            "files_unmodified": summary.get("files_unmodified"),
            "bytes_added": summary.get("data_added")}


# ---- profiling ------------------------------------------------------------------------------

class AllThreads:
    """cProfile of this thread and of every thread started while it is on: the dispatcher runs
    a job in its own thread and the agent's events arrive on the transport's."""

    def __init__(self):
        self.profiles = []
        self._lock = threading.Lock()

    def _start_in_thread(self, frame, event, arg):
        p = cProfile.Profile()
        with self._lock:
            self.profiles.append(p)
        p.enable()  # replaces this hook for the thread

    def __enter__(self):
        threading.setprofile(self._start_in_thread)
        main = cProfile.Profile()
        self.profiles.append(main)
        main.enable()
        return self

    def __exit__(self, *exc):
        threading.setprofile(None)
        self.profiles[0].disable()

    def stats(self):
        s = pstats.Stats(self.profiles[0])
        for p in self.profiles[1:]:
            try:
                s.add(p)
            except TypeError:
                pass  # a thread that never ran Python code
        return s


def top(stats, key, n):
    buf = io.StringIO()
    stats.stream = buf
    stats.sort_stats(key).print_stats(n)
    return buf.getvalue()


def phases(cairn, src, base_image):
    """The differential's work done step by step in this process, on the same base image:
    what each part costs without the job's machinery around it."""
    m = cairn.m
    base = dict(m.db.one("SELECT * FROM images WHERE id=?", (base_image,)))
    out = {}
    t = time.perf_counter()
    index = incremental.open_base_index(m, base)
    state, base_entries = incremental.previous_state(index)
    out["master: previous_state (base index -> state for the agent)"] = time.perf_counter() - t
    state_chars = len(state)
    t = time.perf_counter()
    PreviousState(state)
    out["agent: decode the state"] = time.perf_counter() - t

    rows = []

    def emit(event, data):
        if event == "rows":
            rows.append(data["rows"])

    class Null:
        def write(self, buf):
            return len(buf)

    t = time.perf_counter()
    summary = archiver.backup_to(Null(), [src], emit=emit, is_cancelled=lambda: False,
                                 image_meta={"bench": True}, checksum=base["checksum"],
                                 previous=state)
    out["agent: walk, compare and list (backup_to to a null sink)"] = time.perf_counter() - t
    t = time.perf_counter()
    wire = [protocol.encode({"id": 1, "event": "rows", "data": {"rows": b}}) for b in rows]
    out["transport: rows encoded as protocol lines (agent)"] = time.perf_counter() - t
    t = time.perf_counter()
    decoded = [protocol.decode(w)["data"]["rows"] for w in wire]
    out["transport: rows decoded (master)"] = time.perf_counter() - t
    completer = incremental.Completer(base, index, base_entries)
    t = time.perf_counter()
    for b in decoded:
        completer.complete(b)
    out["master: Completer.complete (rows from the base index)"] = time.perf_counter() - t
    path = os.path.join(os.path.dirname(cairn.home), "phases.idx")
    writer = IndexWriter(path)
    t = time.perf_counter()
    for b in decoded:
        writer.add_rows(b)
    writer.close()
    out["master: IndexWriter.add_rows + close"] = time.perf_counter() - t
    os.unlink(path)
    # The agent's walk once more under cProfile, for where its time goes.
    prof = cProfile.Profile()
    prof.enable()
    archiver.backup_to(Null(), [src], emit=lambda event, data: None,
                       is_cancelled=lambda: False, image_meta={"bench": True},
                       checksum=base["checksum"], previous=state)
    prof.disable()
    agent_profile = top(pstats.Stats(prof), "tottime", 20)
    index.close()
    return out, agent_profile, {"state_chars": state_chars,
                                "agent_unchanged": summary["unchanged"],
                                "agent_files_sent": summary["files"],
                                "row_batches": len(rows),
                                "wire_bytes": sum(len(w) for w in wire)}


# ---- the run --------------------------------------------------------------------------------

def full_rounds(src, work, n, say):
    """n rounds of a first backup by each tool, each from scratch (a new master and pool, a
    new restic repository), alternating which goes first: {"cairn": [s], "restic": [s]}."""
    out = {"cairn": [], "restic": []}
    env = restic_env(work) if restic_version() else None

    def cairn_full(k):
        say(f"cairn: full backup (round {k + 1} of {n + 1}) ...")
        c = Cairn(src, work)
        try:
            out["cairn"].append(c.backup("full")["seconds"])
        finally:
            c.close()
            for stale in ("cairn-home", "cairn-vol"):
                shutil.rmtree(os.path.join(work, stale), ignore_errors=True)
        sh("sync")

    def restic_full(k):
        say(f"restic: init and first backup (round {k + 1} of {n + 1}) ...")
        sh("restic init", env=env)
        try:
            out["restic"].append(restic_backup(src, env)["seconds"])
        finally:
            for stale in ("restic-repo", "restic-cache"):
                shutil.rmtree(os.path.join(work, stale), ignore_errors=True)
        sh("sync")

    for k in range(n):
        order = [cairn_full, restic_full] if k % 2 else [restic_full, cairn_full]
        for run in order:
            if run is restic_full and env is None:
                continue
            run(k)
    return out


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gib": round(mem / 2**30, 1),
            "python": platform.python_version(), "kernel": platform.release()}


def restic_version():
    if not shutil.which("restic"):
        return None
    return sh("restic version", capture=True).strip()


def main():
    # Long: the benchmark's script from arguments to report, read top to bottom like the run.
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200_000, help="files in the tree (200000)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="times to run the second backups; the fastest counts (1)")
    ap.add_argument("--dir", help="work directory (default: a new one under the system's "
                                  "temporary directory)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the tree (DIR/tree) for another run with --dir DIR")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--profile", action="store_true",
                    help="profile one more differential and time its phases")
    ap.add_argument("--full-rounds", type=int, default=1,
                    help="rounds of first backups, each tool from scratch, alternating which "
                         "goes first; medians count (1)")
    a = ap.parse_args()
    if a.files < 1 or a.repeat < 1 or a.full_rounds < 1:
        ap.error("--files, --repeat and --full-rounds must be at least 1")
    if a.dir:
        os.makedirs(a.dir, exist_ok=True)
        work = os.path.abspath(a.dir)
    else:
        work = tempfile.mkdtemp(prefix="cairn-bench-incr-")
    say = (lambda *x: print(*x, file=sys.stderr, flush=True)) if a.json else \
        (lambda *x: print(*x, flush=True))
    src = os.path.join(work, "tree")
    mnt, fstype, dev = filesystem_of(work)
    res = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(),
           "restic": restic_version(), "work_dir": work,
           "filesystem": {"mount": mnt, "type": fstype, "device": dev}}
    cairn = None
    ok = True
    try:
        t = time.perf_counter()
        built = make_tree(src, a.files)
        say(f"tree {src} on {fstype} ({dev} at {mnt}): "
            + (f"built in {time.perf_counter() - t:.0f} s" if built else "kept from before"))
        files, dirs, nbytes = tree_size(src)
        res["tree"] = {"files": files, "dirs": dirs, "bytes": nbytes}
        say(f"{files} files, {dirs} directories, {nbytes / 1e6:.0f} MB")
        for stale in ("cairn-home", "cairn-vol", "restic-repo", "restic-cache"):
            shutil.rmtree(os.path.join(work, stale), ignore_errors=True)  # an interrupted run
        warm(src)
        sh("sync")
        extra_fulls = full_rounds(src, work, a.full_rounds - 1, say)

        cairn = Cairn(src, work)
        say("cairn: full backup ...")
        res["cairn_full"] = cairn.backup("full")
        sh("sync")
        env = None
        if res["restic"]:
            env = restic_env(work)
            say("restic: init and first backup ...")
            sh("restic init", env=env)
            res["restic_first"] = restic_backup(src, env)
            sh("sync")
        cairn_runs, restic_runs = [], []
        for i in range(a.repeat):
            say(f"cairn: differential of the unchanged tree ({i + 1}/{a.repeat}) ...")
            cairn_runs.append(cairn.backup("diff"))
            sh("sync")
            if env:
                say(f"restic: second backup ({i + 1}/{a.repeat}) ...")
                restic_runs.append(restic_backup(src, env))
                sh("sync")
        fulls = extra_fulls["cairn"] + [res["cairn_full"]["seconds"]]
        res["cairn_full_all_s"] = [round(x, 2) for x in fulls]
        res["cairn_full_median_s"] = statistics.median(fulls)
        if env:
            firsts = extra_fulls["restic"] + [res["restic_first"]["seconds"]]
            res["restic_first_all_s"] = [round(x, 2) for x in firsts]
            res["restic_first_median_s"] = statistics.median(firsts)
        res["cairn_incremental"] = min(cairn_runs, key=lambda r: r["seconds"])
        res["cairn_incremental_all_s"] = [round(r["seconds"], 2) for r in cairn_runs]
        if restic_runs:
            res["restic_second"] = min(restic_runs, key=lambda r: r["seconds"])
            res["restic_second_all_s"] = [round(r["seconds"], 2) for r in restic_runs]
            res["ratio_second_restic_over_cairn"] = (res["restic_second"]["seconds"]
                                                     / res["cairn_incremental"]["seconds"])
            res["ratio_first_restic_over_cairn"] = (res["restic_first_median_s"]
                                                    / res["cairn_full_median_s"])
        inc = res["cairn_incremental"]
        res["target_s"] = TARGET_S
        res["target_met"] = inc["seconds"] < TARGET_S and inc["files_sent"] == 0
        ok = res["target_met"]

        if a.profile:
            say("profile: one more differential under cProfile ...")
            # The agent's events are handled on its connection's reader thread: connect
            # again under the profiler so that thread is profiled too.
            cairn.m.hosts.close()
            with AllThreads() as prof:
                cairn.m.hosts.connect(cairn.m.config.host("me"))
                run = cairn.backup("diff")
            res["profiled_run_s"] = run["seconds"]
            stats = prof.stats()
            res["profile_cumulative"] = top(stats, "cumulative", 40)
            res["profile_tottime"] = top(stats, "tottime", 25)
            say("profile: the phases one by one ...")
            res["phases_s"], res["profile_agent_walk"], res["phases_info"] = phases(
                cairn, src, res["cairn_full"]["image"])
        res["load_average"] = os.getloadavg()
    finally:
        if cairn is not None:
            cairn.close()
        # Only what this run made: --dir may name a directory that holds other things.
        made = ["cairn-home", "cairn-vol", "restic-repo", "restic-cache"]
        if not a.keep:
            made += ["tree", "tree" + TREE_DONE]
        for name in made:
            path = os.path.join(work, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.unlink(path)
        if not a.keep:
            try:
                os.rmdir(work)
            except OSError:
                pass  # not empty: a --dir of the user's
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        report(res)
    sys.exit(0 if ok else 1)


def report(res):
    t = res["tree"]
    fs = res["filesystem"]
    print(f"\n## incremental of an unchanged tree: {t['files']:,} files in {t['dirs']:,} "
          f"directories, {t['bytes'] / 1e6:.0f} MB, on {fs['type']} ({fs['device']})")
    print(f"{res['date']}; {res['machine']['cpus']} CPUs, {res['machine']['cpu']}; "
          f"Python {res['machine']['python']}; {res['restic'] or 'restic not installed'}")
    cf, ci = res["cairn_full"], res["cairn_incremental"]
    rows = [("first (full) backup" + (", median" if len(res["cairn_full_all_s"]) > 1 else ""),
             res["cairn_full_median_s"], res.get("restic_first_median_s")),
            ("second backup, nothing changed", ci["seconds"],
             res.get("restic_second", {}).get("seconds"))]
    print(f"\n| {'backup':32} | {'Cairn s':>8} | {'restic s':>8} | {'restic / Cairn':>14} |")
    print(f"| {'-' * 32} | {'-' * 8} | {'-' * 8} | {'-' * 14} |")
    for name, c, r in rows:
        rs = f"{r:8.2f}" if r is not None else f"{'-':>8}"
        ratio = f"{r / c:14.2f}" if r is not None else f"{'-':>14}"
        print(f"| {name:32} | {c:8.2f} | {rs} | {ratio} |")
    if len(res["cairn_full_all_s"]) > 1:
        print(f"first backups, every round: Cairn {res['cairn_full_all_s']}, "
              f"restic {res.get('restic_first_all_s')}")
    if len(res["cairn_incremental_all_s"]) > 1:
        print(f"second backups, every run: Cairn {res['cairn_incremental_all_s']}, "
              f"restic {res.get('restic_second_all_s')}")
    if res.get("restic_first_median_s"):
        share = res["cairn_full_median_s"] / res["restic_first_median_s"]
        print(f"first backup: Cairn takes {share:.2f}x restic's time (target <= "
              f"{FULL_TARGET_SHARE}x for 1,000,000 small files): "
              + ("met" if share <= FULL_TARGET_SHARE else "not met"))
    print(f"\nCairn differential: sent {ci['files_sent']} files, {ci['bytes_sent']} bytes; "
          f"image {ci['image_bytes']:,} bytes (full: {cf['image_bytes']:,}); "
          f"{ci['entries_in_index']:,} entries in its file index (full: "
          f"{cf['entries_in_index']:,})")
    if ci["incremental_log"]:
        print(f"  job log: {ci['incremental_log']}")
    if "restic_second" in res:
        r = res["restic_second"]
        print(f"restic second backup: {r['files_new']} new, {r['files_changed']} changed, "
              f"{r['files_unmodified']} unmodified, {r['bytes_added']} bytes added")
    verdict = "PASS" if res["target_met"] else "FAIL"
    print(f"\ntarget: Cairn's incremental sends nothing in < {res['target_s']:.0f} s: "
          f"{ci['seconds']:.2f} s, {ci['files_sent']} files sent: {verdict}")
    if "phases_s" in res:
        print(f"\nprofiled differential: {res['profiled_run_s']:.2f} s")
        print("phases, one by one in this process on the same base image:")
        for k, v in res["phases_s"].items():
            print(f"  {v:7.2f} s  {k}")
        print(f"  ({res['phases_info']})")
        print("\nthe agent's walk (backup_to in this process), by own time:")
        print(res["profile_agent_walk"])
        print("master side, every thread, by cumulative time (the waits in lock acquire and "
              "in _read_loop's readline are threads blocked, not work):")
        print(res["profile_cumulative"])
        print("by own time:")
        print(res["profile_tottime"])
    print(f"load average: {' '.join(f'{x:.2f}' for x in res['load_average'])}")


if __name__ == "__main__":
    main()
