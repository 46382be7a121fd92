"""The `cairn` command. The forms in DESIGN.md are a contract; every listing or action takes
--json and then prints one JSON document on stdout. Errors go to stderr as a message and a
hint (and as {"error", "hint", "status"} on stdout with --json); the exit code is 0 on
success, otherwise the status code of the failure (see `cairn status-codes`)."""

import argparse
import json
import os
import subprocess
import sys

from app import __version__, status as st, timeutil
from app.errors import CairnError, ValidationError
from app.terminal_text import escape, escape_all


def _common():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--home", default=argparse.SUPPRESS,
                   help="the master's state directory (default: $CAIRN_HOME or the user's "
                        "data directory)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print one JSON document on stdout")
    return p


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size_arg(text):
    """A size in bytes, with an optional K, M or G (powers of 1024)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    try:
        return int(t[:len(t) - len(unit)]) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 524288, 512K, 2M)")


def build_parser():
    common = _common()
    ap = argparse.ArgumentParser(prog="cairn", parents=[common],
                                 description="Cairn backup administration")
    ap.add_argument("--version", action="version", version=f"cairn {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")

    def cmd(parent, name, help, **kw):
        return parent.add_parser(name, help=help, parents=[common], **kw)

    # hosts
    host = cmd(sub, "host", "register and inspect hosts").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(host, "add", "register a host")
    p.add_argument("name")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--local", action="store_true", help="this machine, reached without SSH")
    g.add_argument("--address", help="host name or IP address for SSH")
    p.add_argument("--port", type=int, default=22)
    p.add_argument("--user")
    p.add_argument("--key", help="private key file for SSH")
    p.add_argument("--trust-host-key", action="store_true",
                   help="trust the host's SSH key if it is not known yet (check its fingerprint)")
    p.add_argument("--data-address", help="address other agents use for backup data to this host")
    p.add_argument("--no-check", action="store_true", help="do not connect before registering")
    cmd(host, "list", "list hosts")
    p = cmd(host, "probe", "what the host reports: OS, python, file systems")
    p.add_argument("name")
    p = cmd(host, "trust", "trust the SSH host key a registered host presents now")
    p.add_argument("name")
    p.add_argument("--fingerprint", help="trust only this key (SHA256:...)")
    p.add_argument("--replace", action="store_true",
                   help="drop the key trusted before (the host was reinstalled)")
    p = cmd(host, "remove", "unregister a host")
    p.add_argument("name")
    p = cmd(host, "set", "change a host's attribute",
            description="Change one attribute of a registered host: port, user, key_file, "
                        "data_address, max_jobs, agent_env or comment. agent_env is the "
                        "environment its agent starts with, as NAME=value pairs separated by "
                        "commas (CAIRN_* variables, PATH, PYTHONPATH, TMPDIR), e.g. CAIRN_MMFS_SUDO=1; "
                        "an empty value clears it.")
    p.add_argument("name")
    p.add_argument("key")
    p.add_argument("value")

    # storage
    ss = cmd(sub, "storage-server", "storage servers").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(ss, "create", "create a storage server")
    p.add_argument("name")
    p.add_argument("--type", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--path")
    p.add_argument("--encrypt", action="store_true",
                   help="dedup: encrypt chunks at rest (AES-256-GCM); the master keeps the key "
                        "in CAIRN_HOME/keys/NAME.key: back it up")
    p.add_argument("--min-chunk", type=_size_arg, help="dedup: minimum chunk size (e.g. 128K)")
    p.add_argument("--avg-chunk", type=_size_arg, help="dedup: average chunk size (e.g. 512K)")
    p.add_argument("--max-chunk", type=_size_arg, help="dedup: maximum chunk size (e.g. 2M)")
    cmd(ss, "list", "list storage servers")
    p = cmd(ss, "delete", "delete a storage server that no disk pool uses")
    p.add_argument("name")

    dp = cmd(sub, "disk-pool", "disk pools").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(dp, "create", "create a disk pool")
    p.add_argument("name")
    p.add_argument("--server", required=True)
    p.add_argument("--volume", action="append", default=[],
                   help="repeat for more volumes (a dedup server's pool takes its storage path)")
    p.add_argument("--high-water", type=int, default=98)
    p.add_argument("--low-water", type=int, default=80)
    p.add_argument("--max-io-streams", type=int)
    p.add_argument("--compact-below", type=int, metavar="PCT",
                   help="deduplicating pool: space reclaim compacts a container whose live "
                        "data is below PCT%% of its size (default 50; 0: only delete empty "
                        "containers)")
    cmd(dp, "list", "list disk pools")
    p = cmd(dp, "set", "change a disk pool's attribute",
            description="Change one attribute of a disk pool: high_water, low_water, "
                        "max_io_streams (0: no limit), compact_below (deduplicating pools: "
                        "percent of live data below which reclaim compacts a container) or "
                        "comment.")
    p.add_argument("name")
    p.add_argument("key")
    p.add_argument("value")
    p = cmd(dp, "delete", "delete a disk pool that no storage unit or image uses")
    p.add_argument("name")
    p = cmd(dp, "reclaim", "deduplication pool: remove chunks no image uses, compact containers")
    p.add_argument("name")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    p = cmd(dp, "verify", "read every image of the pool back and check it (headers and "
                          "checksums, or every chunk of a deduplicating pool); also make the "
                          "pool's files private again and report any that were not")
    p.add_argument("name")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    p = cmd(dp, "cleanup", "remove pool files that no catalog image owns (left by backups "
                           "that stopped before their image was recorded)")
    p.add_argument("name")
    p.add_argument("--dry-run", action="store_true", help="only list them")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    p = cmd(dp, "usage", "deduplication pool: chunks and bytes it holds")
    p.add_argument("name")
    p = cmd(dp, "rebuild-index", "deduplication pool: rebuild the chunk index from the "
                                 "containers alone")
    p.add_argument("name")

    su = cmd(sub, "storage-unit", "storage units").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(su, "create", "create a storage unit")
    p.add_argument("name")
    p.add_argument("--pool", required=True)
    p.add_argument("--max-concurrent-jobs", type=int, default=1)
    cmd(su, "list", "list storage units")
    p = cmd(su, "delete", "delete a storage unit that no policy uses")
    p.add_argument("name")

    # policies
    po = cmd(sub, "policy", "backup policies").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(po, "create", "create a policy")
    p.add_argument("name")
    p.add_argument("--storage-unit", required=True)
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--compression", action="store_true")
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
    p = cmd(po, "set", "change a policy's attribute",
            description="Change one attribute of a policy: storage_unit, priority, "
                        "multiple_streams, checksum, snapshot (none, filesystem, fileset), "
                        "file_list (auto, walk), dedup, skip_nodump (yes, no), active or "
                        "comment.")
    p.add_argument("name")
    p.add_argument("key")
    p.add_argument("value")
    p = cmd(po, "add-client", "add a client to a policy")
    p.add_argument("policy")
    p.add_argument("host")
    p = cmd(po, "add-selection", "add a backup selection to a policy")
    p.add_argument("policy")
    p.add_argument("path")
    p = cmd(po, "add-schedule", "add a schedule to a policy",
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
    p.add_argument("--type", required=True,
                   help="full, differential (changes since the last backup of any type) or "
                        "cumulative (changes since the last full)")
    p.add_argument("--retention", default="2w")
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
    p.add_argument("--read-every-file", action="store_true",
                   help="full schedules into deduplicating pools: read every file instead of "
                        "trusting the files cache (e.g. a monthly full beside nightly ones)")
    cmd(po, "list", "list policies")
    p = cmd(po, "delete", "delete a policy (its images stay until they expire)")
    p.add_argument("name")
    p = cmd(po, "show", "show a policy")
    p.add_argument("name")

    # backup / jobs / images / restore
    p = cmd(sub, "backup", "start a backup of a policy")
    p.add_argument("policy")
    p.add_argument("--client")
    p.add_argument("--schedule")
    p.add_argument("--no-files-cache", action="store_true",
                   help="a full into a deduplication pool reads every file, also those the "
                        "previous image shows unchanged")
    p.add_argument("--wait", action="store_true", help="wait until the jobs end")

    jb = cmd(sub, "jobs", "the activity monitor").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(jb, "list", "list jobs")
    p.add_argument("--state", choices=["queued", "active", "done"])
    p = cmd(jb, "show", "one job")
    p.add_argument("id", type=int)
    p = cmd(jb, "log", "a job's detailed log")
    p.add_argument("id", type=int)
    p = cmd(jb, "cancel", "cancel a job")
    p.add_argument("id", type=int)
    p = cmd(jb, "suspend", "hold a queued job until it is resumed")
    p.add_argument("id", type=int)
    p = cmd(jb, "resume", "let a suspended job start again")
    p.add_argument("id", type=int)
    p = cmd(jb, "restart", "queue a failed or canceled job again with the same parameters")
    p.add_argument("id", type=int)
    p.add_argument("--wait", action="store_true", help="wait for the new job to end")

    im = cmd(sub, "images", "backup images").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(im, "list", "list images")
    p.add_argument("--client")
    p.add_argument("--policy")
    p.add_argument("--since", metavar="TIME", help="only images created at or after TIME")
    p.add_argument("--until", metavar="TIME", help="only images created at or before TIME")
    p = cmd(im, "expire", "expire an image now (an expire job; waits for it)")
    p.add_argument("image")
    p.add_argument("--with-dependents", action="store_true",
                   help="also expire the images that read data from it (later incrementals, "
                        "stream images); without it such an image is refused, naming them")
    p = cmd(im, "dependents", "the images that go when an image is expired")
    p.add_argument("image")
    p = cmd(im, "show", "one image: where it is, what it holds, the snapshot it was read from")
    p.add_argument("image")
    p = cmd(im, "verify", "read an image back and check every tar header and file checksum "
                          "(every chunk on a deduplicating pool)")
    p.add_argument("image")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    p = cmd(im, "rebuild-index", "rebuild an image's catalog index (for browse and restore) "
                                 "from the image itself; the old index is kept aside")
    p.add_argument("image")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")

    p = cmd(sub, "browse", "list a directory of an image")
    p.add_argument("args", nargs="*", metavar="IMAGE [PATH]")
    p.add_argument("--client")
    p.add_argument("--policy")
    p.add_argument("--at")

    p = cmd(sub, "restore", "restore files from an image")
    p.add_argument("image", nargs="?")
    p.add_argument("--client")
    p.add_argument("--policy")
    p.add_argument("--at")
    p.add_argument("--path", action="append", required=True)
    p.add_argument("--to", required=True, help="target directory ('/' = original location)")
    p.add_argument("--to-host")
    p.add_argument("--overwrite", choices=["skip", "overwrite", "rename"], default="skip")
    p.add_argument("--direct-io", choices=["auto", "off"], default="auto",
                   help="auto (default): write large files past the page cache where the "
                        "target's file system suits it; off: always through it")
    p.add_argument("--streams", default="auto", metavar="auto|N",
                   help="processes that restore files at once when the image and the target "
                        "are on one host: auto (default: one per core, at most 4, for 64 MiB "
                        "or more) or a number (1: one process)")
    p.add_argument("--strip-prefix", metavar="PREFIX",
                   help="remove this leading path from every restored path")
    p.add_argument("--add-prefix", metavar="PREFIX",
                   help="put this path in front of every restored path")
    p.add_argument("--rename", nargs=2, metavar=("PATTERN", "REPLACEMENT"),
                   help="rename paths: a glob (each * or ? of REPLACEMENT takes what the "
                        "pattern's wildcards matched) or, with --regex, a regular expression")
    p.add_argument("--regex", action="store_true", help="--rename PATTERN is a regular "
                   "expression (REPLACEMENT may use \\1)")
    p.add_argument("--preview", action="store_true",
                   help="show where the paths would go, and start nothing")
    p.add_argument("--wait", action="store_true")

    rp = cmd(sub, "report", "reports over the job history").add_subparsers(dest="sub",
                                                                           metavar="REPORT")
    p = cmd(rp, "backups", "client backups: one row per backup job that ended")
    p.add_argument("--since", metavar="TIME", help="jobs started at or after TIME")
    p.add_argument("--until", metavar="TIME", help="jobs started before TIME")
    p.add_argument("--client", metavar="HOST")
    p.add_argument("--policy", metavar="NAME")
    p.add_argument("--csv", metavar="FILE", help="also write the rows to FILE as CSV")

    p = cmd(sub, "console", "the desktop console")
    p.add_argument("--screenshot", metavar="FILE")
    p.add_argument("--view", help="the page to open (default: getting started until setup "
                   "is complete, then the activity monitor); with --screenshot also "
                   "wizard:storage-server, wizard:disk-pool, wizard:storage-unit, wizard:policy")
    ma = cmd(sub, "master", "the master without a GUI").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(ma, "run", "run the dispatcher")
    p.add_argument("--until-idle", action="store_true", help="stop when no job is queued or running")
    cmd(ma, "settings", "the master's settings (jobs per client, backup tries, retry delay)")
    p = cmd(ma, "set", "change a master setting")
    p.add_argument("key", choices=["max_jobs_per_client", "backup_tries", "retry_delay"])
    p.add_argument("value")
    sc = cmd(sub, "schedule", "what the scheduler will run and what it did").add_subparsers(
        dest="sub", metavar="ACTION")
    p = cmd(sc, "runs", "upcoming scheduled runs, and recorded ones (queued, missed, skipped)")
    p.add_argument("--policy", metavar="NAME")
    p.add_argument("--horizon", metavar="DURATION", default="7d",
                   help="how far ahead to look (default 7d)")
    p.add_argument("--limit", type=int, default=200, help="recorded runs to show (default 200)")
    cmd(sub, "status-codes", "the table of job status codes")
    ca = cmd(sub, "catalog", "the catalog itself").add_subparsers(dest="sub", metavar="ACTION")
    cmd(ca, "check", "check the catalog: sqlite's integrity check, every image's file index",
        description="Check the catalog without changing it: sqlite's integrity and foreign "
                    "key checks, the file index of every image (present, readable, every "
                    "block intact), the images each image reads data from, and the image "
                    "files of pools on this machine. No host is contacted. Exits 0 when "
                    "nothing is wrong, else 70 with each problem and its fix.")
    sub.add_parser("agent", help=argparse.SUPPRESS)
    return ap


# ---- output ---------------------------------------------------------------------------------

def _out(args, doc, human=None):
    if getattr(args, "json", False):
        # ASCII escapes keep names that are not UTF-8 (surrogate escapes) valid JSON; a
        # reader gets the exact bytes back with os.fsencode.
        json.dump(doc, sys.stdout, indent=2, ensure_ascii=True, default=str)
        sys.stdout.write("\n")
    elif human is not None:
        # Names, log lines and whatever a host reported reach the terminal escaped, never as
        # control characters (see app/terminal_text.py).
        human(escape_all(doc))
    else:
        print(json.dumps(doc, indent=2, ensure_ascii=True, default=str))


def _table(rows, cols):
    if not rows:
        print("(none)")
        return
    data = [[("" if r.get(c) is None else str(r.get(c))) for c in cols] for r in rows]
    widths = [max(len(c), *(len(d[i]) for d in data)) for i, c in enumerate(cols)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)))
    for d in data:
        print("  ".join(v.ljust(w) for v, w in zip(d, widths)))


def _size(n):
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


# ---- commands -------------------------------------------------------------------------------

def _master(args):
    from app.master import Master
    return Master(getattr(args, "home", None), password_provider=_password_prompt)


def _password_prompt(prompt):
    if not sys.stdin.isatty():
        return None
    import getpass
    return getpass.getpass(prompt)


def run(args):
    c, s = args.cmd, getattr(args, "sub", None)
    if c == "status-codes":
        rows = [{"status": k, "meaning": v} for k, v in sorted(st.STATUS_TEXT.items())]
        return _out(args, {"status_codes": rows}, lambda d: _table(d["status_codes"],
                                                                  ["status", "meaning"]))
    if c == "catalog":
        return _catalog(args, s)
    if c == "console":
        from ui.app import main as console_main
        return console_main(home=getattr(args, "home", None), screenshot=args.screenshot,
                            view=args.view)
    m = _master(args)
    try:
        return _dispatch(m, args, c, s)
    finally:
        m.close()


def _dispatch(m, args, c, s):
    if c == "host":
        if s == "add":
            h = m.add_host(args.name, local=args.local, address=args.address, port=args.port,
                           user=args.user, key_file=args.key, trust_host_key=args.trust_host_key,
                           data_address=args.data_address, check=not args.no_check)
            return _out(args, h, lambda d: print(f"host {d['name']} added"))
        if s == "list":
            return _out(args, {"hosts": m.config.hosts()},
                        lambda d: _table(d["hosts"], ["name", "kind", "address", "port", "user"]))
        if s == "probe":
            return _out(args, m.probe_host(args.name), _print_probe)
        if s == "trust":
            r = m.trust_host_key(args.name, fingerprint=args.fingerprint, replace=args.replace)
            return _out(args, r, lambda d: print(
                f"host {d['host']}: trusted {d['key_type']} {d['fingerprint']}" if d["trusted"]
                else f"host {d['host']}: its key is trusted already"))
        if s == "set":
            r = m.update_object("host", args.name,
                                **{args.key: _setting_value(args.key, args.value)})
            return _out(args, r, lambda d: print(f"host {d['name']}: {args.key} changed"))
        if s == "remove":
            m.delete_object("host", args.name)
            return _out(args, {"removed": args.name}, lambda d: print(f"host {args.name} removed"))
    if c == "storage-server":
        if s == "delete":
            return _delete(m, args, "storage-server")
        if s == "create":
            opts = {k: v for k, v in (("min_size", args.min_chunk), ("avg_size", args.avg_chunk),
                                      ("max_size", args.max_chunk)) if v is not None}
            if args.encrypt:
                opts["encrypted"] = True
            r = m.create_storage_server(args.name, type=args.type, host=args.host, path=args.path,
                                        options=opts or None)

            def show(d):
                print(f"storage server {d['name']} created")
                for w in d.get("warnings") or []:
                    print(f"warning: {w}", file=sys.stderr)
                if d.get("options", {}).get("encrypted"):
                    print(f"its encryption key is {m.home.key_path(d['name'])}: back it up; "
                          "without it the pool cannot be read", file=sys.stderr)
            return _out(args, r, show)
        return _out(args, {"storage_servers": m.config.storage_servers()},
                    lambda d: _table(d["storage_servers"], ["name", "type", "host", "path"]))
    if c == "disk-pool":
        if s == "delete":
            return _delete(m, args, "disk-pool")
        if s == "reclaim":
            return _jobs_result(m, args, [m.start_reclaim(args.name)])
        if s == "verify":
            return _jobs_result(m, args, [m.start_verify(pool=args.name)])
        if s == "cleanup":
            return _jobs_result(m, args, [m.start_cleanup(args.name, dry_run=args.dry_run)])
        if s == "usage":
            r = m.pool_usage(args.name)
            return _out(args, r, lambda d: print(
                f"{d['chunks']} chunks, {_size(d['stored_bytes'])} stored in "
                f"{d['containers']} containers ({_size(d['container_bytes'])} on disk)"
                + (", encrypted" if d.get("encrypted") else "")))
        if s == "rebuild-index":
            r = m.rebuild_pool_index(args.name)
            return _out(args, r, lambda d: print(
                f"index rebuilt: {d['chunks']} chunks from {d['containers']} containers"
                + (f"; {d['damaged']} damaged record(s) left out" if d.get("damaged") else "")
                + (f"; {d['torn']} torn container end(s) skipped" if d.get("torn") else "")))
        if s == "create":
            r = m.create_disk_pool(args.name, server=args.server, volumes=args.volume,
                                   high_water=args.high_water, low_water=args.low_water,
                                   max_io_streams=args.max_io_streams,
                                   compact_below=args.compact_below)
            return _out(args, r, lambda d: print(f"disk pool {d['name']} created"))
        if s == "set":
            r = m.update_object("disk-pool", args.name,
                                **{args.key: _setting_value(args.key, args.value)})
            return _out(args, r, lambda d: print(f"disk pool {d['name']}: {args.key} changed"))
        return _out(args, {"disk_pools": m.config.disk_pools()},
                    lambda d: _table(d["disk_pools"], ["name", "server", "volumes", "high_water",
                                                       "low_water"]))
    if c == "storage-unit":
        if s == "delete":
            return _delete(m, args, "storage-unit")
        if s == "create":
            r = m.config.add_storage_unit(args.name, pool=args.pool,
                                          max_concurrent_jobs=args.max_concurrent_jobs)
            return _out(args, r, lambda d: print(f"storage unit {d['name']} created"))
        return _out(args, {"storage_units": m.config.storage_units()},
                    lambda d: _table(d["storage_units"], ["name", "pool", "host",
                                                          "max_concurrent_jobs"]))
    if c == "policy":
        if s == "delete":
            return _delete(m, args, "policy")
        cfg = m.config
        if s == "create":
            r = cfg.add_policy(args.name, storage_unit=args.storage_unit, priority=args.priority,
                               compression=args.compression, encryption=args.encryption,
                               multiple_streams=args.multiple_streams,
                               checksum=args.checksum, snapshot=args.snapshot,
                               file_list=args.file_list, dedup=args.dedup,
                               skip_nodump=args.skip_nodump)
        elif s == "set":
            r = m.update_object("policy", args.name,
                                **{args.key: _setting_value(args.key, args.value)})
        elif s == "add-client":
            r = cfg.add_policy_client(args.policy, args.host)
        elif s == "add-selection":
            r = cfg.add_policy_selection(args.policy, args.path)
        elif s == "add-schedule":
            from app.config import calendar_from_text, parse_windows_text
            r = cfg.add_schedule(args.policy, args.name, type=args.type, retention=args.retention,
                                 frequency=args.frequency,
                                 windows=parse_windows_text(args.window) if args.window else None,
                                 calendar=calendar_from_text(args.weekdays, args.monthdays,
                                                             args.exclude_date),
                                 read_all=args.read_every_file)
        elif s == "show":
            r = cfg.policy(args.name)
        else:
            return _out(args, {"policies": cfg.policies()},
                        lambda d: _table(d["policies"], ["name", "storage_unit", "clients",
                                                         "selections"]))
        return _out(args, r, lambda d: print(f"policy {d['name']}: storage unit "
                                             f"{d['storage_unit']}, clients {d['clients']}, "
                                             f"selections {d['selections']}, schedules "
                                             f"{[x['name'] for x in d['schedules']]}"))
    if c == "backup":
        ids = m.start_backup(args.policy, client=args.client, schedule=args.schedule,
                             files_cache=not args.no_files_cache)
        return _jobs_result(m, args, ids)
    if c == "restore":
        image = args.image
        if args.client:
            if image:
                raise CairnError("give either IMAGE or --client, not both")
            image = m.image_at(args.client, args.policy, args.at)["id"]
        elif not image:
            raise CairnError("name the image to restore from, or --client HOST",
                             status_code=st.INVALID_REQUEST)
        relocate = {}
        if args.strip_prefix:
            relocate["strip"] = args.strip_prefix
        if args.add_prefix:
            relocate["add"] = args.add_prefix
        if args.rename:
            relocate["rename"] = {"pattern": args.rename[0], "replacement": args.rename[1],
                                  "mode": "regex" if args.regex else "glob"}
        elif args.regex:
            raise CairnError("--regex goes with --rename PATTERN REPLACEMENT",
                             status_code=st.INVALID_REQUEST)
        if args.preview:
            r = m.preview_restore(image, args.path, args.to, to_host=args.to_host,
                                  overwrite=args.overwrite, relocate=relocate or None)
            return _out(args, r, lambda d: [print(f"{i['path']}  ->  {d['to_host']}:"
                                                  f"{i['target']}") for i in d["items"]])
        jid = m.start_restore(image, args.path, args.to, to_host=args.to_host,
                              overwrite=args.overwrite, relocate=relocate or None,
                              direct_io=args.direct_io, streams=_streams_arg(args.streams))
        return _jobs_result(m, args, [jid])
    if c == "jobs":
        if s == "show":
            j = m.jobs.get(args.id)
            j["log"] = m.jobs.logs(args.id)
            return _out(args, j, _print_job)
        if s == "log":
            logs = m.jobs.logs(args.id)
            return _out(args, {"id": args.id, "log": logs},
                        lambda d: [print(f"{x['ts']} {x['level']:7} {x['message']}")
                                   for x in d["log"]])
        if s == "restart":
            ids = [j["id"] for j in m.restart_job(args.id)]
            return _jobs_result(m, args, ids)
        if s in ("suspend", "resume"):
            j = m.suspend_job(args.id) if s == "suspend" else m.resume_job(args.id)
            return _out(args, j, lambda d: print(f"job {d['id']}: {s}d"))
        if s == "cancel":
            j = m.jobs.request_cancel(args.id)
            return _out(args, j, lambda d: print(f"job {d['id']}: cancel requested "
                                                 f"(state {d['state']})"))
        return _out(args, {"jobs": m.jobs.list(state=getattr(args, "state", None))},
                    lambda d: _table(d["jobs"], ["id", "type", "state", "status", "client",
                                                 "policy", "schedule", "files", "bytes",
                                                 "percent", "wait_reason"]))
    if c == "images":
        if s == "expire":
            r = m.expire_image(args.image, with_dependents=args.with_dependents)
            return _out(args, r, lambda d: print(
                f"expired by job {d['job']}: {', '.join(d['images'])} ({d['bytes']} bytes)"))
        if s == "show":
            return _out(args, m.image(args.image), _print_image)
        if s == "verify":
            return _jobs_result(m, args, [m.start_verify(image=args.image)])
        if s == "rebuild-index":
            return _jobs_result(m, args, [m.start_rebuild_index(args.image)])
        if s == "dependents":
            r = m.expire_preview(args.image)
            return _out(args, r, lambda d: print(
                f"expiring {d['image']} also expires: {', '.join(d['with']) or 'nothing else'}"))
        images = (m.images_in_range(args.client, args.policy, args.since, args.until)
                  if args.since or args.until
                  else m.images(client=args.client, policy=args.policy))
        return _out(args, {"images": images},
                    lambda d: _table(d["images"], ["id", "client", "policy", "schedule",
                                                   "schedule_type", "created", "expires",
                                                   "files", "bytes"]))
    if c == "browse":
        pos = list(args.args)
        if args.client:
            if len(pos) > 1:
                raise CairnError("with --client give at most one PATH",
                                 status_code=st.INVALID_REQUEST)
            image = m.image_at(args.client, args.policy, args.at)["id"]
            path = pos[0] if pos else "/"
        else:
            if not pos or len(pos) > 2:
                raise CairnError("give IMAGE [PATH], or --client HOST [PATH]",
                                 status_code=st.INVALID_REQUEST)
            image, path = pos[0], (pos[1] if len(pos) > 1 else "/")
        r = m.browse(image, path)
        return _out(args, r, _print_listing)
    if c == "report" and s == "backups":
        from app import reports
        doc = reports.backup_report(m, since=args.since, until=args.until, client=args.client,
                                    policy=args.policy)
        if args.csv:
            doc["csv"] = reports.write_csv(doc["rows"], args.csv)
        return _out(args, doc, _print_backups_report)
    if c == "schedule" and s == "runs":
        from app.scheduler import Scheduler
        horizon = timeutil.parse_duration(args.horizon, what="horizon")
        if horizon is None:
            raise CairnError(f"horizon {args.horizon!r} must be a length of time, e.g. 7d",
                             status_code=st.INVALID_REQUEST)
        sched = Scheduler(m)
        doc = {"upcoming": sched.next_runs(args.policy, horizon_s=horizon),
               "runs": sched.runs(args.policy, limit=args.limit)}
        return _out(args, doc, _print_schedule_runs)
    if c == "master" and s in ("settings", "set"):
        doc = m.set_setting(args.key, args.value) if s == "set" else m.settings()
        return _out(args, {"settings": doc}, lambda d: [
            print(f"{k:22} {v['value']!s:8} {v['about']} (default {v['default']})")
            for k, v in d["settings"].items()])
    if c == "master" and s == "run":
        print(f"cairn master: dispatcher running on {m.home.root} (Ctrl-C stops it)",
              file=sys.stderr)
        try:
            m.dispatcher.run_forever(until_idle=args.until_idle)
        except KeyboardInterrupt:
            m.dispatcher.stop()
        return 0
    raise CairnError(f"unknown command: {c} {s or ''}".strip(), status_code=st.INVALID_REQUEST)


def _catalog(args, s):
    """`cairn catalog check` opens the catalog on its own, without the master: it must also
    report on a catalog the master refuses."""
    if s != "check":
        raise CairnError("name what to do with the catalog: cairn catalog check",
                         status_code=st.INVALID_REQUEST)
    from app.catalog_check import check_catalog
    from app.paths import Home
    doc = check_catalog(Home(getattr(args, "home", None)))
    doc["status"] = st.OK if doc["ok"] else st.CATALOG_FAILED
    _out(args, doc, _print_catalog_check)
    return doc["status"]


def _print_catalog_check(d):
    for p in d["problems"]:
        print(f"problem: {p['problem']}")
        print(f"  fix: {p['fix']}")
    for n in d["notes"]:
        print(f"note: {n['note']}" + (f"\n  fix: {n['fix']}" if n["fix"] else ""))
    def n(count, one, many):
        return f"{count} {one if count == 1 else many}"

    c = d["checked"]
    done = (["sqlite integrity"] if c["sqlite_integrity"] else []) \
        + (["foreign keys"] if c["foreign_keys"] else []) \
        + [n(c["images"], "image", "images"),
           n(c["indexes"], "file index", "file indexes")
           + f" ({n(c['index_entries'], 'entry', 'entries')})",
           n(c["image_files"], "image file", "image files") + " on this machine"]
    verdict = "no problems" if d["ok"] else n(len(d["problems"]), "problem", "problems")
    print(f"catalog {d['catalog']}: {verdict}; checked {', '.join(done)}")


def _streams_arg(value):
    """--streams: None for auto, else the number (the master checks its range)."""
    value = value.strip().lower()
    if value == "auto":
        return None
    try:
        return int(value)
    except ValueError:
        raise CairnError(f"--streams {value!r} is neither auto nor a number",
                         status_code=st.INVALID_REQUEST) from None


def _jobs_result(m, args, ids):
    if args.wait:
        jobs = m.wait_for(ids)
    else:
        _ensure_dispatcher(m, args)
        jobs = [m.jobs.get(j) for j in ids]
    codes = [j["status"] for j in jobs if j["status"] is not None]
    worst = max(codes, key=lambda x: (x != 0, x != 1, x)) if codes else 0
    doc = {"jobs": jobs, "status": worst}

    def human(d):
        for j in d["jobs"]:
            if j["state"] == "done":
                print(f"job {j['id']} ({j['type']}, {j['client']}): status {j['status']} - "
                      f"{j['status_text']}; {j['files']} files, {_size(j['bytes'])}"
                      + (f", dedup {j['dedup_ratio']:.1f}%" if j.get("dedup_ratio") is not None
                         else ""))
            else:
                print(f"job {j['id']} ({j['type']}, {j['client']}) {j['state']}; follow it with "
                      f"`cairn jobs show {j['id']}`")
    _out(args, doc, human)
    return worst


def _ensure_dispatcher(m, args):
    """Without --wait the jobs still have to run: start a headless master for them when no
    console or master is dispatching already."""
    from app.jobs.dispatcher import Dispatcher
    if Dispatcher.lease_holder(m.db) is not None:
        return
    cmd = [sys.executable, "-m", "app", "--home", m.home.root, "master", "run", "--until-idle"]
    if getattr(sys, "frozen", False):
        cmd = [sys.executable, "--home", m.home.root, "master", "run", "--until-idle"]
    from app.formats import private
    log = os.fdopen(private.create(os.path.join(m.home.root, "master.log"),
                                   os.O_WRONLY | os.O_APPEND), "ab")
    subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                     start_new_session=True, env=os.environ.copy())
    log.close()


def _print_backups_report(d):
    def rate(v):
        return f"{_size(v)}/s" if v else ""

    _table([dict(r, bytes=_size(r["bytes"]), rate=rate(r["rate_bytes_per_s"]),
                 group_rate=rate(r["group_rate_bytes_per_s"]))
            for r in d["rows"]], ["job_id", "client", "policy", "schedule", "started",
                                  "elapsed_s", "files", "bytes", "rate", "status", "group",
                                  "group_rate"])
    s = d["summary"]
    average, combined = s["average_rate_bytes_per_s"], s["combined_rate_bytes_per_s"]
    print(f"{s['jobs']} jobs, {s['failed']} failed; {_size(s['bytes'])} in {s['elapsed_s']} s "
          f"of job time" + (f"; average {rate(average)} per job" if average else "")
          + (f", {rate(combined)} combined while backups ran" if combined else ""))
    if d.get("csv"):
        print(f"wrote {d['csv']['rows']} rows to {d['csv']['path']}")


def _print_schedule_runs(d):
    print("upcoming:")
    _table([dict(e, note=e["note"] or "") for e in d["upcoming"]],
           ["due", "policy", "schedule", "type", "client", "window_end", "runs", "note"])
    print("recorded:")
    _table(d["runs"], ["due", "policy", "schedule", "client", "outcome", "job_id",
                       "job_state", "job_status"])


def _print_probe(d):
    print(f"{d['host']}: {d['os']}, kernel {d['kernel']}, python {d['python']}, "
          f"{d['cpus']} CPUs, {_size(d['memory_bytes'])} memory")
    _table([dict(f, size=_size(f.get("size")), free=_size(f.get("free")))
            for f in d["filesystems"]], ["mount_point", "type", "size", "free", "class"])
    scale = d.get("storage_scale")
    if scale and scale.get("error"):
        print(f"Storage Scale: {scale['error']}")
        if scale.get("hint"):
            print(f"  {scale['hint']}")
    elif scale:
        print(f"Storage Scale cluster {scale.get('cluster_name')} "
              f"(id {scale.get('cluster_id')}, version {scale.get('version')})")
        _table(scale.get("nodes") or [], ["name", "state", "quorum", "manager"])
        _table([dict(f, size=_size(f.get("size")), free=_size(f.get("free")),
                     mounted_on=", ".join(m["node"] for m in f.get("mounted_on") or []))
                for f in scale.get("filesystems") or []],
               ["device", "mount_point", "size", "free", "mounted_on"])


def _print_image(d):
    for k in ("id", "client", "policy", "schedule", "schedule_type", "base_image", "created",
              "expires", "files", "bytes", "storage_unit", "pool", "storage_host", "path",
              "image_bytes", "checksum", "warnings", "stream", "part_of"):
        if d.get(k) is not None:
            print(f"{k:16} {d[k]}")
    for snap in d.get("snapshot") or []:
        where = f"fileset {snap['fileset']} of {snap['device']}" if snap.get("fileset") \
            else f"file system {snap['device']}"
        print(f"{'snapshot':16} {snap['name']} of {where}, taken "
              f"{timeutil.iso(snap['created'])}")
    dd = d.get("dedup")
    if dd:
        print(f"{'deduplication':16} {dd.get('dedup_ratio') or 0:.1f}% in the pool already "
              f"({dd.get('mode')}); {dd.get('new_chunks')} of {dd.get('chunks')} chunks new, "
              f"{_size(dd.get('stored_bytes') or 0)} stored")
    scan = d.get("scan") or {}
    if scan.get("method"):
        print(f"{'file list':16} "
              + ("Storage Scale policy engine" if scan["method"] == "policy" else "tree walk"))


def _print_job(j):
    shown = dict(j, bytes=f"{j['bytes']} ({_size(j['bytes'])})",
                 rate_bytes_per_s=(f"{_size(j['rate_bytes_per_s'])}/s"
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


def _print_listing(d):
    print(f"{d['image']}:{d['path']}")
    for e in d["entries"]:
        mt = timeutil.iso(e["mtime_ns"] / 1e9)
        print(f"  {e['kind']} {e['mode']:04o} {e['uid']:>6} {e['gid']:>6} {e['size']:>12} "
              f"{mt} {e['name']}" + (f" -> {e['link']}" if e["link"] else ""))


def _setting_value(key, text):
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


def _delete(m, args, kind):
    r = m.delete_object(kind, args.name)
    return _out(args, r, lambda d: print(f"{kind.replace('-', ' ')} {args.name} deleted"))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["agent"]:
        from app.agent.server import main as agent_main
        return agent_main()
    import sqlite3
    from app.store.db import catalog_error
    # Whatever a name holds, printing it must never crash the command.
    sys.stdout.reconfigure(errors="backslashreplace")
    ap = build_parser()
    args = ap.parse_args(argv)
    if not args.cmd:
        ap.print_help()
        return 0
    try:
        try:
            rc = run(args)
        except sqlite3.Error as e:
            # What the catalog layer did not turn into a message already: still one.
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


if __name__ == "__main__":
    sys.exit(main())
