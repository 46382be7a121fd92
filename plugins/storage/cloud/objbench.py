"""The object storage benchmark of a cloud pool's storage host, the pattern of SPObjBench and
tsmobjperf: for each thread count from min to max, the threads upload objects (in parts when
an object is a part or larger, as a pool's containers go up), read them back whole, then read
random ranges out of them (as a restore reads chunks out of containers). Each step says the
throughput of each phase, the ranged reads per second and the latency percentiles.

A thread is a request in flight: it moves one object at a time and an object's parts one
after the other (the run's transfer has no threads of its own), so that N threads are N
requests at once, as the seed's thread counts are.

The data path does no work per byte in Python: objects are uploaded from a few random
buffers made once per run (a thread uses buffer thread % SOURCES, as the seed's threads take
its source files round-robin), and read back through into a count, a chunk at a time.

Everything lives under a prefix of the run's own inside the bucket spec's prefix,
cairn-benchmark/HOST-PID-STARTED-RANDOM/, and is deleted when the run ends, whatever ends it;
a step's objects are deleted when the step ends. The prefix of a run whose agent was killed
(this host, its process gone), or that began more than a day ago, is removed by the next run,
its unfinished multipart uploads aborted."""

import io
import math
import os
import random
import socket
import threading
import time

from app.errors import Canceled, CairnError, ValidationError
from app.liveness import process_alive
from plugins.storage.cloud import bucket as cloud

MiB = 1 << 20
ROOT = "cairn-benchmark/"
STALE_AGE_S = 24 * 3600
# S3's smallest part (all but the last) and largest; the largest object the run uploads
MIN_PART = 5 * MiB
MAX_PART = 5 << 30
MAX_OBJECT = 1 << 30
MAX_THREADS = 100
# Distinct source buffers, at most SOURCE_MEMORY bytes of them.
SOURCES = 4
SOURCE_MEMORY = 1 << 30
# A dedup pool's default container and average chunk (plugins/storage/dedup): what a cloud
# pool uploads, and what a restore reads out of one.
DEFAULT_OBJECT_SIZE = 64 * MiB
DEFAULT_RANGED_SIZE = 512 << 10
DEFAULT_OBJECTS_PER_THREAD = 4
DEFAULT_RANGED_PER_THREAD = 16
READ_CHUNK = 1 * MiB
POLL_S = 0.05
SPEC_KEYS = ("endpoint", "bucket", "access_key", "secret_key")


def thread_counts(min_threads, max_threads, step):
    """The thread count of each step: min_threads, then each multiple of step above it, and
    max_threads last (1, 10, 20, ... 100 for 1 to 100 by 10, as the seed runs them)."""
    counts = [min_threads]
    n = (min_threads // step + 1) * step
    while n < max_threads:
        counts.append(n)
        n += step
    if counts[-1] != max_threads:
        counts.append(max_threads)
    return counts


def percentile_ms(seconds, q):
    """The q-th percentile (nearest rank) of latencies in seconds, in milliseconds."""
    if not seconds:
        return None
    ordered = sorted(seconds)
    return round(ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)] * 1000.0, 2)


def csv_rows(result):
    """The seed's CSV table of a run: a header, then one row per thread count (threads,
    object size in bytes, write MB/s, read MB/s)."""
    rows = [["Thread Count", "Object Size (bytes)", "Write Throughput (MB/s)",
             "Read Throughput (MB/s)"]]
    for s in result["steps"]:
        rows.append([s["threads"], s["object_size"], s["write_mb_s"], s["read_mb_s"]])
    return rows


def _int(name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{name} must be a whole number from {low} to {high}, not "
                              f"{value!r}")
    return value


