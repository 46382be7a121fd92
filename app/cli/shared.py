"""What several nouns share: the master a command talks to, the value a `set` gives, deleting
an object, and the jobs a command started (waited for, or left to a dispatcher)."""

import json
import sys

from app.cli import follow
from app.cli.output import out, size
from app.errors import ValidationError


INTERRUPTED = 130


def open_master(args):
    """The master a command works with: the one in --home (CAIRN_HOME), or with --master the
    one served on another machine, reached over SSH (app/remote/)."""
    if getattr(args, "master", None):
        # The SSH client loads for --master only, as the master below for local commands.
        from app.remote.client import RemoteMaster
        from app.paths import Home
        return RemoteMaster(args.master, identity=args.identity,
                            trust_key=args.trust_master_key, command=args.master_command,
                            known_hosts=Home(getattr(args, "home", None)).known_hosts,
                            password_provider=_password_prompt)
    # The master (some 0.2 s of imports) loads only for the commands that open it: `cairn
    # --help`, `status-codes` and `catalog check` run without it.
    from app.master import Master
    return Master(getattr(args, "home", None), password_provider=_password_prompt)


def _password_prompt(prompt):
    if not sys.stdin.isatty():
        return None
    import getpass
    return getpass.getpass(prompt)


def setting_value(key, text):
    """A value given on the command line: yes/no and true/false for switches."""
    if key not in ("multiple_streams", "skip_nodump", "active"):
        return text
    low = text.strip().lower()
    if low in ("yes", "true", "on"):
        return True
    if low in ("no", "false", "off"):
        return False
    raise ValidationError(f"{key} takes yes or no, not {text!r}",
                          hint=f"e.g. `set ... {key} yes`")


def deleting(kind):
    """The handler of `cairn KIND delete NAME`."""
    def delete(m, args):
        r = m.delete_object(kind, args.name)
        return out(args, r, lambda d: print(f"{kind.replace('-', ' ')} {args.name} deleted"))
    return delete


def progress_option(p):
    """--progress of a command that can wait for its jobs."""
    p.add_argument("--progress", choices=("auto", "json", "none"), default="auto",
                   help="while waiting: auto shows a line per running job when stdout is a "
                        "terminal (not with --json); json prints one JSON event a line "
                        "(job, state, phase, bytes, files, totals, rate) and then the result "
                        "as one line; none shows nothing until the jobs end")


def jobs_result(m, args, ids, more=None, job_lines=None):
    """more(doc): what a command adds to the result of its jobs once they ended (the document
    given to it is the one --json prints), and a function printing it for people, or None.
    job_lines: where the lines on each job go for people (stdout unless given: stderr keeps
    a command's CSV on stdout alone)."""
    how = follow.mode(args) if args.wait else None
    left_running = False
    if how:
        # The jobs run outside this command, so that Ctrl-C can leave them running.
        f = follow.Follow(m, ids, how, lambda: _ensure_dispatcher(m, args))
        jobs = f.run()
        left_running = f.left_running
    elif args.wait:
        try:
            jobs = m.wait_for(ids)
        except KeyboardInterrupt:
            jobs, left_running = follow.stop_waiting(m, ids)
            if left_running:
                _ensure_dispatcher(m, args)   # the queued ones still have to run
    else:
        _ensure_dispatcher(m, args)
        jobs = [m.job(j) for j in ids]
    codes = [j["status"] for j in jobs if j["status"] is not None]
    worst = max(codes, key=lambda x: (x != 0, x != 1, x)) if codes else 0
    doc = {"jobs": jobs, "status": worst}
    # A lifecycle's duplications of the backups' images: listed, not waited for (`cairn jobs
    # wait ID`), and run by a dispatcher once the backups are done.
    dups = m.duplicate_jobs(ids)
    if dups:
        doc["duplicates"] = dups
        if args.wait and any(d["state"] != "done" for d in dups):
            _ensure_dispatcher(m, args)

    show_more = more(doc) if more else None

    def human(d):
        to = job_lines or sys.stdout
        for j in d["jobs"]:
            if j["state"] == "done":
                print(f"job {j['id']} ({j['type']}, {j['client']}): status {j['status']} - "
                      f"{j['status_text']}; {j['files']} files, {size(j['bytes'])}"
                      + (f", dedup {j['dedup_ratio']:.1f}%" if j.get("dedup_ratio") is not None
                         else ""), file=to)
            else:
                print(f"job {j['id']} ({j['type']}, {j['client']}) {j['state']}; follow it with "
                      f"`cairn jobs show {j['id']}`", file=to)
        for j in d.get("duplicates", []):
            print(f"duplicate job {j['id']} ({j['storage_unit']}) {j['state']}"
                  + (f": status {j['status']}" if j["state"] == "done" else
                     f"; wait for it with `cairn jobs wait {j['id']}`"), file=to)
        if show_more:
            show_more(d)
    if how == "json":
        # The last line of the stream: the result as --json gives it, on one line.
        args.json = True
        sys.stdout.write(json.dumps(doc, ensure_ascii=True, default=str) + "\n")
    else:
        out(args, doc, human)
    # Interrupted, the jobs going on: 130, as a shell reports a command Ctrl-C stopped.
    return INTERRUPTED if left_running else worst


def _ensure_dispatcher(m, args):
    """Without --wait the jobs still have to run: a headless master starts for them when no
    console or master is dispatching already (Master.ensure_dispatcher)."""
    m.ensure_dispatcher()
