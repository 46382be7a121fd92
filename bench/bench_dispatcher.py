"""One tick of the dispatcher with a night's queue: 1,000 clients, 5,000 queued backup jobs,
20 storage units.

The catalog is a real one (a sqlite file made by app.master.Master in a temporary CAIRN
home): 1,000 client hosts registered by address (never connected to: no job runs), five
advanced-disk storage servers on this machine's local host, each with two disk pools of two
storage units (3 concurrent jobs each; half the pools limited to 5 I/O streams), four storage
unit groups (least-loaded over 8 units of four servers, round-robin over 4 units of two,
prioritized over 3, failover over 3) and two units written to directly, and 100,000 ended
jobs of past nights (--history). Eight policies over them queue 5,000 jobs through
Master.start_backup, policy after policy as the scheduler does (one policy's differential
looks for its chain, one has three data streams: a parent and three children per client);
every twentieth client has its own limit of one job, the others the master's of two.
--by-client queues them client after client instead (Master.queue_backup), so that each
client's jobs are queued together.

The tick is the dispatcher's own (Dispatcher.tick: what may start, wait reasons, placement,
claiming the jobs); only the hand-over of a claimed job to its thread (Dispatcher._start) is
replaced by a list, so nothing runs and the catalog only changes through the dispatcher.
Placement asks each unit's storage server whether a volume has room (check_volumes through
the local host's agent, remembered for AVAILABLE_TTL seconds): those answers are real, and
are asked before a timed tick whenever they would expire during it, as the ticks of a running
dispatcher every few seconds keep them; a tick that must ask all 20 units again is timed
apart ("cold").

    .venv/bin/python bench/bench_dispatcher.py [--rounds 5] [--steps 8] [--by-client]
        [--history 100000] [--no-night] [--profile first|steady]

Each round puts every queued job back in the queue (not timed), times the first tick of the
night (nothing running, 5,000 queued: it starts as many as the limits allow and writes every
other job's wait reason), then `--steps` times ends a tenth of the running jobs at random
(not timed) and times the tick that follows ("steady": it starts as many as ended). Medians
over all rounds. It then runs a night to its end (ticks, and between them each running job
ends with a chance of one in three) and reports how many jobs each storage server got, how
many clients had all their jobs of a group on one server, and how often a client had two
jobs (not streams of one job) running at once on one server of a group. Exits 1 if a median
misses the target of 50 ms."""

import argparse
import cProfile
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from app import status as st  # noqa: E402
from app import timeutil  # noqa: E402
from app.jobs.dispatcher import Dispatcher  # noqa: E402
from app.master import Master  # noqa: E402

TICK_MS = 50.0
CLIENTS = 1000
SERVERS = 5
# (policy, group or unit, clients, schedule type, priority, streams)
POLICIES = [
    ("ll-fs", "ll", 1000, "full", 0, 1),
    ("ll-db", "ll", 1000, "full", 0, 1),
    ("rr-fs", "rr", 1000, "differential", 0, 1),
    ("rr-home", "rr", 500, "full", 0, 1),
    ("pri", "pri", 500, "full", 5, 1),
    ("fo", "fo", 400, "full", 0, 1),
    ("plain", "u19", 200, "full", 0, 1),
    ("streams", "ll", 100, "full", 0, 3),
]
GROUPS = {  # group: (selection, units)
    "ll": ("least-loaded", ["u01", "u03", "u05", "u07", "u09", "u11", "u13", "u15"]),
    "rr": ("round-robin", ["u02", "u04", "u06", "u08"]),
    "pri": ("prioritized", ["u10", "u12", "u14"]),
    "fo": ("failover", ["u16", "u17", "u18"]),
}


