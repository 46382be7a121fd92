"""The scheduler: queues the backups that schedules call for, in their start windows.

A schedule with start windows runs by itself: a frequency schedule when no backup of it
succeeded within its frequency (counted from that backup's start), a calendar schedule once
in each window that opens on one of its days. Each decision is a row in schedule_runs, one
per policy, schedule, client and due time, written in the same transaction as the job it
queues, so two masters on one catalog (a console and a headless master) never queue the same
run twice. A window that closed while no master was running is recorded as missed, with a job
that ended with status 196, so the activity monitor shows it.

A catalog schedule (type catalog) runs catalog backups of the master's own state to its
policy's storage unit instead, once per due time whatever the policy's clients (its runs are
recorded with an empty client).

Every time comes from the injected clock; windows and calendar days are read in the
scheduler's time zone (the master's local one unless given)."""

import datetime as dt
import heapq
import itertools
import json
import time
from bisect import bisect_left

from app import status as st
from app import timeutil
from app.audit import SCHEDULER
from app.config import STREAM_MARKER
from app.schedule_rules import CATALOG_SCHEDULE, DEFAULT_FREQUENCY, calendar_matches
from app.jobs import catalog_backup
from app.jobs.store import ACTIVE, DONE, QUEUED

LAST_TICK = "scheduler_last_tick"   # settings key: when the scheduler last looked
LOOKBACK_S = 7 * 86400              # missed windows are looked for this far back at most
#: which schedule runs when several of one policy are due for a client at once
TYPE_RANK = {"full": 0, "cumulative": 1, "differential": 2}
_OK = (st.OK, st.PARTIAL)


class _Schedule:
    __slots__ = ("name", "type", "rank", "order", "windows", "span_s", "freq", "calendar",
                 "read_all", "retention_s")

    def __init__(self, row):
        self.name = row["name"]
        self.type = row["type"]
        self.retention_s = row["retention_s"]
        self.read_all = bool(row["read_all"])
        self.rank = TYPE_RANK.get(row["type"], len(TYPE_RANK))
        self.order = row["id"]
        self.windows = []
        for w in json.loads(row["windows"]):
            hh, mm = (int(x) for x in w["start"].split(":"))
            self.windows.append((w["day"], hh, mm, round(w["hours"] * 3600)))
        self.span_s = max((w[3] for w in self.windows), default=0)
        self.calendar = json.loads(row["calendar"]) if row["calendar"] else None
        self.freq = None if self.calendar else \
            (row["frequency_s"] or DEFAULT_FREQUENCY.get(row["type"], 86400))


