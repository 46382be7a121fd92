"""Cairn's deduplicating pool against restic, borg and kopia on the same data in the same run,
with warm caches.

  .venv/bin/python bench/bench_dedup.py [--scale F] [--sets large,small]
                                         [--tools cairn,restic,borg,kopia,kopia-zstd[,cairn-enc]]
                                         [--work DIR] [--seed N] [--cairn-type TYPE]
                                         [--cairn-direct-io on|off] [--first-rounds N] [--json]
                                         [--no-settle]

Data sets, generated in a new directory under the work directory (default /var/tmp) and
deterministic from --seed: (a) 2 GiB in 8 files of 256 MiB, (b) 20,000 files of 100 KiB in
200 directories (20 of 10). --scale F shrinks both (the size of the large files and the number
of small ones). Content: a stream of 64 KiB blocks, 70% of them text-like and 30% random
bytes. A text block is a 64 KiB slice at a random offset of a 10 MB pool of pseudo-words
(4,000 words of 2-10 letters, Zipf-distributed, lines of 5-14 words) with its letters
permuted by one of 256 substitution tables, so that no two text blocks share long runs and a
content-defined chunk (which spans several blocks and some random bytes) is never stored twice
by chance. zstd -3 packs this about 1.75x, lz4 -1 about 1.45x, zlib -1 about 1.7x.

The 5% change, applied once between the unchanged second full and the backup after it:
(a) every other file gets 8 regions rewritten in place with new content (one at a random
offset in each eighth of the file), 5% of the data set's bytes in all, sizes unchanged;
(b) 5% of the files, chosen at random, are rewritten whole with new content of the same size.

Steps, each tool in turn at each step (so that load from elsewhere falls on all alike), a
`sync` (not timed) before each, and the data read (not timed) before each tool's turn so that
every tool starts from the same warm page cache: borg drops the files it has read from the
cache (POSIX_FADV_DONTNEED), which left the tool after it reading from the disk. Before its
restore, each tool's repository is read too (Cairn's: the pool and the catalog; restic's
and kopia's: the repository and its cache): Cairn writes the pool's containers with
O_DIRECT, so they are on the disk only, while the peers' repositories are still in the page
cache from their backups:
  first full -> unchanged second full -> 5% changed -> the backup after it -> full restore of the
  latest backup to an empty directory.
The first full runs --first-rounds times per tool (3), the tools taking turns, each round
into a new repository (all of them kept until the run ends, like everything else); the
last round's is the one the later steps build on, and the median of the rounds is reported
and compared (every round is in the output): on a shared 2-core machine one round of a
CPU-bound step swings by a fifth or more with what else the host runs.
Each restore is compared with the source, file by file (SHA-256, and the same files and
directories); a difference stops nothing else but is reported loudly and makes the exit status 1.

- restic (Debian): `restic init` (repository version 2, default compression "auto", i.e.
  zstd), `restic backup` (the second and third find their parent snapshot by host and path),
  `restic restore latest --target DIR`; password from RESTIC_PASSWORD, cache in the work dir.
- borg (Debian): `borg init --encryption=none`, `borg create --compression lz4` (its files
  cache skips unchanged files), `borg extract` of the last archive in an empty directory;
  BORG_BASE_DIR in the work dir.
- kopia (built from its Go module by scripts/kopia-build.sh, once per machine; skipped with
  the script's reason where it cannot be built, e.g. without Go), twice as two tools: `kopia`
  with its default settings (no compression) and `kopia-zstd` (`kopia policy set --global
  --compression=zstd` after the repository is made). `kopia repository create filesystem`
  (automatic maintenance on, as by default: a full one ends a repository's first snapshot),
  `kopia snapshot create DIR` (the second and third find their parent by host, user and path),
  `kopia snapshot restore ID DIR` of the last snapshot into the source's path below the
  target; password from KOPIA_PASSWORD, config file, cache and logs in the work dir.
  The peer classes are in bench/dedup_peers.py.
- Cairn: a master on the embedded local host (bench/benchlib.py) with a storage server of type
  `dedup` (--cairn-type) whose disk pool is one directory; each backup a whole full job
  through the master API (queueing, the agent, the commit, the catalog and the file index),
  the restore a restore job of the newest image to a new directory. Its job's `dedup_ratio`
  is recorded for each backup.

Times are wall seconds (time.perf_counter) around each subprocess or job; MB/s is the data
set's bytes (MB = 10^6) over that. Repository size is the apparent size (sum of st_size) of
the repository directory (Cairn: the pool directory; its catalog, outside the pool, is shown
apart), measured after each backup. Targets, reported and not enforced: first full
>= 2.5x restic's rate, unchanged second full shorter than borg's, restore >= 1.2x the fastest
peer's rate, pool size <= 1.05x restic's repository. Exit status 1 when a tool failed or a
restore differs, else 0 (kopia skipped for want of Go is not a failure). If the Cairn master refuses the storage type or a Cairn job fails, the
Cairn rows show the error and the peers run on.

A run deletes its work directory at the end. On ext4 without a journal, files made within
some six minutes of many deletions nearby are several times slower to create (the inode
allocator passes over recently freed inodes one by one), which would slow the next run's
restores. So a run that deleted many files leaves a note of the time in the work directory's
parent (.cairn-bench-deleted), and the next run there waits until SETTLE_S seconds have
passed since (--no-settle: not at all; the wait is in the output either way)."""

