"""The storage host's disk benchmark (`cairn storage-server benchmark`), the pattern of
tsmdiskperf: thread pairs, a writer and a reader per directory, directories spread round-robin
over the volumes, one more pair per step until the combined throughput stops growing or the
most pairs are reached. `stgpool` moves 256 KiB per I/O sequentially (a pool's containers),
`db` 8 KiB at random offsets (a catalog's pages).

Each step is measured past the page cache: with O_DIRECT and page-aligned buffers where the
file system takes it; elsewhere buffered, each writer syncing its data every SYNC_OPS writes
and every reader dropping what it read from the cache (posix_fadvise DONTNEED), which the
result says. The data path does no work per byte in Python: one preallocated buffer per
thread, os.pwrite and os.preadv, which release the GIL while the kernel works.

Everything is written below a folder of its own on each volume, removed when the run ends,
whatever ends it; a folder left by an agent that was killed (its host and process id in the
name, the process gone) is removed by the next run on that volume."""

import mmap
import os
import random
import shutil
import socket
import statistics
import threading
import time

from app import status
from app.errors import Canceled, CairnError, ValidationError
from app.formats import directio
from app.liveness import process_alive
from plugins.filesystems import posix

MiB = 1 << 20
ALIGN = 4096
WORKLOADS = {"stgpool": {"io_size": 256 << 10, "random": False},
             "db": {"io_size": 8 << 10, "random": True}}
PREFIX = ".cairn-benchmark-"
# A buffered writer syncs (and drops from the cache) what it wrote every this many writes.
SYNC_OPS = 32
MEMORY_FS = {"tmpfs", "ramfs"}
# The step's last intervals whose combined throughput varies by less than this (standard
# deviation over mean) make it stable.
STABLE_INTERVALS = 5
STABLE_SPREAD = 0.10
# A pair that adds less than GAIN to the best combined throughput, PATIENCE times in a row:
# the throughput has stabilized.
GAIN = 0.05
PATIENCE = 2
FILL = 1 << 20

# Latencies in microseconds, log-linear: exact below 64 µs, then 32 buckets per power of two
# (3% wide), up to some 2**41 µs.
BUCKETS = 1216


def _bucket_value_us(i):
    """The middle of bucket i, in microseconds."""
    if i < 64:
        return i + 0.5
    shift = i // 32 - 1
    return ((i - shift * 32) << shift) + (1 << shift) / 2


def percentile_ms(hist, q):
    """The q-th percentile (0-100) of a latency histogram, in milliseconds; None if empty."""
    total = sum(hist)
    if not total:
        return None
    want = q / 100.0 * total
    seen = 0
    for i, n in enumerate(hist):
        seen += n
        if n and seen >= want:
            return round(_bucket_value_us(i) / 1000.0, 3)
    return None


def _aligned(size):
    """A page-aligned buffer of `size` bytes (an anonymous mmap), filled with data that does
    not compress."""
    buf = mmap.mmap(-1, size)
    seed = os.urandom(min(size, 64 << 10))
    for at in range(0, size, len(seed)):
        n = min(len(seed), size - at)
        buf[at:at + n] = seed[:n]
    return buf


class Volume:
    """One volume of the run: its folder, and how its files bypass the cache."""

    def __init__(self, path, token):
        self.path = path
        self.root = os.path.join(path, PREFIX + token)
        self.direct = False
        self.fs_type = None
        self.made = False


