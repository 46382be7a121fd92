"""`cairn storage-unit-group`: storage units a backup job is placed on when it starts (the
first that can take it, the first available, in turn, or the least loaded)."""

from app.cli.output import out, table
from app.stugroups import SELECTIONS


def storage_unit_group_commands(sub, cmd):
    g = cmd(sub, "storage-unit-group", "storage unit groups: several storage units a policy's "
            "jobs are spread over", handler=_list).add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(g, "create", "create a storage unit group", handler=_create,
            description="A policy that writes to the group (`cairn policy create NAME "
                        "--storage-unit-group GROUP`) has each backup job placed on one of "
                        "its units when the job starts, passing over units that are full "
                        "(high-water mark), whose host is down or whose limits are reached. "
                        "prioritized: the first unit that can take the job; failover: the "
                        "first available unit, waiting while it is only busy; round-robin: "
                        "the units in turn; least-loaded: the storage server running the "
                        "fewest jobs, then the one that wrote least in the last minutes. An "
                        "incremental goes where its chain is.",
            epilog="example: cairn storage-unit-group create spread --units stu-a,stu-b "
                   "--selection least-loaded")
    p.add_argument("name")
    p.add_argument("--units", required=True, metavar="STU,STU[,...]",
                   help="the storage units, in the order prioritized and failover use")
    p.add_argument("--selection", required=True, choices=SELECTIONS,
                   help="how a job's unit is chosen when it starts")
    p.add_argument("--comment", default="")
    cmd(g, "list", "list storage unit groups", handler=_list)
    p = cmd(g, "show", "show a storage unit group and the policies that use it",
            handler=_show)
    p.add_argument("name")
    p = cmd(g, "delete", "delete a storage unit group no policy uses", handler=_delete)
    p.add_argument("name")


def _print(d):
    print(f"storage unit group {d['name']} ({d['selection']}): " + ", ".join(
        f"{u['storage_unit']} (pool {u['pool']} on {u['host']})" for u in d["units"]))
    print(f"  used by: {', '.join(d['policies']) or 'no policy'}")


def _create(m, args):
    return out(args, m.create_storage_unit_group(args.name, args.units, args.selection,
                                                 comment=args.comment), _print)


def _show(m, args):
    return out(args, m.storage_unit_group(args.name), _print)


def _delete(m, args):
    return out(args, m.delete_storage_unit_group(args.name),
               lambda d: print(f"storage unit group {args.name} deleted"))


def _list(m, args):
    return out(args, {"storage_unit_groups": m.storage_unit_groups()},
               lambda d: table([{"name": r["name"], "selection": r["selection"],
                                 "units": ",".join(r["unit_names"]),
                                 "policies": ", ".join(r["policies"])}
                                for r in d["storage_unit_groups"]],
                               ["name", "selection", "units", "policies"]))
