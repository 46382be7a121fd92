"""Where backups go: `cairn storage-server`, `cairn disk-pool` and `cairn storage-unit`."""

import argparse
import sys

from app.cli.benchmark import benchmark_commands
from app.cli.output import out, size, table
from app.errors import ValidationError
from app.formats.sizes import parse_size
from app.terminal_text import escape_all
from app.cli.shared import deleting, jobs_result, progress_option, setting_value
from plugins.storage import registry
from plugins.storage.cloud import keys as cloud_keys


def _size_arg(text):
    """A size in bytes, with an optional K, M or G (powers of 1024)."""
    try:
        return parse_size(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 524288, 512K, 2M)")


# ---- storage-server -------------------------------------------------------------------------

def storage_server_commands(sub, cmd):
    ss = cmd(sub, "storage-server", "storage servers",
             handler=_server_list).add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(ss, "create", "create a storage server", handler=_server_create)
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
    p.add_argument("--endpoint", help="cloud: the S3 service's URL (https://...)")
    p.add_argument("--bucket", help="cloud: the bucket that holds the pool")
    p.add_argument("--credentials-file", metavar="F",
                   help="cloud: a file only you may read with access_key=... and "
                        "secret_key=... lines; the master keeps a copy in "
                        "CAIRN_HOME/keys/NAME.s3, never in the catalog")
    p.add_argument("--region", help="cloud: the bucket's region (default us-east-1)")
    p.add_argument("--prefix", help="cloud: keep the pool's objects under this prefix")
    p.add_argument("--ca-file", metavar="F",
                   help="cloud: the CA certificate (on the storage server) that the "
                        "endpoint's TLS certificate is checked against")
    p.add_argument("--cache", metavar="DIR",
                   help="cloud: the local cache on the storage server (default "
                        "/var/cache/cairn/cloud/NAME)")
    p.add_argument("--cache-limit", type=_size_arg, metavar="SIZE",
                   help="cloud: the most container bytes the cache keeps (e.g. 200G); by "
                        "default it is trimmed when its file system is 90%% full")
    p.add_argument("--commit-at", choices=("bucket", "cache"),
                   help="cloud: a backup ends once the bucket holds its image (bucket, the "
                        "default), or once the cache does, its upload queued (cache)")
    cmd(ss, "list", "list storage servers", handler=_server_list)
    p = cmd(ss, "set", "change a storage server's setting", handler=_server_set,
            description="Change settings of a storage server: for a deduplicating server "
                        "(dedup, cloud) its chunk sizes min_chunk, avg_chunk, max_chunk "
                        "(e.g. 256K, 1M; min < avg < max, avg a power of two), which the "
                        "next backups cut their data with: images already stored keep their "
                        "chunks and restore as before, and new data deduplicates against "
                        "them only where whole chunks repeat. Any server: comment. Several "
                        "KEY VALUE pairs change together (all or nothing).")
    p.add_argument("name")
    p.add_argument("key")
    p.add_argument("value")
    p.add_argument("more", nargs="*", metavar="KEY VALUE",
                   help="further settings changed in the same step")
    benchmark_commands(ss, cmd, _size_arg)
    p = cmd(ss, "delete", "delete a storage server that no disk pool uses",
            handler=deleting("storage-server"))
    p.add_argument("name")


def _server_create(m, args):
    opts = {k: v for k, v in (("min_size", args.min_chunk), ("avg_size", args.avg_chunk),
                              ("max_size", args.max_chunk)) if v is not None}
    if args.encrypt:
        opts["encrypted"] = True
    opts.update({k: v for k, v in (("endpoint", args.endpoint), ("bucket", args.bucket),
                                   ("region", args.region), ("prefix", args.prefix),
                                   ("ca_file", args.ca_file),
                                   ("cache_limit", args.cache_limit),
                                   ("commit_at", args.commit_at)) if v is not None})
    if args.cache and args.path and args.cache != args.path:
        raise ValidationError("--cache and --path name the same directory: give one")
    credentials = None
    if args.credentials_file:
        credentials = cloud_keys.read_file(args.credentials_file)
    r = m.create_storage_server(args.name, type=args.type, host=args.host,
                                path=args.cache or args.path, options=opts or None,
                                credentials=credentials)

    def show(d):
        print(f"storage server {d['name']} created")
        for w in d.get("warnings") or []:
            print(f"warning: {w}", file=sys.stderr)
        if d.get("key_file"):
            print(f"its encryption key is {d['key_file']}: back it up; "
                  "without it the pool cannot be read", file=sys.stderr)
    return out(args, r, show)


