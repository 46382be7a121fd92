"""One alert message of everything pending: a subject that counts what happened, a plain text
body for mail, and a JSON document for webhooks and commands."""

import socket

from app import timeutil
from app.alerts.events import cleared_text

ORDER = ["failed", "verify-damage", "high-water", "host-unreachable", "catalog-overdue",
         "missed", "partial"]
HEADINGS = {"failed": ("failed job", "failed jobs"),
            "verify-damage": ("verify with findings", "verifies with findings"),
            "high-water": ("pool above its high-water mark", "pools above their high-water mark"),
            "host-unreachable": ("host unreachable", "hosts unreachable"),
            "catalog-overdue": ("catalog backup overdue", "catalog backups overdue"),
            "missed": ("missed backup", "missed backups"),
            "partial": ("partial job", "partial jobs")}


def master_name():
    return socket.gethostname() or "localhost"


def _count(n, kind):
    one, many = HEADINGS.get(kind, (kind, kind))
    return f"{n} {one if n == 1 else many}"


def build(events, cleared, now, test=False):
    """{"subject", "text", "json"} of a digest. events and cleared: rows of alert_events
    (dicts) told for the first time and conditions that ended."""
    master = master_name()
    by_kind = {}
    for e in events:
        by_kind.setdefault(e["kind"], []).append(e)
    kinds = sorted(by_kind, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))
    if test:
        subject = f"[Cairn] {master}: test message"
    elif kinds:
        subject = f"[Cairn] {master}: " + ", ".join(_count(len(by_kind[k]), k) for k in kinds)
    else:
        subject = f"[Cairn] {master}: all clear ({len(cleared)} resolved)"
    lines = [f"Cairn master {master}, {timeutil.iso(now)}", ""]
    if test:
        lines += ["This is a test message from Cairn (`cairn alerts test`): alerts reach "
                  "this address.", ""]
    for k in kinds:
        head = _count(len(by_kind[k]), k)
        lines.append(head[0].upper() + head[1:] + ":")
        for e in by_kind[k]:
            lines.append(f"  - {e['message']}")
        lines.append("")
    if cleared:
        lines.append("Resolved:")
        lines += [f"  - {cleared_text(e)}" for e in cleared]
        lines.append("")
    if any(e["job_id"] for e in events):
        lines.append("Details: `cairn jobs show JOB` or the console's activity monitor.")
    lines.append("Alert settings: `cairn alerts show`.")

    def item(e):
        return {"kind": e["kind"], "severity": e["severity"], "subject": e["subject"],
                "message": e["message"], "job_id": e["job_id"],
                "since": timeutil.iso(e["first_seen"])}
    doc = {"master": master, "generated": timeutil.iso(now), "test": test, "subject": subject,
           "events": [item(e) for e in events],
           "resolved": [dict(item(e), message=cleared_text(e)) for e in cleared]}
    return {"subject": subject, "text": "\n".join(lines) + "\n", "json": doc}

