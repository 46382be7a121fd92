"""The dispatcher: takes queued jobs in priority order and runs each in its own thread, as
long as the storage unit's limit of concurrent jobs, the disk pool's limit of I/O streams and
the client's limit of jobs allow; a job that must wait says why. A scheduled job still waiting
when its start window closes ends as missed (status 196); a failed backup is tried again after
a delay, up to the master's number of tries, each attempt a job of its own.

Where it runs for good (the console, `cairn master run`), the dispatcher also runs the
scheduler, queues expiry of images whose retention has ended and verify of pools whose verify
interval has passed.

Only one dispatcher acts on a catalog at a time: it holds a lease row that it renews, so a
console and a headless master (or a CLI with --wait) never run the same job twice. A job
left `active` by a dispatcher that died (its heartbeat stopped) is ended with a status that
says so."""

import json
import os
import threading
import time
import traceback

from app import status as st
from app import timeutil
from app.access_scope import internal
from app.audit import DISPATCHER
from app.errors import CairnError, Canceled
from app.jobs import benchmark, commit, duplicate_commit, duplicate_queue, expire, \
    kinds
from app.jobs.duplicate_queue import JOB_TYPE as DUPLICATE
from app.jobs.placement import RECENT_SECONDS, Placement
from app.jobs.rules import retry_wanted
from app.jobs.store import ACTIVE, NEXT_CHANGE, QUEUED

LEASE = "dispatcher"
# A headless dispatcher being started (Master.ensure_dispatcher): while it is, no other
# process starts one; the dispatcher that takes the lease ends it.
STARTING = "dispatcher-start"
LEASE_SECONDS = 15.0
STALE_SECONDS = 60.0
# What a tick reads of each queued job.
_QUEUED_COLUMNS = ("id, type, client, policy, storage_unit, params, parent_id, attempt, "
                   "not_before, not_after, suspended, wait_reason")
SCHEDULE_EVERY = 15.0
EXPIRE_EVERY = 60.0
ALERTS_EVERY = 60.0
# A job that ended is looked at by the alert round this soon (the digest interval still
# decides when mail goes out).
ALERTS_AFTER_END = 5.0
RECOVER_RETRY = 60.0


