"""What is backed up and when: `cairn policy` (its clients, selections and schedules) and
`cairn schedule runs` (what the scheduler will run and what it did)."""

import argparse
import json
import sys

from app import status as st, timeutil
from app.cli.output import out, table
from app.cli.shared import deleting, setting_value
from app.errors import CairnError
from app.terminal_text import escape_all


def policy_commands(sub, cmd):
    po = cmd(sub, "policy", "backup policies",
             handler=_list).add_subparsers(dest="sub", metavar="ACTION")
    _create_command(po, cmd)
    p = cmd(po, "set", "change a policy's attribute", handler=_set,
            description="Change one attribute of a policy: storage_unit, lifecycle (a "
                        "lifecycle's name, or none), storage_unit_group (a group's name, or "
                        "none), priority, "
                        "multiple_streams, checksum, snapshot (none, filesystem, fileset), "
                        "file_list (auto, walk), dedup, compression (server, client, off), "
                        "compression_level (1 to 19), skip_nodump (yes, no), active or "
                        "comment.")
    p.add_argument("name")
    p.add_argument("key")
    p.add_argument("value")
    p = cmd(po, "add-client", "add a client to a policy", handler=_add_client)
    p.add_argument("policy")
    p.add_argument("host")
    p = cmd(po, "add-selection", "add a backup selection to a policy", handler=_add_selection)
    p.add_argument("policy")
    p.add_argument("path")
    _add_schedule_command(po, cmd)
    _day_two_commands(po, cmd)
    cmd(po, "list", "list policies", handler=_list)
    p = cmd(po, "delete", "delete a policy (its images stay until they expire)",
            handler=deleting("policy"))
    p.add_argument("name")
    p = cmd(po, "show", "show a policy", handler=_show)
    p.add_argument("name")


def _create_command(po, cmd):
    p = cmd(po, "create", "create a policy", handler=_create)
    p.add_argument("name")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--storage-unit", help="where its backups go (one copy)")
    where.add_argument("--lifecycle",
                       help="where its backups go and where they are duplicated to, each copy "
                            "with its own retention (`cairn lifecycle create`)")
    where.add_argument("--storage-unit-group", metavar="NAME",
                       help="where its backups go: one unit of the group, chosen when each "
                            "job starts (`cairn storage-unit-group create`)")
    p.add_argument("--priority", type=int, default=0)
    comp = p.add_mutually_exclusive_group()
    comp.add_argument("--compression", action="store_true",
                      help="compress on the client (--compression-at client)")
    comp.add_argument("--compression-at", choices=["client", "server", "off"],
                      help="where backup data is compressed (zstd): server (the storage "
                           "server), client (before it crosses the network) or off. On a "
                           "deduplicating pool its new chunks (default server); on "
                           "advanced-disk the image file, a zstd tar that `tar -I zstd` "
                           "reads (default off: plain tar files)")
    p.add_argument("--compression-level", type=int, metavar="N",
                   help="the zstd level, 1 (fastest, the default) to 19 (smallest)")
    p.add_argument("--encryption", action="store_true")
    p.add_argument("--multiple-streams", action="store_true")
    p.add_argument("--checksum", choices=["crc32", "sha256"], default="crc32",
                   help="file checksums checked at restore: crc32 (fast, catches corruption) "
                        "or sha256 (also evidence against tampering; costs CPU)")
    p.add_argument("--snapshot", choices=["none", "filesystem", "fileset"], default="none",
                   help="back up from a Storage Scale snapshot of the file system (or of the "
                        "fileset) holding each selection, taken and deleted by the backup")
    p.add_argument("--file-list", choices=["auto", "walk"], default="auto",
                   help="how backups find their files: auto uses the Storage Scale policy "
                        "engine where the selection is on Storage Scale and walks the tree "
                        "elsewhere; walk always walks")
    p.add_argument("--dedup", choices=["server", "client"], default="server",
                   help="on a deduplicating pool: server (the client sends a plain stream) or "
                        "client (the client chunks and sends only chunks the pool lacks); a "
                        "host's own setting (host set HOST dedup ...) wins",)
    p.add_argument("--skip-nodump", action="store_true",
                   help="leave out files and directories marked nodump (chattr +d), as dump "
                        "does")