import argparse
import hashlib
import importlib.util
import json
import os
import random
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.benchlib import du  # noqa: E402
from bench.bench_incremental import filesystem_of, machine  # noqa: E402
from bench.benchlib import local_master  # noqa: E402
from bench.dedup_peers import PEER_CLASSES, RestoreDiffers, ToolError, warm  # noqa: E402

MB = 1e6
BLOCK = 64 << 10
TEXT_SHARE = 0.7
LARGE_TOTAL = 2 << 30
LARGE_FILES = 8
SMALL_COUNT = 20_000
SMALL_SIZE = 100 << 10
SMALL_TOP, SMALL_SUB = 20, 10  # 200 leaf directories at full scale
CHANGE_SHARE = 0.05
REGIONS = 8  # rewritten regions per changed large file
TOOLS = ("cairn", "restic", "borg", "kopia", "kopia-zstd")
# on request only (--tools ...,cairn-enc): Cairn on a pool encrypted at rest, for what
# encryption costs measured in the same alternating rounds as the plain pool
EXTRA_TOOLS = ("cairn-enc",)
PEERS = TOOLS[1:]
BACKUPS = ("first", "second", "change")
# Repository bytes per data set byte, an upper bound for the free-space check: compressed
# data plus the 5% change stored again, for kopia without compression the data and the whole
# chunks (4 MiB on average) around each of the 32 changed regions of (a) (1.49 at --scale 0.1,
# less at larger scales), or for advanced-disk three uncompressed images.
REPO_FACTOR = {"restic": 1.2, "borg": 1.2, "kopia": 1.5, "kopia-zstd": 1.2, "dedup": 1.2,
               "advanced-disk": 3.1}
# See the module docstring: the wait after a run that deleted at least SETTLE_FILES files.
SETTLE_S = 360
SETTLE_FILES = 10_000
SETTLE_NOTE = ".cairn-bench-deleted"

TARGETS = {
    "first_full_rate_cairn_over_restic": (">=", 2.5),
    "second_full_seconds_borg_over_cairn": (">", 1.0),
    "restore_rate_cairn_over_best_peer": (">=", 1.2),
    "pool_bytes_cairn_over_restic": ("<=", 1.05),
    # with --tools cairn,cairn-enc: encryption at rest costs at most 10%
    "encrypted_first_full_seconds_over_plain": ("<=", 1.10),
    "encrypted_restore_seconds_over_plain": ("<=", 1.10),
}


# ---- the data -------------------------------------------------------------------------------

