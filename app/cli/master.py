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


def _console(args):
    # Qt is imported only here, so that every other command works where it is not installed.
    from ui.app import main as console_main
    return console_main(home=getattr(args, "home", None), screenshot=args.screenshot,
                        view=args.view)


# ---- master ---------------------------------------------------------------------------------

def master_commands(sub, cmd):
    ma = cmd(sub, "master", "the master without a GUI").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(ma, "run", "run the dispatcher", handler=_run)
    p.add_argument("--until-idle", action="store_true", help="stop when no job is queued or running")
    cmd(ma, "settings", "the master's settings (jobs per client, backup tries, retry delay, "
        "days before a client without a backup is warned about)",
        handler=_settings)
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
