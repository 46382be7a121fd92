"""The `cairn` command. The forms in DESIGN.md are a contract; every listing or action takes
--json and then prints one JSON document on stdout. Errors go to stderr as a message and a
hint (and as {"error", "hint", "status"} on stdout with --json); the exit code is 0 on
success, otherwise the status code of the failure (see `cairn status-codes`).

Each noun has its module, which defines the parsers of its commands and, beside them, the
handler of each: the parser records it (`handler`), and run() calls it with the master open,
or with the arguments alone where a command must not open the master (`opens_master`)."""

import argparse
import json
import os
import sqlite3
import sys

from app import __version__, status as st
from app.cli import alerts, backup, catalog, health, host, images, jobs, lifecycle, master, \
    policy, report, restore, storage, stugroup, users
from app.cli.shared import open_master
from app.errors import CairnError
from app.store.db import catalog_error
from app.terminal_text import escape

# The nouns, in the order `cairn --help` lists them; each adds its parser and its actions'.
NOUNS = (
    host.host_commands,
    storage.storage_server_commands,
    storage.disk_pool_commands,
    storage.storage_unit_commands,
    stugroup.storage_unit_group_commands,
    policy.policy_commands,
    backup.backup_commands,
    jobs.jobs_commands,
    images.images_commands,
    restore.browse_commands,
    restore.restore_commands,
    report.report_commands,
    master.console_commands,
    master.master_commands,
    policy.schedule_commands,
    health.status_commands,
    report.status_codes_commands,
    catalog.catalog_commands,
    lifecycle.lifecycle_commands,
    alerts.alerts_commands,
    users.user_commands,
    users.audit_commands,
    master.agent_commands,
)


def _common():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--home", default=argparse.SUPPRESS,
                   help="the master's state directory (default: $CAIRN_HOME or the user's "
                        "data directory)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print one JSON document on stdout")
    return p


class _Unbuilt:
    """Stands for the parsers of a noun the command line does not name, and for whatever is
    asked of them: building all of the nouns' hundred parsers costs every `cairn` start tens
    of milliseconds, and a command needs its own noun's only."""

    def __getattr__(self, name):
        return self._anything

    def __setattr__(self, name, value):
        pass

    def _anything(self, *args, **kw):
        return self


_UNBUILT = _Unbuilt()


def build_parser(only=None):
    """The whole parser, or with `only` (a noun such as "backup") one in which only that
    noun's commands are built: the others are named, for --help, but empty. None when `only`
    is no noun."""
    common = _common()
    ap = argparse.ArgumentParser(prog="cairn", parents=[common],
                                 description="Cairn backup administration")
    ap.add_argument("--version", action="version", version=f"cairn {__version__}")
    g = ap.add_argument_group("a master on another machine, reached over SSH (before COMMAND)")
    g.add_argument("--master", metavar="[USER@]HOST[:PORT]",
                   help="run the command against the master on HOST (`cairn master serve "
                        "--stdio` there) instead of the one in --home")
    g.add_argument("--identity", metavar="FILE",
                   help="the SSH private key for --master (default: the SSH agent's keys, "
                        "then ~/.ssh/id_*)")
    g.add_argument("--trust-master-key", action="store_true",
                   help="trust the master's SSH host key although it is not known yet (check "
                        "its fingerprint first); a changed key is refused all the same")
    g.add_argument("--master-command", metavar="CMD",
                   help="the command that serves the master on HOST (default: cairn master "
                        "serve --stdio)")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    nouns = set()

    def cmd(parent, name, help, handler=None, opens_master=True, local_only=None, **kw):
        if parent is sub:
            nouns.add(name)
            if only is not None and name != only:
                return _UNBUILT
        elif parent is _UNBUILT:
            return _UNBUILT
        p = parent.add_parser(name, help=help, parents=[common], **kw)
        if handler is not None:
            # local_only: why the command cannot run against a master over SSH (--master)
            p.set_defaults(handler=handler, opens_master=opens_master, local_only=local_only)
        return p

    for add_commands in NOUNS:
        add_commands(sub, cmd)
    if only is not None and only not in nouns:
        return None
    return ap


# The options before COMMAND that take a value.
_VALUED = ("--home", "--master", "--identity", "--master-command")


def _noun(argv):
    """The noun a command line names (its first word that is not an option or the value of
    --home or of an option naming the master), or None when it names none or asks for help
    before it."""
    words = iter(argv)
    for w in words:
        if w in ("-h", "--help", "--version"):
            return None
        if w in _VALUED:
            next(words, None)
        elif not w.startswith("-"):
            return w
    return None


def run(args):
    handler = getattr(args, "handler", _unknown_command)
    _check_master_options(args)
    if not getattr(args, "opens_master", True):
        return handler(args)
    m = open_master(args)
    try:
        return handler(m, args)
    finally:
        m.close()


def _check_master_options(args):
    """--master and what goes with it: refused for a command that works on this machine's
    own files, and the options that go with --master refused without it."""
    words = " ".join(w for w in (args.cmd, getattr(args, "sub", None)) if w)
    if getattr(args, "master", None):
        if getattr(args, "local_only", None):
            raise CairnError(f"`cairn {words}` cannot run against a master over SSH: "
                             f"{args.local_only}",
                             hint="run it on the master's machine, without --master",
                             status_code=st.INVALID_REQUEST)
        return
    given = [o for o, v in (("--identity", getattr(args, "identity", None)),
                            ("--trust-master-key", getattr(args, "trust_master_key", False)),
                            ("--master-command", getattr(args, "master_command", None))) if v]
    if given:
        raise CairnError(f"{given[0]} goes with --master [USER@]HOST[:PORT]",
                         hint="e.g. cairn --master admin@backup1 " + given[0] + " ... "
                              + words, status_code=st.INVALID_REQUEST)


def _unknown_command(m, args):
    """A noun named without one of its actions (or a name only main() knows)."""
    c, s = args.cmd, getattr(args, "sub", None)
    raise CairnError(f"unknown command: {c} {s or ''}".strip(), status_code=st.INVALID_REQUEST)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # Whatever a name holds, printing it must never crash the command.
    sys.stdout.reconfigure(errors="backslashreplace")
    noun = _noun(argv)
    ap = (build_parser(noun) if noun is not None else None) or build_parser()
    args = ap.parse_args(argv)
    if not args.cmd:
        ap.print_help()
        return 0
    if getattr(args, "progress", None) == "json":
        # a script's stream: errors too come as JSON on stdout
        args.json = True
    try:
        try:
            rc = run(args)
        except sqlite3.Error as e:
            # What the catalog layer did not turn into a message already: still one.
            # app.paths (platformdirs) loads on this error only, not at every `cairn` start.
            from app.paths import Home
            raise catalog_error(Home(getattr(args, "home", None)).catalog, e,
                                any_error=True) from None
        return rc if isinstance(rc, int) else 0
    except CairnError as e:
        if getattr(args, "json", False):
            json.dump(e.to_dict(), sys.stdout, indent=2)
            sys.stdout.write("\n")
        print(f"cairn: {escape(e.message)}", file=sys.stderr)
        if e.hint:
            print(f"  {escape(e.hint)}", file=sys.stderr)
        return e.status or 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) stopped reading: not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
