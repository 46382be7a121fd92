"""`cairn jobs`: the activity monitor."""

from app.cli.output import out, size, table
from app.cli.shared import jobs_result


def jobs_commands(sub, cmd):
    jb = cmd(sub, "jobs", "the activity monitor",
             handler=_list).add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(jb, "list", "list jobs", handler=_list)
    p.add_argument("--state", choices=["queued", "active", "done"])
    p = cmd(jb, "show", "one job", handler=_show)
    p.add_argument("id", type=int)
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
    p = cmd(jb, "restart", "queue a failed or canceled job again with the same parameters",
            handler=_restart)
    p.add_argument("id", type=int)
    p.add_argument("--wait", action="store_true", help="wait for the new job to end")


def _list(m, args):
    return out(args, {"jobs": m.job_list(state=getattr(args, "state", None))},
               lambda d: table(d["jobs"], ["id", "type", "state", "status", "client",
                                           "policy", "schedule", "files", "bytes",
                                           "percent", "wait_reason"]))


def _show(m, args):
    j = m.job(args.id)
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
    for k in ("id", "type", "state", "status", "status_text", "client", "policy", "schedule",
              "storage_unit", "started", "ended", "files", "bytes", "rate_bytes_per_s",
              "percent", "eta_s", "wait_reason", "image_id", "dedup_ratio"):
        if k == "dedup_ratio" and shown.get(k) is None:
            continue
        print(f"{k:16} {'' if shown.get(k) is None else shown[k]}")
    print("log:")
    for x in j.get("log", []):
        print(f"  {x['ts']} {x['level']:7} {x['message']}")