class Scheduler:
    def __init__(self, master, clock=time.time, tz=None):
        self.master = master
        self.db = master.db
        self.jobs = master.jobs
        self.clock = clock
        self.tz = tz
        #: jobs recorded as missed by the last tick (they ended with status 196 at once)
        self.last_missed = []

    # ---- time: wall clock in the scheduler's zone <-> epoch seconds -----------------------
    def _date(self, ts):
        return dt.datetime.fromtimestamp(ts, self.tz).date()

    def _epoch(self, day, hh, mm):
        wall = dt.datetime.combine(day, dt.time(hh, mm))
        # A naive time is read in the machine's zone, with its daylight saving rules.
        return (wall.replace(tzinfo=self.tz) if self.tz is not None else wall).timestamp()

    def instances(self, sched, lo, hi):
        """The schedule's window instances [(start, end, start date)] that end after `lo`
        and start before `hi`, by start."""
        if not sched.windows:
            return []
        day = self._date(lo - sched.span_s) - dt.timedelta(days=1)
        last = self._date(hi) + dt.timedelta(days=1)
        out = []
        while day <= last:
            wd = day.weekday()
            for d, hh, mm, length in sched.windows:
                if d == wd:
                    start = self._epoch(day, hh, mm)
                    end = start + length
                    if end > lo and start < hi:
                        out.append((start, end, day))
            day += dt.timedelta(days=1)
        out.sort()
        return out

    def _open(self, sched, now):
        for inst in self.instances(sched, now, now + 1):
            if inst[0] <= now < inst[1]:
                return inst
        return None

    def _due(self, sched, inst, last_ok):
        """When the schedule became due in this window instance (None: not in it)."""
        start, end, day = inst
        if sched.calendar is not None:
            return start if calendar_matches(sched.calendar, day) else None
        due = start if last_ok is None else max(start, last_ok + sched.freq)
        return due if due < end else None

    # ---- the catalog ----------------------------------------------------------------------
    def _policies(self, policy=None):
        """Active policies with their clients, selections and the schedules that have start
        windows, in four queries whatever their number."""
        sql = ("SELECT p.id, p.name, p.priority, p.checksum, p.created, p.multiple_streams, "
               "u.name AS storage_unit "
               "FROM policies p JOIN storage_units u ON u.id=p.storage_unit_id "
               "WHERE p.active=1")
        args = ()
        if policy is not None:
            sql, args = sql + " AND p.name=?", (policy,)
        pols = {}
        for r in self.db.all(sql + " ORDER BY p.name", args):
            pols[r["id"]] = {"name": r["name"], "priority": r["priority"],
                             "checksum": r["checksum"], "storage_unit": r["storage_unit"],
                             "multiple_streams": bool(r["multiple_streams"]),
                             "created": _epoch_or_none(r["created"]),
                             "clients": [], "selections": [], "schedules": [],
                             "catalog": []}
        if not pols:
            return []
        for r in self.db.all("SELECT c.policy_id, h.name FROM policy_clients c "
                             "JOIN hosts h ON h.id=c.host_id ORDER BY h.name"):
            if r[0] in pols:
                pols[r[0]]["clients"].append(r[1])
        for r in self.db.all("SELECT policy_id, path FROM policy_selections ORDER BY id"):
            if r[0] in pols:
                pols[r[0]]["selections"].append(
                    STREAM_MARKER if r[1].startswith(STREAM_MARKER + ":") else r[1])
        for r in self.db.all("SELECT * FROM schedules WHERE windows!='[]' ORDER BY id"):
            p = pols.get(r["policy_id"])
            if p is not None:
                s = _Schedule(r)
                if s.windows:
                    p["catalog" if s.type == CATALOG_SCHEDULE else "schedules"].append(s)
        return [p for p in pols.values() if (p["schedules"] and p["clients"]) or p["catalog"]]

    def _last_ok(self, since, job_type="backup"):
        """{(policy, schedule, client): start of the newest successful backup} over backups
        (or catalog backups: client "") started at or after `since`."""
        return {(r[0], r[1], r[2]): timeutil.parse_iso(r[3]) for r in self.db.all(
            "SELECT policy, schedule, coalesce(client, ''), max(started) FROM jobs "
            "WHERE type=? AND state=? AND status IN (?, ?) AND started>=? "
            "GROUP BY policy, schedule, client",
            (job_type, DONE, *_OK, timeutil.iso(since)))}

    def _ok_starts(self, since, job_type="backup"):
        """{(policy, schedule, client): sorted starts of successful backups} since `since`
        (catalog backups: client "")."""
        out = {}
        for r in self.db.all("SELECT policy, schedule, coalesce(client, ''), started FROM jobs "
                             "WHERE type=? AND state=? AND status IN (?, ?) "
                             "AND started>=? ORDER BY started",
                             (job_type, DONE, *_OK, timeutil.iso(since))):
            out.setdefault((r[0], r[1], r[2]), []).append(timeutil.parse_iso(r[3]))
        return out

    def _busy(self):
        """(policy, client) pairs with a backup queued or running."""
        return {(r[0], r[1]) for r in self.db.all(
            "SELECT DISTINCT policy, client FROM jobs WHERE state IN (?, ?) AND type='backup'",
            (QUEUED, ACTIVE))}

    def _recorded(self, policy, schedule, client, due_iso):
        return self.db.one("SELECT 1 FROM schedule_runs WHERE policy=? AND schedule=? AND "
                           "client=? AND due=?", (policy, schedule, client, due_iso)) is not None

    def last_tick(self):
        row = self.db.one("SELECT value FROM settings WHERE key=?", (LAST_TICK,))
        try:
            return float(row[0]) if row else None
        except ValueError:
            return None

    # ---- one round ------------------------------------------------------------------------
    def tick(self, now=None):
        """Queue what is due now; record windows missed since the last tick. Returns the
        ids of the jobs queued."""
        now = self.clock() if now is None else now
        prev = self.last_tick()
        # The first tick on a catalog has no past to judge: nothing before it was missed.
        since = None if prev is None or prev >= now else max(prev, now - LOOKBACK_S)
        policies = self._policies()
        to_queue, to_skip = self._choose(policies, now)
        missed = self._missed(policies, since, now) if since is not None else []
        queued, made_missed = self._record(now, to_queue, to_skip, missed)
        queued += self._queue_catalog(self._catalog_due(policies, now), now)
        for jid, s, inst in made_missed:
            self.jobs.finish(jid, st.WINDOW_CLOSED,
                             f"schedule {s.name}: its start window {_span(inst)} closed while "
                             "no master was running")
        self.last_missed = [m[0] for m in made_missed]
        return queued

    def _choose(self, policies, now):
        """What to queue now and what to record as skipped: for each policy and client that is
        not busy, the first (by rank, then order) of the schedules due in their open start
        windows and not recorded yet; the others are skipped. Returns (to_queue, to_skip); each
        to_queue item carries the skips recorded only if it is queued."""
        scheds = [s for p in policies for s in p["schedules"]]
        longest = max((s.freq or 0 for s in scheds), default=0)
        span = max((s.span_s for s in scheds), default=0)

        open_inst = {}
        for s in scheds:
            inst = self._open(s, now)
            if inst is not None:
                open_inst[s] = inst
        # An open window started at most `span` ago, and a backup older than its start minus
        # the frequency leaves the schedule due from the window's start anyway.
        last_ok = self._last_ok(now - span - longest) if open_inst else {}
        busy = self._busy() if open_inst else set()

        to_queue, to_skip = [], []
        for p in policies:
            live = [s for s in p["schedules"] if s in open_inst]
            if not live:
                continue
            for client in p["clients"]:
                if (p["name"], client) in busy:
                    continue
                cands = []
                for s in live:
                    due = self._due(s, open_inst[s], last_ok.get((p["name"], s.name, client)))
                    if due is None or due > now:
                        continue
                    if self._recorded(p["name"], s.name, client, timeutil.iso(due)):
                        continue
                    cands.append((s.rank, s.order, s, due))
                if not cands:
                    continue
                cands.sort(key=lambda c: c[:2])
                if not p["selections"]:
                    for _, _, s, due in cands:
                        to_skip.append((p, s, client, due, open_inst[s],
                                        "skipped: the policy has no backup selections"))
                    continue
                # A higher schedule that already succeeded in its own open window makes a
                # lower one pointless there (a full just ran: no incremental on top of it).
                ran = None
                for s in live:
                    t = last_ok.get((p["name"], s.name, client))
                    if t is not None and t >= open_inst[s][0] and \
                            (ran is None or (s.rank, s.order) < (ran[0].rank, ran[0].order)):
                        ran = (s, t)
                winner = None
                for rank, order, s, due in cands:
                    if ran is not None and (ran[0].rank, ran[0].order) < (rank, order):
                        to_skip.append((p, s, client, due, open_inst[s],
                                        f"skipped: {ran[0].type} schedule {ran[0].name} ran in "
                                        f"this window (started {timeutil.iso(ran[1])})"))
                    elif winner is None:
                        winner = (p, s, client, due, open_inst[s], [])
                        to_queue.append(winner)
                    else:
                        # recorded only if the winner is queued
                        winner[5].append((p, s, client, due, open_inst[s],
                                          f"skipped: {winner[1].type} schedule "
                                          f"{winner[1].name} runs instead"))
        return to_queue, to_skip

    def _record(self, now, to_queue, to_skip, missed):
        """In one transaction: queue the chosen jobs, record the skipped and missed runs and
        the tick. Returns (ids of the jobs queued, [(job id, schedule, window) missed])."""
        queued, made_missed, audited = [], [], []
        noted = timeutil.iso(now)
        with self.db.tx() as c:
            for p, s, client, due, inst, losers in to_queue:
                # Checked again under the write lock: another master may have queued it or
                # another backup of this client since the reads above.
                if c.execute("SELECT 1 FROM jobs WHERE type='backup' AND policy=? AND client=? "
                             "AND state IN (?, ?) LIMIT 1",
                             (p["name"], client, QUEUED, ACTIVE)).fetchone():
                    continue
                run_id = self._insert_run(c, p, s, client, due, inst, "queued", noted)
                if run_id is None:
                    continue
                queued.append(self._create_job(
                    c, p, s, client, inst, run_id,
                    f"queued by the scheduler: schedule {s.name}, window {_span(inst)}"))
                audited.append(self._audit("start_backup", p, s, inst, queued[-1], client))
                to_skip.extend(losers)
            for p, s, client, due, inst, reason in to_skip:
                self._insert_run(c, p, s, client, due, inst, reason, noted)
            for p, s, client, due, inst in missed:
                run_id = self._insert_run(c, p, s, client, due, inst, "missed", noted)
                if run_id is not None:
                    jid = self._create_job(c, p, s, client, inst, run_id,
                                           f"schedule {s.name}: start window {_span(inst)} "
                                           "missed")
                    made_missed.append((jid, s, inst))
            c.execute("INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) "
                      "DO UPDATE SET value=excluded.value", (LAST_TICK, repr(float(now))))
        self.master.access.audit.settle(audited)
        return queued, made_missed

    def _audit(self, action, p, s, inst, job_id, client=None):
        """The audit entry of a job the scheduler queued, made in the transaction that
        queues it (app/audit.py: the master's own work)."""
        args = {"policy": p["name"], "schedule": s.name, "window": _span(inst)}
        if client is not None:
            args["client"] = client
        return self.master.access.audit.system(SCHEDULER, action, f"policy {p['name']}",
                                               {"args": args, "result": {"jobs": [job_id]}})

    # ---- catalog schedules ----------------------------------------------------------------
    def _catalog_due(self, policies, now):
        """[(policy, schedule, due, window)] of the catalog schedules due now."""
        scheds = [(p, s) for p in policies for s in p["catalog"]]
        open_inst = {s: self._open(s, now) for _, s in scheds}
        if not any(open_inst.values()):
            return []
        longest = max(s.freq or 0 for _, s in scheds)
        span = max(s.span_s for _, s in scheds)
        last_ok = self._last_ok(now - span - longest, catalog_backup.JOB_TYPE)
        out = []
        for p, s in scheds:
            inst = open_inst[s]
            if inst is None:
                continue
            due = self._due(s, inst, last_ok.get((p["name"], s.name, "")))
            if due is not None and due <= now and \
                    not self._recorded(p["name"], s.name, "", timeutil.iso(due)):
                out.append((p, s, due, inst))
        return out

    def _queue_catalog(self, due, now):
        """Queues a catalog backup per due catalog schedule, unless one of the same schedule
        is queued or running; recorded as the backups' runs are. Returns the job ids."""
        queued, audited = [], []
        with self.db.tx() as c:
            for p, s, at, inst in due:
                if c.execute("SELECT 1 FROM jobs WHERE type=? AND policy=? AND schedule=? "
                             "AND state IN (?, ?) LIMIT 1",
                             (catalog_backup.JOB_TYPE, p["name"], s.name, QUEUED,
                              ACTIVE)).fetchone():
                    continue
                run_id = self._insert_run(c, p, s, "", at, inst, "queued", timeutil.iso(now))
                if run_id is None:
                    continue
                queued.append(self._create_job(
                    c, p, s, "", inst, run_id,
                    f"catalog backup queued by the scheduler: schedule {s.name}, "
                    f"window {_span(inst)}"))
                audited.append(self._audit("start_catalog_backup", p, s, inst, queued[-1]))
        self.master.access.audit.settle(audited)
        return queued

    def _missed(self, policies, since, now):
        """Window instances that ended in (since, now] in which a schedule was due for a
        client while no master looked (nothing recorded for that due time, and the last
        tick before was earlier)."""
        found, ended = [], []
        for p in policies:
            # a catalog schedule's runs need neither selections nor clients
            scheds = p["catalog"] + (p["schedules"] if p["selections"] else [])
            for s in scheds:
                for inst in self.instances(s, since, now):
                    if since < inst[1] <= now and \
                            (p["created"] is None or inst[0] >= p["created"]):
                        ended.append((p, s, inst))
        if not ended:
            return found
        oldest = min(inst[0] for _, _, inst in ended)
        longest = max((s.freq or 0) for _, s, _ in ended)
        starts = self._ok_starts(oldest - longest)
        if any(s.type == CATALOG_SCHEDULE for _, s, _ in ended):
            starts.update(self._ok_starts(oldest - longest, catalog_backup.JOB_TYPE))
        for p, s, inst in ended:
            for client in ([""] if s.type == CATALOG_SCHEDULE else p["clients"]):
                ok = starts.get((p["name"], s.name, client), [])
                i = bisect_left(ok, inst[1])
                due = self._due(s, inst, ok[i - 1] if i else None)
                if due is None or due <= since:
                    continue
                if not self._recorded(p["name"], s.name, client, timeutil.iso(due)):
                    found.append((p, s, client, due, inst))
        return found

    def _insert_run(self, c, p, s, client, due, inst, outcome, noted):
        cur = c.execute("INSERT OR IGNORE INTO schedule_runs(policy, schedule, client, due, "
                        "window_end, outcome, noted) VALUES (?,?,?,?,?,?,?)",
                        (p["name"], s.name, client, timeutil.iso(due), timeutil.iso(inst[1]),
                         outcome, noted))
        return cur.lastrowid if cur.rowcount == 1 else None

    def _create_job(self, c, p, s, client, inst, run_id, note):
        """A backup job as Master.start_backup makes it (with its stream jobs when the policy
        has multiple data streams), or a catalog schedule's catalog backup, bound to the
        window's end."""
        if s.type == CATALOG_SCHEDULE:
            jid = catalog_backup.queue(self.master, p["storage_unit"],
                                       retention_s=s.retention_s, policy=p["name"],
                                       schedule=s.name, not_after=inst[1], note=note, c=c)
        else:
            jid = self.master.queue_backup(p, client, {"name": s.name, "type": s.type,
                                                       "read_all": s.read_all,
                                                       "retention_s": None if s.retention_s < 0
                                                       else s.retention_s},
                                           not_after=inst[1], note=note, c=c)
        c.execute("UPDATE schedule_runs SET job_id=? WHERE id=?", (jid, run_id))
        return jid

    # ---- what is coming, what happened ----------------------------------------------------
    def next_runs(self, policy=None, now=None, horizon_s=7 * 86400):
        """The window instances within `horizon_s` in which each schedule would fire for each
        client, soonest first: {policy, schedule, type, client, due (when it would be
        queued), window_start, window_end, runs (how many times in that window, for a
        frequency shorter than the window; 0 when skipped), note (set when another schedule
        of the policy runs instead)}; a catalog schedule's runs have the client "". Frequency
        schedules are projected as if each backup succeeded when queued."""
        if policy is not None:
            self.master.config.policy(policy)   # an unknown name is an error, not "nothing"
        now = self.clock() if now is None else now
        hi = now + horizon_s
        policies = self._policies(policy)
        scheds = [s for p in policies for s in p["schedules"]]
        longest = max((s.freq or 0 for s in scheds), default=0)
        span = max((s.span_s for s in scheds), default=0)
        last_ok = self._last_ok(now - span - longest) if scheds else {}
        out = []
        for p in policies:
            if p["catalog"]:
                cs = p["catalog"]
                cat_ok = self._last_ok(now - max(s.span_s for s in cs)
                                       - max(s.freq or 0 for s in cs), catalog_backup.JOB_TYPE)
                out.extend(self._project(p, "", {s: self.instances(s, now, hi)
                                                 for s in p["catalog"]}, cat_ok, now))
            if not p["selections"]:
                continue
            plan = {s: self.instances(s, now, hi) for s in p["schedules"]}
            for client in p["clients"]:
                out.extend(self._project(p, client, plan, last_ok, now))
        out.sort(key=lambda e: (e["due"], e["policy"], e["client"], e["_rank"]))
        for e in out:
            del e["_rank"]
        return out

    def _project(self, p, client, plan, last_ok, now):
        """The firings of one policy's schedules for one client, walked in time order the way
        ticks would meet them: at each moment the highest due schedule runs and the others
        are skipped for that window."""
        heap, seq = [], itertools.count()

        def push(s, i, last):
            insts = plan[s]
            while i < len(insts):
                due = self._due(s, insts[i], last)
                if due is not None and due <= now and self._recorded(
                        p["name"], s.name, client, timeutil.iso(due)):
                    if s.calendar is not None:
                        due = None
                    else:
                        # Queued (or decided) already: the next one is counted from it.
                        last = due
                        continue
                if due is not None:
                    heapq.heappush(heap, (max(due, now), s.rank, s.order, next(seq), s, i,
                                          last))
                    return
                i += 1

        for s in plan:
            push(s, 0, last_ok.get((p["name"], s.name, client)))
        out = []
        while heap:
            at, _, _, _, s, i, last = heapq.heappop(heap)
            start, end, _ = plan[s][i]
            entry = {"policy": p["name"], "schedule": s.name, "type": s.type,
                     "client": client, "due": timeutil.iso(at),
                     "window_start": timeutil.iso(start), "window_end": timeutil.iso(end),
                     "runs": 1, "note": None, "_rank": (s.rank, s.order)}
            out.append(entry)
            if s.calendar is None:
                entry["runs"] = 1 + int((end - at - 1e-9) // s.freq)
                last = at + (entry["runs"] - 1) * s.freq
            push(s, i + 1, last)
            # Others due at the same moment are skipped in their window; their last backup
            # stays what it was.
            while heap and heap[0][0] == at:
                _, _, _, _, o, j, olast = heapq.heappop(heap)
                ostart, oend, _ = plan[o][j]
                out.append({"policy": p["name"], "schedule": o.name, "type": o.type,
                            "client": client, "due": timeutil.iso(at),
                            "window_start": timeutil.iso(ostart),
                            "window_end": timeutil.iso(oend), "runs": 0,
                            "note": f"skipped: {s.type} schedule {s.name} runs instead",
                            "_rank": (o.rank, o.order)})
                push(o, j + 1, olast)
        return out

    def runs(self, policy=None, limit=200):
        """The scheduler's recorded decisions (queued, missed, skipped: why), newest due time
        first, with the state and status of the job each one made."""
        sql = ("SELECT r.*, j.state AS job_state, j.status AS job_status FROM schedule_runs r "
               "LEFT JOIN jobs j ON j.id=r.job_id")
        args = []
        if policy is not None:
            self.master.config.policy(policy)
            sql += " WHERE r.policy=?"
            args.append(policy)
        sql += " ORDER BY r.due DESC, r.id DESC LIMIT ?"
        args.append(int(limit))
        return [dict(r) for r in self.db.all(sql, args)]


def _epoch_or_none(text):
    try:
        return timeutil.parse_iso(text) if text else None
    except Exception:  # noqa: BLE001 - an unreadable creation time just means "no bound"
        return None


def _span(inst):
    return f"{timeutil.iso(inst[0])}–{timeutil.iso(inst[1])}"
