"""What there is to tell: events of jobs that ended (failed, missed, verify damage, partial),
each told once, and conditions that hold (a pool above its high-water mark, a host down too
long, an overdue catalog backup), each told when it starts and again when it clears.

An event is {"key", "kind", "severity", "subject", "message", "job_id"}; its key names what
it is about, so that the same failure is never told twice and a condition is one event for
as long as it holds."""

from app import status as st, timeutil

# Jobs that ended up to this long before the last look are looked at again: a job's end is
# stamped before its row is committed, and a look may fall between the two.
OVERLAP_S = 300
VERIFY_FINDINGS = {st.CHECKSUM_MISMATCH, st.IMAGE_DAMAGED, st.POOL_EXPOSED}
QUIET = {st.OK, st.CANCELED}


def _job_kind(job):
    if job["status"] == st.WINDOW_CLOSED:
        return "missed", "warning"
    if job["status"] == st.PARTIAL:
        return "partial", "warning"
    if job["type"] == "verify" and job["status"] in VERIFY_FINDINGS:
        return "verify-damage", "error"
    return "failed", "error"


def _what(job):
    """"backup of client c1 (policy p, schedule daily)" and the like."""
    words = [job["type"]]
    if job["client"]:
        words.append(f"of client {job['client']}")
    extra = [f"{k} {job[k]}" for k in ("policy", "schedule") if job[k]]
    if job["storage_unit"]:
        extra.append(f"storage unit {job['storage_unit']}")
    return " ".join(words) + (f" ({', '.join(extra)})" if extra else "")


def _last_words(db, job):
    """The job's own account of its end: its last error or warning, else what its end line
    adds to the status text; None when the status says it all."""
    end = f"ended with status {job['status']}: "
    for (msg,) in db.all("SELECT message FROM job_log WHERE job_id=? AND level IN "
                         "('error','warning') ORDER BY id DESC LIMIT 5", (job["id"],)):
        msg = msg.decode("utf-8", "replace") if isinstance(msg, bytes) else msg
        if msg.startswith(end):
            msg = msg[len(end):]
            if msg.strip().rstrip(".") == st.text(job["status"]).rstrip("."):
                continue
        return msg if len(msg) <= 300 else msg[:297] + "..."
    return None


def job_events(db, since, kinds, floor=0.0):
    """Events of the jobs that ended after `since` (epoch seconds, less OVERLAP_S) and after
    `floor`, of the kinds chosen. A failed attempt whose next attempt is queued is left to
    that attempt."""
    rows = db.all(
        "SELECT j.id, j.type, j.status, j.client, j.policy, j.schedule, j.storage_unit, "
        "j.ended, j.attempt, EXISTS(SELECT 1 FROM jobs r WHERE r.retry_of=coalesce(j.retry_of, "
        "j.id) AND r.attempt>j.attempt) AS retried FROM jobs j "
        "WHERE j.state='done' AND j.ended_t>? ORDER BY j.id", (max(since - OVERLAP_S, floor),))
    out = []
    for r in rows:
        job = dict(r)
        if job["status"] is None or job["status"] in QUIET or job["retried"]:
            continue
        kind, severity = _job_kind(job)
        if kind not in kinds:
            continue
        text = (f"Job {job['id']}, {_what(job)}, ended {job['ended']} with status "
                f"{job['status']}: {st.text(job['status'])}.")
        why = _last_words(db, job)
        if why:
            text += f" Log: {why}"
        out.append({"key": f"job:{job['id']}", "kind": kind, "severity": severity,
                    "subject": job["client"], "message": text, "job_id": job["id"]})
    return out


def pool_conditions(doc):
    """{key: event} of the pools at or above their high-water mark (health summary doc)."""
    out = {}
    for p in doc["pools"]:
        if p.get("above_high_water"):
            out[f"high-water:{p['name']}"] = {
                "kind": "high-water", "severity": "error", "subject": p["name"], "job_id": None,
                "message": f"Disk pool {p['name']} on {p['host']} is {p['used_percent']:.0f}% "
                           f"full, at or above its high-water mark of {p['high_water']}%: new "
                           "backups to it fail until space is freed."}
    return out


def host_conditions(doc, created, now, down_after):
    """{key: event} of the hosts not reachable for longer than down_after seconds, counted
    from their last contact (or, never reached, from when they were added)."""
    out = {}
    for h in doc["hosts"]:
        if h["reachable"] is not False:
            continue
        since = h["last_contact"] or created.get(h["name"])
        t = timeutil.parse_iso(since) if since else None
        if t is not None and now - t < down_after:
            continue
        last = f"last contact {h['last_contact']}" if h["last_contact"] else "never reached"
        out[f"host:{h['name']}"] = {
            "kind": "host-unreachable", "severity": "error", "subject": h["name"],
            "job_id": None,
            "message": f"Host {h['name']} is not reachable ({h['error']}); {last}."}
    return out


def catalog_condition(state):
    if not state["overdue"]:
        return {}
    last = f"the last one ended {state['last']}" if state["last"] else "there is none yet"
    return {"catalog-overdue": {
        "kind": "catalog-overdue", "severity": "warning", "subject": None, "job_id": None,
        "message": f"A catalog backup is overdue ({last}): a lost master would lose the record "
                   f"of {state['images']} image(s)."}}


def cleared_text(event):
    """What a condition's end says in a digest."""
    what = {"high-water": f"Disk pool {event['subject']} is below its high-water mark again.",
            "host-unreachable": f"Host {event['subject']} is reachable again.",
            "catalog-overdue": "A catalog backup ended well: none is overdue."}
    return what.get(event["kind"], f"Cleared: {event['message']}")
