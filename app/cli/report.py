"""`cairn report` (reports over the job history) and `cairn status-codes`."""

from app import status as st
from app.cli.jobs import figure_kwargs, figure_options
from app.cli.output import out, size, table


def report_commands(sub, cmd):
    rp = cmd(sub, "report", "reports over the job history").add_subparsers(dest="sub",
                                                                           metavar="REPORT")
    for name, kind, text in (("backups", "backup", "client backups: one row per backup job "
                              "that ended"),
                             ("restores", "restore", "restores: one row per restore job that "
                              "ended")):
        p = cmd(rp, name, text, handler=_report)
        p.set_defaults(kind=kind)
        p.add_argument("--since", metavar="TIME", help="jobs started at or after TIME")
        p.add_argument("--until", metavar="TIME", help="jobs started before TIME")
        p.add_argument("--client", metavar="HOST")
        p.add_argument("--policy", metavar="NAME")
        p.add_argument("--csv", metavar="FILE", help="also write the rows to FILE as CSV")
        figure_options(p)


def _report(m, args):
    doc = m.job_report(args.kind, since=args.since, until=args.until, client=args.client,
                       policy=args.policy, **figure_kwargs(args))
    if args.csv:
        # the CSV is written here, where the command runs (also against a remote master)
        from app import reports  # for this command only, not for every `cairn` command
        doc["csv"] = reports.write_csv(doc["rows"], args.csv)
    return out(args, doc, _print_report)


def _rate(v):
    return f"{size(v)}/s" if v else ""


def _print_report(d):
    table([dict(r, bytes=size(r["bytes"]), elapsed_s=f"{r['elapsed_s']:.3f}",
                rate=_rate(r["rate_bytes_per_s"]), peak=_rate(r["peak_bytes_per_s"]),
                first=size(r["first_bytes"]) if r["first_bytes"] is not None else "")
           for r in d["rows"]], ["job_id", "client", "policy", "schedule", "started",
                                 "elapsed_s", "files", "bytes", "rate", "peak", "first",
                                 "status", "group"])
    print(f"rate: bytes over elapsed; peak: best {d['peak_window_s']:g} s; first: data in "
          f"the first {d['first_s'] / 60:g} minutes")
    for g in d["groups"]:
        print(f"group {g['group']}: {len(g['jobs'])} jobs, {g['clients']} clients, "
              f"{size(g['bytes'])} from {g['started']} in {g['span_s']:.3f} s; "
              f"sum of per-client rates {_rate(g['total_average_rate_bytes_per_s']) or '-'}, "
              f"mean per client {_rate(g['mean_rate_bytes_per_s']) or '-'}, "
              f"wall-clock {_rate(g['wall_clock_rate_bytes_per_s']) or '-'}")
    s = d["summary"]
    average, combined = s["average_rate_bytes_per_s"], s["combined_rate_bytes_per_s"]
    print(f"{s['jobs']} jobs, {s['failed']} failed; {size(s['bytes'])} in "
          f"{s['elapsed_s']:.0f} s of job time"
          + (f"; average {_rate(average)} per job" if average else "")
          + (f", {_rate(combined)} wall-clock while jobs ran" if combined else ""))
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
