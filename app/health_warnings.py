"""The open warnings of the health summary (app/health.py): one sentence each, with its
severity ("error": something fails or will fail now; "warning": needs a look soon) and what
it concerns ({"kind", "name"}), so that the console can link it to that object."""

# A pool this close below its high-water mark, or that reaches it within this many days at
# its present growth, is warned about before its backups start to fail.
NEAR_HIGH_WATER_PCT = 5.0
NEAR_HIGH_WATER_DAYS = 7


def _w(severity, kind, name, text):
    return {"severity": severity, "kind": kind, "name": name, "message": text}


def _ids(ids, most=10):
    shown = ", ".join(str(i) for i in ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


def _n(n, word, plural=None):
    return f"{n} {word if n == 1 else plural or word + 's'}"


def warnings(doc):
    out = []
    down = {h["name"] for h in doc["hosts"] if h["reachable"] is False}
    for h in doc["hosts"]:
        if h["reachable"] is False:
            since = f"; last contact {h['last_contact']}" if h["last_contact"] else \
                "; never reached"
            out.append(_w("error", "host", h["name"],
                          f"Host {h['name']} is not reachable ({h['error']}){since}."))
    for p in doc["pools"]:
        if p["size_bytes"] is None:
            if "not asked yet" in (p["error"] or "") or p["host"] in down:
                continue    # the host's own warning says why
            out.append(_w("warning", "disk-pool", p["name"],
                          f"Disk pool {p['name']}: its capacity is not known ({p['error']})."))
            continue
        if p["above_high_water"]:
            out.append(_w("error", "disk-pool", p["name"],
                          f"Disk pool {p['name']} is {p['used_percent']:.0f}% full, at or "
                          f"above its high-water mark of {p['high_water']}%: new backups to "
                          "it fail until space is freed."))
        elif p["used_percent"] >= p["high_water"] - NEAR_HIGH_WATER_PCT or (
                p["days_to_high_water"] is not None
                and p["days_to_high_water"] <= NEAR_HIGH_WATER_DAYS):
            when = (f"; at its present growth in about {p['days_to_high_water']:.0f} days"
                    if p["days_to_high_water"] is not None else "")
            out.append(_w("warning", "disk-pool", p["name"],
                          f"Disk pool {p['name']} is {p['used_percent']:.0f}% full, near its "
                          f"high-water mark of {p['high_water']}%{when}."))
        elif p["error"]:
            out.append(_w("warning", "disk-pool", p["name"],
                          f"Disk pool {p['name']}: {p['error']}."))
    j = doc["jobs"]
    if j["failed_24h"]:
        out.append(_w("error", "jobs", None,
                      f"{_n(j['failed_24h'], 'job')} failed in the last 24 hours: "
                      f"{_ids(j['failed_ids'])}."))
    if j["missed_24h"]:
        out.append(_w("warning", "jobs", None,
                      f"{_n(j['missed_24h'], 'scheduled backup')} missed the start window in "
                      f"the last 24 hours: {_ids(j['missed_ids'])}."))
    if j["partial_24h"]:
        out.append(_w("warning", "jobs", None,
                      f"{_n(j['partial_24h'], 'job')} ended partially in the last 24 hours (files "
                      f"skipped, see their logs): {_ids(j['partial_ids'])}."))
    days = doc["stale_client_days"]
    for c in doc["clients"]:
        if c["stale"]:
            last = (f"last {c['last_successful_backup']}" if c["last_successful_backup"]
                    else "none yet")
            out.append(_w("warning", "client", c["name"],
                          f"Client {c['name']} has no successful backup in {days} days "
                          f"({last})."))
    cb = doc["catalog_backup"]
    if cb["overdue"]:
        last = f"the last one {cb['last']}" if cb["last"] else "there is none yet"
        out.append(_w("warning", "catalog", None,
                      f"A catalog backup is overdue ({last}): a lost master would lose the "
                      f"record of {_n(cb['images'], 'image')}."))
    al = doc.get("alerts") or {}
    for channel, why in (al.get("failed") or {}).items():
        out.append(_w("warning", "alerts", channel,
                      f"Alerts could not be sent by {channel} at {al['last']}: {why}."))
    for text in al.get("problems") or []:
        out.append(_w("warning", "alerts", None, f"Alert settings: {text}."))
    for name in cb.get("keys_not_escrowed") or []:
        out.append(_w("warning", "storage-server", name,
                      f"No catalog backup holds the key of storage server {name} yet."))
    au = doc.get("audit") or {}
    for b in (au.get("broken") or [])[:3]:
        out.append(_w("error", "audit", None,
                      f"The audit log's hash chain is broken at entry {b['seq']}: "
                      f"{b['problem']} (`cairn audit --verify`)."))
    return out
