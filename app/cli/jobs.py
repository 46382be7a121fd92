"""`cairn jobs`: the activity monitor."""

from app.cli.output import out, size, table
from app.cli.shared import jobs_result, progress_option


def jobs_commands(sub, cmd):
    jb = cmd(sub, "jobs", "the activity monitor",
             handler=_list).add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(jb, "list", "list jobs", handler=_list)
    p.add_argument("--state", choices=["queued", "active", "done"])
    p = cmd(jb, "show", "one job", handler=_show)
    p.add_argument("id", type=int)
    figure_options(p)
    p = cmd(jb, "log", "a job's detailed log", handler=_log)
    p.add_argument("id", type=int)
    p = cmd(jb, "cancel", "cancel a job", handler=_cancel)
    p.add_argument("id", type=int)
    p = cmd(jb, "suspend", "hold a queued job until it is resumed", handler=_suspend_or_resume)
    p.add_argument("id", type=int)
    p = cmd(jb, "resume", "let a suspended job start again", handler=_suspend_or_resume)
    p.add_argument("id", type=int)
    p = cmd(jb, "wait", "wait until jobs end (running them when no master runs)",
            handler=_wait)
    p.add_argument("ids", type=int, nargs="+", metavar="ID")
    progress_option(p)
    p = cmd(jb, "restart", "queue a failed or canceled job again with the same parameters",
            handler=_restart)
    p.add_argument("id", type=int)
    p.add_argument("--wait", action="store_true", help="wait for the new job to end")
    progress_option(p)


def _list(m, args):
    return out(args, {"jobs": m.job_list(state=getattr(args, "state", None))},
               lambda d: table(d["jobs"], ["id", "type", "state", "status", "client",
                                           "policy", "schedule", "files", "bytes",
                                           "percent", "wait_reason"]))


def figure_options(p):
    """The options of a job's throughput figures; unset, the master's defaults apply."""
    p.add_argument("--peak-window", type=float, metavar="SECONDS",
                   help="the sustained peak is the best stretch this long (default 10; "
                        "3600 for an hour)")
    p.add_argument("--first-minutes", type=float, metavar="N",
                   help="report the data moved in the first N minutes (default 60)")


def figure_kwargs(args):
    kw = {}
    if args.peak_window is not None:
        kw["peak_window_s"] = args.peak_window
    if args.first_minutes is not None:
        kw["first_s"] = args.first_minutes * 60
    return kw


def _show(m, args):
    j = m.job(args.id)
    j["figures"] = m.job_stats(args.id, **figure_kwargs(args))["stats"]
    j["log"] = m.job_logs(args.id)
    return out(args, j, _print_job)


def _log(m, args):
    logs = m.job_logs(args.id)
    return out(args, {"id": args.id, "log": logs},
               lambda d: [print(f"{x['ts']} {x['level']:7} {x['message']}") for x in d["log"]])


def _cancel(m, args):
    j = m.cancel_job(args.id)
    return out(args, j, lambda d: print(f"job {d['id']}: cancel requested "
                                        f"(state {d['state']})"))


def _suspend_or_resume(m, args):
    s = args.sub
    j = m.suspend_job(args.id) if s == "suspend" else m.resume_job(args.id)
    done = {"suspend": "suspended", "resume": "resumed"}[s]
    return out(args, j, lambda d: print(f"job {d['id']}: {done}"))


def _wait(m, args):
    args.wait = True
    for j in args.ids:
        m.job(j)  # an unknown id is refused before anything waits
    return jobs_result(m, args, args.ids)


def _restart(m, args):
    ids = [j["id"] for j in m.restart_job(args.id)]
    return jobs_result(m, args, ids)


def _print_job(j):
    shown = dict(j, bytes=f"{j['bytes']} ({size(j['bytes'])})",
                 rate_bytes_per_s=(f"{size(j['rate_bytes_per_s'])}/s"
                                   if j.get("rate_bytes_per_s") else None))
    for k in ("id", "type", "state", "phase", "status", "status_text", "client", "policy",
              "schedule", "storage_unit", "started", "ended", "files", "bytes",
              "rate_bytes_per_s", "percent", "eta_s", "wait_reason", "image_id", "dedup_ratio"):
        if k in ("dedup_ratio", "phase") and shown.get(k) is None:
            continue
        print(f"{k:16} {'' if shown.get(k) is None else shown[k]}")
    f = j.get("figures")
    if f and f["average_bytes_per_s"] is not None:
        peak = f["peak_bytes_per_s"]
        print(f"{'average':16} {size(f['average_bytes_per_s'])}/s ({size(f['bytes'])} in "
              f"{f['duration_s']:.1f} s)")
        print(f"{'sustained peak':16} "
              + ("" if peak is None else f"{size(peak)}/s (best {f['peak_window_s']:.0f} s, "
                                         f"from {f['peak_at_s']:.0f} s on)"))
        print(f"{'first ' + format(f['first_s'] / 60, 'g') + ' min':16} "
              f"{size(f['first_bytes'])}")
    print("log:")
    for x in j.get("log", []):
        print(f"  {x['ts']} {x['level']:7} {x['message']}")
