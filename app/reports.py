"""Reports over the catalog's job history.

The client backups report has one row per backup job that ended (whatever its status), with
its client, policy, schedule, times, files, bytes, elapsed time and rate, filtered by a time
range (on the job's start) and by client and policy. The restores report is the same over
restore jobs. A row's elapsed time comes from the job's sub-second clock (started_t,
ended_t) and its rate is its bytes over that elapsed time, exactly.

Jobs that ran together share a *group*: the jobs of the report whose run times overlap,
directly or through a chain of other jobs (the connected components of their intervals; jobs
that only touch, one ending as the next starts, do not overlap). A group carries the sum of
its jobs' rates (the "total average data rate" of a multi-client run: the mean per-client
rate times the number of clients), that mean, and its wall-clock rate: its bytes over its
span (last end − first start), the throughput the system delivered while those jobs ran.
The sum is higher whenever the jobs did not all start and end together. Groups are formed
among the report's own rows, so a filtered report describes exactly what it lists.

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
from app.jobs import stats

# A chart of a longer range shows the days from the first backup to the last only.
MAX_CHART_DAYS = 366

# The CSV's columns, in order; the header row names them so.
CSV_COLUMNS = ("job_id", "client", "policy", "schedule", "schedule_type", "started", "ended",
               "elapsed_s", "files", "bytes", "rate_bytes_per_s", "status", "status_text",
               "group", "group_rate_bytes_per_s", "group_total_average_rate_bytes_per_s",
               "image_id")


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


#: the reports there are, by the job type they list
REPORT_TYPES = ("backup", "restore")


def _elapsed(r):
    """(start, elapsed seconds, source) of a job row. The job's own clock (started_t,
    ended_t, sub-second) where the catalog has it; else the whole-second times, and for a
    job shorter than SHORT_JOB_S the time its measured rate implies ("measured")."""
    if r["started_t"] is not None and r["ended_t"] is not None:
        return r["started_t"], max(0.0, r["ended_t"] - r["started_t"]), "clock"
    start = float(timeutil.parse_iso(r["started"]))
    elapsed = max(0.0, timeutil.parse_iso(r["ended"]) - start)
    if elapsed < SHORT_JOB_S and r["rate_bytes_per_s"]:
        return start, r["bytes"] / r["rate_bytes_per_s"], "measured"
    return start, float(elapsed), "seconds"


def job_rows(db, kind="backup", since=None, until=None, client=None, policy=None):
    """The report's rows of jobs of type `kind` that ended, oldest start first, without
    groups. `since` is inclusive, `until` exclusive; both apply to the job's start time.
    Each row's rate_bytes_per_s is its bytes over its elapsed_s, exactly."""
    if kind not in REPORT_TYPES:
        raise ValidationError(f"there is no report of {kind!r} jobs",
                              hint="choose one of: " + ", ".join(REPORT_TYPES))
    since, until = _time("since", since), _time("until", until)
    if since and until and since >= until:
        raise ValidationError(f"the report's range is empty: {since} is not before {until}",
                              hint="give --since a time before --until")
    sql = ("SELECT id, client, policy, schedule, params, started, ended, started_t, ended_t,"
           " files, bytes, status, image_id, rate_bytes_per_s FROM jobs"
           " WHERE type=? AND state='done' AND started IS NOT NULL"
           # the parent of a multi-stream job (no storage unit) adds up its streams' jobs
           " AND storage_unit IS NOT NULL"
           " AND ended IS NOT NULL")
    args = [kind]
    for clause, value in (("started>=?", since), ("started<?", until), ("client=?", client),
                          ("policy=?", policy)):
        if value:
            sql += " AND " + clause
            args.append(value)
    rows = []
    for r in db.all(sql + " ORDER BY COALESCE(started_t, 0), started, id", args):
        start, elapsed, source = _elapsed(r)
        try:
            schedule_type = json.loads(r["params"] or "{}").get("schedule_type")
        except ValueError:
            schedule_type = None
        rows.append({
            "job_id": r["id"], "client": r["client"], "policy": r["policy"],
            "schedule": r["schedule"], "schedule_type": schedule_type,
            "started": r["started"], "ended": r["ended"],
            "started_t": start, "ended_t": start + elapsed,
            "elapsed_s": elapsed, "elapsed_source": source,
            "files": r["files"], "bytes": r["bytes"],
            "rate_bytes_per_s": r["bytes"] / elapsed if elapsed > 0 else None,
            "status": r["status"],
            "status_text": st.text(r["status"]) if r["status"] is not None else None,
            "image_id": r["image_id"],
        })
    rows.sort(key=lambda x: (x["started_t"], x["job_id"]))
    return rows


def backup_rows(db, since=None, until=None, client=None, policy=None):
    """The backup report's rows (job_rows of backup jobs)."""
    return job_rows(db, "backup", since, until, client, policy)


#: below this many seconds between start and end, second-resolution times say little
SHORT_JOB_S = 5


