"""`cairn host`: register and inspect hosts."""

import sys

from app import scale_view
from app.cli.output import out, size, table
from app.cli.shared import setting_value
from app.terminal_text import escape_all


def host_commands(sub, cmd):
    host = cmd(sub, "host", "register and inspect hosts").add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(host, "add", "register a host", handler=_add)
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
    cmd(host, "list", "list hosts", handler=_list)
    p = cmd(host, "probe", "what the host reports: OS, python, file systems", handler=_probe)
    p.add_argument("name")
    p = cmd(host, "trust", "trust the SSH host key a registered host presents now",
            handler=_trust)
    p.add_argument("name")
    p.add_argument("--fingerprint", help="trust only this key (SHA256:...)")
    p.add_argument("--replace", action="store_true",
                   help="drop the key trusted before (the host was reinstalled)")
    p = cmd(host, "remove", "unregister a host", handler=_remove)
    p.add_argument("name")
    p = cmd(host, "set", "change a host's attribute", handler=_set,
            description="Change one attribute of a registered host: port, user, key_file, "
                        "data_address, max_jobs, agent_env or comment. agent_env is the "
                        "environment its agent starts with, as NAME=value pairs separated by "
                        "commas (CAIRN_* variables, PATH, PYTHONPATH, TMPDIR), e.g. CAIRN_MMFS_SUDO=1; "
                        "an empty value clears it.")
    p.add_argument("name")
    p.add_argument("key")
    p.add_argument("value")


def _add(m, args):
    h = m.add_host(args.name, local=args.local, address=args.address, port=args.port,
                   user=args.user, key_file=args.key, trust_host_key=args.trust_host_key,
                   data_address=args.data_address, check=not args.no_check)
    return out(args, h, lambda d: print(f"host {d['name']} added"))


def _list(m, args):
    return out(args, {"hosts": m.host_list()},
               lambda d: table(d["hosts"], ["name", "kind", "address", "port", "user"]))


def _probe(m, args):
    r = m.probe_host(args.name)
    scale = r.get("storage_scale")
    r["warnings"] = []
    if scale_view.problem(scale, args.name) is None:
        # The mount map's warnings: storage servers whose node has not mounted the GPFS
        # file system their disk pool is on.
        found = scale_view.members(scale, m.disk_pools(), m.host_list(),
                                   probed=(args.name, r.get("hostname")))
        r["warnings"] = [f"{fs.get('device')}: {f}" for fs in scale.get("filesystems") or []
                         for f in scale_view.member_flags(fs, found)]
    for w in escape_all(r["warnings"]):
        print(f"warning: {w}", file=sys.stderr)
    return out(args, r, _print_probe)


def _trust(m, args):
    r = m.trust_host_key(args.name, fingerprint=args.fingerprint, replace=args.replace)
    return out(args, r, lambda d: print(
        f"host {d['host']}: trusted {d['key_type']} {d['fingerprint']}" if d["trusted"]
        else f"host {d['host']}: its key is trusted already"))


def _set(m, args):
    r = m.update_object("host", args.name, **{args.key: setting_value(args.key, args.value)})
    return out(args, r, lambda d: print(f"host {d['name']}: {args.key} changed"))


def _remove(m, args):
    m.delete_object("host", args.name)
    return out(args, {"removed": args.name}, lambda d: print(f"host {args.name} removed"))


def _print_probe(d):
    print(f"{d['host']}: {d['os']}, kernel {d['kernel']}, python {d['python']}, "
          f"{d['cpus']} CPUs, {size(d['memory_bytes'])} memory")
    table([dict(f, size=size(f.get("size")), free=size(f.get("free")))
           for f in d["filesystems"]], ["mount_point", "type", "size", "free", "class"])
    scale = d.get("storage_scale")
    if scale and scale.get("error"):
        print(f"Storage Scale: {scale['error']}")
        if scale.get("hint"):
            print(f"  {scale['hint']}")
    elif scale:
        print(f"Storage Scale cluster {scale.get('cluster_name')} "
              f"(id {scale.get('cluster_id')}, version {scale.get('version')})")
        table(scale.get("nodes") or [], ["name", "state", "quorum", "manager"])
        table([dict(f, size=size(f.get("size")), free=size(f.get("free")),
                    mounted_on=", ".join(m["node"] for m in f.get("mounted_on") or []))
               for f in scale.get("filesystems") or []],
              ["device", "mount_point", "size", "free", "mounted_on"])
