"""The audit log: who did what, when, from where, and what was refused. One catalog table
(audit_log, migration 26), so a catalog backup carries it and `cairn catalog recover` brings
it back. Entries are only ever appended: each carries the SHA-256 of its own fields and of
the entry before it (prev_hash), so an entry edited, deleted or put in between breaks the
chain at that point (verify). The newest entry's number and hash are also written to
`audit.head` beside the catalog: deleting the newest entries, which leaves a shorter chain
that is whole, shows there as the head's entry missing or different.

The master's own work is recorded too, with the part of the master that did it as the user,
role "system" and origin "local" (system()): the scheduler's jobs ("scheduler"), and the
dispatcher's retries, automatic expiries and scheduled verifies ("dispatcher"), one entry per
job queued, written in the transaction that queues it. No Cairn user has those names.

A catalog recovered from a catalog backup (`cairn catalog recover`) holds the entries up to
the moment of that backup: recovered() appends a "catalog_recover" entry that continues the
chain from the last entry the backup holds and starts a new segment of it, saying which
backup it came from and that entries written after it are not in this catalog. verify()
names each such segment; the chain stays whole across it.

Entries are also sent to syslog (journald reads it) when the master setting audit_syslog
names a facility; the syslog module is loaded only then, and where it does not exist (not
POSIX) nothing is sent."""

import hashlib
import json
import os
import threading
import time

from app import timeutil
from app.errors import ValidationError

GENESIS = "0" * 64
FIELDS = ("seq", "time", "user", "role", "origin", "action", "object", "outcome", "details",
          "prev_hash")
SYSLOG_FACILITIES = ("off", "auth", "authpriv", "daemon", "user", "local0", "local1",
                     "local2", "local3", "local4", "local5", "local6", "local7")
# The master's own actors (system()), and the role their entries carry: no user's names.
SCHEDULER, DISPATCHER, RECOVERY = "scheduler", "dispatcher", "recovery"
SYSTEM_ACTORS = (SCHEDULER, DISPATCHER, RECOVERY, "system")
SYSTEM_ROLE = "system"
# The action of the entry that starts a segment of the chain in a recovered catalog.
RECOVERED = "catalog_recover"
# What an entry's details never hold, whatever a call was given.
SECRET_WORDS = ("passphrase", "password", "secret", "credentials")


