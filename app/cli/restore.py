"""Getting files back: `cairn browse` (a directory of an image) and `cairn restore`."""

from app import status as st, timeutil
from app.cli.output import out
from app.cli.shared import jobs_result, progress_option
from app.errors import CairnError


# ---- browse ---------------------------------------------------------------------------------

def browse_commands(sub, cmd):
    p = cmd(sub, "browse", "list a directory of an image", handler=_browse)
    p.add_argument("args", nargs="*", metavar="IMAGE [PATH]")
    p.add_argument("--client")
    p.add_argument("--policy")
    p.add_argument("--at")


def _browse(m, args):
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
    return out(args, r, _print_listing)


def _print_listing(d):
    print(f"{d['image']}:{d['path']}")
    for e in d["entries"]:
        mt = timeutil.iso(e["mtime_ns"] / 1e9)
        # as ls -l shows them: the client's names, the number where it had none (--json
        # keeps the numbers beside the names)
        user = e.get("user") or e["uid"]
        group = e.get("group") or e["gid"]
        print(f"  {e['kind']} {e['mode']:04o} {user:<8} {group:<8} {e['size']:>12} "
              f"{mt} {e['name']}" + (f" -> {e['link']}" if e["link"] else ""))


# ---- restore --------------------------------------------------------------------------------

def restore_commands(sub, cmd):
    p = cmd(sub, "restore", "restore files from an image", handler=_restore)
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
    p.add_argument("--copy", type=int, metavar="N",
                   help="read this copy of the image (see `cairn images copies IMAGE`), and no "
                        "other; by default the primary copy, then the next when one is "
                        "missing, damaged or its host is down")
    p.add_argument("--preview", action="store_true",
                   help="show where the paths would go, and start nothing")
    p.add_argument("--wait", action="store_true")
    progress_option(p)


def _restore(m, args):
    image = args.image
    if args.client:
        if image:
            raise CairnError("give either IMAGE or --client, not both")
        image = m.image_at(args.client, args.policy, args.at)["id"]
    elif not image:
        raise CairnError("name the image to restore from, or --client HOST",
                         status_code=st.INVALID_REQUEST)
    relocate = _relocation(args)
    if args.preview:
        r = m.preview_restore(image, args.path, args.to, to_host=args.to_host,
                              overwrite=args.overwrite, relocate=relocate or None)
        return out(args, r, lambda d: [print(f"{i['path']}  ->  {d['to_host']}:"
                                             f"{i['target']}") for i in d["items"]])
    jid = m.start_restore(image, args.path, args.to, to_host=args.to_host,
                          overwrite=args.overwrite, relocate=relocate or None,
                          direct_io=args.direct_io, streams=_streams_arg(args.streams),
                          copy=args.copy)
    return jobs_result(m, args, [jid])


def _relocation(args):
    """Where the restored paths go, from --strip-prefix, --add-prefix and --rename."""
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
    return relocate


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
