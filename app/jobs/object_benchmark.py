"""The object storage benchmark of a storage server whose pool lives in a bucket (`cairn
storage-server benchmark NAME` on a cloud server): the benchmark job of app/jobs/benchmark.py
with the storage host's agent uploading objects (in parts from a part up), reading them back
whole and reading ranges of them, at each thread count from min to max by step
(plugins/storage/cloud/objbench.py). Its objects live under a prefix of the run's own and
are removed whatever ends the run, a cancel included.

The bucket's spec holds its credentials: the job reads it from the storage type when it runs
and hands it to the agent in the request alone, never in the job's params, log or result, nor
in the catalog's record of the run; those name the bucket as bucket@endpoint/prefix.

The disk benchmark's rules hold: refused while backups, restores or the pool's own jobs use
the server's pool unless forced, the pool's jobs held while it runs, a "step" event per
thread count into the job's result and log, the run kept in benchmark_runs (workload
"object", io_size the object size, max_write_mb_s and max_read_mb_s). max_combined_mb_s
stays NULL there: the writes and the reads run one after the other, so their sum is no
throughput the bucket gave, and the disk sizing levels do not apply to it."""

from urllib.parse import urlsplit

from app.errors import ValidationError
from app.jobs import benchmark
from app.jobs.benchmark import JOB_TYPE
from app.jobs.result import JobResult
from plugins.storage import registry
from plugins.storage.cloud import objbench

WORKLOAD = "object"
SETTINGS = ("min_threads", "max_threads", "step", "object_size")
# The agent's own settings a caller may give (tests and benchmarks make runs short).
TUNING = ("objects_per_thread", "seconds", "ranged_size", "ranged_per_thread", "part_size")
MiB = 1 << 20


def has_bucket(srv):
    return registry.can(srv["type"], "bucket")


def bucket_label(spec):
    """The bucket as bucket@endpoint/prefix; a user and password in the endpoint are left
    out."""
    url = urlsplit(spec["endpoint"])
    where = f"{url.scheme}://{url.netloc.rpartition('@')[2]}{url.path.rstrip('/')}"
    prefix = (spec.get("prefix") or "").strip("/")
    return f"{spec['bucket']}@{where}" + (f"/{prefix}" if prefix else "")


def _server(master, server):
    srv = master.config.storage_server(server)
    if not has_bucket(srv):
        raise ValidationError(f"storage server {server} keeps its pool on disks, not in a "
                              "bucket: the object benchmark is for cloud storage servers",
                              hint="measure its disks with --workload stgpool or db")
    return srv


def _spec(master, srv):
    """The bucket's spec, credentials included: for the agent's request only."""
    return registry.of_server(srv).access_without_key(srv, master.home)["bucket"]


def _pools(master, server):
    return [p["name"] for p in master.config.disk_pools() if p["server"] == server]


def _mib(n):
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n / 1024:g} KiB"


def make_job(master, server, force=False, min_threads=None, max_threads=None, step=None,
             object_size=None, **tuning):
    """Queues an object storage benchmark of a cloud server's bucket. A setting left out
    (None) takes the benchmark's default. tuning: objects_per_thread, seconds, ranged_size,
    ranged_per_thread, part_size."""
    unknown = set(tuning) - set(TUNING)
    if unknown:
        raise ValidationError(f"unknown object benchmark setting {sorted(unknown)[0]!r}")
    srv = _server(master, server)
    label = bucket_label(_spec(master, srv))
    given = dict(min_threads=min_threads, max_threads=max_threads, step=step,
                 object_size=object_size, **tuning)
    settings = objbench.check_settings(**{k: v for k, v in given.items() if v is not None})
    pools = _pools(master, server)
    if not force:
        benchmark.refuse_if_used(master, pools)
    benchmark.check_not_running(master, server)
    counts = objbench.thread_counts(settings["min_threads"], settings["max_threads"],
                                    settings["step"])
    params = {"server": server, "workload": WORKLOAD, "volumes": [label], "pools": pools,
              "force": bool(force), "thread_counts": counts,
              **{k: v for k, v in settings.items() if v is not None}}
    return master.jobs.create(JOB_TYPE, params=params,
                              note=f"object benchmark of storage server {server} queued: "
                                   f"{', '.join(map(str, counts))} thread(s), objects of "
                                   f"{_mib(settings['object_size'])} in bucket {label}")


