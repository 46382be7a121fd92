"""The alert round the dispatcher runs about once a minute, in a thread of its own so that a
host that does not answer never holds up the jobs: find what is new (app/alerts/events.py),
record it, and send one digest of all that is pending once the interval since the last
message has passed.

Jobs are looked at every round; the hosts (reachability and the pools' capacity) are asked
at most every HOST_ROUND_S, since asking them costs a connection each. Alerts begin with the
jobs that end after alerting was first turned on: old failures are not sent."""

import json
import threading
import time

from app import timeutil
from app.access_scope import internal
from app.alerts import channels, digest, events, settings as cfg

ROUND_S = 60
HOST_ROUND_S = 300
# Without alerts, the hosts are still asked this often, so that the pools' growth has
# samples on a site where nobody looks (the first an hour after the dispatcher starts).
SAMPLE_S = 3600
KEEP_S = 90 * 86400
SINCE = "alerts_state.jobs_since"
STARTED = "alerts_state.started"
CONDITION_KINDS = ("high-water", "host-unreachable", "catalog-overdue")


def _event_rows(db, where, order="id", args=()):
    return [dict(r) for r in db.all(
        "SELECT id, key, kind, severity, subject, message, job_id, first_seen, cleared, "
        f"digest_id FROM alert_events WHERE {where} ORDER BY {order}", args)]