def check_settings(min_threads=1, max_threads=8, step=1, object_size=DEFAULT_OBJECT_SIZE,
                   objects_per_thread=None, seconds=None, ranged_size=None,
                   ranged_per_thread=None, part_size=None):
    """A run's settings checked, the defaults filled in: the master checks them when it
    queues a run, the agent again when it runs one. ranged_size defaults to the smaller of
    DEFAULT_RANGED_SIZE and the object; seconds replaces the counts per thread."""
    min_threads = _int("min_threads", min_threads, 1, MAX_THREADS)
    max_threads = _int("max_threads", max_threads, min_threads, MAX_THREADS)
    step = _int("step", step, 1, MAX_THREADS)
    object_size = _int("object_size", object_size, 1, MAX_OBJECT)
    part_size = _int("part_size", cloud.PART_SIZE if part_size is None else part_size,
                     MIN_PART, MAX_PART)
    ranged_size = _int("ranged_size", min(DEFAULT_RANGED_SIZE, object_size)
                       if ranged_size is None else ranged_size, 1, object_size)
    if seconds is not None and (objects_per_thread, ranged_per_thread) != (None, None):
        raise ValidationError("give objects_per_thread and ranged_per_thread, or seconds, "
                              "not both")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or \
                not 0 < seconds <= 3600:
            raise ValidationError(f"seconds must be a number above 0 and at most 3600, "
                                  f"not {seconds!r}")
        seconds = float(seconds)
    else:
        if objects_per_thread is None:
            objects_per_thread = DEFAULT_OBJECTS_PER_THREAD
        if ranged_per_thread is None:
            ranged_per_thread = DEFAULT_RANGED_PER_THREAD
        _int("objects_per_thread", objects_per_thread, 1, 1000)
        _int("ranged_per_thread", ranged_per_thread, 1, 100000)
    return {"min_threads": min_threads, "max_threads": max_threads, "step": step,
            "object_size": object_size, "part_size": part_size, "ranged_size": ranged_size,
            "seconds": seconds, "objects_per_thread": objects_per_thread,
            "ranged_per_thread": ranged_per_thread}


def _run_of(token):
    """(host, pid, started) of a run's prefix name, or None when it is none of ours."""
    parts = token.rsplit("-", 3)
    if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


class _Stop(Exception):
    """Ends a read that is under way when its phase stops."""


class _Worker(threading.Thread):
    """One thread of a phase: op(thread, k) -> bytes moved, `count` times, or until `seconds`
    are up (at least once), or until stop is set. t0 and t1 bound its work."""

    def __init__(self, index, op, count, seconds, stop):
        super().__init__(daemon=True, name=f"objbench-{index}")
        self.index, self.op, self.count, self.seconds, self.stop = \
            index, op, count, seconds, stop
        self.bytes = 0
        self.latencies = []
        self.error = None
        self.t0 = self.t1 = None

    def run(self):
        clock = time.perf_counter
        self.t0 = clock()
        end = None if self.seconds is None else self.t0 + self.seconds
        k = 0
        try:
            while not self.stop.is_set():
                if (end is None and k >= self.count) or (end is not None and k and
                                                         clock() >= end):
                    break
                t = clock()
                self.bytes += self.op(self.index, k)
                self.latencies.append(clock() - t)
                k += 1
        except _Stop:
            pass
        except BaseException as e:  # noqa: BLE001 - the phase raises it in the run's thread
            self.error = e
        self.t1 = clock()


