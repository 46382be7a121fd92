"""The disk benchmark of a storage server (`cairn storage-server benchmark NAME`): a job like
verify, which has the storage host's agent run thread pairs on the volumes
(app/agent/diskbench.py) and keeps each run in the catalog (benchmark_runs), so that runs can
be compared over time. Progress is the bytes moved and each step as it ends (the job's
result grows step by step); a cancel stops the threads, and the agent removes its files.

It never runs on a pool that backups, restores or a pool's own jobs use at that moment
(checked when it is queued and again when it starts) unless forced: its load would slow them
down, and theirs would make its figures wrong. While it runs, the dispatcher holds the
backups, restores and duplications of the pools it measures (held_pools).

The object storage benchmark of a cloud server's bucket is a benchmark job too, kept in the
same table: app/jobs/object_benchmark.py."""

import json
import os
import time

from app import status as st
from app import storage_sizing, timeutil
from app.errors import CairnError, ValidationError
from app.jobs.context import JobContext, results
from app.jobs.result import JobResult

JOB_TYPE = "benchmark"
WORKLOADS = ("stgpool", "db")
MAX_PAIRS = 100
DEFAULT_PAIRS = 8
DEFAULT_STEP_S = 10.0
DEFAULT_FILE_SIZE = 1 << 30
# The agent's own settings a caller may give (tests and benchmarks make runs short).
TUNING = ("step_seconds", "max_step_seconds", "interval", "file_size")


def _inside(a, b):
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def target(master, server, volumes=None):
    """(storage server, host, volumes, pools whose volumes the benchmark touches). Without
    volumes: every volume of the server's disk pools, else its storage path."""
    srv = master.config.storage_server(server)
    pools = [p for p in master.config.disk_pools() if p["server"] == server]
    if volumes:
        vols = [os.path.normpath(v) for v in volumes]
        bad = [v for v in vols if not v.startswith("/")]
        if bad:
            raise ValidationError(f"volume {bad[0]!r} is not an absolute path",
                                  hint="give each --volume as a full path on the storage "
                                       f"server's host {srv['host']}")
    else:
        vols = list(dict.fromkeys(v for p in pools for v in p["volumes"]))
        if not vols and srv.get("path"):
            vols = [srv["path"]]
        if not vols:
            raise ValidationError(f"storage server {server} has no disk pool volume to test",
                                  hint="name the directories with --volume PATH")
    touched = [p["name"] for p in pools if any(_inside(v, pv) for v in vols
                                               for pv in p["volumes"])]
    return srv, master.config.host(srv["host"]), vols, touched


def users(master, pools):
    """The running jobs that use any of the pools: [(job id, type, pool)]."""
    if not pools:
        return []
    of_stu = {u["name"]: u["pool"] for u in master.config.storage_units()}
    found = []
    for r in master.db.all("SELECT id, type, storage_unit, params FROM jobs "
                           "WHERE state='active' AND type!=?", (JOB_TYPE,)):
        pool = of_stu.get(r["storage_unit"]) or json.loads(r["params"] or "{}").get("pool")
        if pool in pools:
            found.append((r["id"], r["type"], pool))
    return found


def refuse_if_used(master, pools):
    used = users(master, pools)
    if used:
        what = ", ".join(f"{t} job {j} on pool {p}" for j, t, p in used[:5])
        raise CairnError(f"the pool is in use: {what}; a benchmark now would slow them down "
                         "and measure less than the disks give",
                         status_code=st.POOL_BUSY,
                         hint="run it when they have ended, or give --force to run it anyway")


def check_not_running(master, server):
    """One benchmark of a server at a time: two would measure each other."""
    for r in master.db.all("SELECT id, params FROM jobs WHERE type=? AND state!='done'",
                           (JOB_TYPE,)):
        if json.loads(r["params"] or "{}").get("server") == server:
            raise ValidationError(f"a benchmark of storage server {server} is queued or "
                                  f"running already (job {r['id']})",
                                  hint=f"follow it with `cairn jobs show {r['id']}`")


