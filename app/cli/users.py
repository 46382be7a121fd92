"""`cairn user` (Cairn users: roles, SSH keys, grants) and `cairn audit` (the audit log: who
did what, when, from where; its hash chain checked)."""

from app import status as st
from app.cli.output import out, table
from app.errors import CairnError, ValidationError

_ROLES = ("admin", "operator", "restore", "viewer")


def user_commands(sub, cmd):
    us = cmd(sub, "user", "Cairn users and their roles", handler=_list
             ).add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(us, "add", "add a user", handler=_add,
            description="Roles: viewer (reads), restore (browses and restores its grants "
                        "only), operator (runs, cancels and restarts jobs, restores anywhere, "
                        "changes no configuration), admin (everything). `cairn user list` "
                        "shows the authorized_keys line for each key.",
            epilog="example: cairn user add ann --role restore --ssh-key ann.pub "
                   "--grant fs1:/data/projects/alpha --grant-dest fs1:/scratch/ann")
    p.add_argument("name")
    p.add_argument("--role", required=True, choices=_ROLES)
    _key_and_grant_options(p)
    cmd(us, "list", "list users: role, keys, grants, authorized_keys lines", handler=_list)
    p = cmd(us, "set", "change a user's role, keys, login name or grants", handler=_set)
    p.add_argument("name")
    p.add_argument("--role", choices=_ROLES)
    _key_and_grant_options(p)
    p.add_argument("--remove-ssh-key", action="append", default=[], metavar="FINGERPRINT|FILE",
                   help="unbind a key (its SHA256: fingerprint or its .pub file)")
    p.add_argument("--remove-grant", action="append", default=[], metavar="CLIENT:PATH")
    p.add_argument("--remove-grant-dest", action="append", default=[], metavar="HOST:DIR")
    p = cmd(us, "remove", "remove a user (not the last admin)", handler=_remove)
    p.add_argument("name")
    cmd(us, "whoami", "the user this command acts as, its role and grants", handler=_whoami)


def _key_and_grant_options(p):
    p.add_argument("--ssh-key", action="append", default=[], metavar="FILE",
                   help="an SSH public key (.pub) the user logs in with (repeat for more)")
    p.add_argument("--grant", action="append", default=[], metavar="CLIENT:PATH",
                   help="restore role: a client's path (and all below it) the user may browse "
                        "and restore (repeat for more)")
    p.add_argument("--grant-dest", action="append", default=[], metavar="HOST:DIR",
                   help="restore role: a directory (and all below it) the user may restore "
                        "to, besides its granted paths themselves")
    p.add_argument("--login", metavar="LOGIN",
                   help="the login name that acts as this user when the master is reached "
                        "without --user ('' unbinds it)")
    p.add_argument("--comment")


def audit_commands(sub, cmd):
    p = cmd(sub, "audit", "the audit log: who did what, when and from where", handler=_audit,
            description="Every configuration change (before and after), job started, "
                        "canceled or restarted, restore, expiry, user change, login and "
                        "refused request. Entries are hash-chained: an edited or deleted "
                        "entry is reported.")
    p.add_argument("--since", metavar="TIME",
                   help="entries at or after TIME (ISO 8601, or back from now: 24h, 7d)")
    p.add_argument("--user", metavar="NAME", help="entries of one Cairn user")
    p.add_argument("--limit", type=int, metavar="N", help="the newest N entries only")
    p.add_argument("--verify", action="store_true",
                   help="check the whole chain; exit status 70 when it is broken")


def _read_key(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        raise ValidationError(f"cannot read the key file {path}: {e.strerror or e}",
                              hint="give the user's public key file, e.g. id_ed25519.pub"
                              ) from None


def _print_users(doc):
    for u in doc["users"]:
        extra = f", login {u['login']}" if u["login"] else ""
        print(f"{u['name']}: {u['role']}{extra}")
        for g in u["grants"]:
            print(f"  grant {g}")
        for g in u["dest_grants"]:
            print(f"  restore to {g}")
        for k in u["keys"]:
            print(f"  key {k['type']} {k['fingerprint']} {k['comment']}".rstrip())
            print(f"    {k['authorized_keys']}")


def _list(m, args):
    return out(args, {"users": m.users()}, _print_users)


def _add(m, args):
    u = m.add_user(args.name, args.role, keys=[_read_key(f) for f in args.ssh_key],
                   grants=args.grant, dest_grants=args.grant_dest, login=args.login,
                   comment=args.comment or "")
    return out(args, u, lambda d: _print_users({"users": [d]}))


def _set(m, args):
    remove = [k if k.startswith("SHA256:") else _read_key(k) for k in args.remove_ssh_key]
    u = m.set_user(args.name, role=args.role, login=args.login, comment=args.comment,
                   add_keys=[_read_key(f) for f in args.ssh_key], remove_keys=remove,
                   grants=args.grant, remove_grants=args.remove_grant,
                   dest_grants=args.grant_dest, remove_dest_grants=args.remove_grant_dest)
    return out(args, u, lambda d: _print_users({"users": [d]}))


def _remove(m, args):
    return out(args, m.remove_user(args.name), lambda d: print(f"user {d['removed']} removed"))


def _whoami(m, args):
    doc = m.whoami()
    return out(args, doc, lambda d: print(
        f"{d['user']} ({d['role']}) from {d['origin']}"
        + "".join(f"\n  grant {g}" for g in d["grants"])
        + "".join(f"\n  restore to {g}" for g in d["dest_grants"])))


def _audit(m, args):
    if args.limit is not None and args.limit < 1:
        raise ValidationError("--limit must be at least 1")
    chain = m.audit_verify()
    broken = {b["seq"] for b in chain["broken"]}
    entries = m.audit_entries(since=args.since, user=args.user, limit=args.limit, verify=False)
    for e in entries:
        e["chain_ok"] = e["seq"] not in broken
    doc = {"entries": entries, "chain": chain}

    def human(d):
        table([{"seq": e["seq"], "time": e["time"], "user": e["user"],
                "origin": e["origin"], "action": e["action"], "object": e["object"],
                "outcome": e["outcome"] + ("" if e.get("chain_ok", True) else " BROKEN")}
               for e in d["entries"]],
              ["seq", "time", "user", "origin", "action", "object", "outcome"])
        c = d["chain"]
        if c["ok"]:
            print(f"chain: whole ({c['entries']} entries, head {c['head']})")
        if c.get("segments"):
            from app.audit import segment_text   # the log's module loads for this line only
            for seg in c["segments"]:
                print(f"chain: {segment_text(seg)}")
        for b in c["broken"]:
            print(f"chain: BROKEN at entry {b['seq']}: {b['problem']}")
    out(args, doc, human)
    if args.verify and not chain["ok"]:
        if not getattr(args, "json", False):
            raise CairnError("the audit log's hash chain is broken: entries were changed or "
                             "deleted", hint="the entries named above; compare with the "
                             "copy sent to syslog, or with a catalog backup",
                             status_code=st.CATALOG_FAILED)
        return st.CATALOG_FAILED
    return 0