def entry_hash(e):
    doc = {f: e[f] for f in FIELDS}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def scrub(value, key=""):
    """A call's arguments fit for the log: secrets replaced, bytes and odd types as text."""
    if any(w in str(key).lower() for w in SECRET_WORDS):
        return None if value is None else "(secret)"
    if isinstance(value, dict):
        return {str(k): scrub(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [scrub(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return "(bytes)"     # a passphrase's, a key's: not even its length
    return str(value)


class AuditLog:
    def __init__(self, db, head_path, syslog_facility=lambda: "off"):
        self.db = db
        self.head_path = head_path
        self.syslog_facility = syslog_facility

    def append(self, user, role, origin, action, obj="", outcome="ok", details=None):
        """Adds one entry at the end of the chain (in a write transaction of its own, so
        two processes never chain onto the same entry) and returns it."""
        e = {"time": _now_text(), "user": user, "role": role, "origin": origin or "local",
             "action": action, "object": obj or "", "outcome": outcome,
             "details": json.dumps(scrub(details or {}), sort_keys=True, default=str)}
        if self.db.conn.in_transaction:
            # a call made inside a transaction of the caller's: the entry commits (or rolls
            # back) with what it records; the head follows with the next entry
            self._insert(self.db.conn, e)
        else:
            with self.db.tx() as c:
                self._insert(c, e)
            self._write_head(e)
        self._forward(e)
        return _public(e)

    def system(self, actor, action, obj="", details=None):
        """An entry of the master's own work (actor: SCHEDULER, DISPATCHER), role "system",
        origin "local". Made inside the caller's write transaction, it commits with what it
        records (call settle() once that committed, for the head file)."""
        return self.append(actor, SYSTEM_ROLE, "local", action, obj, "ok", details)

    def settle(self, entries):
        """The head file brought up to the newest of entries appended inside a transaction
        that has committed since."""
        if entries:
            self._write_head(max(entries, key=lambda e: e["seq"]))

    def recovered(self, backup, created=None, master_host=None, os_user=None):
        """Starts a new segment of the chain in a catalog just recovered from a catalog
        backup: an entry, chained to the last one the backup holds, that says where the
        catalog came from and that entries written after the backup are not in it. The
        head file is written for it (a recovered home has none)."""
        last = self.db.one("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1")
        return self.append(
            RECOVERY, SYSTEM_ROLE, "local", RECOVERED, "catalog", "ok",
            {"backup": backup, "backup_created": created, "master_host": master_host,
             "os_user": os_user,
             "continues_from": {"seq": last[0], "hash": last[1]} if last else None,
             "note": "a new segment of the audit log: entries written after this catalog "
                     "backup was made are not in this catalog (the copy sent to syslog "
                     "has them)"})

    @staticmethod
    def _insert(c, e):
        last = c.execute("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
        e["seq"] = (last[0] + 1) if last else 1
        e["prev_hash"] = last[1] if last else GENESIS
        e["hash"] = entry_hash(e)
        c.execute(f"INSERT INTO audit_log({', '.join(FIELDS)}, hash) VALUES "
                  f"({', '.join('?' * (len(FIELDS) + 1))})",
                  [e[f] for f in FIELDS] + [e["hash"]])

    def entries(self, since=None, user=None, limit=None, verify=True):
        """Entries oldest first (since: a time as the CLI takes it, user: a Cairn user name),
        each with chain_ok (False where the chain is broken at it) when verify."""
        sql, args = "SELECT * FROM audit_log WHERE 1=1", []
        if since:
            sql += " AND time>=?"
            args.append(timeutil.iso(parse_since(since))[:-1] + ".000Z")
        if user:
            sql += " AND user=?"
            args.append(user)
        sql += " ORDER BY seq"
        if limit:
            sql = f"SELECT * FROM ({sql[:-len(' ORDER BY seq')]} ORDER BY seq DESC " \
                  f"LIMIT {int(limit)}) ORDER BY seq"
        rows = [_public(dict(r)) for r in self.db.all(sql, args)]
        if verify:
            broken = {b["seq"] for b in self.verify()["broken"]}
            for r in rows:
                r["chain_ok"] = r["seq"] not in broken
        return rows

    def verify(self, last=None):
        """Walks the chain (its newest `last` entries, when given): {"ok", "entries",
        "broken": [{"seq", "problem"}], "head"}."""
        if last:
            rows = self.db.all("SELECT * FROM (SELECT * FROM audit_log ORDER BY seq DESC "
                               "LIMIT ?) ORDER BY seq", (int(last) + 1,))
        else:
            rows = self.db.all("SELECT * FROM audit_log ORDER BY seq")
        broken, prev, segments = [], None, []
        for r in rows:
            r = dict(r)
            if r["action"] == RECOVERED and r["role"] == SYSTEM_ROLE:
                segments.append(_segment(r))
            if r["hash"] != entry_hash(r):
                broken.append({"seq": r["seq"], "problem": "its contents were changed"})
            if prev is None:
                if not last and (r["seq"] != 1 or r["prev_hash"] != GENESIS):
                    broken.append({"seq": r["seq"], "problem": "the entries before it are "
                                                               "missing"})
            elif r["seq"] != prev["seq"] + 1 or r["prev_hash"] != prev["hash"]:
                gap = r["seq"] - prev["seq"] - 1
                broken.append({"seq": r["seq"], "problem": (
                    ("the entry before it is missing" if gap == 1 else
                     f"{gap} entries before it are missing") if gap > 0 else
                    "it does not follow the entry before it")})
            prev = r
        head = self._check_head(rows, broken)
        count = self.db.one("SELECT count(*) FROM audit_log")[0]
        return {"ok": not broken, "entries": count, "broken": broken, "head": head,
                "checked": len(rows), "segments": segments}

    def _check_head(self, rows, broken):
        head = self._read_head()
        if head is None:
            return "none"
        row = self.db.one("SELECT hash FROM audit_log WHERE seq=?", (head["seq"],))
        if row is None:
            broken.append({"seq": head["seq"], "problem": "the newest entries were deleted "
                                                          f"(up to entry {head['seq']})"})
            return "missing"
        if row[0] != head["hash"]:
            broken.append({"seq": head["seq"], "problem": "it differs from the entry the "
                                                          "head file recorded"})
            return "differs"
        return "matches"

    def _read_head(self):
        try:
            with open(self.head_path) as f:
                doc = json.load(f)
            return {"seq": int(doc["seq"]), "hash": str(doc["hash"])}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write_head(self, e):
        # Two processes may write it out of order: the older entry then stands as the head,
        # which still checks (verify finds it in the chain); a newer one is never lost from
        # the table, only from the head.
        head = self._read_head()
        if head is not None and head["seq"] >= e["seq"]:
            return
        tmp = f"{self.head_path}.{os.getpid()}-{threading.get_ident()}.tmp"
        try:
            # private, as everything in the master's home
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"seq": e["seq"], "hash": e["hash"]}, f)
            os.replace(tmp, self.head_path)
        except OSError:
            pass    # the table holds the entry; the head is a second witness only

    def _forward(self, e):
        try:
            facility = self.syslog_facility()
        except Exception:   # a damaged setting must not stop the audit itself
            facility = "off"
        if facility in (None, "", "off"):
            return
        try:
            import syslog   # lazily: not on every platform, and only when configured
        except ImportError:
            return
        fac = getattr(syslog, "LOG_" + facility.upper(), syslog.LOG_USER)
        level = syslog.LOG_WARNING if e["outcome"] != "ok" else syslog.LOG_INFO
        syslog.openlog("cairn-audit", 0, fac)
        syslog.syslog(fac | level, format_line(_public(e)))


def _segment(row):
    """A "catalog_recover" entry as verify() names it: where the segment starts and why."""
    try:
        d = json.loads(row["details"])
    except ValueError:
        d = {}
    d = d if isinstance(d, dict) else {}
    return {"seq": row["seq"], "time": row["time"], "backup": d.get("backup"),
            "backup_created": d.get("backup_created"),
            "continues_from": (d.get("continues_from") or {}).get("seq")
            if isinstance(d.get("continues_from"), dict) else None}


def segment_text(seg):
    """A line saying where a segment of the chain starts (the CLI, the console)."""
    made = f" made {seg['backup_created']}" if seg.get("backup_created") else ""
    return (f"a new segment starts at entry {seg['seq']} ({seg['time']}): the catalog was "
            f"recovered from {seg['backup']}{made}; entries written after that backup are "
            "not in this catalog")


def format_line(e):
    obj = f" {e['object']}" if e["object"] else ""
    return (f"#{e['seq']} {e['time']} user={e['user']} role={e['role'] or '-'} "
            f"origin={e['origin']} {e['action']}{obj} {e['outcome']}"
            + ("" if e["details"] in ({}, None) else
               " " + json.dumps(e["details"], sort_keys=True)))


def parse_since(text):
    """An ISO 8601 time, or a duration back from now (24h, 7d)."""
    try:
        return timeutil.parse_iso(text)
    except ValidationError:
        try:
            return time.time() - (timeutil.parse_duration(text, what="--since") or 0)
        except ValidationError:
            raise ValidationError(f"{text!r} is not a time",
                                  hint="write it as ISO 8601 (2026-11-21T20:00:00Z) or as a "
                                       "time back from now (24h, 7d)") from None


def _now_text():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _public(e):
    d = dict(e)
    try:
        d["details"] = json.loads(d["details"]) if isinstance(d["details"], str) \
            else d["details"]
    except ValueError:
        pass    # an edited entry: shown as it is (verify reports it)
    return d