def make_job(master, server, volumes=None, workload="stgpool", max_pairs=DEFAULT_PAIRS,
             force=False, **tuning):
    """Queues a benchmark of a storage server's volumes. tuning: the agent's step_seconds,
    max_step_seconds, interval (seconds) and file_size (bytes)."""
    if workload not in WORKLOADS:
        raise ValidationError(f"unknown workload {workload!r}",
                              hint="stgpool (256 KiB sequential I/O, a pool's containers) or "
                                   "db (8 KiB random I/O, a catalog's pages)")
    if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or \
            not 1 <= max_pairs <= MAX_PAIRS:
        raise ValidationError(f"the most pairs must be 1 to {MAX_PAIRS}, not {max_pairs!r}")
    unknown = set(tuning) - set(TUNING)
    if unknown:
        raise ValidationError(f"unknown benchmark setting {sorted(unknown)[0]!r}")
    tuning = {k: v for k, v in tuning.items() if v is not None}
    srv, _host, vols, touched = target(master, server, volumes)
    if not force:
        refuse_if_used(master, touched)
    check_not_running(master, server)
    params = {"server": server, "volumes": vols, "pools": touched, "workload": workload,
              "max_pairs": max_pairs, "force": bool(force), **tuning}
    return master.jobs.create(JOB_TYPE, params=params,
                              note=f"{workload} benchmark of storage server {server} queued: "
                                   f"up to {max_pairs} pair(s) on {', '.join(vols)}")


def held_pools(db):
    """{pool: (benchmark job id, workload)} of the pools that running benchmarks measure (not
    the forced ones): the dispatcher holds the backups, restores and duplications of those
    pools until the benchmark ends, which it does within minutes."""
    held = {}
    for r in db.all("SELECT id, params FROM jobs WHERE state='active' AND type=?",
                    (JOB_TYPE,)):
        p = json.loads(r["params"] or "{}")
        if not p.get("force"):
            for pool in p.get("pools") or []:
                held[pool] = (r["id"], p.get("workload"))
    return held


