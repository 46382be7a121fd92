"""Health at a glance (`cairn status`, the console's dashboard): each disk pool's capacity,
high-water state and growth; each host's reachability and last contact; the last day's
failed, partial and missed jobs; the last good backup of each client; the catalog backup;
and the warnings these add up to.

The hosts are asked side by side, each with a short timeout, and the answer never waits for
one that does not answer past that: a site with three hosts down costs one timeout, not
three, and each such host is reported as not reachable with the reason."""

import threading
import time

from app import pool_capacity, status as st, timeutil
from app.alerts.alerter import delivery_state
from app.health_warnings import warnings
from app.jobs.storage import pool_storage
from plugins.storage import registry

# Seconds a host gets to answer (its agent started or reused, a ping, its pools' volumes).
ASK_TIMEOUT = 8.0
DAY = 86400
# Ended jobs that count as failed: all but success, partial success, an administrator's
# cancel and a missed start window (counted on their own).
NOT_FAILED = {st.OK, st.PARTIAL, st.CANCELED, st.WINDOW_CLOSED}


def ask_hosts(master, hosts, volumes_of, timeout=ASK_TIMEOUT, usage_of=None):
    """{host name: {"reachable", "error", "checks": {path: check_volumes entry}, "usage":
    {pool: pool_usage answer}}}, every host asked in its own thread; one that has not
    answered within `timeout` is "not reachable" and its thread is left to end on its own.
    usage_of: {host: [(pool name, storage spec)]}, the pools whose type keeps its own
    accounting (a deduplicating pool's chunks); one that cannot tell is left out."""
    usage_of = usage_of or {}
    answers = {}
    lock = threading.Lock()

    def ask(h):
        name = h["name"]
        try:
            conn = master.hosts.connect(h)
            conn.call("ping", timeout=timeout)
            paths = volumes_of.get(name) or []
            checks = {}
            if paths:
                vols = conn.call("check_volumes", {"paths": paths}, timeout=timeout)["volumes"]
                checks = {v["path"]: v for v in vols}
            usage = {}
            for pool, spec in usage_of.get(name) or []:
                try:
                    usage[pool] = conn.call("pool_usage", {"storage": spec}, timeout=timeout)
                except Exception:  # noqa: BLE001 - the file systems' figures still hold
                    pass
            got = {"reachable": True, "error": None, "checks": checks, "usage": usage}
        except Exception as e:  # noqa: BLE001 - whatever stops a host answering is its state
            text = getattr(e, "message", None) or str(e).strip() or type(e).__name__
            got = {"reachable": False, "error": text.splitlines()[0], "checks": {}}
        with lock:
            answers[name] = got

    threads = [threading.Thread(target=ask, args=(h,), daemon=True, name=f"health-{h['name']}")
               for h in hosts]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout + 1.0
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    with lock:
        out = dict(answers)
    for h in hosts:
        out.setdefault(h["name"], {"reachable": False, "checks": {},
                                   "error": f"no answer within {timeout:.0f} s"})
    return out


def job_summary(db, now):
    """The jobs that ended in the last 24 hours: counts and ids of the failed, partial and
    missed ones, and how many ran well; with the jobs queued and running now."""
    rows = db.all("SELECT id, status FROM jobs WHERE state='done' AND ended_t>=? ORDER BY id",
                  (now - DAY,))
    failed = [r[0] for r in rows if r[1] not in NOT_FAILED]
    partial = [r[0] for r in rows if r[1] == st.PARTIAL]
    missed = [r[0] for r in rows if r[1] == st.WINDOW_CLOSED]
    canceled = [r[0] for r in rows if r[1] == st.CANCELED]
    counts = dict(db.all("SELECT state, count(*) FROM jobs WHERE state IN ('queued','active') "
                         "GROUP BY state"))
    return {"failed_24h": len(failed), "partial_24h": len(partial), "missed_24h": len(missed),
            "canceled_24h": len(canceled),
            "succeeded_24h": sum(1 for r in rows if r[1] == st.OK),
            "failed_ids": failed, "partial_ids": partial, "missed_ids": missed,
            "canceled_ids": canceled,
            "queued": counts.get("queued", 0), "active": counts.get("active", 0)}


def client_summary(db, days, now):
    """Each client of a policy with its last backup that ended well (status 0 or 1) and
    whether it is stale: none for `days` days (a client registered more recently than that
    is not stale for having none yet)."""
    last = {r[0]: (r[1], r[2], r[3]) for r in db.all(
        "SELECT client, max(ended_t), ended, id FROM jobs WHERE type='backup' AND state='done' "
        "AND status IN (?,?) GROUP BY client", (st.OK, st.PARTIAL))}
    out = []
    for name, created in db.all(
            "SELECT DISTINCT h.name, h.created FROM policy_clients pc "
            "JOIN hosts h ON h.id=pc.host_id ORDER BY h.name"):
        t, ended, jid = last.get(name, (None, None, None))
        since = t if t is not None else timeutil.parse_iso(created)
        out.append({"name": name, "last_successful_backup": ended, "last_backup_job": jid,
                    "age_days": round((now - t) / DAY, 1) if t is not None else None,
                    "stale": now - since > days * DAY})
    return out


def own_accounting(master, pools):
    """{host: [(pool name, storage spec)]} of the pools whose type keeps its own accounting
    (registry capability "reclaim": chunks in containers)."""
    out = {}
    for p in pools:
        if not registry.can(p["server_type"], "reclaim"):
            continue
        try:
            spec = pool_storage(master, master.config.storage_server(p["server"]))
        except Exception:  # noqa: BLE001 - a key the master lacks: the file systems' figures only
            continue
        out.setdefault(p["host"], []).append((p["name"], spec))
    return out