def build(home, vols, by_client=False, history=0):
    """The catalog; returns (master, seconds to queue the jobs, job count). by_client: the
    jobs are queued client after client (each client's policies together), as when they
    were started by client, rather than policy after policy. history: ended jobs of the
    nights before, written first (add_history)."""
    m = Master(home)
    m.config.add_host("me", local=True)
    n = 0
    for s in range(1, SERVERS + 1):
        m.config.add_storage_server(f"s{s}", type="advanced-disk", host="me")
        for k in "ab":
            vol = os.path.join(vols, f"s{s}{k}")
            os.mkdir(vol)
            m.create_disk_pool(f"p{s}{k}", server=f"s{s}", volumes=[vol],
                               max_io_streams=5 if k == "b" else None)
            for _ in range(2):
                n += 1
                m.create_storage_unit(f"u{n:02d}", pool=f"p{s}{k}", max_concurrent_jobs=3)
    for name, (sel, units) in GROUPS.items():
        m.create_storage_unit_group(name, units, sel)
    for i in range(CLIENTS):
        m.config.add_host(f"c{i:04d}", address=f"10.{i // 250}.{i % 250}.1")
    with m.db.tx() as c:
        c.execute("UPDATE hosts SET max_jobs=1 WHERE name LIKE 'c%' AND id % 20 = 0")
    m.set_setting("max_jobs_per_client", 2)
    for name, target, count, kind, prio, streams in POLICIES:
        where = {"storage_unit_group": target} if target in GROUPS else {"storage_unit": target}
        sels = ["/srv/a"] if streams == 1 else \
            [x for i in range(streams) for x in ("NEW_STREAM", f"/srv/{i}")]
        m.create_policy(name, **where, priority=prio, multiple_streams=streams > 1,
                        selections=sels, schedules=[{"name": "night", "type": kind}])
        with m.db.tx() as c:
            pid = c.execute("SELECT id FROM policies WHERE name=?", (name,)).fetchone()[0]
            # Adding 1,000 clients one by one reads the policy back each time (quadratic, and
            # not what is measured): the same rows, in one transaction.
            c.executemany("INSERT INTO policy_clients(policy_id, host_id) SELECT ?, id FROM "
                          "hosts WHERE name=?", [(pid, f"c{i:04d}") for i in range(count)])
    add_history(m, history)
    t = time.perf_counter()
    if by_client:
        pols = [(m.config.policy(p[0]), p[2]) for p in POLICIES]
        ids = [m.queue_backup(pol, f"c{i:04d}", pol["schedules"][0])
               for i in range(CLIENTS) for pol, count in pols if i < count]
    else:
        ids = [j for p in POLICIES for j in m.start_backup(p[0], schedule="night")]
    queued = time.perf_counter() - t
    total = m.db.one("SELECT count(*) FROM jobs WHERE state='queued'")[0]
    assert len(ids) == sum(p[2] for p in POLICIES) and total == 5000, total
    return m, queued, total