def _server_set(m, args):
    if len(args.more) % 2:
        raise ValidationError(f"setting {args.more[-1]!r} has no value",
                              hint="give KEY VALUE pairs, e.g. `cairn storage-server set "
                                   f"{args.name} min_chunk 64K avg_chunk 256K`")
    pairs = [args.key, args.value] + args.more
    changes = dict(zip(pairs[::2], pairs[1::2]))
    if len(changes) * 2 != len(pairs):
        raise ValidationError("a setting is given twice", hint="give each key once")
    r = m.update_object("storage-server", args.name, **changes)

    def show(d):
        storage_type = registry.get(d["type"])
        text = storage_type.settings_text(d["options"]) if storage_type else ""
        print(f"storage server {d['name']}: {', '.join(changes)} changed"
              + (f"; the next backups cut {text}, images already stored keep theirs"
                 if text and set(changes) - {"comment"} else ""))
    return out(args, r, show)


def _server_list(m, args):
    return out(args, {"storage_servers": m.storage_servers()},
               lambda d: table(d["storage_servers"], ["name", "type", "host", "path"]))


# ---- disk-pool ------------------------------------------------------------------------------

def disk_pool_commands(sub, cmd):
    dp = cmd(sub, "disk-pool", "disk pools",
             handler=_pool_list).add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(dp, "create", "create a disk pool", handler=_pool_create)
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
    p = cmd(dp, "list", "list disk pools", handler=_pool_list)
    p.add_argument("--check", action="store_true",
                   help="read each storage server's host and warn about a pool whose file "
                        "system is not mounted there (as disk-pool show does)")
    p = cmd(dp, "show", "a disk pool, each volume as its host finds it now, and warnings",
            handler=_pool_show,
            description="Show a disk pool with each volume checked on its storage server's "
                        "host (exists, writable, size, free, file system) and warnings: a "
                        "Storage Scale (GPFS) file system not mounted on the host's node, "
                        "or a shared file system that other storage servers' pools use not "
                        "mounted on this host.")
    p.add_argument("name")
    p = cmd(dp, "set", "change a disk pool's attribute", handler=_pool_set,
            description="Change one attribute of a disk pool: high_water, low_water, "
                        "max_io_streams (0: no limit), compact_below (deduplicating pools: "
                        "percent of live data below which reclaim compacts a container), "
                        "verify_every (how often the whole pool is read back and checked, "
                        "e.g. 7d; never: only by hand), verify_max_mb_s (the most a verify of "
                        "the pool reads per second, in MB/s, so that backups keep their share "
                        "of the disks; unlimited: as fast as it goes) or comment.")
    p.add_argument("name")
    p.add_argument("key")
    p.add_argument("value")
    p = cmd(dp, "delete", "delete a disk pool that no storage unit or image uses",
            handler=deleting("disk-pool"))
    p.add_argument("name")
    p = cmd(dp, "reclaim", "deduplication pool: remove chunks no image uses, compact containers",
            handler=_pool_reclaim)
    p.add_argument("name")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    progress_option(p)
    p = cmd(dp, "verify", "read every image of the pool back and check it (headers and "
                          "checksums, or every chunk of a deduplicating pool); also make the "
                          "pool's files private again and report any that were not",
            handler=_pool_verify)
    p.add_argument("name")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    progress_option(p)
    p = cmd(dp, "import", "record the images on the pool that the catalog does not know "
                          "(after losing the catalog, or images newer than its backup)",
            handler=_pool_import,
            description="Queue an import of a disk pool: every committed image on the pool "
                        "that the catalog does not know is read (its own metadata and file "
                        "index, never its file data) and recorded with its client, policy, "
                        "schedule, times, file index and incremental chain. An incremental "
                        "whose base image is on neither the pool nor the catalog is listed, "
                        "not recorded; unreadable or suspect images are listed with why. "
                        "Running it again records nothing new. Create the host, storage "
                        "server and disk pool with their old names and paths first.")
    p.add_argument("name")
    p.add_argument("--key-file", metavar="F",
                   help="an encrypted deduplicating pool whose key this master does not have: "
                        "the file holding the key (64 hex digits, as CAIRN_HOME/keys/"
                        "SERVER.key); kept by the master once it opened the pool")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    progress_option(p)
    p = cmd(dp, "cleanup", "remove pool files that no catalog image owns (left by backups "
                           "that stopped before their image was recorded)",
            handler=_pool_cleanup)
    p.add_argument("name")
    p.add_argument("--dry-run", action="store_true", help="only list them")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    progress_option(p)
    p = cmd(dp, "usage", "deduplication pool: chunks and bytes it holds", handler=_pool_usage)
    p.add_argument("name")
    p = cmd(dp, "rebuild-index", "deduplication pool: rebuild the chunk index from the "
                                 "containers alone", handler=_pool_rebuild_index)
    p.add_argument("name")


