"""`cairn report` (reports over the job history) and `cairn status-codes`."""

from app import status as st
from app.cli.output import out, size, table


def report_commands(sub, cmd):
    rp = cmd(sub, "report", "reports over the job history").add_subparsers(dest="sub",
                                                                           metavar="REPORT")
    p = cmd(rp, "backups", "client backups: one row per backup job that ended",
            handler=_backups)
    p.add_argument("--since", metavar="TIME", help="jobs started at or after TIME")
    p.add_argument("--until", metavar="TIME", help="jobs started before TIME")
    p.add_argument("--client", metavar="HOST")
    p.add_argument("--policy", metavar="NAME")
    p.add_argument("--csv", metavar="FILE", help="also write the rows to FILE as CSV")


def _backups(m, args):
    from app import reports  # for this command only, not for every `cairn` command
    doc = reports.backup_report(m, since=args.since, until=args.until, client=args.client,
                                policy=args.policy)
    if args.csv:
        doc["csv"] = reports.write_csv(doc["rows"], args.csv)
    return out(args, doc, _print_backups_report)


def _print_backups_report(d):
    def rate(v):
        return f"{size(v)}/s" if v else ""

    table([dict(r, bytes=size(r["bytes"]), rate=rate(r["rate_bytes_per_s"]),
                group_rate=rate(r["group_rate_bytes_per_s"]))
           for r in d["rows"]], ["job_id", "client", "policy", "schedule", "started",
                                 "elapsed_s", "files", "bytes", "rate", "status", "group",
                                 "group_rate"])
    s = d["summary"]
    average, combined = s["average_rate_bytes_per_s"], s["combined_rate_bytes_per_s"]
    print(f"{s['jobs']} jobs, {s['failed']} failed; {size(s['bytes'])} in {s['elapsed_s']} s "
          f"of job time" + (f"; average {rate(average)} per job" if average else "")
          + (f", {rate(combined)} combined while backups ran" if combined else ""))
    if d.get("csv"):
        print(f"wrote {d['csv']['rows']} rows to {d['csv']['path']}")


# ---- status-codes ---------------------------------------------------------------------------

def status_codes_commands(sub, cmd):
    cmd(sub, "status-codes", "the table of job status codes", handler=_status_codes,
        opens_master=False)


def _status_codes(args):
    rows = [{"status": k, "meaning": v} for k, v in sorted(st.STATUS_TEXT.items())]
    return out(args, {"status_codes": rows}, lambda d: table(d["status_codes"],
                                                             ["status", "meaning"]))
