"""Job records in the catalog: state, status, counters, the detailed log and the throughput
samples (one a second, kept for plots).

Every write to a job row sets its `changed` column to the next value of one change counter
(see NEXT_CHANGE; rows written in one transaction may share a value), and a removed job leaves its id in job_removals with such a value, so a
reader that remembers the counter fetches only what changed since (`changes`). Writes take
sqlite's write lock in turn, so counter values are committed in increasing order and a reader
never skips one."""

import json
import math
import time

from app import status as st
from app import timeutil
from app.errors import NotFound, ValidationError

QUEUED, ACTIVE, DONE = "queued", "active", "done"

#: the next value of the change counter, inside a write transaction
NEXT_CHANGE = ("(SELECT max((SELECT coalesce(max(changed), 0) FROM jobs), "
               "(SELECT coalesce(max(changed), 0) FROM job_removals)) + 1)")


def log_text(message):
    """A log message as the catalog keeps it. Messages name files, and a name that is not
    UTF-8 arrives with surrogate escapes (as os.fsdecode makes it), which a sqlite TEXT value
    cannot hold: such a message is kept as its bytes (UTF-8, with the name's own bytes in
    place), a BLOB, and logs() gives the exact text back. Human output escapes it like any
    name (app/terminal_text.py); --json carries it exactly."""
    try:
        message.encode("utf-8")
        return message
    except UnicodeEncodeError:
        pass
    try:
        return message.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:   # a lone surrogate that stands for no byte
        return message.encode("utf-8", "backslashreplace").decode("utf-8")


def _log_row(row):
    d = dict(row)
    if isinstance(d["message"], bytes):
        d["message"] = d["message"].decode("utf-8", "surrogateescape")
    return d


def job_dict(row):
    d = dict(row)
    params = json.loads(d.pop("params") or "{}")
    d["params"] = params
    if "result" in d:
        d["result"] = json.loads(d["result"]) if d["result"] else None
    d["status_text"] = st.text(d["status"]) if d["status"] is not None else None
    started = timeutil.parse_iso(d["started"]) if d["started"] else None
    ended = timeutil.parse_iso(d["ended"]) if d["ended"] else None
    d["elapsed_s"] = (int((ended or time.time()) - started) if started else None)
    tb, tf = d.get("total_bytes"), d.get("total_files")
    pct = None
    if d["state"] == DONE and d["status"] in (st.OK, st.PARTIAL):
        pct = 100.0
    elif tb:
        pct = min(99.9, 100.0 * d["bytes"] / tb)
    elif tf:
        pct = min(99.9, 100.0 * d["files"] / tf)
    d["percent"] = None if pct is None else round(pct, 1)
    eta = None
    if d["state"] == ACTIVE and tb and d["rate_bytes_per_s"] and d["bytes"] < tb:
        # rounded up: "0:00:00" while data remains reads as done
        eta = max(1, math.ceil((tb - d["bytes"]) / d["rate_bytes_per_s"]))
    d["eta_s"] = eta
    d["cancel_requested"] = bool(d["cancel_requested"])
    if "suspended" in d:
        d["suspended"] = bool(d["suspended"])
    return d