def _pool_create(m, args):
    r = m.create_disk_pool(args.name, server=args.server, volumes=args.volume,
                           high_water=args.high_water, low_water=args.low_water,
                           max_io_streams=args.max_io_streams,
                           compact_below=args.compact_below)
    _warn(r)
    return out(args, r, lambda d: print(f"disk pool {d['name']} created"))


def _warn(d):
    """Warnings on stderr, also with --json (whose document carries them as well)."""
    for w in escape_all(d.get("warnings") or []):
        print(f"warning: {w}", file=sys.stderr)


def _pool_show(m, args):
    r = m.disk_pool_report(args.name)
    _warn(r)

    def show(d):
        print(f"disk pool {d['name']} on storage server {d['server']} ({d['server_type']}, "
              f"host {d['host']}): high water {d['high_water']}%, low water "
              f"{d['low_water']}%")
        if d["error"]:
            print(f"the volumes could not be checked on host {d['host']}: {d['error']}")
        checks = {c["path"]: c for c in d["checks"]}
        rows = []
        for v in d["volumes"]:
            c = checks.get(v) or {}
            fs = c.get("filesystem") or {}
            rows.append({"volume": v, "state": "ok" if c.get("ok") else c.get("error"),
                         "size": size(c.get("size")), "free": size(c.get("free")),
                         "filesystem": (f"{fs.get('mount_point')} ({fs.get('type')})"
                                        if fs else "")})
        table(rows, ["volume", "state", "size", "free", "filesystem"])
    out(args, r, show)
    return 0


def _pool_list(m, args):
    if not getattr(args, "check", False):
        return out(args, {"disk_pools": m.disk_pools()},
                   lambda d: table(d["disk_pools"], ["name", "server", "volumes",
                                                     "high_water", "low_water"]))
    pools = m.disk_pools_checked()
    for p in escape_all(pools):
        if not p["host_readable"]:
            print(f"warning: disk pool {p['name']}: host {p['host']} could not be read",
                  file=sys.stderr)
        for w in p["warnings"]:
            print(f"warning: disk pool {p['name']}: {w}", file=sys.stderr)
    return out(args, {"disk_pools": pools}, lambda d: table(
        [dict(p, warnings=len(p["warnings"]) if p["host_readable"] else "host unreadable")
         for p in d["disk_pools"]],
        ["name", "server", "host", "volumes", "high_water", "low_water", "warnings"]))