class Alerter:
    def __init__(self, master):
        self.master = master
        self._lock = threading.Lock()
        self._running = False
        self._hosts_asked = None
        self._started = None
        self._thread = None

    # ---- the round ------------------------------------------------------------------------
    def start_round(self, now=None):
        """Runs a round in a thread unless one still runs; with no channel configured, only
        asks the hosts (pool samples) once SAMPLE_S has passed. Returns at once."""
        t = time.time() if now is None else now
        if self._started is None:
            self._started = t
        alerting = bool(cfg.channels(cfg.values(self.master.db)))
        last = self._hosts_asked if self._hosts_asked is not None else self._started
        if not alerting and t - last < SAMPLE_S:
            return False
        with self._lock:
            if self._running:
                return False
            self._running = True
        work = self.round if alerting else self.sample
        self._thread = threading.Thread(target=self._round_thread, args=(work, now),
                                        daemon=True, name="alerts")
        self._thread.start()
        return True

    def sample(self, now=None):
        """Asks the hosts, which records each pool's use (app/pool_capacity.py)."""
        now = time.time() if now is None else now
        self._hosts_asked = now
        self.master.health(now=now)

    def wait(self, timeout=None):
        """Waits for a round that runs (a closing master lets it finish with the catalog)."""
        th = self._thread
        if th is not None:
            th.join(timeout)

    def _round_thread(self, work, now):
        try:
            with internal():     # the master's own work (app/access.py)
                work(now)
        except Exception:  # noqa: BLE001 - the next round tries again; logged for admins
            import traceback  # only on this rare path
            traceback.print_exc()
        finally:
            with self._lock:
                self._running = False

    def round(self, now=None, ask_hosts=None):
        """Finds, records and, when due, sends. Returns what it did: {"events": new events,
        "resolved", "sent": the digest's results or None, "why": why nothing was sent}."""
        now = time.time() if now is None else now
        db = self.master.db
        v = cfg.values(db)
        if not cfg.channels(v):
            return {"events": 0, "resolved": 0, "sent": None,
                    "why": "no alert channel is configured"}
        kinds = cfg.kinds(v)
        row = db.one("SELECT value FROM settings WHERE key=?", (SINCE,))
        since = float(row[0]) if row else now
        first = db.one("SELECT value FROM settings WHERE key=?", (STARTED,))
        found = events.job_events(db, since, kinds, float(first[0])) if row and first else []
        conditions, looked = {}, set()
        if "catalog-overdue" in kinds:
            conditions.update(events.catalog_condition(self.master.catalog_backup_state(now)))
            looked.add("catalog-overdue")
        if ask_hosts is None:
            ask_hosts = self._hosts_asked is None or now - self._hosts_asked >= HOST_ROUND_S
        host_kinds = kinds & {"high-water", "host-unreachable"}
        if ask_hosts and host_kinds:
            self._hosts_asked = now
            doc = self.master.health(now=now)
            if "high-water" in kinds:
                conditions.update(events.pool_conditions(doc))
            if "host-unreachable" in kinds:
                created = dict(db.all("SELECT name, created FROM hosts"))
                down = timeutil.parse_duration(v["host_down_after"])
                conditions.update(events.host_conditions(doc, created, now, down))
            looked |= host_kinds
        new, resolved = self._record(found, conditions, looked, kinds, now, since)
        sent = self.send_due(now, v)
        return {"events": new, "resolved": resolved, **sent}

    def _record(self, found, conditions, looked, kinds, now, since):
        db = self.master.db
        new = resolved = 0
        with db.tx() as c:
            for e in found:
                # a job's event is told once, ever
                if c.execute("SELECT 1 FROM alert_events WHERE key=?", (e["key"],)).fetchone():
                    continue
                self._insert(c, e["key"], e, now)
                new += 1
            for kind in set(CONDITION_KINDS) - kinds:
                # a kind no longer chosen: its open conditions end without a word
                c.execute("DELETE FROM alert_events WHERE kind=? AND cleared IS NULL", (kind,))
            marks = ",".join("?" * len(looked))
            open_ = {r[0]: r[1] for r in c.execute(
                f"SELECT key, id FROM alert_events WHERE cleared IS NULL AND kind IN ({marks})",
                tuple(looked))} if looked else {}
            for key, e in conditions.items():
                if key not in open_:
                    self._insert(c, key, e, now)
                    new += 1
            for key, eid in open_.items():
                if key not in conditions:
                    c.execute("UPDATE alert_events SET cleared=? WHERE id=?", (now, eid))
                    resolved += 1
            c.execute("INSERT INTO settings(key, value) VALUES (?,?) ON CONFLICT(key) DO UPDATE "
                      "SET value=excluded.value", (SINCE, repr(max(now, since))))
            c.execute("INSERT OR IGNORE INTO settings(key, value) VALUES (?,?)", (STARTED, repr(now)))
            c.execute("DELETE FROM alert_events WHERE first_seen<? AND digest_id IS NOT NULL "
                      "AND (cleared IS NOT NULL OR job_id IS NOT NULL)", (now - KEEP_S,))
            c.execute("DELETE FROM alert_digests WHERE t<? AND id NOT IN (SELECT digest_id FROM "
                      "alert_events WHERE digest_id IS NOT NULL)", (now - KEEP_S,))
        return new, resolved

    @staticmethod
    def _insert(c, key, e, now):
        c.execute("INSERT INTO alert_events(key, kind, severity, subject, message, job_id, "
                  "first_seen) VALUES (?,?,?,?,?,?,?)",
                  (key, e["kind"], e["severity"], e["subject"], e["message"], e["job_id"], now))

    # ---- sending --------------------------------------------------------------------------
    def pending(self):
        """(events not told yet, conditions told that have cleared since)."""
        db = self.master.db
        return (_event_rows(db, "digest_id IS NULL"),
                _event_rows(db, "cleared IS NOT NULL AND digest_id IS NOT NULL AND "
                                "cleared_digest_id IS NULL"))

    def send_due(self, now, v=None):
        """Sends one digest of what is pending if the interval since the last one has passed.
        The events are claimed for the digest before it goes out, so that two masters' rounds
        never send the same event twice; if no channel delivers it, they are pending again."""
        db = self.master.db
        v = v or cfg.values(db)
        with db.tx() as c:
            fresh, cleared = self.pending()
            if not fresh and not cleared:
                return {"sent": None, "why": "nothing to tell"}
            last = c.execute("SELECT max(t) FROM alert_digests WHERE test=0").fetchone()[0]
            interval = timeutil.parse_duration(v["interval"])
            if last is not None and now - last < interval:
                return {"sent": None, "why": f"the next digest is due at "
                                             f"{timeutil.iso(last + interval)}"}
            did = c.execute("INSERT INTO alert_digests(t, test, events, delivered, results) "
                            "VALUES (?,0,?,0,'{}')", (now, len(fresh) + len(cleared))).lastrowid
            c.executemany("UPDATE alert_events SET digest_id=? WHERE id=?",
                          [(did, e["id"]) for e in fresh])
            c.executemany("UPDATE alert_events SET cleared_digest_id=? WHERE id=?",
                          [(did, e["id"]) for e in cleared])
        for e in fresh:
            if e["cleared"] is not None:
                e["message"] += " (resolved since)"
        d = digest.build(fresh, cleared, now)
        results = channels.deliver(v, d)
        delivered = any(r["ok"] for r in results.values())
        with db.tx() as c:
            c.execute("UPDATE alert_digests SET delivered=?, results=? WHERE id=?",
                      (int(delivered), json.dumps(results), did))
            if not delivered:
                c.execute("UPDATE alert_events SET digest_id=NULL WHERE digest_id=?", (did,))
                c.execute("UPDATE alert_events SET cleared_digest_id=NULL WHERE "
                          "cleared_digest_id=?", (did,))
        return {"sent": results, "subject": d["subject"],
                "why": None if delivered else "no channel delivered it; it is tried again "
                                              "after the interval"}

    def test(self, now=None, only=None):
        """Sends a test message on each channel turned on (or those named); {channel: result}."""
        now = time.time() if now is None else now
        db = self.master.db
        v = cfg.values(db)
        d = digest.build([], [], now, test=True)
        results = channels.deliver(v, d, only=only)
        with db.tx() as c:
            c.execute("INSERT INTO alert_digests(t, test, events, delivered, results) "
                      "VALUES (?,?,?,?,?)", (now, 1, 0, int(any(r["ok"] for r in
                                                               results.values())),
                                             json.dumps(results)))
        return {"subject": d["subject"], "results": results}


