"""`cairn alerts`: where alerts go (email, syslog, webhook, command), what is alerted, a test
message, what is pending and what was sent (app/alerts/)."""

import getpass
import sys

from app.cli.output import out, table
from app.errors import ValidationError


def alerts_commands(sub, cmd):
    al = cmd(sub, "alerts", "alerts by email, syslog, webhook or command").add_subparsers(
        dest="sub", metavar="ACTION")
    cmd(al, "show", "the alert settings, what is pending and the last messages",
        handler=_show)
    p = cmd(al, "set", "change alert settings: NAME VALUE [NAME VALUE ...] (an empty VALUE "
            "puts back the default)", handler=_set)
    p.add_argument("pairs", nargs="+", metavar="NAME VALUE")
    p = cmd(al, "password", "keep the SMTP login's password in the OS keyring", handler=_password)
    p.add_argument("--password-stdin", action="store_true",
                   help="read it from the first line of standard input instead of a prompt")
    p = cmd(al, "test", "send a test message on every channel turned on", handler=_test)
    p.add_argument("--channel", action="append", choices=["email", "syslog", "webhook",
                                                          "command"],
                   help="only this channel (may be given more than once)")
    cmd(al, "check", "look for what to alert now (hosts asked too) and send the digest if "
        "it is due", handler=_check)
    p = cmd(al, "history", "the last digests and test messages, each channel's result",
            handler=_history)
    p.add_argument("--limit", type=int, default=20)


def _show(m, args):
    doc = m.alert_settings()
    doc["pending"] = m.alert_events()
    doc["history"] = m.alert_history(5)

    def human(d):
        on = ", ".join(d["channels"]) or "none (nothing is sent)"
        print(f"Channels turned on: {on}")
        for p in d["problems"]:
            print(f"  note: {p}")
        if d["password_stored"] is not None:
            print("SMTP password in the OS keyring: " + ("yes" if d["password_stored"] else
                                                        "NO (`cairn alerts password`)"))
        print()
        table([{"setting": k, "value": s["value"], "about": s["about"]}
               for k, s in d["settings"].items()], ["setting", "value", "about"])
        print("\nPending and open" if d["pending"] else "\nNothing pending")
        for e in d["pending"]:
            state = "told" if e["told"] else "to tell"
            print(f"  {e['since']} {e['severity']:7} [{state}] {e['message']}")
        _print_history(d["history"])
    return out(args, doc, human)


def _set(m, args):
    pairs = args.pairs
    if len(pairs) % 2:
        raise ValidationError("give each setting with its value: NAME VALUE [NAME VALUE ...]",
                              hint="an empty value (\"\") puts back the default")
    doc = m.set_alert_settings(dict(zip(pairs[::2], pairs[1::2])))
    return out(args, doc, lambda d: [
        print(f"{k:16} {d['settings'][k]['value']}") for k in pairs[::2]])


def _password(m, args):
    if args.password_stdin:
        pw = sys.stdin.readline().rstrip("\r\n")
    else:
        pw = getpass.getpass("SMTP password: ")
        if getpass.getpass("again: ") != pw:
            raise ValidationError("the two passwords differ; nothing was kept")
    doc = m.set_alert_password(pw)
    return out(args, doc, lambda d: print("kept in the OS keyring"))


def _results(results):
    for name, r in results.items():
        print(f"  {name:8} {'ok' if r['ok'] else 'FAILED'}: {r['text']}")


def _test(m, args):
    doc = m.alerts_test(channels=args.channel)
    out(args, doc, lambda d: (print(f"Test message \"{d['subject']}\""),
                              _results(d["results"])))
    # every channel delivered: 0; some did not: 1
    return 0 if all(r["ok"] for r in doc["results"].values()) else 1


def _check(m, args):
    doc = m.alerts_round(ask_hosts=True)

    def human(d):
        print(f"{d['events']} new event(s), {d['resolved']} resolved")
        if d["sent"]:
            print(f"Digest \"{d['subject']}\"")
            _results(d["sent"])
        if d["why"]:
            print(f"Nothing sent: {d['why']}" if not d["sent"] else d["why"])
    out(args, doc, human)
    return 1 if _undelivered(doc) else 0


def _undelivered(doc):
    return bool(doc["sent"]) and not any(r["ok"] for r in doc["sent"].values())


def _print_history(rows):
    print("\nLast messages" if rows else "\nNo message sent yet")
    for h in rows:
        what = "test" if h["test"] else f"{h['events']} event(s)"
        print(f"  {h['time']} {what}: " + ("; ".join(
            f"{k} {'ok' if r['ok'] else 'failed: ' + r['text']}"
            for k, r in h["results"].items()) or "sending"))


def _history(m, args):
    rows = m.alert_history(args.limit)
    return out(args, {"history": rows}, lambda d: _print_history(d["history"]))
