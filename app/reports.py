"""Reports over the catalog's job history.

The client backups report has one row per backup job that ended (whatever its status), with
its client, policy, schedule, times, files, bytes, elapsed time and rate, filtered by a time
range (on the job's start) and by client and policy.

Jobs that ran together share a *group*: the backup jobs of the report whose run times overlap,
directly or through a chain of other jobs (the connected components of their intervals; jobs
that only touch, one ending the second the next starts, do not overlap). A group's combined
rate is the sum of its jobs' bytes over its span (last end − first start): the throughput the
backup system delivered while those jobs ran, which no single job's rate shows. Groups are
formed among the report's own rows, so a filtered report describes exactly what it lists.

Per-client bytes per day (by the job's start, in UTC or local time) feed a stacked chart.
Times are the catalog's ISO 8601 UTC texts throughout; CSV export writes them as they are."""

import csv
import json
import os
import tempfile
import time
from datetime import datetime, timedelta, timezone

from app import status as st
from app import timeutil
from app.errors import CairnError, ValidationError

# A chart of a longer range shows the days from the first backup to the last only.
MAX_CHART_DAYS = 366

# The CSV's columns, in order; the header row names them so.
CSV_COLUMNS = ("job_id", "client", "policy", "schedule", "schedule_type", "started", "ended",
               "elapsed_s", "files", "bytes", "rate_bytes_per_s", "status", "status_text",
               "group", "group_rate_bytes_per_s", "image_id")


def _time(name, value):
    """ISO text, epoch seconds or None → the catalog's ISO text (comparable as text)."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return timeutil.iso(value)
    try:
        return timeutil.iso(timeutil.parse_iso(str(value)))
    except ValidationError:
        raise ValidationError(f"--{name} {value!r} is not a time",
                              hint="write it as ISO 8601, e.g. 2026-11-21T20:00:00Z") from None


def backup_rows(db, since=None, until=None, client=None, policy=None):
    """The report's rows, oldest start first, without groups. `since` is inclusive, `until`
    exclusive; both apply to the job's start time."""
    since, until = _time("since", since), _time("until", until)
    if since and until and since >= until:
        raise ValidationError(f"the report's range is empty: {since} is not before {until}",
                              hint="give --since a time before --until")
    sql = ("SELECT id, client, policy, schedule, params, started, ended, files, bytes, status,"
           " image_id, rate_bytes_per_s FROM jobs WHERE type='backup' AND state='done' AND started IS NOT NULL"
           # the parent of a multi-stream backup (no storage unit) adds up its streams' jobs
           " AND storage_unit IS NOT NULL"
           " AND ended IS NOT NULL")
    args = []
    for clause, value in (("started>=?", since), ("started<?", until), ("client=?", client),
                          ("policy=?", policy)):
        if value:
            sql += " AND " + clause
            args.append(value)
    rows = []
    for r in db.all(sql + " ORDER BY started, id", args):
        start, end = timeutil.parse_iso(r["started"]), timeutil.parse_iso(r["ended"])
        elapsed = max(0.0, end - start)
        try:
            schedule_type = json.loads(r["params"] or "{}").get("schedule_type")
        except ValueError:
            schedule_type = None
        rows.append({
            "job_id": r["id"], "client": r["client"], "policy": r["policy"],
            "schedule": r["schedule"], "schedule_type": schedule_type,
            "started": r["started"], "ended": r["ended"], "elapsed_s": int(elapsed),
            "files": r["files"], "bytes": r["bytes"],
            # Catalog times have whole seconds: a job shorter than a few seconds has the
            # rate it measured itself while running.
            "rate_bytes_per_s": (r["bytes"] / elapsed if elapsed >= SHORT_JOB_S
                                 else r["rate_bytes_per_s"]),
            "status": r["status"],
            "status_text": st.text(r["status"]) if r["status"] is not None else None,
            "image_id": r["image_id"],
        })
    return rows


#: below this many seconds between start and end, second-resolution times say little
SHORT_JOB_S = 5


def group_overlapping(rows):
    """Gives each row the `group` (1, 2, … by start) of the jobs it ran together with and that
    group's `group_rate_bytes_per_s`; returns the groups. Rows may come in any order."""
    spans = sorted(((timeutil.parse_iso(r["started"]), timeutil.parse_iso(r["ended"]), r)
                    for r in rows), key=lambda s: (s[0], s[1], s[2]["job_id"]))
    groups = []
    for start, end, row in spans:
        g = groups[-1] if groups else None
        if g is None or start >= g["_end"]:
            g = {"group": len(groups) + 1, "_start": start, "_end": end, "jobs": [],
                 "rows": [], "bytes": 0}
            groups.append(g)
        g["_end"] = max(g["_end"], end)
        g["jobs"].append(row["job_id"])
        g["rows"].append(row)
        g["bytes"] += row["bytes"]
        row["group"] = g["group"]
    out = []
    for g in groups:
        span = g["_end"] - g["_start"]
        rate = g["bytes"] / span if span >= SHORT_JOB_S else None
        if rate is None and len(g["rows"]) == 1:
            rate = g["rows"][0]["rate_bytes_per_s"]
        out.append({"group": g["group"], "started": timeutil.iso(g["_start"]),
                    "ended": timeutil.iso(g["_end"]), "span_s": int(span), "jobs": g["jobs"],
                    "bytes": g["bytes"], "rate_bytes_per_s": rate})
    rates = {g["group"]: g["rate_bytes_per_s"] for g in out}
    for _, _, row in spans:
        row["group_rate_bytes_per_s"] = rates[row["group"]]
    return out