def history(db, limit=20):
    """The latest digests and test messages, newest first, with each channel's result."""
    return [{"id": r["id"], "time": timeutil.iso(r["t"]), "test": bool(r["test"]),
             "events": r["events"], "delivered": bool(r["delivered"]),
             "results": json.loads(r["results"] or "{}")}
            for r in db.all("SELECT id, t, test, events, delivered, results FROM alert_digests "
                            "ORDER BY t DESC, id DESC LIMIT ?", (limit,))]


def open_events(db, limit=200):
    """Events not told yet and conditions that still hold, newest first."""
    rows = _event_rows(db, "digest_id IS NULL OR (cleared IS NULL AND job_id IS NULL)",
                       order="id DESC LIMIT ?", args=(limit,))
    for r in rows:
        r["since"] = timeutil.iso(r.pop("first_seen"))
        r["told"] = r.pop("digest_id") is not None
        r["cleared"] = timeutil.iso(r["cleared"]) if r["cleared"] else None
    return rows


def delivery_state(db):
    """{"channels": turned on, "to": {channel: where it goes}, "last": time of the last
    digest, "failed": {channel: why} of that digest's channels that did not deliver} for the
    health summary."""
    v = cfg.values(db)
    row = db.one("SELECT t, results FROM alert_digests WHERE test=0 ORDER BY t DESC, id DESC "
                 "LIMIT 1")
    results = json.loads(row[1] or "{}") if row else {}
    to = {"email": v["recipients"], "syslog": v["syslog_address"],
          "webhook": v["webhook_url"], "command": v["command"]}
    return {"channels": cfg.channels(v), "problems": cfg.problems(v),
            "to": {k: to[k] for k in cfg.channels(v)},
            "last": timeutil.iso(row[0]) if row else None,
            "failed": {k: r["text"] for k, r in results.items() if not r["ok"]}}