def _pool_set(m, args):
    r = m.update_object("disk-pool", args.name,
                        **{args.key: setting_value(args.key, args.value)})
    return out(args, r, lambda d: print(f"disk pool {d['name']}: {args.key} changed"))


def _pool_reclaim(m, args):
    return jobs_result(m, args, [m.start_reclaim(args.name)])


def _pool_verify(m, args):
    return jobs_result(m, args, [m.start_verify(pool=args.name)])


def _pool_import(m, args):
    job_id = m.start_import(args.name, key_file=args.key_file)
    code = jobs_result(m, args, [job_id])
    job = m.job(job_id)
    if args.wait and not getattr(args, "json", False):
        if job.get("result"):
            _print_import(escape_all(job["result"]))
        elif job["status"] not in (0, None):
            for x in m.job_logs(job_id):
                if x["level"] == "error":
                    for line in x["message"].splitlines():
                        print(escape_all(line), file=sys.stderr)
    return code


def _print_import(r):
    print(f"imported {len(r['imported'])} image(s)"
          + (f" and {len(r['sets'])} set image(s)" if r["sets"] else "")
          + f" from disk pool {r['pool']}; {r['already_known']} already in the catalog")
    for i in r["incomplete"]:
        print(f"not recorded, chain incomplete: {i['image']}: {i['why']}")
    for e in r["errors"]:
        print(f"not recorded: {e['image']} ({e['path']}): {e['error']}")
    notes = {}
    for n in r["notes"]:
        notes.setdefault(n["note"], []).append(n["image"])
    for text, images in notes.items():
        print(f"note: {images[0] if len(images) == 1 else f'{len(images)} images'}: {text}")
    if r.get("key"):
        print(r["key"])


def _pool_cleanup(m, args):
    return jobs_result(m, args, [m.start_cleanup(args.name, dry_run=args.dry_run)])


def _pool_usage(m, args):
    r = m.pool_usage(args.name)

    def show(d):
        print(f"{d['chunks']} chunks, {size(d['stored_bytes'])} stored in "
              f"{d['containers']} containers ({size(d['container_bytes'])})"
              + (", encrypted" if d.get("encrypted") else ""))
        c = d.get("cloud")
        if c:
            print(f"cache: {c['cached']} of {c['containers']} containers "
                  f"({size(c['cached_bytes'])}); waiting for the bucket: {c['waiting']} "
                  f"container(s) ({size(c['waiting_bytes'])}), {c['waiting_recipes']} "
                  "recipe(s)")
    return out(args, r, show)


def _pool_rebuild_index(m, args):
    r = m.rebuild_pool_index(args.name)
    return out(args, r, lambda d: print(
        f"index rebuilt: {d['chunks']} chunks from {d['containers']} containers"
        + (f"; {d['damaged']} damaged record(s) left out" if d.get("damaged") else "")
        + (f"; {d['torn']} torn container end(s) skipped" if d.get("torn") else "")))


# ---- storage-unit ---------------------------------------------------------------------------

def storage_unit_commands(sub, cmd):
    su = cmd(sub, "storage-unit", "storage units",
             handler=_unit_list).add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(su, "create", "create a storage unit", handler=_unit_create)
    p.add_argument("name")
    p.add_argument("--pool", required=True)
    p.add_argument("--max-concurrent-jobs", type=int, default=1)
    cmd(su, "list", "list storage units", handler=_unit_list)
    p = cmd(su, "delete", "delete a storage unit that no policy uses",
            handler=deleting("storage-unit"))
    p.add_argument("name")


def _unit_create(m, args):
    r = m.create_storage_unit(args.name, pool=args.pool,
                              max_concurrent_jobs=args.max_concurrent_jobs)
    return out(args, r, lambda d: print(f"storage unit {d['name']} created"))


def _unit_list(m, args):
    return out(args, {"storage_units": m.storage_units()},
               lambda d: table(d["storage_units"], ["name", "pool", "host",
                                                    "max_concurrent_jobs"]))
