"""`cairn lifecycle`: the steps a policy's images go through (a backup, then duplications to
other pools, each copy with its own retention)."""

from app.cli.output import out, table
from app.cli.shared import deleting


def lifecycle_commands(sub, cmd):
    lc = cmd(sub, "lifecycle", "lifecycles: a backup and its duplications to other pools",
             handler=_list).add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(lc, "create", "create a lifecycle", handler=_create,
            description="A lifecycle's first step is the backup (to one storage unit), the "
                        "others duplicate each image to another storage unit's pool; each copy "
                        "is kept for its step's retention. A policy uses it with "
                        "`cairn policy create NAME --lifecycle LIFECYCLE`.",
            epilog="example: cairn lifecycle create gold --step backup:stu-a:2w "
                   "--step duplicate:stu-b:8w")
    p.add_argument("name")
    p.add_argument("--step", action="append", required=True, metavar="KIND:STU:RETENTION",
                   help="backup:STU:RETENTION first, then duplicate:STU:RETENTION (repeat for "
                        "more copies); RETENTION as 2w, 90d, 1y or infinite")
    p.add_argument("--comment", default="")
    cmd(lc, "list", "list lifecycles", handler=_list)
    p = cmd(lc, "show", "show a lifecycle and the policies that use it", handler=_show)
    p.add_argument("name")
    p = cmd(lc, "delete", "delete a lifecycle no policy uses (its images' copies stay until "
                          "they expire)", handler=deleting("lifecycle"))
    p.add_argument("name")


def _print(d):
    print(f"lifecycle {d['name']}: " + ", then ".join(
        f"{'back up to' if s['kind'] == 'backup' else 'duplicate to'} {s['storage_unit']} "
        f"(pool {s['pool']} on {s['host']}, copy {s['copy']} kept {s['retention']})"
        for s in d["steps"]))
    print(f"  used by: {', '.join(d['policies']) or 'no policy'}")


def _create(m, args):
    return out(args, m.create_lifecycle(args.name, args.step, comment=args.comment), _print)


def _show(m, args):
    return out(args, m.lifecycle(args.name), _print)


def _list(m, args):
    """The lifecycles, and the copies they want that keep failing ("failing")."""
    doc = {"lifecycles": m.lifecycles(), "failing": m.duplication_problems()}

    def human(d):
        table([{"name": r["name"], "steps": " ".join(s["text"] for s in r["steps"]),
                "policies": ", ".join(r["policies"])} for r in d["lifecycles"]],
              ["name", "steps", "policies"])
        for f in d["failing"]:
            print(f"warning: image {f['image']} has no copy {f['copy']} in disk pool "
                  f"{f['pool']}: duplicate job {f['job']} (attempt {f['attempts']}) ended with "
                  f"status {f['status']}: {f['why']}; `cairn jobs restart {f['job']}`")
    return out(args, doc, human)