def _add_schedule_command(po, cmd):
    p = cmd(po, "add-schedule", "add a schedule to a policy", handler=_add_schedule,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            description="Add a schedule to a policy. A schedule with start windows runs by "
                        "itself:\neither every --frequency, or on the calendar days of "
                        "--weekdays/--monthdays;\nwith windows but neither, a full runs "
                        "weekly and an incremental daily.\nWithout --window it only runs "
                        "when started by hand (cairn backup).",
            epilog="examples:\n"
                   "  cairn policy add-schedule home weekly --type full --retention 4w \\\n"
                   "      --window \"sat 20:00 12h\"\n"
                   "  cairn policy add-schedule home nightly --type differential "
                   "--frequency 1d \\\n      --window \"mon-fri 22:00 8h\"\n"
                   "  cairn policy add-schedule home monthly --type full --monthdays 1,last "
                   "\\\n      --window \"daily 22:00 8h\" --exclude-date 2026-12-25\n"
                   "Windows are in the master's local time; a window may run past midnight.")
    p.add_argument("policy")
    p.add_argument("name")
    _schedule_options(p, adding=True)


def _schedule_options(p, adding):
    """add-schedule's options; for set-schedule (adding False) every one is optional and
    only those given change."""
    p.add_argument("--type", required=adding,
                   help="full, differential (changes since the last backup of any type), "
                        "cumulative (changes since the last full) or catalog (a catalog "
                        "backup of the master to the policy's storage unit; --retention says "
                        "how long its archives are kept)")
    p.add_argument("--retention", default="2w" if adding else None)
    p.add_argument("--frequency", metavar="DURATION",
                   help="run when no backup of this schedule succeeded for this long: 12h, "
                        "1d, 1w")
    p.add_argument("--window", action="append", metavar='"DAYS HH:MM LENGTH"',
                   help='a start window, e.g. "mon 22:00 8h", "daily 22:00 8h", '
                        '"mon-fri 20:00 90m"; repeat for more')
    p.add_argument("--weekdays", metavar="DAYS",
                   help="calendar: run on these days of the week, e.g. mon,wed")
    p.add_argument("--monthdays", metavar="DAYS",
                   help="calendar: run on these days of the month, e.g. 1,15,last")
    p.add_argument("--exclude-date", action="append", metavar="YYYY-MM-DD",
                   help="calendar: not on this date; repeat for more")
    p.add_argument("--read-every-file", default=False if adding else None,
                   action="store_true" if adding else argparse.BooleanOptionalAction,
                   help="full schedules into deduplicating pools: read every file instead of "
                        "trusting the files cache (e.g. a monthly full beside nightly ones)")
    p.add_argument("--passphrase-file", metavar="F",
                   help="catalog schedules: the catalog backups' passphrase, needed once "
                        "(not if a catalog backup was made before); it is stored nowhere")


def _policy_out(args, r):
    if not getattr(args, "json", False):
        for w in r.get("warnings") or ():
            print(f"warning: {escape_all(w)}", file=sys.stderr)
    return out(args, r, lambda d: print(
        f"policy {d['name']}: storage unit {d['storage_unit']}"
        + (f" (lifecycle {d['lifecycle']})" if d.get("lifecycle") else "")
        + (f" (first of storage unit group {d['storage_unit_group']})"
           if d.get("storage_unit_group") else "")
        + f", clients {d['clients']}, selections {d['selections']}, schedules "
          f"{[x['name'] for x in d['schedules']]}"))


def _create(m, args):
    return _policy_out(args, m.create_policy(
        args.name, storage_unit=args.storage_unit, lifecycle=args.lifecycle,
        storage_unit_group=args.storage_unit_group, priority=args.priority,
        compression="client" if args.compression else args.compression_at,
        compression_level=args.compression_level, encryption=args.encryption,
        multiple_streams=args.multiple_streams, checksum=args.checksum, snapshot=args.snapshot,
        file_list=args.file_list, dedup=args.dedup, skip_nodump=args.skip_nodump))


def _set(m, args):
    return _policy_out(args, m.update_object(
        "policy", args.name, **{args.key: setting_value(args.key, args.value)}))


def _add_client(m, args):
    return _policy_out(args, m.add_policy_client(args.policy, args.host))


