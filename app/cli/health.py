"""`cairn status`: health at a glance (app/health.py), one JSON document with --json."""

from app.cli.output import out, size, table


def status_commands(sub, cmd):
    p = cmd(sub, "status", "health at a glance: pools, hosts, the last day's jobs, clients, "
            "catalog backup, warnings", handler=_status)
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="how long each host gets to answer (default 8); hosts are asked "
                        "side by side")


def _status(m, args):
    kw = {"timeout": args.timeout} if args.timeout else {}
    doc = m.health(**kw)
    out(args, doc, _print)
    return 0


def _pct(p):
    return "" if p["used_percent"] is None else f"{p['used_percent']:.1f}%"


def _print(d):
    print("Disk pools")
    table([{"name": p["name"], "host": p["host"], "size": size(p["size_bytes"]),
            "used": size(p["used_bytes"]), "free": size(p["free_bytes"]), "use": _pct(p),
            "high-water": f"{p['high_water']}%" + (" ABOVE" if p["above_high_water"] else ""),
            "growth/day": "" if p["growth_bytes_per_day"] is None
            else size(p["growth_bytes_per_day"]),
            "error": p["error"] or ""} for p in d["pools"]],
          ["name", "host", "size", "used", "free", "use", "high-water", "growth/day", "error"])
    for p in d["pools"]:
        if p.get("dedup"):
            dd = p["dedup"]
            print(f"  {p['name']}: {size(dd['stored_bytes'])} of data stored once "
                  f"({dd['chunks']:,} chunks) in {size(dd['container_bytes'])} of container "
                  "files")
    print("\nHosts")
    table([{"name": h["name"], "state": "reachable" if h["reachable"]
            else f"not reachable ({h['error']})", "last contact": h["last_contact"] or "never"}
           for h in d["hosts"]], ["name", "state", "last contact"])
    j = d["jobs"]
    print(f"\nJobs in the last 24 hours: {j['succeeded_24h']} succeeded, "
          f"{j['failed_24h']} failed, {j['partial_24h']} partial, {j['missed_24h']} missed, "
          f"{j['canceled_24h']} canceled; {j['active']} running, {j['queued']} queued")
    for what in ("failed", "partial", "missed"):
        if j[f"{what}_ids"]:
            print(f"  {what}: " + " ".join(str(i) for i in j[f"{what}_ids"]))
    print(f"\nClients (stale: no successful backup in {d['stale_client_days']} days)")
    table([{"name": c["name"], "last backup": c["last_successful_backup"] or "none",
            "stale": "yes" if c["stale"] else ""} for c in d["clients"]],
          ["name", "last backup", "stale"])
    cb = d["catalog_backup"]
    print(f"\nCatalog backup: last {cb['last'] or 'never'}"
          + (" (overdue)" if cb["overdue"] else ""))
    print("\nWarnings" if d["warnings"] else "\nNo warnings")
    for w in d["warnings"]:
        print(f"  {w['severity'].upper()}: {w['message']}")