def group_overlapping(rows):
    """Gives each row the `group` (1, 2, … by start) of the jobs it ran together with and that
    group's `group_rate_bytes_per_s`; returns the groups. A group is the jobs whose runs
    overlap, directly or through a chain of others (jobs that only touch do not), on the
    jobs' own sub-second clocks where the catalog has them. Rows may come in any order.

    Each group has three rates: `total_average_rate_bytes_per_s`, the sum of its jobs' own
    rates (what the clients achieved each, added up: as if all ran the whole time);
    `mean_rate_bytes_per_s`, that sum over the number of jobs; and
    `wall_clock_rate_bytes_per_s` (also `rate_bytes_per_s`), its bytes over its span from the
    first start to the last end: what the system delivered while they ran."""
    spans = sorted(((r["started_t"], r["ended_t"], r) for r in rows),
                   key=lambda s: (s[0], s[1], s[2]["job_id"]))
    groups = []
    for start, end, row in spans:
        g = groups[-1] if groups else None
        if g is None or start >= g["_end"]:
            g = {"group": len(groups) + 1, "_start": start, "_end": end, "rows": []}
            groups.append(g)
        g["_end"] = max(g["_end"], end)
        g["rows"].append(row)
        row["group"] = g["group"]
    out = [_group(g) for g in groups]
    by = {g["group"]: g for g in out}
    for _, _, row in spans:
        row["group_rate_bytes_per_s"] = by[row["group"]]["rate_bytes_per_s"]
        row["group_total_average_rate_bytes_per_s"] = \
            by[row["group"]]["total_average_rate_bytes_per_s"]
    return out


def _group(g):
    span = g["_end"] - g["_start"]
    total = sum(r["bytes"] for r in g["rows"])
    rated = [r["rate_bytes_per_s"] for r in g["rows"] if r["rate_bytes_per_s"] is not None]
    summed = sum(rated) if rated else None
    wall = total / span if span > 0 else None
    return {"group": g["group"], "started": timeutil.iso(g["_start"]),
            "ended": timeutil.iso(g["_end"]), "started_t": g["_start"], "ended_t": g["_end"],
            "span_s": span, "jobs": [r["job_id"] for r in g["rows"]],
            "clients": len({r["client"] for r in g["rows"]}), "bytes": total,
            "total_average_rate_bytes_per_s": summed,
            "mean_rate_bytes_per_s": summed / len(rated) if rated else None,
            "wall_clock_rate_bytes_per_s": wall, "rate_bytes_per_s": wall}


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


def add_figures(db, rows, peak_window_s, first_s):
    """Gives each row peak_bytes_per_s, peak_window_s and first_bytes from its samples (None
    where the job kept none)."""
    samples = {}
    ids = [r["job_id"] for r in rows]
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        for s in db.all("SELECT job_id, t, bytes FROM job_samples WHERE job_id IN "
                        f"({','.join('?' * len(part))}) ORDER BY job_id, t", part):
            samples.setdefault(s["job_id"], []).append((s["t"], s["bytes"]))
    for r in rows:
        got = samples.get(r["job_id"])
        if not got:
            r.update(peak_bytes_per_s=None, peak_window_s=None, first_bytes=None)
            continue
        f = stats.summary(got, r["started_t"], window=peak_window_s, first_s=first_s)
        r.update(peak_bytes_per_s=f["peak_bytes_per_s"], peak_window_s=f["peak_window_s"],
                 first_bytes=f["first_bytes"])


def backup_report(m, since=None, until=None, client=None, policy=None, local_days=False):
    """The client backups report of master `m`: rows, groups, summary and daily totals."""
    return job_report(m, "backup", since, until, client, policy, local_days)


def restore_report(m, since=None, until=None, client=None, policy=None, local_days=False):
    """The restores report: the backup report's shape over restore jobs (client and policy
    are those of the image restored)."""
    return job_report(m, "restore", since, until, client, policy, local_days)


def job_report(m, kind, since=None, until=None, client=None, policy=None, local_days=False,
               peak_window_s=stats.PEAK_WINDOW_S, first_s=stats.FIRST_S):
    """The report of jobs of type `kind` (REPORT_TYPES): rows, groups, summary, daily
    totals. Each row also has its job's sustained peak over `peak_window_s` and the data it
    moved in its first `first_s` (app.jobs.stats, from its samples)."""
    stats.check_windows(peak_window_s, first_s)
    rows = job_rows(m.db, kind, since, until, client, policy)
    add_figures(m.db, rows, peak_window_s, first_s)
    groups = group_overlapping(rows)
    since, until = _time("since", since), _time("until", until)
    first, last = _chart_days(since, until, local_days)
    return {
        "report": kind + "s",
        "peak_window_s": peak_window_s, "first_s": first_s,
        "since": since, "until": until,
        "client": client or None, "policy": policy or None,
        "generated": timeutil.iso(time.time()),
        "rows": rows,
        "groups": groups,
        "summary": summarize(rows, groups),
        "daily": daily_totals(rows, local=local_days, first=first, last=last),
    }


def report_choices(m, kind="backup"):
    """The clients and policies that have jobs of type `kind`, for the report's filters."""
    def distinct(col):
        return [r[0] for r in m.db.all(f"SELECT DISTINCT {col} FROM jobs WHERE type=? "
                                       f"AND {col} IS NOT NULL ORDER BY {col}", (kind,))]
    return {"clients": distinct("client"), "policies": distinct("policy")}


def _plain(value, column=None):
    if value is None:
        return ""
    if column == "elapsed_s":
        return f"{value:.3f}".rstrip("0").rstrip(".")
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
                w.writerow([_plain(r.get(c), c) for c in CSV_COLUMNS])
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