def _add_selection(m, args):
    return _policy_out(args, m.add_policy_selection(args.policy, args.path))


def _add_schedule(m, args):
    # app.config loads for the commands that parse with it, not for every `cairn` command.
    from app.schedule_rules import calendar_from_text, parse_windows_text
    passphrase = None
    if args.passphrase_file:
        # The escrow's module loads for this option only.
        from app.catalog_backup.escrow import read_passphrase
        passphrase = read_passphrase(args.passphrase_file)
    return _policy_out(args, m.add_schedule(
        args.policy, args.name, type=args.type, retention=args.retention,
        frequency=args.frequency,
        windows=parse_windows_text(args.window) if args.window else None,
        calendar=calendar_from_text(args.weekdays, args.monthdays, args.exclude_date),
        read_all=args.read_every_file, passphrase=passphrase))


def _show(m, args):
    return out(args, m.policy(args.name), _print_policy)


def _print_policy(d):
    target = d["storage_unit"] + (f" (lifecycle {d['lifecycle']})" if d.get("lifecycle")
                                  else "") + \
        (f" (storage unit group {d['storage_unit_group']})" if d.get("storage_unit_group")
         else "")
    print(f"policy {d['name']}{'' if d['active'] else ' (inactive)'}: storage unit {target}")
    print(f"  priority {d['priority']}, multiple streams {'yes' if d['multiple_streams'] else 'no'}"
          f", checksum {d['checksum']}, snapshot {d['snapshot']}, file list {d['file_list']}, "
          f"dedup {d['dedup']}, compression {d['compression']} (level "
          f"{d['compression_level']}), skip nodump {'yes' if d['skip_nodump'] else 'no'}")
    print("  clients:    " + (", ".join(d["clients"]) or "none"))
    print("  selections: " + (", ".join(d["selections"]) or "none"))
    print("  excludes:   " + (", ".join(d["excludes"]) or "none"))
    for client, pats in d["client_excludes"].items():
        print(f"    for {client}: {', '.join(pats)}")
    print("  schedules:" + ("" if d["schedules"] else " none"))
    for x in d["schedules"]:
        when = (f"every {x['frequency']}" if x["frequency"] else "") if x["kind"] != "calendar" \
            else "calendar " + json.dumps(x["calendar"])
        wins = f", {len(x['windows'])} start window(s)" if x["windows"] else ", by hand only"
        print(f"    {x['name']}: {x['type']}, retention {x['retention']}"
              f"{', ' + when if when else ''}{wins}"
              f"{', reads every file' if x['read_all'] else ''}")


# ---- day two: change what exists ------------------------------------------------------------

def _day_two_commands(po, cmd):
    p = cmd(po, "remove-client", "remove a client from a policy (with its own excludes)",
            handler=lambda m, a: _policy_out(a, m.remove_policy_client(a.policy, a.host)))
    p.add_argument("policy")
    p.add_argument("host")
    p = cmd(po, "remove-selection", "remove a backup selection from a policy",
            handler=lambda m, a: _policy_out(a, m.remove_policy_selection(a.policy, a.path)))
    p.add_argument("policy")
    p.add_argument("path")
    p = cmd(po, "set-schedule", "change a schedule's options; those not given stay",
            handler=_set_schedule,
            description="Change the options given and keep the others, checked as "
                        "add-schedule checks a new schedule. --frequency replaces calendar "
                        "days and --weekdays/--monthdays replace a frequency; --window none "
                        "leaves only backups started by hand; --weekdays none, --monthdays "
                        "none and --exclude-date none clear that part of the calendar. Jobs "
                        "already queued keep what they were queued with.")
    p.add_argument("policy")
    p.add_argument("name")
    _schedule_options(p, adding=False)
    p = cmd(po, "remove-schedule", "remove a schedule from a policy",
            handler=lambda m, a: _policy_out(a, m.remove_schedule(a.policy, a.name)))
    p.add_argument("policy")
    p.add_argument("name")
    for verb, what in (("add", "leave out of the policy's backups"),
                       ("remove", "back up again")):
        p = cmd(po, f"{verb}-exclude", f"{what}: a file name pattern or an absolute path",
                handler=_add_exclude if verb == "add" else _remove_exclude,
                description="PATTERN is a glob matched against each file's and directory's "
                            "name (*.tmp, core.*, .cache), or an absolute path whose whole "
                            "subtree is left out (/home/joe/scratch).")
        p.add_argument("policy")
        p.add_argument("pattern")
        p.add_argument("--client", metavar="HOST",
                       help="for this client of the policy only")