class Worker(threading.Thread):
    """A writer or a reader on one file until `stop` is set. bytes, ops and hist grow as it
    works; the step reads them (ints, read whole under the GIL) between intervals."""

    def __init__(self, kind, path, io_size, file_size, random_io, direct, stop):
        super().__init__(daemon=True, name=f"bench-{kind}")
        self.kind, self.path = kind, path
        self.io_size, self.blocks = io_size, file_size // io_size
        self.random_io, self.direct, self.stop = random_io, direct, stop
        self.bytes = 0
        self.ops = 0
        self.hist = [0] * BUCKETS
        self.error = None

    def run(self):
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001 - the step reports it and stops
            self.error = e
            self.stop.set()

    def _loop(self):
        writing = self.kind == "write"
        flags = (os.O_WRONLY if writing else os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0)
        if self.direct:
            flags |= os.O_DIRECT
        fd = os.open(self.path, flags)
        if not self.direct and not writing:
            # no read-ahead: it would fill the cache with what the next reads then find there
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        buf = _aligned(self.io_size)
        bufs = [buf]
        io, blocks, hist, stop = self.io_size, self.blocks, self.hist, self.stop
        rng = random.Random(os.urandom(8))
        clock = time.perf_counter_ns
        buffered = not self.direct
        pos = 0
        since_sync = 0
        try:
            while not stop.is_set():
                off = (rng.randrange(blocks) if self.random_io else pos) * io
                if buffered and not writing:
                    os.posix_fadvise(fd, off, io, os.POSIX_FADV_DONTNEED)
                t0 = clock()
                n = os.pwrite(fd, buf, off) if writing else os.preadv(fd, bufs, off)
                t1 = clock()
                if n != io:
                    raise OSError(f"a {'write' if writing else 'read'} of {io} bytes at "
                                  f"{off} moved {n}")
                us = (t1 - t0) // 1000
                if us < 64:
                    hist[us] += 1
                else:
                    s = us.bit_length() - 6
                    hist[min(s * 32 + (us >> s), BUCKETS - 1)] += 1
                self.bytes += io
                self.ops += 1
                pos = pos + 1 if pos + 1 < blocks else 0
                if buffered and writing:
                    since_sync += 1
                    if since_sync >= SYNC_OPS:
                        since_sync = 0
                        os.fdatasync(fd)
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
            buf.close()


