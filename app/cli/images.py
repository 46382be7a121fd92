"""`cairn images`: list, show, check and expire backup images."""

from app import timeutil
from app.cli.output import out, size, table
from app.cli.shared import jobs_result, progress_option


def images_commands(sub, cmd):
    im = cmd(sub, "images", "backup images",
             handler=_list).add_subparsers(dest="sub", metavar="ACTION")
    p = cmd(im, "list", "list images", handler=_list)
    p.add_argument("--client")
    p.add_argument("--policy")
    p.add_argument("--since", metavar="TIME", help="only images created at or after TIME")
    p.add_argument("--until", metavar="TIME", help="only images created at or before TIME")
    p = cmd(im, "expire", "expire an image now (an expire job; waits for it)", handler=_expire)
    p.add_argument("image")
    p.add_argument("--with-dependents", action="store_true",
                   help="also expire the images that read data from it (later incrementals, "
                        "stream images); without it such an image is refused, naming them")
    p = cmd(im, "dependents", "the images that go when an image is expired",
            handler=_dependents)
    p.add_argument("image")
    p = cmd(im, "copies", "every copy of an image: its number, pool, storage unit, host, expiry "
                          "and state", handler=_copies)
    p.add_argument("image")
    p = cmd(im, "show", "one image: where it is, what it holds, the snapshot it was read from",
            handler=_show)
    p.add_argument("image")
    p = cmd(im, "verify", "read an image back and check every tar header and file checksum "
                          "(every chunk on a deduplicating pool)", handler=_verify)
    p.add_argument("image")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    progress_option(p)
    p = cmd(im, "rebuild-index", "rebuild an image's catalog index (for browse and restore) "
                                 "from the image itself; the old index is kept aside",
            handler=_rebuild_index)
    p.add_argument("image")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    progress_option(p)


def _list(m, args):
    # `cairn images` alone lists them all: the options are list's own
    client, policy = getattr(args, "client", None), getattr(args, "policy", None)
    since, until = getattr(args, "since", None), getattr(args, "until", None)
    images = (m.images_in_range(client, policy, since, until) if since or until
              else m.images(client=client, policy=policy))
    # bytes: the data backed up; image_bytes: what the image takes in its pool (compressed,
    # or what a deduplicating pool stored for it)
    return out(args, {"images": images},
               lambda d: table(d["images"], ["id", "client", "policy", "schedule",
                                             "schedule_type", "created", "expires",
                                             "files", "bytes", "image_bytes"]))


def _expire(m, args):
    r = m.expire_image(args.image, with_dependents=args.with_dependents)
    return out(args, r, lambda d: print(
        f"expired by job {d['job']}: {', '.join(d['images'])} ({d['bytes']} bytes)"))


def _dependents(m, args):
    r = m.expire_preview(args.image)
    return out(args, r, lambda d: print(
        f"expiring {d['image']} also expires: {', '.join(d['with']) or 'nothing else'}"))


def _show(m, args):
    return out(args, m.image(args.image), _print_image)


def _copies(m, args):
    def human(d):
        table([{"copy": c["copy"], "primary": "yes" if c["primary"] else "",
                "pool": c["pool"], "storage_unit": c["storage_unit"], "host": c["storage_host"],
                "expires": c["expires"] or "never", "state": c["state"]}
               for c in d["copies"]],
              ["copy", "primary", "pool", "storage_unit", "host", "expires", "state"])
        for j in d["duplications"]:
            print(f"duplicate job {j['job']} ({j['state']}) makes copy {j['copy']} on "
                  f"{j['storage_unit']}")
    return out(args, m.image_copies(args.image), human)


def _verify(m, args):
    return jobs_result(m, args, [m.start_verify(image=args.image)])


def _rebuild_index(m, args):
    return jobs_result(m, args, [m.start_rebuild_index(args.image)])


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
        if dd.get("new_chunks") is None:
            print(f"{'deduplication':16} {dd.get('chunks')} chunks (what the image added to "
                  "the pool is not known)")
        else:
            print(f"{'deduplication':16} {dd.get('dedup_ratio') or 0:.1f}% in the pool "
                  "already" + (f" ({dd['mode']})" if dd.get("mode") else "")
                  + f"; {dd.get('new_chunks')} of {dd.get('chunks')} chunks new, "
                  f"{size(dd.get('stored_bytes') or 0)} stored")
    zc = d.get("compression")
    if zc:
        print(f"{'compression':16} {zc.get('codec', 'zstd')}"
              + (f" level {zc['level']}" if zc.get("level") else "")
              + (" on the client" if zc.get("at") == "client" else
                 " on the storage server" if zc.get("at") else "")
              + f": {size(zc.get('tar_bytes') or 0)} of tar stream stored in "
              f"{size(zc.get('stored_bytes') or 0)} ({zc.get('frames')} frames)")
    scan = d.get("scan") or {}
    if scan.get("method"):
        print(f"{'file list':16} "
              + ("Storage Scale policy engine" if scan["method"] == "policy" else "tree walk"))
    imp = d.get("imported")
    if imp:
        print(f"{'imported':16} from its pool by job {imp.get('job')} "
              f"(image format {imp.get('format_version')}"
              + (f", made by backup job {imp['job_id']}" if imp.get("job_id") else "") + ")")
        for x in imp.get("lacks") or []:
            print(f"{'  lacks':16} {x}")
        for x in imp.get("notes") or []:
            print(f"{'  note':16} {x}")