class ObjectBenchmarkJob(benchmark.BenchmarkJob):
    """A benchmark job of workload "object" (app/jobs/kinds.py): the bucket's spec is read
    when it runs; the agent's object_benchmark request does the steps."""

    FORCED = ("forced: backups or restores use the pool; the figures are lower than the "
              "bucket gives")

    def prepare(self):
        p = self.job["params"]
        self.server = _server(self.master, p["server"])
        self.host = self.master.config.host(self.server["host"])
        self.pools = _pools(self.master, p["server"])
        self.volumes = list(p["volumes"])

    def _request(self):
        p = self.job["params"]
        spec = _spec(self.master, self.server)
        self.volumes = [bucket_label(spec)]
        self.ctx.log(f"object benchmark of bucket {self.volumes[0]} from host "
                     f"{self.host['name']}: {', '.join(map(str, p['thread_counts']))} "
                     f"thread(s), objects of {_mib(p['object_size'])} (in parts of "
                     f"{_mib(p['part_size'])} from that size up), ranged reads of "
                     f"{_mib(p['ranged_size'])}")
        return "object_benchmark", {"bucket": spec, **{k: p[k] for k in SETTINGS + TUNING
                                                        if p.get(k) is not None}}

    def step_text(self, s):
        return step_line(s)

    def _partial(self):
        p = self.job["params"]
        return {"server": p["server"], "workload": WORKLOAD, "volumes": self.volumes,
                "thread_counts": p["thread_counts"], "object_size": p["object_size"],
                "steps": list(self.steps)}

    def _done(self, out):
        ctx = self.ctx
        if out.get("removed_runs"):
            ctx.log(f"removed {out.get('removed', 0)} object(s) and "
                    f"{out.get('aborted_uploads', 0)} unfinished upload(s) left by earlier "
                    f"runs whose agent was stopped: {', '.join(out['removed_runs'])}")
        steps = out.get("steps") or self.steps
        ctx.log(best_line(steps))
        result = dict(self._partial(), steps=steps, **{k: out.get(k) for k in (
            "stopped", "part_size", "ranged_size", "max_write_mb_s", "max_read_mb_s")})
        self.master.jobs.set_result(self.job["id"], result)
        ctx.flush(sample=True)
        return JobResult(bytes=ctx.bytes, files=0)

    def _figures(self, out, steps):
        return {"io_size": self.job["params"]["object_size"], "cache_bypass": None,
                "max_combined_mb_s": None,
                "max_write_mb_s": max((s["write_mb_s"] for s in steps), default=None),
                "max_read_mb_s": max((s["read_mb_s"] for s in steps), default=None)}


def _pair(s, kind):
    vals = [s.get(f"{kind}_p{q}_ms") for q in (50, 95)]
    return "/".join("-" if v is None else f"{v:g}" for v in vals)


def step_line(s):
    """One thread count in a line, for the job's log."""
    return (f"{s['threads']} thread(s), objects of {_mib(s['object_size'])}: write "
            f"{s['write_mb_s']} MiB/s, read {s['read_mb_s']} MiB/s, ranged reads "
            f"{s['ranged_read_mb_s']} MiB/s ({s['ranged_ops_s']} a second); latency p50/p95 "
            f"PUT {_pair(s, 'put')} ms, GET {_pair(s, 'get')} ms, ranged GET "
            f"{_pair(s, 'ranged')} ms"
            + (f"; {s['retried']} request(s) tried again" if s.get("retried") else ""))


def best_line(steps):
    """The best write and read throughput of a run, with their thread counts."""
    if not steps:
        return "no thread count was measured"
    w = max(steps, key=lambda s: s["write_mb_s"])
    r = max(steps, key=lambda s: s["read_mb_s"])
    return (f"best write {w['write_mb_s']} MiB/s ({w['threads']} thread(s)), best read "
            f"{r['read_mb_s']} MiB/s ({r['threads']} thread(s))")