class DiskBenchmark:
    """One run. emit(event, data) and is_cancelled() are the request's; the other arguments
    are the run's settings (see run())."""

    def __init__(self, volumes, workload="stgpool", max_pairs=8, step_seconds=10.0,
                 max_step_seconds=None, interval=None, file_size=1 << 30, emit=None,
                 is_cancelled=None):
        if workload not in WORKLOADS:
            raise ValidationError(f"unknown workload {workload!r}: stgpool or db")
        if not volumes or not all(isinstance(v, str) and v.startswith("/") for v in volumes):
            raise ValidationError("the benchmark needs one or more volumes (absolute paths)")
        if not isinstance(max_pairs, int) or not 1 <= max_pairs <= 100:
            raise ValidationError(f"max_pairs must be 1 to 100, not {max_pairs!r}")
        w = WORKLOADS[workload]
        self.workload, self.io_size, self.random_io = workload, w["io_size"], w["random"]
        if not isinstance(file_size, int) or file_size < 4 * self.io_size:
            raise ValidationError(f"file_size must be at least {4 * self.io_size} bytes")
        self.file_size = file_size // self.io_size * self.io_size
        self.max_pairs = max_pairs
        self.step_seconds = float(step_seconds)
        self.max_step_seconds = float(max_step_seconds or 3 * step_seconds)
        # a step of a few seconds still has STABLE_INTERVALS intervals to judge by
        self.interval = float(interval or min(1.0, self.step_seconds / STABLE_INTERVALS))
        if not (0 < self.interval <= self.step_seconds <= self.max_step_seconds):
            raise ValidationError("interval, step_seconds and max_step_seconds must grow in "
                                  "that order")
        self.emit = emit or (lambda event, data: None)
        self.is_cancelled = is_cancelled or (lambda: False)
        token = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(4).hex()}"
        self.volumes = [Volume(v, token) for v in dict.fromkeys(volumes)]
        self.moved = 0
        self.removed_stale = []
        self.not_removed = []

    # ---- the run --------------------------------------------------------------------------
    def run(self):
        """The steps and what the run found: {"steps": [...], "stopped": "stable" or
        "max_pairs", "best": the step of the highest combined throughput, "cache_bypass":
        "direct" or "fadvise", "notes": [...]}."""
        try:
            self._prepare()
            steps, stopped = [], "max_pairs"
            for n in range(1, self.max_pairs + 1):
                self._fill(n - 1)
                step = self._step(n)
                steps.append(step)
                self.emit("step", step)
                if self._stabilized(steps):
                    stopped = "stable"
                    break
            best = max(steps, key=lambda s: s["combined_mb_s"])
            return {"workload": self.workload, "io_size": self.io_size,
                    "file_size": self.file_size, "volumes": [v.path for v in self.volumes],
                    "steps": steps, "stopped": stopped, "best": best,
                    "max_combined_mb_s": best["combined_mb_s"],
                    "cache_bypass": self._bypass(), "notes": self._notes(),
                    "removed_stale": self.removed_stale}
        finally:
            self.cleanup()

    def _stabilized(self, steps):
        if len(steps) <= PATIENCE:
            return False
        before = max(s["combined_mb_s"] for s in steps[:-PATIENCE])
        return all(s["combined_mb_s"] < before * (1 + GAIN) for s in steps[-PATIENCE:])

    def _bypass(self):
        return "direct" if all(v.direct for v in self.volumes) else "fadvise"

    def _notes(self):
        notes = []
        for v in self.volumes:
            if not v.direct:
                notes.append(f"{v.path}: the file system does not take direct I/O; the "
                             "benchmark wrote through the page cache, syncing every "
                             f"{SYNC_OPS} writes and dropping what it read from the cache "
                             "(posix_fadvise), which comes close to the disks")
            if v.fs_type in MEMORY_FS:
                notes.append(f"{v.path} is on {v.fs_type}, a file system in memory: the "
                             "figures are the memory's, not a disk's")
        return notes

    # ---- volumes and files ----------------------------------------------------------------
    def _prepare(self):
        for v in self.volumes:
            if not os.path.isdir(v.path):
                raise ValidationError(f"volume {v.path} does not exist or is not a directory")
            self._remove_stale(v)
            os.mkdir(v.root, 0o700)
            v.made = True
            fs = posix.filesystem_of(v.path) or {}
            v.fs_type = fs.get("type")
            v.direct = self._takes_direct(v.root)
        per_volume = {}
        for i in range(self.max_pairs):
            per_volume[self._volume(i).path] = per_volume.get(self._volume(i).path, 0) + 1
        for v in self.volumes:
            need = per_volume.get(v.path, 0) * 2 * self.file_size
            st = os.statvfs(v.path)
            free = st.f_bavail * st.f_frsize
            if need > free * 0.9:
                raise CairnError(
                    f"volume {v.path} has {free // MiB} MiB free; {self.max_pairs} pairs "
                    f"need {need // MiB} MiB there (two files of {self.file_size // MiB} "
                    "MiB per pair)", status_code=status.POOL_FULL,
                    hint="give fewer pairs (--max-pairs) or smaller files (--file-size)")

    def _remove_stale(self, v):
        """Folders of runs whose agent was killed on this host: its process is gone."""
        me = socket.gethostname()
        try:
            names = [n for n in os.listdir(v.path) if n.startswith(PREFIX)]
        except OSError:
            return
        for name in names:
            parts = name[len(PREFIX):].rsplit("-", 2)
            if len(parts) != 3 or parts[0] != me or not parts[1].isdigit():
                continue
            if process_alive(int(parts[1])):
                continue  # a run of a live agent
            shutil.rmtree(os.path.join(v.path, name), ignore_errors=True)
            self.removed_stale.append(os.path.join(v.path, name))

    @staticmethod
    def _takes_direct(folder):
        flag = getattr(os, "O_DIRECT", 0)
        if not flag or not directio.enabled():
            return False  # none here, or turned off in the agent's environment
        probe = os.path.join(folder, "direct-probe")
        buf = _aligned(ALIGN)
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | flag, 0o600)
            try:
                os.pwrite(fd, buf, 0)
            finally:
                os.close(fd)
            return True
        except OSError:
            return False
        finally:
            buf.close()
            try:
                os.unlink(probe)
            except FileNotFoundError:
                pass

    def _volume(self, i):
        return self.volumes[i % len(self.volumes)]

    def _dir(self, i):
        return os.path.join(self._volume(i).root, f"pair-{i + 1}")

    def _fill(self, i):
        """Pair i's folder, its reader's file written whole (so that reads reach the disk)
        and its writer's file allocated."""
        folder = self._dir(i)
        os.mkdir(folder, 0o700)
        direct = self._volume(i).direct
        self.emit("log", {"message": f"pair {i + 1}: writing the {self.file_size // MiB} MiB "
                                     f"its reader reads in {folder}"})
        fd = os.open(os.path.join(folder, "write"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, self.file_size)
        except OSError:
            pass  # a file system without allocation: the writer's first pass allocates
        finally:
            os.close(fd)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_DIRECT if direct else 0)
        fd = os.open(os.path.join(folder, "read"), flags, 0o600)
        unit = max(self.io_size, FILL)
        buf = _aligned(unit)
        try:
            at = 0
            while at < self.file_size:
                if self.is_cancelled():
                    raise Canceled()
                n = min(unit, self.file_size - at)
                at += os.pwrite(fd, memoryview(buf)[:n], at)
            if not direct:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
            buf.close()

    def cleanup(self):
        for v in self.volumes:
            if v.made:
                shutil.rmtree(v.root, ignore_errors=True)
                if os.path.lexists(v.root):
                    self.not_removed.append(v.root)
        if self.not_removed:
            self.emit("warning", {"path": "", "message": "benchmark files could not be "
                                  "removed: " + ", ".join(self.not_removed)})

    # ---- one step -------------------------------------------------------------------------
    def _step(self, n):
        stop = threading.Event()
        workers = []
        for i in range(n):
            d, direct = self._dir(i), self._volume(i).direct
            for kind in ("write", "read"):
                workers.append(Worker(kind, os.path.join(d, kind), self.io_size,
                                      self.file_size, self.random_io, direct, stop))
        for w in workers:
            w.start()
        try:
            return self._measure(n, workers)
        finally:
            stop.set()
            for w in workers:
                w.join()

    def _wait(self, seconds, workers):
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            if self.is_cancelled():
                raise Canceled()
            failed = next((w for w in workers if w.error is not None), None)
            if failed is not None:
                e = failed.error
                raise CairnError(f"the benchmark's {failed.kind} on {failed.path} failed: "
                                 f"{getattr(e, 'strerror', None) or e}",
                                 status_code=status.STORAGE_WRITE_FAILED)
            time.sleep(min(left, 0.05))

    def _totals(self, workers, kind):
        ws = [w for w in workers if w.kind == kind]
        return sum(w.bytes for w in ws), sum(w.ops for w in ws)

    def _measure(self, n, workers):
        self._wait(self.interval, workers)  # the threads get going: not measured
        t0 = time.monotonic()
        start = {k: self._totals(workers, k) for k in ("write", "read")}
        hists0 = [list(w.hist) for w in workers]
        last, t_last = dict(start), t0
        combined = []
        while True:
            self._wait(self.interval, workers)
            now = time.monotonic()
            cur = {k: self._totals(workers, k) for k in ("write", "read")}
            dt = now - t_last
            w_rate = (cur["write"][0] - last["write"][0]) / dt / MiB
            r_rate = (cur["read"][0] - last["read"][0]) / dt / MiB
            combined.append(w_rate + r_rate)
            self.moved += (cur["write"][0] - last["write"][0]) + (cur["read"][0] - last["read"][0])
            last, t_last = cur, now
            self.emit("progress", {"bytes": self.moved, "files": 0, "pairs": n,
                                   "write_mb_s": round(w_rate, 1), "read_mb_s": round(r_rate, 1)})
            elapsed = now - t0
            if elapsed >= self.max_step_seconds or (
                    elapsed >= self.step_seconds and self._steady(combined)):
                break
        seconds = t_last - t0
        hist = {"write": [0] * BUCKETS, "read": [0] * BUCKETS}
        for w, h0 in zip(workers, hists0):
            acc = hist[w.kind]
            for i, (a, b) in enumerate(zip(w.hist, h0)):
                if a != b:
                    acc[i] += a - b
        step = {"threads": n, "pairs": n, "io_size": self.io_size, "seconds": round(seconds, 2),
                "directories": [self._dir(i) for i in range(n)]}
        for k in ("write", "read"):
            b, ops = cur[k][0] - start[k][0], cur[k][1] - start[k][1]
            step[f"{k}_mb_s"] = round(b / seconds / MiB, 2)
            step[f"{k}_iops"] = round(ops / seconds, 1)
            for q in (50, 95, 99):
                step[f"{k}_p{q}_ms"] = percentile_ms(hist[k], q)
        step["combined_mb_s"] = round(step["write_mb_s"] + step["read_mb_s"], 2)
        step["max_combined_mb_s"] = round(max(combined), 2)
        return step

    @staticmethod
    def _steady(combined):
        if len(combined) < STABLE_INTERVALS:
            return False
        tail = combined[-STABLE_INTERVALS:]
        mean = statistics.fmean(tail)
        return mean > 0 and statistics.pstdev(tail) / mean < STABLE_SPREAD