class Content:
    """The deterministic stream of 64 KiB blocks the data sets are made of (see the module
    docstring for the mix)."""

    def __init__(self, seed):
        r = self.r = random.Random(seed)
        letters = string.ascii_lowercase
        vocab = ["".join(r.choice(letters) for _ in range(r.randint(2, 10)))
                 for _ in range(4000)]
        cum, s = [], 0.0
        for i in range(len(vocab)):
            s += 1.0 / (i + 1)
            cum.append(s)
        words = r.choices(vocab, cum_weights=cum, k=1_400_000)
        lines, i = [], 0
        while i < len(words):
            n = r.randint(5, 14)
            lines.append(" ".join(words[i:i + n]) + (".\n" if r.random() < 0.3 else ",\n"))
            i += n
        self.pool = "".join(lines).encode()
        self.tables = []
        for _ in range(256):
            p = list(letters)
            r.shuffle(p)
            self.tables.append(bytes.maketrans(letters.encode(), "".join(p).encode()))

    def block(self):
        r = self.r
        if r.random() < TEXT_SHARE:
            off = r.randrange(len(self.pool) - BLOCK)
            return self.pool[off:off + BLOCK].translate(r.choice(self.tables))
        return r.randbytes(BLOCK)

    def take(self, n):
        return b"".join(self.block() for _ in range(-(-n // BLOCK)))[:n]


def write_file(path, content, size):
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 4 << 20)
            f.write(content.take(n))
            left -= n


def make_large(root, content, total, files):
    size = max(BLOCK, total // files // BLOCK * BLOCK)
    os.makedirs(root)
    for i in range(files):
        write_file(os.path.join(root, f"large-{i:02d}.bin"), content, size)


def small_path(root, i):
    per_top = SMALL_COUNT // SMALL_TOP
    return os.path.join(root, f"d{i // per_top:02d}",
                        f"s{i % per_top // (per_top // SMALL_SUB)}", f"f{i:05d}.dat")


def make_small(root, content, count, size):
    for i in range(count):
        p = small_path(root, i)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        write_file(p, content, size)


def files_of(root):
    return sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names)


def change_large(root, content, rnd):
    """Every other file: REGIONS regions rewritten in place, CHANGE_SHARE of all bytes."""
    files = files_of(root)
    total = sum(os.path.getsize(p) for p in files)
    changed = files[::2]
    region = int(total * CHANGE_SHARE / (len(changed) * REGIONS))
    nbytes = 0
    for p in changed:
        slot = os.path.getsize(p) // REGIONS
        fd = os.open(p, os.O_WRONLY)
        try:
            for k in range(REGIONS):
                off = k * slot + rnd.randrange(slot - region + 1)
                os.pwrite(fd, content.take(region), off)
                nbytes += region
        finally:
            os.close(fd)
    return {"files_changed": len(changed), "regions": len(changed) * REGIONS,
            "region_bytes": region, "bytes_changed": nbytes}


def change_small(root, content, rnd):
    """CHANGE_SHARE of the files rewritten whole with new content of the same size."""
    files = files_of(root)
    pick = rnd.sample(files, max(1, round(len(files) * CHANGE_SHARE)))
    nbytes = 0
    for p in sorted(pick):
        size = os.path.getsize(p)
        write_file(p, content, size)
        nbytes += size
    return {"files_changed": len(pick), "bytes_changed": nbytes}


def tree_digest(root):
    """{relative path: SHA-256 of a file, or "dir"}: what a restore must give back."""
    out = {}
    for d, dirs, names in os.walk(root):
        for n in dirs:
            out[os.path.relpath(os.path.join(d, n), root)] = "dir"
        for n in names:
            p = os.path.join(d, n)
            h = hashlib.sha256()
            with open(p, "rb") as f:
                while True:
                    buf = f.read(1 << 20)
                    if not buf:
                        break
                    h.update(buf)
            out[os.path.relpath(p, root)] = h.hexdigest()
    return out


def verify(tool, expected, restored):
    if not os.path.isdir(restored):
        raise RestoreDiffers(f"{tool} restore: {restored} was not created")
    got = tree_digest(restored)
    if got == expected:
        return
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    differ = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
    raise RestoreDiffers(
        f"{tool} restore differs from the source: {len(missing)} missing "
        f"{missing[:3]}, {len(extra)} extra {extra[:3]}, {len(differ)} with other content "
        f"{differ[:3]}")


# ---- the tools ------------------------------------------------------------------------------

class Cairn:
    """Cairn on the embedded local host, driven through the master API as the console does."""

    name = "cairn"

    def __init__(self, src, work, storage_type, encrypted=False):
        self.src, self.type, self.encrypted = src, storage_type, encrypted
        if encrypted:
            self.name = "cairn-enc"
        self.home = os.path.join(work, self.name + "-home")
        self.vol = os.path.join(work, self.name + "-pool")
        self.m = self.image = None

    def setup(self):
        os.makedirs(self.vol)
        try:
            self.m = local_master(self.home, self.vol, self.src, storage_type=self.type,
                                  encrypted=self.encrypted)
        except Exception as e:
            raise ToolError(f"setting up a {self.type} pool: {type(e).__name__}: {e}")
        return {}

    def _job(self, what, start):
        m = self.m
        t0 = time.perf_counter()
        try:
            jid = start()
            [job] = m.wait_for([jid], poll=0.02)
        except Exception as e:
            raise ToolError(f"cairn {what}: {type(e).__name__}: {e}")
        elapsed = time.perf_counter() - t0
        if job["status"] != 0:
            logs = m.jobs.logs(jid)
            raise ToolError(f"cairn {what} job {jid} failed (status {job['status']}): "
                            + "; ".join(r["message"] for r in logs[-3:]))
        return job, elapsed

    def backup(self, label):
        job, s = self._job("backup", lambda: self.m.start_backup("p")[0])
        self.image = job["image_id"]
        img = self.m.image(self.image)
        return {"seconds": s, "job": job["id"], "image": self.image,
                "dedup_ratio": job.get("dedup_ratio"), "bytes_sent": job.get("bytes"),
                "image_bytes": img.get("image_bytes")}

    def restore(self, tgt):
        _, s = self._job("restore", lambda: self.m.start_restore(self.image, [self.src], tgt))
        return s

    def size(self):
        return du(self.vol)

    def warm_repository(self):
        # the pool's containers are written with O_DIRECT: after the backups they are on the
        # disk only, where the peers' repositories, written through the page cache, are not
        warm(self.vol)
        warm(self.home)

    def close(self):
        if self.m is not None:
            self.m.close()
            self.m = None


# ---- the run --------------------------------------------------------------------------------

def sync():
    subprocess.run(["sync"], check=True)


def set_sizes(scale):
    large_files = LARGE_FILES
    large_total = max(large_files * BLOCK, int(LARGE_TOTAL * scale))
    small_count = max(1, round(SMALL_COUNT * scale))
    return {"large": (large_total // large_files // BLOCK * BLOCK * large_files, large_files),
            "small": (small_count * SMALL_SIZE, small_count)}


def check_space(work, sizes, sets, tools, cairn_type, rounds):
    """Every set's data stays until the run ends (see bench_set): the sets add up."""
    factors = [REPO_FACTOR[cairn_type if t.startswith("cairn") else t] for t in tools]
    # each of a first full's extra rounds makes a repository per tool (of one backup)
    repos = sum(factors) * (1 + (rounds - 1) / 2)
    need = sum(sizes[s][0] for s in sets) * (1 + len(tools) + repos) + (1 << 30)
    free = shutil.disk_usage(work).free
    mnt, fstype, dev = filesystem_of(work)
    if free < need:
        raise SystemExit(
            f"not enough free disk space: this run needs about {need / 1e9:.1f} GB in {work} "
            f"(each data set, {len(tools)} restores of it and as many repositories, the first "
            f"full's extra rounds, plus 1 GiB "
            f"to spare) "
            f"but {mnt} ({fstype} on {dev}) has {free / 1e9:.1f} GB free; give --work DIR on "
            f"a larger file system or a smaller --scale")
    return need, free


def settle_left(parent, now=None):
    """Seconds still to wait, in `parent`, since the last run there deleted many files (0 when
    none did, or long enough ago; an unreadable note counts as none)."""
    try:
        with open(os.path.join(parent, SETTLE_NOTE)) as f:
            deleted_at = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    now = time.time() if now is None else now
    return max(0.0, min(float(SETTLE_S), deleted_at + SETTLE_S - now))


def note_deletion(parent, files, now=None):
    """Leaves the time of a deletion of `files` files in `parent` for the next run (see
    settle_left); fewer than SETTLE_FILES leave no note."""
    if files < SETTLE_FILES:
        return False
    with open(os.path.join(parent, SETTLE_NOTE), "w") as f:
        f.write(f"{time.time() if now is None else now:.0f} {files}\n")
    return True


def files_made(sizes, sets, tools):
    """About how many files a run makes (data sets and one restore of each per tool)."""
    return sum(sizes[s][1] * (1 + len(tools)) for s in sets)


def new_tool(name, src, work, cairn_type):
    """The tool `name` backing up `src`, its repository in `work`."""
    if name in ("cairn", "cairn-enc"):
        return Cairn(src, work, cairn_type, encrypted=name == "cairn-enc")
    return PEER_CLASSES[name](src, work)


def first_full_trials(src, work, live, rounds, cairn_type, say):
    """rounds - 1 first fulls per tool before the one the later steps build on, the tools
    taking turns, each into a new repository kept until the run ends: on this file system
    (mounted with discard) the device trims what a deletion freed for a while after it, and
    writes that wait for the device (Cairn's direct writes) are slower meanwhile.
    Returns {tool: [seconds]}."""
    out = {t: [] for t in live}
    for i in range(rounds - 1):
        for t in live:
            where = os.path.join(work, f"trial-{t}-{i + 1}")
            os.makedirs(where)
            tool = new_tool(t, src, where, cairn_type)
            try:
                tool.setup()
                warm(src)
                sync()
                say(f"{os.path.basename(os.path.dirname(src))}: {t} first full, round {i + 1} "
                    f"of {rounds} ...")
                out[t].append(tool.backup("first")["seconds"])
            except ToolError as e:
                say(f"{t} first full, round {i + 1}: {e} (not counted)")
            finally:
                tool.close()
    return out


def set_up(made, results, say):
    """Sets up each tool of `made` ({name: tool}); returns those that are ready. A peer that
    is missing or fails to set up has an "error" in its `results`, kopia without a Go
    toolchain to build it a "skipped" (not an error of the run)."""
    live = {}
    for t, tool in made.items():
        r = results[t]
        try:
            if t in PEERS and tool.version() is None:
                if tool.skippable():
                    r["skipped"] = tool.why_missing()
                    say(f"{t}: {r['skipped']}")
                    tool.close()
                    continue
                raise ToolError(tool.why_missing())
            r["setup"] = tool.setup()
            live[t] = tool
        except ToolError as e:
            r["error"] = str(e)
            say(f"{t}: {e}")
            tool.close()
    return live


def bench_set(kind, src, work, tools, a, say):
    res = {"tools": {t: {} for t in tools}}
    t0 = time.perf_counter()
    content = Content(a.seed)
    if kind == "large":
        total, files = set_sizes(a.scale)["large"]
        make_large(src, content, total, files)
    else:
        _, count = set_sizes(a.scale)["small"]
        make_small(src, content, count, SMALL_SIZE)
    all_files = files_of(src)
    nbytes = sum(os.path.getsize(p) for p in all_files)
    res.update(files=len(all_files), bytes=nbytes,
               generated_s=round(time.perf_counter() - t0, 1))
    say(f"{kind}: {len(all_files):,} files, {nbytes / MB:.0f} MB generated in "
        f"{res['generated_s']} s")
    warm(src)

    made = {t: new_tool(t, src, work, a.cairn_type) for t in tools}
    live = set_up(made, res["tools"], say)

    def step(name, fn, warm_repositories=False):
        for t, tool in list(live.items()):
            warm(src)
            if warm_repositories:
                tool.warm_repository()
            sync()
            say(f"{kind}: {t} {name} ...")
            try:
                fn(t, tool)
            except ToolError as e:
                res["tools"][t]["error"] = f"{name}: {e}"
                if isinstance(e, RestoreDiffers):
                    say(f"\n!!! {t}: RESTORE DIFFERS FROM THE SOURCE: {e}\n")
                else:
                    say(f"{t} {name} failed: {e}")
                tool.close()
                del live[t]

    def backup(label):
        def fn(t, tool):
            r = tool.backup(label)
            sync()
            r["repo_bytes"] = tool.size()
            res["tools"][t][label] = r
        return fn

    try:
        trials = first_full_trials(src, work, live, a.first_rounds, a.cairn_type, say)
        step("first full", backup("first"))
        for t, times in trials.items():
            r = res["tools"][t].get("first")
            if r is not None:
                # every round, the kept repository's last; the median is what is compared
                r["rounds"] = times + [r["seconds"]]
                r["seconds"] = statistics.median(r["rounds"])
        step("unchanged second full", backup("second"))
        sync()
        rnd = random.Random(a.seed + 1)
        res["change"] = (change_large if kind == "large" else change_small)(
            src, Content(a.seed + 2), rnd)
        expected = tree_digest(src)
        sync()
        step("backup after the 5% change", backup("change"))

        def restore(t, tool):
            tgt = os.path.join(work, f"restore-{t}")
            s = tool.restore(tgt)
            sync()
            verify(t, expected, os.path.join(tgt, src.lstrip("/")))
            res["tools"][t]["restore"] = {"seconds": s}
        step("full restore", restore, warm_repositories=True)
    finally:
        # Nothing of the set is deleted before the run ends: on a file system without a
        # journal (ext4 here) a file created within minutes of many being deleted near it is
        # several times slower to make, so deleting one set's files would slow down the next
        # set's restores, and deleting one tool's restore the next tool's.
        for t, tool in live.items():
            tool.close()
        for t, tool in made.items():
            if t == "cairn" and os.path.isdir(tool.home):
                res["tools"][t]["catalog_bytes"] = du(tool.home)
    res["ratios"] = ratios(res)
    return res


def ratios(res):
    tr, n = res["tools"], res["bytes"]

    def sec(t, step):
        return tr.get(t, {}).get(step, {}).get("seconds")

    out = {}
    c1, r1 = sec("cairn", "first"), sec("restic", "first")
    if c1 and r1:
        out["first_full_rate_cairn_over_restic"] = r1 / c1
    c2, b2 = sec("cairn", "second"), sec("borg", "second")
    if c2 and b2:
        out["second_full_seconds_borg_over_cairn"] = b2 / c2
    cr = sec("cairn", "restore")
    peers = [s for s in (sec(p, "restore") for p in PEERS) if s]
    if cr and peers:
        out["restore_rate_cairn_over_best_peer"] = (n / cr) / (n / min(peers))
    e1, e3 = sec("cairn-enc", "first"), sec("cairn-enc", "restore")
    if c1 and e1:
        out["encrypted_first_full_seconds_over_plain"] = e1 / c1
    if cr and e3:
        out["encrypted_restore_seconds_over_plain"] = e3 / cr
    if "change" in tr.get("cairn", {}) and "change" in tr.get("restic", {}):
        # Sizes after all three backups.
        out["pool_bytes_cairn_over_restic"] = (tr["cairn"]["change"]["repo_bytes"]
                                               / tr["restic"]["change"]["repo_bytes"])
    return {k: {"value": v, "target": TARGETS[k], "met": met(v, *TARGETS[k])}
            for k, v in out.items()}


def met(v, op, target):
    return {">=": v >= target, ">": v > target, "<=": v <= target}[op]


def report(name, s):
    n = s["bytes"]
    c = s.get("change")
    if c and "regions" in c:
        change = (f"{c['regions']} regions of {c['region_bytes'] / MB:.2f} MB in "
                  f"{c['files_changed']} files rewritten, {c['bytes_changed'] / MB:.1f} MB")
    elif c:
        change = f"{c['files_changed']:,} files rewritten, {c['bytes_changed'] / MB:.1f} MB"
    else:
        change = "not reached"
    print(f"\n## {name}: {s['files']:,} files, {n / MB:.0f} MB; the change: {change}")
    head = ("tool", "first s", "MB/s", "second s", "change s", "restore s", "MB/s",
            "repository bytes")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(" --- " for _ in head) + "|")
    errors = []
    for t, r in s["tools"].items():
        def sec(step):
            x = r.get(step, {}).get("seconds")
            return f"{x:.2f}" if x else "-"

        def rate(step):
            x = r.get(step, {}).get("seconds")
            return f"{n / MB / x:.0f}" if x else "-"
        size = r.get("change", {}).get("repo_bytes")
        cells = (t, sec("first"), rate("first"), sec("second"), sec("change"), sec("restore"),
                 rate("restore"), f"{size:,}" if size else "-")
        print("| " + " | ".join(cells) + " |")
        if "error" in r:
            errors.append(f"{t}: ERROR {r['error']}")
        if "skipped" in r:
            errors.append(f"{t}: SKIPPED {r['skipped']}")
    for e in errors:
        print(e)
    c = s["tools"].get("cairn", {})
    if "catalog_bytes" in c:
        print(f"cairn catalog (outside the pool): {c['catalog_bytes']:,} bytes")
    rounds = [f"{t} " + " / ".join(f"{x:.2f}" for x in r["first"]["rounds"])
              for t, r in s["tools"].items() if len(r.get("first", {}).get("rounds", ())) > 1]
    if rounds:
        print("first full, each round in s (the median above): " + "; ".join(rounds))
    if any(c.get(b, {}).get("dedup_ratio") is not None for b in BACKUPS):
        print("cairn dedup_ratio (%): " + ", ".join(
            f"{b} {c[b]['dedup_ratio']}" for b in BACKUPS if b in c))
    growth = []
    for t, r in s["tools"].items():
        sizes = [r.get(b, {}).get("repo_bytes") for b in BACKUPS]
        if all(sizes):
            growth.append(f"{t} {sizes[0] / MB:.0f} / {sizes[1] / MB:.0f} / {sizes[2] / MB:.0f}")
    if growth:
        print("repository MB after first / second / change: " + "; ".join(growth))
    labels = {
        "first_full_rate_cairn_over_restic": "first full rate, cairn / restic",
        "second_full_seconds_borg_over_cairn": "unchanged second full s, borg / cairn",
        "restore_rate_cairn_over_best_peer": "restore rate, cairn / fastest peer",
        "pool_bytes_cairn_over_restic": "pool bytes, cairn / restic repository",
        "encrypted_first_full_seconds_over_plain": "first full s, encrypted / plain pool",
        "encrypted_restore_seconds_over_plain": "restore s, encrypted / plain pool",
    }
    for k, label in labels.items():
        op, target = TARGETS[k]
        r = s["ratios"].get(k)
        verdict = f"{r['value']:.2f}  {'PASS' if r['met'] else 'MISS'}" if r else "n/a"
        print(f"{label:40} (target {op} {target}): {verdict}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0,
                    help="shrink both data sets by this factor, e.g. 0.05 for a quick run (1)")
    ap.add_argument("--sets", default="large,small", help="large,small (both)")
    ap.add_argument("--tools", default=",".join(TOOLS),
                    help=",".join(TOOLS) + " (all); also cairn-enc (Cairn on an encrypted pool)")
    ap.add_argument("--work", help="a new directory is made in DIR (default /var/tmp)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the generated data (1)")
    ap.add_argument("--cairn-type", default="dedup", choices=sorted(REPO_FACTOR.keys() -
                                                                    set(PEERS)),
                    help="Cairn's storage type (dedup; advanced-disk to compare)")
    ap.add_argument("--cairn-direct-io", choices=("on", "off"), default="on",
                    help="off: the pool's containers are written through the page cache "
                         "(CAIRN_DIRECT_IO=0 for Cairn's agent), to compare (on)")
    ap.add_argument("--first-rounds", type=int, default=3,
                    help="first fulls per tool, the tools taking turns; the median is "
                         "reported (3)")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON document")
    ap.add_argument("--no-settle", action="store_true",
                    help="do not wait after the last run's deletion (see the module docstring)")
    a = ap.parse_args()
    if a.cairn_direct_io == "off":
        os.environ["CAIRN_DIRECT_IO"] = "0"  # the agent Cairn starts inherits it
    if not a.scale > 0:
        ap.error("--scale must be above 0")
    if a.first_rounds < 1:
        ap.error("--first-rounds must be 1 or more")
    sets = [s for s in a.sets.split(",") if s]
    tools = [t for t in a.tools.split(",") if t]
    bad = [s for s in sets if s not in ("large", "small")] + \
        [t for t in tools if t not in TOOLS + EXTRA_TOOLS]
    if bad or not sets or not tools:
        ap.error(f"unknown or missing --sets/--tools: {bad or 'none given'}; "
                 f"sets: large,small; tools: {','.join(TOOLS + EXTRA_TOOLS)}")
    say = (lambda *x: print(*x, file=sys.stderr, flush=True)) if a.json else \
        (lambda *x: print(*x, flush=True))
    parent = os.path.abspath(a.work or "/var/tmp")
    os.makedirs(parent, exist_ok=True)
    sizes = set_sizes(a.scale)
    need, free = check_space(parent, sizes, sets, tools, a.cairn_type, a.first_rounds)
    left = settle_left(parent)
    if left and not a.no_settle:
        say(f"waiting {left:.0f} s: the last run in {parent} deleted its files "
            f"{SETTLE_S - left:.0f} s ago, and creating files that soon after is slower on "
            f"ext4 without a journal (--no-settle to skip the wait)")
        time.sleep(left)
    work = os.path.realpath(tempfile.mkdtemp(prefix="cairn-bench-dedup-", dir=parent))
    mnt, fstype, dev = filesystem_of(work)
    say(f"work directory {work} on {fstype} ({dev} at {mnt}): about {need / 1e9:.1f} GB "
        f"needed, {free / 1e9:.1f} GB free")
    import app
    versions = {"cairn": f"cairn {app.__version__} (storage type {a.cairn_type})"}
    # kopia is built (scripts/kopia-build.sh) only when it is one of the tools, before any
    # step is timed
    versions.update((p, PEER_CLASSES[p].version()) for p in PEERS
                    if p in tools or p in ("restic", "borg"))
    # The pool compresses with zstd when the agent can import it, else with zlib level 1.
    versions["cairn_codec_available"] = ("zstd" if importlib.util.find_spec("zstandard")
                                         else "zlib (zstandard is not installed)")
    versions["cairn_direct_io"] = a.cairn_direct_io
    res = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(),
           "versions": versions, "scale": a.scale, "seed": a.seed, "work_dir": work,
           "filesystem": {"mount": mnt, "type": fstype, "device": dev},
           "data": {"block": BLOCK, "text_share": TEXT_SHARE, "change_share": CHANGE_SHARE},
           "targets": {k: f"{op} {v}" for k, (op, v) in TARGETS.items()}, "sets": {},
           "settle_wait_s": round(left) if not a.no_settle else 0}
    failed = False
    try:
        for kind in sets:
            # each set in a directory of its own, kept until the run ends (see bench_set)
            set_work = os.path.join(work, kind)
            os.makedirs(set_work)
            res["sets"][kind] = bench_set(kind, os.path.join(set_work, "data"), set_work,
                                          tools, a, say)
            failed |= any("error" in r for r in res["sets"][kind]["tools"].values())
    finally:
        shutil.rmtree(work, ignore_errors=True)
        try:
            note_deletion(parent, files_made(sizes, sets, tools))
        except OSError as e:
            say(f"could not leave the note of the deletion in {parent}: {e}")
    res["load_average"] = os.getloadavg()
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"\n{res['date']}; {res['machine']['cpus']} CPUs, {res['machine']['cpu']}; "
              f"scale {a.scale}; {fstype} on {dev}")
        print("; ".join(f"{k}: {v}" for k, v in versions.items()))
        names = {"large": "(a) large files", "small": "(b) small files of 100 KiB"}
        for kind, s in res["sets"].items():
            report(names[kind], s)
        print(f"load average: {' '.join(f'{x:.2f}' for x in res['load_average'])}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