def add_history(m, n):
    """n ended backup jobs of the nights before (5,000 a night, the last ended an hour ago),
    written as rows: a catalog keeps the jobs of past nights, and a tick must not read them
    all."""
    if not n:
        return
    units = [r[0] for r in m.db.all("SELECT name FROM storage_units ORDER BY name")]
    end = time.time() - 3600
    rows = []
    for i in range(n):
        night, k = divmod(i, 5000)
        t = end - night * 86400 - k * 5
        rows.append(("backup", "done", st.OK, f"c{i % CLIENTS:04d}", POLICIES[i % 8][0],
                     "night", units[i % len(units)], timeutil.iso(t - 900),
                     timeutil.iso(t - 600), timeutil.iso(t), t, 1 << 30, 1000, i + 1))
    with m.db.tx() as c:
        c.executemany("INSERT INTO jobs(type, state, status, client, policy, schedule, "
                      "storage_unit, created, started, ended, ended_t, bytes, files, changed) "
                      "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)


class TimedDispatcher(Dispatcher):
    """The dispatcher with the hand-over to a job's thread replaced: claimed jobs are listed,
    not run."""

    def __init__(self, master):
        super().__init__(master)
        self.started = []

    def _start(self, job):
        self.started.append(job["id"])


class Bench:
    def __init__(self, m):
        self.m = m
        self.d = TimedDispatcher(m)
        assert self.d.acquire_lease()
        self.units = [r[0] for r in m.db.all("SELECT name FROM storage_units ORDER BY name")]
        self.queued = [tuple(r) for r in m.db.all(
            "SELECT storage_unit, params, id FROM jobs WHERE state='queued' ORDER BY id")]

    def reset(self):
        """Every job back in the queue as it was queued."""
        with self.m.db.tx() as c:
            c.executemany("UPDATE jobs SET state='queued', status=NULL, started=NULL, "
                          "started_t=NULL, ended=NULL, ended_t=NULL, runner=NULL, "
                          "heartbeat=NULL, wait_reason=NULL, bytes=0, rate_bytes_per_s=NULL, "
                          "storage_unit=?, params=? WHERE id=?", self.queued)
            c.execute("UPDATE storage_unit_groups SET rr_next=0")
        self.d.started = []

    def keep_available(self, margin=1.0):
        """Asks again (really) the units whose remembered availability would expire within
        `margin` seconds, as a dispatcher ticking every few seconds does in some tick."""
        p = self.d.placement
        soon = time.monotonic() + margin
        for u in self.units:
            hit = p._available.get(u)
            if hit is None or hit[0] < soon:
                p._available.pop(u, None)
                p.unavailable(u)

    def end_some(self, rng, share):
        """Ends a share of the running jobs, as their threads would, with a size each."""
        running = [r[0] for r in self.m.db.all("SELECT id FROM jobs WHERE state='active' AND "
                                               "storage_unit IS NOT NULL")]
        for jid in rng.sample(running, max(1, int(len(running) * share))) if running else ():
            self.m.jobs.finish(jid, st.OK, bytes=rng.randrange(1 << 30, 1 << 34))
        # A multi-stream parent ends with its children.
        for r in self.m.db.all("SELECT p.id FROM jobs p WHERE p.state='active' AND "
                               "p.storage_unit IS NULL AND NOT EXISTS (SELECT 1 FROM jobs c "
                               "WHERE c.parent_id=p.id AND c.state!='done')"):
            self.m.jobs.finish(r[0], st.OK)

    def tick(self, profile=None):
        # What the untimed writes before left in the write-ahead log is copied back now, not
        # by the tick's commit; a checkpoint its own writes bring about is its own.
        self.m.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        before = len(self.d.started)
        t = time.perf_counter()
        if profile:
            profile.enable()
        self.d.tick()
        if profile:
            profile.disable()
        return (time.perf_counter() - t) * 1000, len(self.d.started) - before


def timed_rounds(b, rounds, steps, profile=None, profiled=None):
    rng = random.Random(27)
    first, steady, cold = [], [], []
    for _ in range(rounds):
        b.reset()
        b.keep_available()
        ms, n = b.tick(profile if profiled == "first" else None)
        first.append((ms, n))
        for _ in range(steps):
            b.end_some(rng, 0.1)
            b.keep_available()
            steady.append(b.tick(profile if profiled == "steady" else None))
        b.end_some(rng, 0.1)
        b.d.placement.forget()
        cold.append(b.tick())
    return first, steady, cold


def night(b, share=1 / 3):
    """Ticks until the queue is empty, ending running jobs at random between ticks. Returns
    the number of ticks and, per tick, the clients that had two jobs running on one storage
    server of a group."""
    rng = random.Random(1)
    b.reset()
    ticks, doubled = 0, 0
    server_of = b.d.placement.servers()
    group_units = {u for _, units in GROUPS.values() for u in units}
    while b.m.db.one("SELECT 1 FROM jobs WHERE state='queued'"):
        b.keep_available()
        b.tick()
        ticks += 1
        # The streams of one multi-stream job stay together by design: they count once.
        together = defaultdict(set)
        for r in b.m.db.all("SELECT client, storage_unit, coalesce(parent_id, id) FROM jobs "
                            "WHERE state='active' AND type='backup' AND storage_unit IS NOT "
                            "NULL"):
            if r[1] in group_units:
                together[(r[0], server_of[r[1]])].add(r[2])
        doubled += sum(1 for jobs in together.values() if len(jobs) > 1)
        b.end_some(rng, share)
        if ticks > 20000:
            raise RuntimeError("the queue does not drain")
    return ticks, doubled


def spread(m, server_of, first_id):
    """Per group: jobs per storage server, and per client how its jobs in the group were
    spread (the jobs of this night: ids from first_id)."""
    rows = m.db.all("SELECT client, policy, storage_unit, parent_id FROM jobs WHERE "
                    "type='backup' AND storage_unit IS NOT NULL AND id>=?", (first_id,))
    group_of = {p[0]: p[1] for p in POLICIES}
    out = {}
    for g in GROUPS:
        per_server = Counter()
        per_client = defaultdict(Counter)
        for r in rows:
            if group_of.get(r["policy"]) != g:
                continue
            per_server[server_of[r["storage_unit"]]] += 1
            if r["parent_id"] is None:  # the streams of one job stay together by design
                per_client[r["client"]][server_of[r["storage_unit"]]] += 1
        several = [c for c in per_client.values() if sum(c.values()) > 1]
        out[g] = {"per_server": dict(sorted(per_server.items())),
                  "clients_with_several": len(several),
                  "all_on_one_server": sum(1 for c in several if len(c) == 1)}
    return out


def median_ms(pairs):
    return statistics.median(ms for ms, _ in pairs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--profile", choices=["first", "steady"],
                    help="cProfile the first or the steady ticks and print where time goes")
    ap.add_argument("--no-night", action="store_true", help="skip the night's spread")
    ap.add_argument("--history", type=int, default=100000,
                    help="ended jobs of past nights in the catalog (default 100,000: 20 nights)")
    ap.add_argument("--by-client", action="store_true",
                    help="queue client after client (Master.queue_backup), each client's jobs "
                         "together, instead of policy after policy")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="cairn-bench-dispatch-")
    try:
        vols = os.path.join(work, "vols")
        os.mkdir(vols)
        t = time.perf_counter()
        m, queued_s, total = build(os.path.join(work, "home"), vols, args.by_client,
                                   args.history)
        print(f"catalog built in {time.perf_counter() - t:.1f} s")
        how = "Master.queue_backup, client after client" if args.by_client else \
            "Master.start_backup, policy after policy"
        print(f"queueing {total} jobs ({how}): {queued_s * 1000:.0f} ms "
              f"({queued_s / total * 1e6:.0f} us per job)")
        b = Bench(m)
        prof = cProfile.Profile() if args.profile else None
        first, steady, cold = timed_rounds(b, args.rounds, args.steps, prof, args.profile)
        print(f"first tick (5,000 queued, nothing running): median {median_ms(first):.1f} ms "
              f"(min {min(ms for ms, _ in first):.1f}, max {max(ms for ms, _ in first):.1f}), "
              f"{first[0][1]} jobs started")
        if steady:
            print(f"steady tick (a tenth of the running jobs ended): median "
                  f"{median_ms(steady):.1f} ms (min {min(ms for ms, _ in steady):.1f}, max "
                  f"{max(ms for ms, _ in steady):.1f}), "
                  f"{statistics.median(n for _, n in steady):.0f} started per tick")
        print(f"cold tick (availability of all 20 units asked again): median "
              f"{median_ms(cold):.1f} ms")
        missed = [name for name, v in (("first", first), ("steady", steady))
                  if v and median_ms(v) >= TICK_MS]
        if prof:
            print(f"(times above include cProfile's own cost, {args.profile} ticks)")
            pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
        if not args.no_night:
            t = time.perf_counter()
            ticks, doubled = night(b)
            print(f"a night to its end: {ticks} ticks, {time.perf_counter() - t:.1f} s")
            for g, s in spread(m, b.d.placement.servers(), b.queued[0][2]).items():
                print(f"  group {g} ({GROUPS[g][0]}): jobs per storage server {s['per_server']}; "
                      f"clients with several jobs {s['clients_with_several']}, all on one "
                      f"server {s['all_on_one_server']}")
            print(f"  client with two jobs running on one server of a group, summed over "
                  f"ticks: {doubled}")
        m.close()
        for name in missed:
            print(f"MISSED: {name} tick median >= {TICK_MS:.0f} ms")
        return 1 if missed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