class ObjectBenchmark:
    """One run against the bucket of bucket_spec (plugins/storage/cloud/bucket.py). emit(event,
    data) and is_cancelled() are the request's. Each step's phases run objects_per_thread
    objects (ranged_per_thread ranged reads) per thread, or, with seconds, each phase about
    that long. part_size: the multipart part size (the Bucket's PART_SIZE unless given)."""

    def __init__(self, bucket_spec, *, min_threads=1, max_threads=8, step=1,
                 object_size=DEFAULT_OBJECT_SIZE, objects_per_thread=None, seconds=None,
                 ranged_size=None, ranged_per_thread=None, part_size=None,
                 emit=None, is_cancelled=None):
        if not isinstance(bucket_spec, dict) or not all(
                isinstance(bucket_spec.get(k), str) and bucket_spec.get(k)
                for k in SPEC_KEYS):
            raise ValidationError("the benchmark needs the bucket's spec: "
                                  + ", ".join(SPEC_KEYS))
        settings = check_settings(min_threads=min_threads, max_threads=max_threads, step=step,
                                  object_size=object_size,
                                  objects_per_thread=objects_per_thread, seconds=seconds,
                                  ranged_size=ranged_size, ranged_per_thread=ranged_per_thread,
                                  part_size=part_size)
        for k, v in settings.items():
            setattr(self, k, v)
        self.spec = bucket_spec
        self.emit = emit or (lambda event, data: None)
        self.is_cancelled = is_cancelled or (lambda: False)
        token = f"{socket.gethostname()}-{os.getpid()}-{int(time.time())}-{os.urandom(3).hex()}"
        self.prefix = f"{ROOT}{token}/"
        self.bucket = None
        self.began = False
        self.sources = []
        self.parts = 0
        self._parts_lock = threading.Lock()
        self.moved = 0
        self.removed = 0
        self.removed_runs = []
        self.aborted_uploads = 0
        self.not_removed = None
        self._stop = threading.Event()

    # ---- the run --------------------------------------------------------------------------
    def run(self):
        """{"steps": [...], "max_write_mb_s", "max_read_mb_s", "removed" (objects of killed
        runs removed), "stopped": "max" (every thread count was run), ...}; a cancel raises
        Canceled once the run's objects are gone."""
        try:
            b = self.bucket = cloud.Bucket(self.spec, threads=self.max_threads)
            # the run's threads are its requests in flight: no threads per upload
            b.transfer.multipart_threshold = b.transfer.multipart_chunksize = self.part_size
            b.transfer.use_threads = False
            b.transfer.max_concurrency = 1
            b.client.meta.events.register("before-call.s3.UploadPart", self._count_part)
            b.check()
            self._remove_stale()
            count = max(1, min(SOURCES, self.max_threads, SOURCE_MEMORY // self.object_size))
            self.sources = [os.urandom(self.object_size) for _ in range(count)]
            steps = []
            self.began = True
            for n in thread_counts(self.min_threads, self.max_threads, self.step):
                if self.is_cancelled():
                    raise Canceled()
                steps.append(self._step(n))
            return {"steps": steps, "stopped": "max",
                    "max_write_mb_s": max(s["write_mb_s"] for s in steps),
                    "max_read_mb_s": max(s["read_mb_s"] for s in steps),
                    "object_size": self.object_size, "part_size": self.part_size,
                    "ranged_size": self.ranged_size, "bucket": b.name,
                    "prefix": b.key(self.prefix),
                    "removed": self.removed, "removed_runs": self.removed_runs,
                    "aborted_uploads": self.aborted_uploads}
        finally:
            self.sources = []
            self.cleanup()

    def _count_part(self, **_):
        with self._parts_lock:
            self.parts += 1

    def _remove_stale(self):
        """The objects and unfinished uploads of runs whose agent was killed on this host, or
        that began more than a day ago."""
        b = self.bucket
        me, now = socket.gethostname(), time.time()
        objects, uploads = {}, {}
        for name, _ in b.names(ROOT):
            objects.setdefault(name[len(ROOT):].split("/", 1)[0], []).append(name)
        for name, upload_id in b.uploads(ROOT):
            uploads.setdefault(name[len(ROOT):].split("/", 1)[0], []).append((name, upload_id))
        for token in sorted(set(objects) | set(uploads)):
            run = _run_of(token)
            if run is None:
                continue
            host, pid, started = run
            if now - started <= STALE_AGE_S and (host != me or process_alive(pid)):
                continue
            b.abort(uploads.get(token, []))
            b.delete(objects.get(token, []))
            self.removed += len(objects.get(token, []))
            self.aborted_uploads += len(uploads.get(token, []))
            self.removed_runs.append(b.key(ROOT + token + "/"))

    def cleanup(self):
        """Deletes what the run wrote, found by listing its prefix (an upload that failed
        halfway included); a failure to do so is a warning, not the run's error."""
        if not self.began:
            return
        b = self.bucket
        # the objects first: a key that may not list unfinished uploads still removes them
        for what, remove in (("objects", lambda: b.delete(n for n, _ in b.names(self.prefix))),
                             ("unfinished uploads", lambda: b.abort(b.uploads(self.prefix)))):
            try:
                remove()
            except CairnError as e:
                self.not_removed = b.key(self.prefix)
                self.emit("warning", {"path": "", "message": f"the benchmark's {what} under "
                                      f"{self.not_removed} could not be removed ({e.message});"
                                      " the next benchmark on this host removes them"})

    # ---- one step -------------------------------------------------------------------------
    def _step(self, n):
        b = self.bucket
        size, folder = self.object_size, f"{self.prefix}t{n:03d}/"
        names = [[] for _ in range(n)]
        retried, parts = b.retried, self.parts

        def put(i, k):
            name = f"{folder}{i:03d}-{k:05d}"
            source = self.sources[i % len(self.sources)]
            names[i].append(name)
            if size >= self.part_size:
                b.put_fileobj(name, io.BytesIO(source))
            else:
                b.put_bytes(name, source)
            return size

        def get(i, k):
            mine = names[i]
            got = b.read_through(mine[k % len(mine)], self._sink)
            if got != size:
                raise cloud.BucketError(f"reading {mine[k % len(mine)]} in bucket {b.name}: "
                                        f"{got} bytes came back of {size}")
            return got

        rngs = [random.Random(os.urandom(8)) for _ in range(n)]

        def ranged(i, k):
            rng = rngs[i]
            mine = names[rng.randrange(n)]
            at = rng.randrange(size - self.ranged_size + 1)
            b.get_bytes(mine[rng.randrange(len(mine))], at, self.ranged_size)
            return self.ranged_size

        w = self._phase("put", n, put, [self.objects_per_thread] * n)
        parts = self.parts - parts
        r = self._phase("get", n, get, [len(m) for m in names])
        rr = self._phase("ranged", n, ranged, [self.ranged_per_thread] * n)
        step = {"threads": n, "object_size": size, "objects": w["ops"],
                "part_size": self.part_size, "multipart": size >= self.part_size,
                "parts": parts, "ranged_size": self.ranged_size,
                "write_mb_s": w["mb_s"], "read_mb_s": r["mb_s"],
                "ranged_read_mb_s": rr["mb_s"], "ranged_ops_s": rr["ops_s"],
                "seconds": round(w["seconds"] + r["seconds"] + rr["seconds"], 2),
                "retried": b.retried - retried}
        for kind, phase in (("put", w), ("get", r), ("ranged", rr)):
            for q in (50, 95):
                step[f"{kind}_p{q}_ms"] = percentile_ms(phase["latencies"], q)
        self.emit("step", step)
        b.delete(name for mine in names for name in mine)
        return step

    def _sink(self, data):
        if self._stop.is_set():
            raise _Stop()

    def _phase(self, kind, n, op, counts):
        """op run by n threads at once; what they moved and how fast."""
        self._stop = stop = threading.Event()
        workers = [_Worker(i, op, counts[i], self.seconds, stop) for i in range(n)]
        for w in workers:
            w.start()
        try:
            while any(w.is_alive() for w in workers):
                if self.is_cancelled():
                    raise Canceled()
                failed = next((w for w in workers if w.error is not None), None)
                if failed is not None:
                    raise failed.error
                time.sleep(POLL_S)
        finally:
            stop.set()
            for w in workers:
                w.join()
        if self.is_cancelled():
            raise Canceled()
        failed = next((w for w in workers if w.error is not None), None)
        if failed is not None:
            raise failed.error
        moved = sum(w.bytes for w in workers)
        ops = sum(len(w.latencies) for w in workers)
        seconds = max(w.t1 for w in workers) - min(w.t0 for w in workers)
        self.moved += moved
        self.emit("progress", {"bytes": self.moved, "files": 0, "threads": n, "phase": kind})
        return {"ops": ops, "seconds": seconds, "mb_s": round(moved / seconds / MiB, 2),
                "ops_s": round(ops / seconds, 1),
                "latencies": [x for w in workers for x in w.latencies]}