class JobStore:
    def __init__(self, db):
        self.db = db

    def create(self, type, *, client=None, policy=None, schedule=None, storage_unit=None,
               priority=0, params=None, parent_id=None, attempt=1, retry_of=None,
               not_before=None, not_after=None, note=None, c=None):
        """Queues a job. not_before/not_after (epoch seconds) bound when it may start: a job
        still queued after not_after ends as missed (status 196). `c`: an open write
        transaction to create it in, so that a caller's own record lands with it."""
        if c is None:
            with self.db.tx() as c:
                return self.create(type, client=client, policy=policy, schedule=schedule,
                                   storage_unit=storage_unit, priority=priority, params=params,
                                   parent_id=parent_id, attempt=attempt, retry_of=retry_of,
                                   not_before=not_before, not_after=not_after, note=note, c=c)
        cur = c.execute(
            "INSERT INTO jobs(type, state, client, policy, schedule, storage_unit, priority,"
            " created, params, parent_id, attempt, retry_of, not_before, not_after, changed) "
            f"VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,{NEXT_CHANGE})",
            (type, QUEUED, client, policy, schedule, storage_unit, priority,
             timeutil.iso(time.time()), json.dumps(params or {}), parent_id, attempt, retry_of,
             not_before, not_after))
        jid = cur.lastrowid
        c.execute("INSERT INTO job_log(job_id, ts, level, message) VALUES (?,?,?,?)",
                  (jid, timeutil.iso(time.time()), "info",
                   log_text(note or f"{type} job queued")))
        return jid

    def get(self, job_id):
        row = self.db.one("SELECT * FROM jobs WHERE id=?", (job_id,))
        if row is None:
            raise NotFound(f"there is no job {job_id}", hint="see `cairn jobs list`")
        return job_dict(row)

    def list(self, state=None, limit=None):
        sql = "SELECT * FROM jobs"
        args = []
        if state:
            sql += " WHERE state=?"
            args.append(state)
        sql += " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [job_dict(r) for r in self.db.all(sql, args)]

    def changes(self, since=0):
        """What changed after the change counter's value `since` (0: everything):
        {"cursor": the value to ask from next time, "jobs": the jobs written since, and every
        active job (its elapsed time and time left move on between writes), "removed": ids of
        jobs removed since}. Read in one snapshot, so nothing falls between two calls."""
        c = self.db.conn
        c.execute("BEGIN")
        try:
            rows = c.execute("SELECT * FROM jobs WHERE changed>? OR state=?",
                             (since, ACTIVE)).fetchall()
            removed = [r[0] for r in c.execute(
                "SELECT job_id FROM job_removals WHERE changed>?", (since,))] if since else []
            cursor = c.execute(f"SELECT {NEXT_CHANGE} - 1").fetchone()[0]
        finally:
            c.execute("COMMIT")
        return {"cursor": cursor, "jobs": [job_dict(r) for r in rows], "removed": removed}

    def remove(self, job_ids):
        """Removes ended jobs with their logs and samples. A job still queued or running is
        refused and nothing is removed."""
        with self.db.tx() as c:
            for jid in job_ids:
                row = c.execute("SELECT state FROM jobs WHERE id=?", (jid,)).fetchone()
                if row is None:
                    raise NotFound(f"there is no job {jid}", hint="see `cairn jobs list`")
                if row["state"] != DONE:
                    raise ValidationError(f"job {jid} is {row['state']}, not ended",
                                          hint="cancel it or wait for it to end first")
                c.execute("INSERT OR REPLACE INTO job_removals(job_id, changed) "
                          f"VALUES (?, {NEXT_CHANGE})", (jid,))
                c.execute("DELETE FROM jobs WHERE id=?", (jid,))

    def log(self, job_id, message, level="info", c=None):
        if c is None:
            with self.db.tx() as c:
                return self.log(job_id, message, level, c)
        c.execute("INSERT INTO job_log(job_id, ts, level, message) VALUES (?,?,?,?)",
                  (job_id, timeutil.iso(time.time()), level, log_text(message)))

    def log_many(self, job_id, entries):
        if not entries:
            return
        ts = timeutil.iso(time.time())
        with self.db.tx() as c:
            c.executemany("INSERT INTO job_log(job_id, ts, level, message) VALUES (?,?,?,?)",
                          [(job_id, ts, lvl, log_text(msg)) for lvl, msg in entries])

    def logs(self, job_id, after=0, limit=10000):
        return [_log_row(r) for r in self.db.all(
            "SELECT id, ts, level, message FROM job_log WHERE job_id=? AND id>? "
            "ORDER BY id LIMIT ?", (job_id, after, limit))]

    def samples(self, job_id, after=None):
        """Throughput samples of a job (cumulative bytes and files at time t), oldest first;
        only those later than `after` when given."""
        return [dict(r) for r in self.db.all(
            "SELECT t, bytes, files FROM job_samples WHERE job_id=? AND t>? ORDER BY t",
            (job_id, -1.0 if after is None else after))]

    def samples_since(self, t):
        """Samples of every job later than time t, as (job_id, t, bytes) rows ordered by job
        and time."""
        return [tuple(r) for r in self.db.all(
            "SELECT job_id, t, bytes FROM job_samples WHERE t>? ORDER BY job_id, t", (t,))]

    def claim(self, job_id, runner, c=None):
        """queued → active, only if still queued (another dispatcher may have been faster, or
        the job was canceled). `c`: an open write transaction to claim it in."""
        if c is None:
            with self.db.tx() as c:
                return self.claim(job_id, runner, c)
        now = time.time()
        cur = c.execute("UPDATE jobs SET state=?, started=?, started_t=?, runner=?, "
                        f"heartbeat=?, wait_reason=NULL, changed={NEXT_CHANGE} "
                        "WHERE id=? AND state=?",
                        (ACTIVE, timeutil.iso(now), now, runner, now, job_id, QUEUED))
        return cur.rowcount == 1

    def progress(self, job_id, *, bytes, files, rate, total_bytes=None, total_files=None,
                 sample_t=None, phase=None):
        with self.db.tx() as c:
            c.execute("UPDATE jobs SET bytes=?, files=?, rate_bytes_per_s=?, heartbeat=?, "
                      "total_bytes=COALESCE(?, total_bytes), total_files=COALESCE(?, total_files),"
                      f" phase=COALESCE(?, phase), changed={NEXT_CHANGE} WHERE id=?",
                      (bytes, files, rate, time.time(), total_bytes, total_files, phase, job_id))
            if sample_t is not None:
                c.execute("INSERT INTO job_samples(job_id, t, bytes, files) VALUES (?,?,?,?)",
                          (job_id, sample_t, bytes, files))

    def set_phase(self, job_id, phase):
        """What a running job is doing now (JobContext.set_phase)."""
        with self.db.tx() as c:
            c.execute(f"UPDATE jobs SET phase=?, changed={NEXT_CHANGE} WHERE id=? AND state=?",
                      (phase, job_id, ACTIVE))

    def set_dedup_ratio(self, job_id, ratio, result=None):
        """The share of the job's data its deduplication pool already held, in percent; with
        result, the job's result too, in the same transaction."""
        with self.db.tx() as c:
            if result is None:
                c.execute(f"UPDATE jobs SET dedup_ratio=?, changed={NEXT_CHANGE} WHERE id=?",
                          (ratio, job_id))
            else:
                c.execute(f"UPDATE jobs SET dedup_ratio=?, result=?, changed={NEXT_CHANGE} "
                          "WHERE id=?", (ratio, json.dumps(result), job_id))

    def set_result(self, job_id, result):
        """What a job found, beyond its counters (e.g. the damaged files a verify names)."""
        with self.db.tx() as c:
            c.execute(f"UPDATE jobs SET result=?, changed={NEXT_CHANGE} WHERE id=?",
                      (json.dumps(result), job_id))

    def set_wait_reason(self, job_id, reason):
        with self.db.tx() as c:
            c.execute(f"UPDATE jobs SET wait_reason=?, changed={NEXT_CHANGE} "
                      "WHERE id=? AND state=?",
                      (reason, job_id, QUEUED))

    def set_wait_reasons(self, reasons, c=None):
        """(reason, job id) pairs, in one transaction (`c`, when open): a dispatcher's tick
        over thousands of queued jobs writes what changed at once."""
        if not reasons:
            return
        if c is None:
            with self.db.tx() as c:
                return self.set_wait_reasons(reasons, c)
        # One change number for all: readers take what changed in one snapshot, so rows
        # written together may share it (JobStore.changes), and it is looked up once.
        n = c.execute(f"SELECT {NEXT_CHANGE}").fetchone()[0]
        c.executemany("UPDATE jobs SET wait_reason=?, changed=? WHERE id=? AND state=?",
                      [(r, n, j, QUEUED) for r, j in reasons])

    def finish(self, job_id, code, message=None, *, image_id=None, bytes=None, files=None):
        now = time.time()
        with self.db.tx() as c:
            row = c.execute("SELECT started, started_t, bytes FROM jobs WHERE id=?",
                            (job_id,)).fetchone()
            b = bytes if bytes is not None else row["bytes"]
            rate = None
            if row["started"]:
                start = (row["started_t"] if row["started_t"] is not None
                         else timeutil.parse_iso(row["started"]))
                dt = max(now - start, 1e-3)
                rate = b / dt
            c.execute("UPDATE jobs SET state=?, status=?, ended=?, ended_t=?, "
                      "image_id=COALESCE(?, image_id), bytes=?, files=COALESCE(?, files), "
                      "rate_bytes_per_s=?, wait_reason=NULL, phase=NULL, "
                      f"changed={NEXT_CHANGE} WHERE id=?",
                      (DONE, code, timeutil.iso(now), now, image_id, b, files, rate, job_id))
            level = "info" if code == st.OK else "warning" if code == st.PARTIAL else "error"
            text = log_text(f"ended with status {code}: {message or st.text(code)}")
            c.execute("INSERT INTO job_log(job_id, ts, level, message) VALUES (?,?,?,?)",
                      (job_id, timeutil.iso(now), level, text))

    def request_cancel(self, job_id):
        job = self.get(job_id)
        if job["state"] == DONE:
            return job
        with self.db.tx() as c:
            c.execute(f"UPDATE jobs SET cancel_requested=1, changed={NEXT_CHANGE} WHERE id=?",
                      (job_id,))
        if job["state"] == QUEUED:
            # Nobody runs it yet: it ends here. A dispatcher that claims it first wins the race
            # and sees cancel_requested as soon as it starts.
            with self.db.tx() as c:
                cur = c.execute("UPDATE jobs SET state=?, status=?, ended=?, "
                                f"changed={NEXT_CHANGE} WHERE id=? AND state=?",
                                (DONE, st.CANCELED, timeutil.iso(time.time()), job_id, QUEUED))
                if cur.rowcount:
                    c.execute("INSERT INTO job_log(job_id, ts, level, message) VALUES (?,?,?,?)",
                              (job_id, timeutil.iso(time.time()), "warning",
                               f"ended with status {st.CANCELED}: canceled while queued"))
        else:
            self.log(job_id, "cancel requested by the administrator", "warning")
        return self.get(job_id)

    def set_suspended(self, job_id, on):
        with self.db.tx() as c:
            c.execute(f"UPDATE jobs SET suspended=?, changed={NEXT_CHANGE} WHERE id=? AND state=?",
                      (int(bool(on)), job_id, QUEUED))

    def cancel_requested(self, job_id):
        row = self.db.one("SELECT cancel_requested FROM jobs WHERE id=?", (job_id,))
        return bool(row and row[0])