def _add_exclude(m, args):
    return _policy_out(args, m.add_policy_exclude(args.policy, args.pattern, args.client))


def _remove_exclude(m, args):
    return _policy_out(args, m.remove_policy_exclude(args.policy, args.pattern, args.client))


_NONE = ("none", "no", "off", "")


def _set_schedule(m, args):
    # app.config loads for the commands that parse with it, not for every `cairn` command.
    from app.schedule_rules import calendar_from_text, parse_windows_text
    changes = {}
    if args.type is not None:
        changes["type"] = args.type
    if args.retention is not None:
        changes["retention"] = args.retention
    if args.frequency is not None:
        changes["frequency"] = None if args.frequency.strip().lower() in _NONE \
            else args.frequency
    if args.window:
        changes["windows"] = [] if [w.strip().lower() for w in args.window] == ["none"] \
            else parse_windows_text(args.window)
    if args.weekdays is not None or args.monthdays is not None or args.exclude_date:
        stored = next((s for s in m.policy(args.policy)["schedules"]
                       if s["name"] == args.name), None) or {}
        cal = stored.get("calendar") or {"weekdays": [], "monthdays": [], "exclude": []}

        def part(given, key):
            if given is None:
                return cal[key]
            return [] if str(given).strip().lower() in _NONE else given
        dates = cal["exclude"] if not args.exclude_date else \
            ([] if [d.strip().lower() for d in args.exclude_date] == ["none"]
             else args.exclude_date)
        changes["calendar"] = calendar_from_text(part(args.weekdays, "weekdays"),
                                                 part(args.monthdays, "monthdays"), dates)
    if args.read_every_file is not None:
        changes["read_all"] = args.read_every_file
    if not changes:
        raise CairnError("nothing to change", status_code=st.INVALID_REQUEST,
                         hint="give one or more of add-schedule's options, e.g. "
                              "--retention 4w or --window \"daily 22:00 8h\"")
    passphrase = None
    if args.passphrase_file:
        # The escrow's module loads for this option only.
        from app.catalog_backup.escrow import read_passphrase
        passphrase = read_passphrase(args.passphrase_file)
    return _policy_out(args, m.set_schedule(args.policy, args.name, passphrase=passphrase,
                                            **changes))


def _list(m, args):
    return out(args, {"policies": m.policies()},
               lambda d: table(d["policies"], ["name", "storage_unit", "lifecycle",
                                               "storage_unit_group", "clients", "selections"]))


# ---- schedule -------------------------------------------------------------------------------

def schedule_commands(sub, cmd):
    sc = cmd(sub, "schedule", "what the scheduler will run and what it did").add_subparsers(
        dest="sub", metavar="ACTION")
    p = cmd(sc, "runs", "upcoming scheduled runs, and recorded ones (queued, missed, skipped)",
            handler=_schedule_runs)
    p.add_argument("--policy", metavar="NAME")
    p.add_argument("--horizon", metavar="DURATION", default="7d",
                   help="how far ahead to look (default 7d)")
    p.add_argument("--limit", type=int, default=200, help="recorded runs to show (default 200)")


def _schedule_runs(m, args):
    horizon = timeutil.parse_duration(args.horizon, what="horizon")
    if horizon is None:
        raise CairnError(f"horizon {args.horizon!r} must be a length of time, e.g. 7d",
                         status_code=st.INVALID_REQUEST)
    doc = m.schedule_runs(args.policy, horizon_s=horizon, limit=args.limit)
    return out(args, doc, _print_schedule_runs)


def _print_schedule_runs(d):
    print("upcoming:")
    table([dict(e, note=e["note"] or "") for e in d["upcoming"]],
          ["due", "policy", "schedule", "type", "client", "window_end", "runs", "note"])
    print("recorded:")
    table(d["runs"], ["due", "policy", "schedule", "client", "outcome", "job_id",
                      "job_state", "job_status"])