def summarize(rows, groups):
    """Totals of a report. `average_rate` is bytes over the jobs' summed elapsed time (each
    job's rate weighted by its duration); `combined_rate` is bytes over the time any backup
    ran (the groups' spans), the throughput of the system as a whole."""
    total_bytes = sum(r["bytes"] for r in rows)
    elapsed = sum(r["elapsed_s"] for r in rows)
    busy = sum(g["span_s"] for g in groups)
    return {
        "jobs": len(rows),
        "succeeded": sum(r["status"] == st.OK for r in rows),
        "partial": sum(r["status"] == st.PARTIAL for r in rows),
        "failed": sum(r["status"] not in (st.OK, st.PARTIAL) for r in rows),
        "clients": len({r["client"] for r in rows}),
        "files": sum(r["files"] for r in rows),
        "bytes": total_bytes,
        "elapsed_s": elapsed,
        "busy_s": busy,
        "groups": len(groups),
        "average_rate_bytes_per_s": total_bytes / elapsed if elapsed else None,
        "combined_rate_bytes_per_s": total_bytes / busy if busy else None,
    }


def _day(iso_text, local):
    ts = timeutil.parse_iso(iso_text)
    if local:
        return time.strftime("%Y-%m-%d", time.localtime(ts))
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d")


def daily_totals(rows, local=False, first=None, last=None):
    """Bytes per client per day of start, every day from `first` to `last` (days as
    YYYY-MM-DD; by default those of the first and last row), a day without backups being 0,
    for a stacked bar chart:
    {"days": [...], "clients": [...], "bytes": {client: [per day]}, "jobs": {...}}."""
    per = {}
    for r in rows:
        key = (r["client"], _day(r["started"], local))
        b, n = per.get(key, (0, 0))
        per[key] = (b + r["bytes"], n + 1)
    first = first or min((d for _, d in per), default=None)
    last = last or max((d for _, d in per), default=None)
    if not first or not last or first > last:
        return {"days": [], "clients": [], "bytes": {}, "jobs": {}}
    start = datetime.strptime(first, "%Y-%m-%d")
    count = (datetime.strptime(last, "%Y-%m-%d") - start).days + 1
    days = [(start + timedelta(days=i)).strftime("%Y-%m-%d") for i in range(count)]
    clients = sorted({c for c, _ in per})
    return {"days": days, "clients": clients,
            "bytes": {c: [per.get((c, d), (0, 0))[0] for d in days] for c in clients},
            "jobs": {c: [per.get((c, d), (0, 0))[1] for d in days] for c in clients}}


def _chart_days(since, until, local):
    """The first and last day a chart of the report shows: the whole range asked for, so
    that days without backups show as such; the rows' days where the range is open or
    longer than MAX_CHART_DAYS."""
    if not since or not until:
        return None, None
    first = _day(since, local)
    last = _day(timeutil.iso(timeutil.parse_iso(until) - 1), local)
    span = (datetime.strptime(last, "%Y-%m-%d") - datetime.strptime(first, "%Y-%m-%d")).days
    if span >= MAX_CHART_DAYS:
        return None, None
    return first, last


def backup_report(m, since=None, until=None, client=None, policy=None, local_days=False):
    """The client backups report of master `m`: rows, groups, summary and daily totals."""
    rows = backup_rows(m.db, since, until, client, policy)
    groups = group_overlapping(rows)
    since, until = _time("since", since), _time("until", until)
    first, last = _chart_days(since, until, local_days)
    return {
        "report": "backups",
        "since": since, "until": until,
        "client": client or None, "policy": policy or None,
        "generated": timeutil.iso(time.time()),
        "rows": rows,
        "groups": groups,
        "summary": summarize(rows, groups),
        "daily": daily_totals(rows, local=local_days, first=first, last=last),
    }


def report_choices(m):
    """The clients and policies that have backup jobs, for the report's filters."""
    def distinct(col):
        return [r[0] for r in m.db.all(f"SELECT DISTINCT {col} FROM jobs WHERE type='backup' "
                                       f"AND {col} IS NOT NULL ORDER BY {col}")]
    return {"clients": distinct("client"), "policies": distinct("policy")}


def _plain(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(round(value)))
    return value


def write_csv(rows, path):
    """Writes the rows as CSV with a header row: ISO times, plain numbers (rates in whole
    bytes per second), empty cells for unknown values. The file appears whole or not at
    all: it is written next to its place and renamed into it."""
    path = os.path.abspath(os.path.expanduser(path))
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise ValidationError(f"cannot write {path}: the directory {directory} does not exist",
                              hint="choose a file in an existing directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".cairn-report-", suffix=".csv", dir=directory)
    except OSError as e:
        raise CairnError(f"cannot write {path}: {e.strerror}",
                         hint="choose a directory you can write to") from None
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
            w = csv.writer(f)
            w.writerow(CSV_COLUMNS)
            for r in rows:
                w.writerow([_plain(r.get(c)) for c in CSV_COLUMNS])
        # private as mkstemp makes it (0600), like the catalog it comes from: it names the
        # clients and what their backups held; whoever may see it is the admin's choice
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise CairnError(f"cannot write {path}: {e.strerror}") from None
    return {"path": path, "rows": len(rows)}