class BenchmarkJob:
    """A benchmark job (app/jobs/kinds.py): prepare() finds the server, its host and the
    pools the volumes belong to; run() checks they are still free, has the agent run the
    steps and records the run."""

    #: the log's warning on a forced run while the pool is in use
    FORCED = ("forced: backups or restores use the pool; the figures are lower than the disks "
              "give")

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"], work="benchmarking")
        self.server = self.host = self.volumes = self.pools = None
        self.steps = []

    def prepare(self):
        p = self.job["params"]
        self.server, self.host, self.volumes, self.pools = target(
            self.master, p["server"], p["volumes"])

    def run(self):
        ctx = self.ctx
        if not self.job["params"].get("force"):
            refuse_if_used(self.master, self.pools)
        elif users(self.master, self.pools):
            ctx.log(self.FORCED, "warning")
        op, args = self._request()
        ctx.flush()
        started = timeutil.iso(time.time())
        out, code = None, st.OK
        try:
            conn = self.master.hosts.connect(self.host)
            call = conn.start(op, args, on_event=self._on_event)
            ctx.supervise([call])
            out = results([call])[0]
            return self._done(out)
        except CairnError as e:
            code = e.status
            raise
        except BaseException:
            code = st.INTERNAL
            raise
        finally:
            self._record(started, out, code)

    def _request(self):
        """The agent's request and its arguments; says in the log what the run does."""
        p = self.job["params"]
        self.ctx.log(f"{p['workload']} benchmark of {', '.join(self.volumes)} on host "
                     f"{self.host['name']}: up to {p['max_pairs']} writer/reader pair(s)")
        return "disk_benchmark", {"volumes": self.volumes, "workload": p["workload"],
                                  "max_pairs": p["max_pairs"],
                                  **{k: p[k] for k in TUNING if k in p}}

    def _on_event(self, event, data):
        if event == "step":
            self.steps.append(data)
            self.ctx.log(self.step_text(data))
            self.master.jobs.set_result(self.job["id"], self._partial())
        else:
            self.ctx.on_event(event, data)

    def step_text(self, s):
        return step_line(s)

    def _partial(self):
        p = self.job["params"]
        return {"server": p["server"], "workload": p["workload"], "volumes": self.volumes,
                "max_pairs": p["max_pairs"], "steps": list(self.steps)}

    def _done(self, out):
        ctx = self.ctx
        for note in out.get("notes") or []:
            ctx.log(note, "warning")
        for path in out.get("removed_stale") or []:
            ctx.log(f"removed {path}, left by a benchmark whose agent was stopped")
        best = out.get("max_combined_mb_s")
        ctx.log(("the throughput stabilized" if out.get("stopped") == "stable" else
                 f"reached the most pairs ({self.job['params']['max_pairs']})")
                + f"; best {best} MiB/s combined: " + storage_sizing.summary(best))
        result = dict(self._partial(), **{k: out.get(k) for k in (
            "io_size", "file_size", "stopped", "max_combined_mb_s", "cache_bypass", "notes")},
            steps=out.get("steps") or self.steps, sizing=storage_sizing.verdict(best))
        self.master.jobs.set_result(self.job["id"], result)
        ctx.flush(sample=True)
        return JobResult(bytes=ctx.bytes, files=0)

    def _figures(self, out, steps):
        """The run's own columns of benchmark_runs."""
        return {"io_size": steps[0]["io_size"] if steps else None,
                "cache_bypass": (out or {}).get("cache_bypass"),
                "max_combined_mb_s": max((s["combined_mb_s"] for s in steps), default=None)}

    def _record(self, started, out, code):
        p = self.job["params"]
        steps = (out or {}).get("steps") or self.steps
        row = {"job_id": self.job["id"], "server": p["server"], "host": self.host["name"],
               "workload": p["workload"], "volumes": json.dumps(self.volumes),
               "started": started, "ended": timeutil.iso(time.time()), "status": code,
               "stopped": (out or {}).get("stopped") or ("canceled" if code == st.CANCELED
                                                         else "failed"),
               "steps": json.dumps(steps), **self._figures(out, steps)}
        with self.master.db.tx() as c:
            c.execute(f"INSERT INTO benchmark_runs({', '.join(row)}) "
                      f"VALUES ({', '.join('?' * len(row))})", list(row.values()))


def step_line(s):
    """One step in a line, for the job's log."""
    return (f"{s['threads']} pair(s): write {s['write_mb_s']} MiB/s, read {s['read_mb_s']} "
            f"MiB/s, combined {s['combined_mb_s']} MiB/s (peak {s['max_combined_mb_s']}); "
            f"{s['write_iops']:.0f} + {s['read_iops']:.0f} IOPS; latency p50/p95/p99 write "
            f"{s['write_p50_ms']}/{s['write_p95_ms']}/{s['write_p99_ms']} ms, read "
            f"{s['read_p50_ms']}/{s['read_p95_ms']}/{s['read_p99_ms']} ms")


def runs(master, server=None, limit=100):
    """The recorded runs, newest first, of one storage server or every one."""
    sql = "SELECT * FROM benchmark_runs"
    args = []
    if server is not None:
        master.config.storage_server(server)  # an unknown name is an error, not no runs
        sql += " WHERE server=?"
        args.append(server)
    sql += " ORDER BY id DESC LIMIT ?"
    args.append(int(limit))
    out = []
    for r in master.db.all(sql, args):
        d = dict(r)
        d["volumes"] = json.loads(d["volumes"] or "[]")
        d["steps"] = json.loads(d["steps"] or "[]")
        # the sizing levels are a disk pool's combined write-and-read throughput
        d["sizing"] = [] if d["workload"] == "object" else \
            storage_sizing.verdict(d["max_combined_mb_s"])
        out.append(d)
    return out