def pool_summary(master, pools, answers, now):
    """Each pool's capacity (pool_capacity), high-water state and growth; a sample of its use
    is kept when it could be measured."""
    out = []
    for p in pools:
        ans = answers.get(p["host"]) or {}
        cap = pool_capacity.capacity(p, ans.get("checks") or {})
        if ans.get("reachable") is None:
            cap["error"] = f"host {p['host']} is not asked yet"
        elif not ans["reachable"]:
            cap["error"] = f"host {p['host']} is not reachable ({ans.get('error')})"
        grow = None
        if cap["size_bytes"] is not None:
            pool_capacity.record(master.db, p["id"], cap["size_bytes"], cap["used_bytes"], now)
            grow = pool_capacity.growth(master.db, p["id"], now, cap["used_bytes"])
        own = (ans.get("usage") or {}).get(p["name"])
        if own is not None:
            # a deduplicating pool's own figures: data stored once, in its container files
            cap["dedup"] = {k: own.get(k) for k in ("stored_bytes", "container_bytes",
                                                    "chunks")}
        out.append({"name": p["name"], "server": p["server"], "type": p["server_type"],
                    "host": p["host"], **cap, "high_water": p["high_water"],
                    "low_water": p["low_water"], "growth_bytes_per_day": grow,
                    "days_to_high_water": pool_capacity.days_to_high_water(
                        cap, p["high_water"], grow)})
    return out


def host_summary(master, hosts, answers):
    out = []
    for h in hosts:
        a = answers[h["name"]]
        heard = master.hosts.last_heard(h["name"])
        last = h.get("last_contact")
        if heard is not None and (last is None or timeutil.iso(heard) > last):
            last = timeutil.iso(heard)
        out.append({"name": h["name"], "kind": h["kind"], "address": h.get("address"),
                    "reachable": a["reachable"], "last_contact": last, "error": a["error"]})
    return out


# A host's answer before it was first asked (summary with answers given, from StateCache)
NOT_ASKED = {"reachable": None, "error": None, "checks": {}}


def summary(master, now=None, timeout=ASK_TIMEOUT, answers=None):
    """The whole health document (see README, `cairn status`). answers: the hosts' answers
    at hand (StateCache) instead of asking them now; a host missing from them is not asked
    yet ("reachable": None)."""
    now = time.time() if now is None else now
    hosts = master.config.hosts()
    pools = master.config.disk_pools()
    volumes_of = {}
    for p in pools:
        volumes_of.setdefault(p["host"], []).extend(
            v for v in p["volumes"] if v not in volumes_of.get(p["host"], []))
    if answers is None:
        answers = ask_hosts(master, hosts, volumes_of, timeout, own_accounting(master, pools))
    else:
        answers = {h["name"]: answers.get(h["name"], NOT_ASKED) for h in hosts}
    # hosts that answered now: their last contact is now, whatever the throttling kept
    for name, a in answers.items():
        if a["reachable"]:
            heard = master.hosts.last_heard(name)
            if heard is not None:
                master.record_contact(name, heard)
    hosts = master.config.hosts()
    doc = {"generated": timeutil.iso(now),
           "pools": pool_summary(master, pools, answers, now),
           "hosts": host_summary(master, hosts, answers),
           "jobs": job_summary(master.db, now),
           "clients": client_summary(master.db, master.setting("stale_client_days"), now),
           "catalog_backup": master.catalog_backup_state(now)}
    doc["stale_client_days"] = master.setting("stale_client_days")
    doc["alerts"] = delivery_state(master.db)
    # the newest entries of the audit log and its head: cheap; `cairn audit --verify` walks
    # the whole chain
    doc["audit"] = master.audit_verify(last=AUDIT_CHECKED)
    doc["warnings"] = warnings(doc)
    doc["ok"] = not any(w["severity"] == "error" for w in doc["warnings"])
    return doc


# How many of the audit log's newest entries the health summary checks.
AUDIT_CHECKED = 1000


class StateCache:
    """The hosts' answers (ask_hosts) for the console's lists, which read every few seconds
    and must not wait for a host: a read gets the answers at hand at once and, when they are
    older than max_age, starts a new ask in the background that a later read gets."""

    def __init__(self, max_age=30.0, timeout=ASK_TIMEOUT):
        self.max_age, self.timeout = max_age, timeout
        self._answers, self._asked = None, None
        self._running = False
        self._lock = threading.Lock()

    def answers(self, master):
        """{host: answer} or None while the first ask is on its way."""
        with self._lock:
            stale = self._asked is None or time.monotonic() - self._asked > self.max_age
            start = stale and not self._running
            if start:
                self._running = True
            answers = self._answers
        if start:
            hosts = master.config.hosts()
            volumes_of = {}
            for p in master.config.disk_pools():
                volumes_of.setdefault(p["host"], []).extend(p["volumes"])
            threading.Thread(target=self._ask, args=(master, hosts, volumes_of),
                             daemon=True, name="health-states").start()
        return answers

    def _ask(self, master, hosts, volumes_of):
        try:
            got = ask_hosts(master, hosts, volumes_of, self.timeout)
        finally:
            with self._lock:
                self._running = False
        with self._lock:
            self._answers, self._asked = got, time.monotonic()


def state_text(answer):
    if answer is None:
        return "checking…"
    return "reachable" if answer["reachable"] else f"not reachable ({answer['error']})"