class Dispatcher:
    def __init__(self, master, clock=time.time):
        self.master = master
        self.db = master.db
        self.clock = clock
        self.scheduler = None
        self._next_schedule = 0.0
        self._next_expire = 0.0
        self._next_alerts = 0.0
        self._next_recover = 0.0
        self.id = f"{os.uname().nodename}:{os.getpid()}:{os.urandom(4).hex()}"
        self._threads = {}
        self._stop = threading.Event()
        self._changed = threading.Event()  # a job thread ended: look again at once
        self._lease_until = 0.0
        self.placement = Placement(master)

    # ---- the lease ------------------------------------------------------------------------
    def acquire_lease(self):
        now = time.time()
        with self.db.tx() as c:
            row = c.execute("SELECT holder, expires FROM leases WHERE name=?", (LEASE,)).fetchone()
            if row and row["holder"] != self.id and row["expires"] > now:
                return False
            c.execute("INSERT INTO leases(name, holder, expires) VALUES (?,?,?) "
                      "ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, "
                      "expires=excluded.expires", (LEASE, self.id, now + LEASE_SECONDS))
            c.execute("DELETE FROM leases WHERE name=?", (STARTING,))
        self._lease_until = now + LEASE_SECONDS
        return True

    def release_lease(self):
        with self.db.tx() as c:
            c.execute("DELETE FROM leases WHERE name=? AND holder=?", (LEASE, self.id))
        self._lease_until = 0.0

    @staticmethod
    def claim_start(db, starter, seconds):
        """Whether `starter` may start a headless dispatcher now: none holds the lease and
        no other process started one in the last `seconds` that has not taken it yet. Several
        consoles and commands that find queued jobs at once start one between them."""
        now = time.time()
        busy = ("SELECT 1 FROM leases WHERE name IN (?, ?) AND expires>? LIMIT 1",
                (LEASE, STARTING, now))
        if db.one(*busy):
            return False
        with db.tx() as c:
            if c.execute(*busy).fetchone():
                return False
            c.execute("INSERT INTO leases(name, holder, expires) VALUES (?,?,?) "
                      "ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, "
                      "expires=excluded.expires", (STARTING, starter, now + seconds))
        return True

    @staticmethod
    def lease_holder(db):
        row = db.one("SELECT holder, expires FROM leases WHERE name=?", (LEASE,))
        if row and row["expires"] > time.time():
            return row["holder"]
        return None

    # ---- dispatching ----------------------------------------------------------------------
    def reap_stale(self):
        cutoff = time.time() - STALE_SECONDS
        rows = self.db.all("SELECT id, type FROM jobs WHERE state=? AND (heartbeat IS NULL OR "
                           "heartbeat<?) AND (runner IS NULL OR runner!=?)",
                           (ACTIVE, cutoff, self.id))
        for r in rows:
            self.master.jobs.finish(r["id"], st.INTERNAL,
                                    "the process running this job stopped before it ended")
            # Its holds end with it, unless it stopped mid-commit: recover() resolves that.
            with self.db.tx() as c:
                c.execute("DELETE FROM image_holds WHERE job_id=? AND NOT EXISTS (SELECT 1 "
                          "FROM image_commits WHERE job_id=?)", (r["id"], r["id"]))
        self.recover()
        # A duplication is the master's own work: one whose process stopped is tried again
        # (what it left is resolved above, or before its next attempt starts).
        for r in rows:
            if r["type"] == DUPLICATE:
                try:
                    self._retry(r["id"])
                except Exception:  # noqa: BLE001 - the failed attempt is recorded either way
                    traceback.print_exc()

    def recover(self):
        """What jobs whose process stopped left half done: a commit between the rename of an
        image and its catalog row (app/jobs/commit.py), images an expire job had marked.
        Cheap when there is nothing; a storage server that cannot be asked is asked again
        after RECOVER_RETRY seconds."""
        now = time.time()
        if now < self._next_recover:
            return
        try:
            left = commit.pending(self.db) or duplicate_commit.pending(self.db) or \
                expire.left_marked(self.db)
            if left:
                self._next_recover = now + RECOVER_RETRY
                commit.recover(self.master)
                duplicate_commit.recover(self.master)
                expire.recover(self.master)
                if not commit.pending(self.db) and not duplicate_commit.pending(self.db):
                    self._next_recover = 0.0
        except Exception:  # noqa: BLE001 - the dispatcher must go on; logged for admins
            traceback.print_exc()

    def tick(self):
        """One round: renew the lease, start what may start. Returns the number of jobs
        running in this dispatcher.

        With thousands of jobs queued, a round reads the catalog a few times, not per job:
        the queue, the running jobs by client and storage unit, the units' and pools' limits,
        the pools of the incrementals' chains. What it decided (the wait reasons that changed,
        the jobs to start and where they go) is written in one transaction at the end, and
        only then are the jobs started."""
        if time.time() > self._lease_until - LEASE_SECONDS / 2 and not self.acquire_lease():
            return len(self._alive())
        ended = [j for j, t in self._threads.items() if not t.is_alive()]
        for jid in ended:
            del self._threads[jid]
        if ended:
            self._next_alerts = min(self._next_alerts, self.clock() + ALERTS_AFTER_END)
        queued = self.db.all(f"SELECT {_QUEUED_COLUMNS} FROM jobs WHERE state=? "
                             "ORDER BY priority DESC, id", (QUEUED,))
        pools = self._pools()
        active_per_stu, active_per_pool, per_client, client_stu = self._running(pools)
        limits = self._client_limits() if queued else {}
        # Pools that backups and restores use or wait for: a scheduled verify yields to them.
        in_use = {p for p, n in active_per_pool.items() if n} | {
            pools["of_stu"][j["storage_unit"]] for j in queued
            if j["storage_unit"] in pools["of_stu"]}
        groups = self.placement.group_of() if queued else {}
        load = self._load(active_per_stu, client_stu) if groups else None
        duplicates = chains = None
        memo = {}
        # Written together when the round has looked at every job (_commit).
        reasons, starting = [], []
        siblings = {}  # parent job: storage unit its first stream started on in this round
        now = self.clock()
        try:
            for job in queued:
                if job["not_after"] is not None and now > job["not_after"]:
                    self._missed(job)
                    continue
                reason = self._hold_reason(job, now)
                # The parent of a multi-stream backup (no storage unit) only waits for its
                # children.
                if reason is None and job["type"] == "backup" and job["storage_unit"]:
                    limit = limits.get(job["client"], limits.get(None))
                    if limit is not None and per_client.get(job["client"], 0) >= limit:
                        reason = (f"client {job['client']} is at its limit of {limit} "
                                  f"job{'s' if limit != 1 else ''}")
                if reason is None and job["type"] == DUPLICATE:
                    if duplicates is None:
                        duplicates = duplicate_queue.unfinished(self.db)
                    reason = duplicate_queue.wait_reason(self.db, job, duplicates)
                if reason is None and job["type"] == "verify" and job["params"]:
                    params = json.loads(job["params"])
                    pool = params.get("pool")
                    if params.get("scheduled") and pool in in_use:
                        reason = (f"a scheduled verify waits until no backup or restore uses "
                                  f"or waits for pool {pool}")
                placed = None
                if reason is None and job["type"] == "backup" and job["storage_unit"] and \
                        job["policy"] in groups:
                    if chains is None:
                        chains = self.placement.chain_pools(
                            [j for j in queued if j["type"] == "backup" and j["storage_unit"]
                             and j["policy"] in groups])
                    placed = self.placement.place(
                        job, groups[job["policy"]], load=load, memo=memo, chains=chains,
                        siblings=siblings,
                        busy=lambda u: self._wait_reason({"type": "backup", "storage_unit": u},
                                                         active_per_stu, active_per_pool, pools))
                    reason = placed[1]
                    if reason is None:
                        job = {**dict(job), "storage_unit": placed[0]}
                if reason is None:
                    reason = self._wait_reason(job, active_per_stu, active_per_pool, pools)
                if reason:
                    if reason != job["wait_reason"]:
                        reasons.append((reason, job["id"]))
                    continue
                memo.clear()  # what a group could take has changed
                group = None
                if placed is not None:
                    group = groups[job["policy"]]
                    if group["selection"] == "round-robin":
                        group["rr_next"] = group["unit_names"].index(placed[0]) + 1
                starting.append((job, group, placed))
                stu = job["storage_unit"]
                if job["type"] == "backup" and job["parent_id"] and stu:
                    siblings.setdefault(job["parent_id"], stu)
                if job["type"] == "backup" and stu:
                    per_client[job["client"]] = per_client.get(job["client"], 0) + 1
                    key = (job["client"], stu)
                    client_stu[key] = client_stu.get(key, 0) + 1
                if stu:
                    active_per_stu[stu] = active_per_stu.get(stu, 0) + 1
                    pool = pools["of_stu"].get(stu)
                    if pool:
                        active_per_pool[pool] = active_per_pool.get(pool, 0) + 1
        finally:
            for job in self._commit(reasons, starting):
                self._start(job)
        return len(self._alive())

    def _running(self, pools):
        """What runs: jobs per storage unit and per pool, backups per client and per (client,
        storage unit) (the client's limit, and its jobs spread over storage servers:
        app/jobs/placement.py)."""
        active_per_stu, active_per_pool = {}, {}
        for r in self.db.all("SELECT storage_unit, count(*) AS n FROM jobs WHERE state=? "
                             "GROUP BY storage_unit", (ACTIVE,)):
            active_per_stu[r["storage_unit"]] = r["n"]
            pool = pools["of_stu"].get(r["storage_unit"])
            if pool:
                active_per_pool[pool] = active_per_pool.get(pool, 0) + r["n"]
        per_client, client_stu = {}, {}
        for r in self.db.all("SELECT client, storage_unit, count(*) AS n FROM jobs WHERE state=? "
                             "AND type='backup' AND storage_unit IS NOT NULL "
                             "GROUP BY client, storage_unit", (ACTIVE,)):
            per_client[r["client"]] = per_client.get(r["client"], 0) + r["n"]
            client_stu[(r["client"], r["storage_unit"])] = r["n"]
        return active_per_stu, active_per_pool, per_client, client_stu

    def _commit(self, reasons, starting):
        """A round's decisions in one transaction: the wait reasons that changed, and the jobs
        to start claimed (those canceled meanwhile are left out) with where a group's jobs
        went and the round-robin turn. Returns the jobs claimed, to be started."""
        if not reasons and not starting:
            return []
        claimed, turns = [], {}
        with self.db.tx() as c:
            self.master.jobs.set_wait_reasons(reasons, c)
            for job, group, placed in starting:
                if not self.master.jobs.claim(job["id"], self.id, c):
                    continue
                if placed is not None:
                    self._placed(job, placed, c)
                    if group["selection"] == "round-robin":
                        turns[group["name"]] = group["rr_next"]
                claimed.append(job)
            for name, position in turns.items():
                self.master.storage_unit_groups_config.advance(name, position, c)
        return claimed

    def _start(self, job):
        """Runs a claimed job in a thread of its own. The one place a tick hands a job over
        to be run: bench/bench_dispatcher.py replaces it to time the decisions alone."""
        t = threading.Thread(target=self._run, args=(job["id"],), daemon=True,
                             name=f"job-{job['id']}")
        self._threads[job["id"]] = t
        t.start()

    def _placed(self, job, placed, c):
        """Records where a job of a storage unit group went (app/jobs/placement.py)."""
        stu, _, message, full = placed
        params = json.loads(job["params"] or "{}")
        if full:
            params["schedule_type"] = "full"
        c.execute(f"UPDATE jobs SET storage_unit=?, params=?, changed={NEXT_CHANGE} WHERE id=?",
                  (stu, json.dumps(params), job["id"]))
        self.master.jobs.log(job["id"], message,
                             "warning" if full or message.startswith("no unit") else "info", c)

    def _load(self, active_per_stu, client_stu):
        """load(stu, client): (jobs running on its storage server, bytes its server's backups
        that ended in the last RECENT_SECONDS wrote, backups of that client running on the
        server), for least-loaded and round-robin placement. Reads the counts as they are when
        called: the jobs started earlier in the same tick count."""
        server_of = self.placement.servers()
        recent = self.placement.recent_bytes(timeutil.iso(time.time() - RECENT_SECONDS))
        units_of = {}
        for u, s in server_of.items():
            units_of.setdefault(s, []).append(u)

        def load(stu, client=None):
            units = units_of.get(server_of.get(stu), [])
            return (sum(active_per_stu.get(u, 0) for u in units),
                    sum(recent.get(u, 0) or 0 for u in units),
                    sum(client_stu.get((client, u), 0) for u in units))
        return load

    def _alive(self):
        return [t for t in self._threads.values() if t.is_alive()]

    def running_here(self):
        """{job id: its thread} of the jobs this dispatcher's process is running."""
        return {j: t for j, t in self._threads.items() if t.is_alive()}

    def _hold_reason(self, job, now):
        if job["suspended"]:
            return "suspended by the administrator: resume it to let it start"
        if job["not_before"] is not None and now < job["not_before"]:
            return f"attempt {job['attempt']} starts at {timeutil.iso(job['not_before'])}"
        return None

    def _client_limits(self):
        """{client: limit} for hosts with their own limit, and None: the master's."""
        limits = {None: self.master.setting("max_jobs_per_client")}
        for r in self.db.all("SELECT name, max_jobs FROM hosts WHERE max_jobs IS NOT NULL"):
            limits[r["name"]] = r["max_jobs"]
        return limits

    def _missed(self, job):
        self.master.jobs.finish(
            job["id"], st.WINDOW_CLOSED,
            f"missed: the start window closed at {timeutil.iso(job['not_after'])} before the "
            f"job could start" + (f" (it waited: {job['wait_reason']})"
                                  if job["wait_reason"] else ""))
        with self.db.tx() as c:
            c.execute("UPDATE schedule_runs SET outcome='missed' WHERE job_id=?", (job["id"],))

    def _retry(self, job_id):
        """Queues the next attempt of a failed backup, if tries and its window allow."""
        jobs = self.master.jobs
        job = jobs.get(job_id)
        # Scheduled backups (they have a window) are tried again, as admins expect from a
        # schedule; a backup started by hand is the admin's to restart (app/jobs/rules.py).
        if not retry_wanted(job):
            return None
        tries = self.master.setting("backup_tries")
        if job["attempt"] >= tries:
            if tries > 1:
                jobs.log(job_id, f"attempt {job['attempt']} of {tries} failed: no tries left",
                         "error" if job["type"] == DUPLICATE else "info")
            return None
        delay = timeutil.parse_duration(self.master.setting("retry_delay")) or 0
        start = self.clock() + delay
        if job["not_after"] is not None and start > job["not_after"]:
            jobs.log(job_id, f"attempt {job['attempt']} of {tries} failed; no retry: the start "
                     f"window closes before {timeutil.iso(start)}", "warning")
            return None
        again = dict(
            client=job["client"], policy=job["policy"], schedule=job["schedule"],
            storage_unit=job["storage_unit"], priority=job["priority"], params=job["params"],
            parent_id=job["parent_id"], attempt=job["attempt"] + 1,
            retry_of=job["retry_of"] or job_id, not_before=start, not_after=job["not_after"],
            note=f"attempt {job['attempt'] + 1} of {tries}, after job {job_id} failed with "
                 f"status {job['status']}")
        audit = self.master.access.audit
        with self.db.tx() as c:
            new = (jobs.create(DUPLICATE, **again, c=c) if job["type"] == DUPLICATE
                   else jobs.create("backup", **again, c=c))
            jobs.log(job_id, f"attempt {job['attempt']} of {tries} failed; attempt "
                     f"{job['attempt'] + 1} queued as job {new}, to start at "
                     f"{timeutil.iso(start)}", "warning", c)
            # the master's own work, recorded with the job it queues (app/audit.py)
            entry = audit.system(DISPATCHER, "retry_job", f"job {job_id}", {
                "args": {"job_id": job_id, "attempt": job["attempt"] + 1, "tries": tries,
                         "failed_with": job["status"], "policy": job["policy"],
                         "client": job["client"], "not_before": timeutil.iso(start)},
                "result": {"jobs": [new]}})
        audit.settle([entry])
        return new

    def housekeeping(self):
        """The scheduler, automatic expiry, scheduled verify of pools and the alert round, at
        their own pace, under the lease."""
        now = self.clock()
        if now >= self._next_schedule:
            self._next_schedule = now + SCHEDULE_EVERY
            try:
                if self.scheduler is None:
                    # loaded by a dispatcher that ticks, not by every master that opens
                    from app.scheduler import Scheduler
                    self.scheduler = Scheduler(self.master, clock=self.clock)
                self.scheduler.tick(now)
            except Exception:  # noqa: BLE001 - the dispatcher must go on; logged for admins
                traceback.print_exc()
        if now >= self._next_expire:
            self._next_expire = now + EXPIRE_EVERY
            try:
                self._audit_started("start_expire", self.master.expire_due(now))
                # loaded by a dispatcher that ticks, not by every master that opens
                from app.jobs import cleanup
                cleanup.remove_stale_index_temps(self.master)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
            try:
                self._audit_started("start_verify", self.master.verify_due(now))
            except Exception:  # noqa: BLE001
                traceback.print_exc()
        if now >= self._next_alerts:
            self._next_alerts = now + ALERTS_EVERY
            try:
                # in a thread of its own: asking hosts must not hold up the jobs
                self.master.alerter.start_round()
            except Exception:  # noqa: BLE001
                traceback.print_exc()

    def _audit_started(self, action, job_ids):
        """Audit entries of the jobs the dispatcher queued by itself (expiry of images past
        their retention, scheduled verifies): one each, the dispatcher as the user."""
        audit = self.master.access.audit
        for jid in job_ids or ():
            job = self.master.jobs.get(jid)
            params = job["params"] if isinstance(job["params"], dict) else {}
            args = {k: params[k] for k in ("images", "copies", "pool") if params.get(k)}
            audit.system(DISPATCHER, action, f"job {jid}",
                         {"args": args, "result": {"jobs": [jid]}})

    def _pools(self):
        """Each storage unit's disk pool and limit of concurrent jobs, and each pool's limit
        of I/O streams."""
        of_stu, streams, jobs = {}, {}, {}
        for r in self.db.all("SELECT u.name AS stu, u.max_concurrent_jobs, d.name AS pool, "
                             "d.max_io_streams FROM storage_units u "
                             "JOIN disk_pools d ON d.id=u.pool_id"):
            of_stu[r["stu"]] = r["pool"]
            jobs[r["stu"]] = r["max_concurrent_jobs"]
            streams[r["pool"]] = r["max_io_streams"]
        # Pools a disk benchmark measures: their jobs wait until it ends.
        return {"of_stu": of_stu, "streams": streams, "jobs": jobs,
                "benchmarked": benchmark.held_pools(self.db)}

    def _wait_reason(self, job, active_per_stu, active_per_pool, pools):
        stu = job["storage_unit"]
        if not stu:
            return None
        # Backups and duplications write to the unit: both count against its limit of jobs.
        if job["type"] in ("backup", DUPLICATE):
            limit = pools["jobs"].get(stu)
            if limit is not None and active_per_stu.get(stu, 0) >= limit:
                return (f"storage unit {stu} is at its limit of {limit} "
                        f"concurrent job{'s' if limit != 1 else ''}")
        # Backups write and restores read the pool's volumes: both count as I/O streams.
        pool = pools["of_stu"].get(stu)
        held = pools["benchmarked"].get(pool)
        if held is not None:
            held_id, workload = held
            what = "an object storage" if workload == "object" else "a disk"
            return f"{what} benchmark (job {held_id}) measures pool {pool}; this job starts " \
                   "when it ends"
        limit = pools["streams"].get(pool)
        if limit is not None and active_per_pool.get(pool, 0) >= limit:
            return (f"disk pool {pool} is at its limit of {limit} I/O "
                    f"stream{'s' if limit != 1 else ''}")
        return None

    def _run(self, job_id):
        with internal():     # the master's own work, whoever asked for it (app/access.py)
            self._run_job(job_id)

    def _run_job(self, job_id):
        jobs = self.master.jobs
        job = jobs.get(job_id)
        try:
            if job["cancel_requested"]:
                raise Canceled()
            # Its kind checks the job and finds what it needs, then runs it to its end and
            # says how it ended (app/jobs/kinds.py, result.py); an error either raises ends
            # the job with the error's status.
            kind = kinds.make(self.master, job)
            kind.prepare()
            r = kind.run()
            jobs.finish(job_id, r.status, r.message, image_id=r.image_id, bytes=r.bytes,
                        files=r.files)
        except Canceled:
            jobs.finish(job_id, st.CANCELED, "canceled by the administrator; nothing was "
                        "committed" if job["type"] == "backup" else "canceled by the administrator")
        except CairnError as e:
            if e.hint:
                jobs.log(job_id, f"to fix: {e.hint}", "error")
            jobs.finish(job_id, e.status, e.message)
        except Exception as e:  # noqa: BLE001 - a job must always end with a status
            jobs.log(job_id, traceback.format_exc(), "debug")
            jobs.finish(job_id, st.INTERNAL, f"{type(e).__name__}: {e}")
        finally:
            try:
                self._retry(job_id)
            except Exception:  # noqa: BLE001 - the failed attempt is recorded either way
                jobs.log(job_id, "queueing the next attempt failed: " + traceback.format_exc(),
                         "error")
            self._changed.set()

    # ---- loops ----------------------------------------------------------------------------
    def run_until_done(self, job_ids, poll=0.2):
        """Run jobs until every one of job_ids has ended (used by `--wait` and tests)."""
        if not self.acquire_lease():
            return False
        self.reap_stale()
        try:
            while True:
                self.tick()
                rows = self.db.all(
                    f"SELECT count(*) FROM jobs WHERE state!='done' AND id IN "
                    f"({','.join('?' * len(job_ids))})", list(job_ids))
                if rows[0][0] == 0 and not self._alive():
                    return True
                self._changed.wait(poll)
                self._changed.clear()
        finally:
            self.release_lease()

    def run_forever(self, poll=0.5, until_idle=False):
        """The headless master and the console: dispatch until stopped. Waits for the lease
        while another dispatcher holds it."""
        with internal():     # the master's own work (app/access.py)
            self._run_forever(poll, until_idle)

    def _run_forever(self, poll, until_idle):
        try:
            while not self._stop.is_set():
                if self.acquire_lease():
                    self.reap_stale()
                    self.housekeeping()
                    self.tick()
                    if until_idle and not self._alive() and not self.db.one(
                            "SELECT 1 FROM jobs WHERE state=?", (QUEUED,)):
                        break
                self._changed.wait(poll)
                self._changed.clear()
        finally:
            for t in list(self._threads.values()):
                t.join(timeout=60)
            self.release_lease()

    def stop(self):
        self._stop.set()
        self._changed.set()
