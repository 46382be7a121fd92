"""Running Cairn itself: `cairn console` (the desktop console), `cairn master` (the master
without a GUI: its dispatcher and its settings) and the hidden `cairn agent`."""

import argparse
import sys

from app.cli.output import out


# ---- console --------------------------------------------------------------------------------

def console_commands(sub, cmd):
    p = cmd(sub, "console", "the desktop console", handler=_console, opens_master=False)
    p.add_argument("--screenshot", metavar="FILE")
    p.add_argument("--view", help="the page to open (default: getting started until setup "
                   "is complete, then the dashboard); with --screenshot also "
                   "wizard:storage-server, wizard:disk-pool, wizard:storage-unit, wizard:policy, "
                   "dialog:alerts, dialog:policy-properties")
    # The master to manage over SSH; the options that go with it may also stand before
    # `console`, as for every command (app/cli/__init__.py).
    p.add_argument("--master", metavar="[USER@]HOST[:PORT]", default=argparse.SUPPRESS,
                   help="manage the master on HOST (`cairn master serve --stdio` there), "
                        "reached over SSH, instead of the embedded one")
    p.add_argument("--identity", metavar="FILE", default=argparse.SUPPRESS,
                   help="the SSH private key for --master")
    p.add_argument("--trust-master-key", action="store_true", default=argparse.SUPPRESS,
                   help="trust the master's SSH host key although it is not known yet")
    p.add_argument("--master-command", metavar="CMD", default=argparse.SUPPRESS,
                   help="the command that serves the master on HOST")


def _console(args):
    # Qt is imported only here, so that every other command works where it is not installed.
    from ui.app import main as console_main
    remote = None
    if getattr(args, "master", None):
        remote = {"where": args.master, "identity": getattr(args, "identity", None),
                  "trust_key": getattr(args, "trust_master_key", False),
                  "command": getattr(args, "master_command", None)}
    return console_main(home=getattr(args, "home", None), screenshot=args.screenshot,
                        view=args.view, remote=remote)


# ---- master ---------------------------------------------------------------------------------

def master_commands(sub, cmd):
    ma = cmd(sub, "master", "the master without a GUI").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(ma, "run", "run the dispatcher", handler=_run,
            local_only="it runs the dispatcher on the master's own machine (a service there)")
    p.add_argument("--until-idle", action="store_true", help="stop when no job is queued or running")
    cmd(ma, "settings", "the master's settings (jobs per client, backup tries, retry delay, "
        "days before a client without a backup is warned about)",
        handler=_settings)
    p = cmd(ma, "serve", "serve the master API to a desktop's console or CLI over SSH",
            handler=_serve, opens_master=False,
            local_only="it serves the master it runs beside",
            description="Serve the master API as line-delimited JSON on stdin and stdout: "
                        "the command that `cairn --master` and `cairn console --master` run "
                        "over SSH (an authorized_keys line can force it, with --user naming "
                        "the Cairn user of that key). Jobs queued through it run in the "
                        "dispatcher that holds the catalog (a console, `cairn master run`), "
                        "or in a headless one started for them.")
    p.add_argument("--stdio", action="store_true", required=True,
                   help="serve on stdin and stdout (the only way there is)")
    p.add_argument("--user", metavar="NAME",
                   help="the Cairn user the client works as (default: the login name)")
    p = cmd(ma, "set", "change a master setting", handler=_settings)
    p.add_argument("key", choices=["max_jobs_per_client", "backup_tries", "retry_delay",
                                   "stale_client_days", "audit_syslog"])
    p.add_argument("value")


def _run(m, args):
    print(f"cairn master: dispatcher running on {m.home.root} (Ctrl-C stops it)",
          file=sys.stderr)
    try:
        m.dispatcher.run_forever(until_idle=args.until_idle)
    except KeyboardInterrupt:
        m.dispatcher.stop()
    return 0


def _serve(args):
    # The server loads for this command only, not for every `cairn` command.
    from app.remote.server import serve_stdio
    return serve_stdio(getattr(args, "home", None), user=args.user)


def _settings(m, args):
    """`master settings` shows them; `master set KEY VALUE` changes one and shows them."""
    doc = m.set_setting(args.key, args.value) if args.sub == "set" else m.settings()
    return out(args, {"settings": doc}, lambda d: [
        print(f"{k:22} {v['value']!s:8} {v['about']} (default {v['default']})")
        for k, v in d["settings"].items()])


# ---- agent ----------------------------------------------------------------------------------

def agent_commands(sub, cmd):
    # `cairn agent` is taken by app/entry.py before the CLI loads (the agent a host runs);
    # the parser only knows the name.
    sub.add_parser("agent", help=argparse.SUPPRESS)
