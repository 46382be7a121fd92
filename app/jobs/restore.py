"""A restore job: turn the chosen paths into a plan from the image's catalog index (which
members, in image order, with their checksums), then have the storage host's agent read
exactly those members and the target host's agent write them under the target directory —
in one agent when both are the same host, agent to agent over the data plane otherwise.

A relocation (app/relocate.py) gives each plan item a "to": its path under the target
directory. The whole plan is mapped and checked before anything is read, so a rename that
would put two files on one target fails the job with nothing written."""


from app import status as st
from app.errors import CairnError, Canceled, NotFound, ValidationError
from app.formats import entry as E
from app.jobs.context import JobContext, results, start_listening_side
from app.jobs.storage import image_storage
from app.relocate import Relocation, plan_targets
from app.jobs.result import JobResult


def _plain(path):
    return path.startswith("/") and ".." not in path.split("/")


def build_plan(index, paths, relocation=None):
    """(plan, extents, files, bytes) for the chosen paths of an image, each item with its
    relocated target ("to") when a relocation is given."""
    chosen = {}
    for p in paths:
        if p == "/":
            for top in index.list_dir("/"):
                for e in index.walk(top.path):
                    chosen.setdefault(e.path, e)
            continue
        e = index.lookup(p)
        if e is None:
            raise ValidationError(f"{p} is not in the image",
                                  hint="browse the image with `cairn browse IMAGE` to see its paths")
        for d in index.walk(p):
            chosen.setdefault(d.path, d)
    # Directories the index made up (no member in the image: length 0) have nothing to read;
    # the agent creates missing parents by itself.
    targets = None
    if relocation:
        targets = plan_targets(relocation, ((e.path, e.kind) for e in chosen.values()))
    entries = [e for e in chosen.values() if e.length > 0
               # a directory mapped onto the target itself is merged into it
               and not (targets and targets[e.path] == "/")]
    items = []
    # A hard link group whose first link is not restored: its first chosen link becomes the
    # file (below), the others link to that one, so that the group stays one file.
    holders = {}
    for e in entries:
        # "member" (the tar member to read) is left out where it is the path's own
        # (E.member_name), and "link" where there is none: the agent takes them as such, and
        # the plan of a restore of many files is that much quicker to send and to read.
        item = {"path": e.path, "kind": e.kind, "checksum": e.checksum, "size": e.size}
        if e.link:
            item["link"] = e.link
        if targets is not None:
            item["to"] = targets[e.path]
        # The third field names the image file that holds the member: 0 this image, k its
        # k-th source (an incremental lists unchanged entries held by earlier images).
        extent = [e.offset, e.length, e.src]
        if e.kind == E.KIND_HARDLINK and e.link not in chosen:
            holder = holders.get(e.link)
            if holder is not None:
                # the member still names the group's first link; "link_to" is where the
                # restore finds the group's file
                item["link_to"] = holder
            else:
                # The link's target is not restored: restore the link as a file of its own,
                # from the target's member.
                target = index.lookup(e.link) if _plain(e.link) else None
                if target is not None and target.kind == E.KIND_FILE:
                    item.update(kind=E.KIND_FILE, checksum=target.checksum,
                                member=E.member_name(target.path), size=target.size)
                    extent = [target.offset, target.length, target.src]
                    holders[e.link] = e.path
                # else: a link to nothing the image holds; the agent refuses and logs it.
        items.append((item, extent))
    # Image by image in image order: each file is read front to back. Directory metadata is
    # applied at the end by the agent, so the order of images does not matter for it. Links
    # to a group's file made above come after every file.
    items.sort(key=lambda ie: ("link_to" in ie[0], ie[1][2], ie[1][0]))
    plan, extents = [], []
    nbytes = nfiles = 0
    for item, extent in items:
        plan.append(item)
        extents.append(extent)
        if item["kind"] != E.KIND_DIR:
            nfiles += 1
        # Stored bytes (the member's length), as the restore counts them: a sparse file
        # moves only its data.
        nbytes += extent[1] if item["kind"] == E.KIND_FILE else 0
    return plan, extents, nfiles, nbytes


def image_files(master, image, extents):
    """The image files a restore reads, by the position its extents name: the image's own
    file, then each source image's. They must all be on the image's storage server."""
    used = {x[2] for x in extents}
    # A set image (multi-stream) has no file of its own: all its entries are in sources.
    paths = [image["path"] or None]
    for k, source_id in enumerate(image["sources"], 1):
        if k not in used:
            paths.append(None)  # keeps positions; never read
            continue
        try:
            src = master.image(source_id)
        except NotFound:
            raise CairnError(f"image {image['id']} needs image {source_id}, which is no "
                             f"longer in the catalog", status_code=st.IMAGE_DAMAGED) from None
        if src["storage_host"] != image["storage_host"]:
            raise CairnError(f"image {source_id} is on {src['storage_host']}, not on "
                             f"{image['storage_host']} with image {image['id']}",
                             status_code=st.IMAGE_DAMAGED)
        paths.append(src["path"])
    return paths


def describe(relocation):
    parts = []
    if relocation.strip:
        parts.append(f"prefix {relocation.strip} stripped")
    if relocation.rename:
        r = relocation.rename
        parts.append(f"{r.mode} {r.pattern!r} renamed to {r.replacement!r}")
    if relocation.add:
        parts.append(f"prefix {relocation.add} added")
    return ", ".join(parts)


def run(master, job):
    ctx = JobContext(master.jobs, job["id"])
    p = job["params"]
    image = master.image(p["image"])
    storage_host = master.config.host(image["storage_host"])
    target_host = master.config.host(p["to_host"])
    target_dir = p["to"]
    relocation = Relocation.from_dict(p.get("relocate"))
    with master.open_index(image) as index:
        plan, extents, nfiles, nbytes = build_plan(index, p["paths"], relocation)
    ctx.set_totals(nfiles, nbytes)
    ctx.log(f"restore of {', '.join(p['paths'])} from image {image['id']} to "
            f"{target_host['name']}:{target_dir} ({nfiles} files, {nbytes} bytes; existing "
            f"files: {p['overwrite']})")
    if relocation:
        ctx.log("relocated: " + describe(relocation))
    direct_io = p.get("direct_io", "auto")
    if direct_io == "off":
        ctx.log("direct I/O off: every file is written through the target host's page cache")
    streams = p.get("parallel_streams")
    if streams is not None:
        if image["storage_host"] == target_host["name"]:
            ctx.log(f"parallel streams asked for: {streams}")
        else:
            ctx.log(f"parallel streams asked for: {streams}; a restore from "
                    f"{image['storage_host']} to another host runs in one stream")
    ctx.flush()
    image_paths = image_files(master, image, extents)
    if len(image_paths) > 1:
        ctx.log(f"the files come from {len(image_paths)} images: {image['id']} and the "
                f"images it builds on ({', '.join(image['sources'])})")

    spec = image_storage(master, image)
    storage = master.hosts.connect(storage_host)
    calls = []
    try:
        if storage_host["name"] == target_host["name"]:
            call = storage.start("restore", {
                "image_path": image["path"], "image_paths": image_paths, "extents": extents,
                "plan": plan, "target_dir": target_dir, "overwrite": p["overwrite"],
                "checksum": image["checksum"], "storage": spec, "direct_io": direct_io,
                **({"streams": streams} if streams is not None else {})},
                on_event=ctx.on_event)
            calls.append(call)
        else:
            target = master.hosts.connect(target_host)
            addr = master.hosts.data_address(storage_host, target_host)
            send, port, cert, token = start_listening_side(
                ctx, storage, "send_extents", {"image_path": image["path"],
                                               "image_paths": image_paths, "extents": extents,
                                               "storage": spec},
                job["id"], address=addr)
            calls.append(send)
            ctx.log(f"data plane: {storage_host['name']} -> {target_host['name']} "
                    f"({addr}:{port}, TLS, per-job key)")
            recv = target.start("restore_receive", {
                "host": addr, "port": port, "cert": cert, "token": token,
                "plan": plan, "target_dir": target_dir, "overwrite": p["overwrite"],
                "checksum": image["checksum"], "direct_io": direct_io,
                "lengths": [e[1] for e in extents]},
                on_event=ctx.on_event)
            calls.insert(0, recv)
        ctx.supervise(calls)
        summary = results(calls)[0]
        if ctx.cancelled:
            raise Canceled()
    except BaseException:
        for c in calls:
            c.cancel()
        if ctx.files:
            ctx.log(f"{ctx.files} files, {ctx.bytes} bytes were put in place before the "
                    f"restore ended")
        ctx.flush()
        raise
    return _report(ctx, summary, target_dir, target_host, image, streams)


def _report(ctx, summary, target_dir, target_host, image, streams):
    """Logs what the restore did; the job's (status, message, image, bytes, files)."""
    ctx.bytes, ctx.files = summary["bytes"], summary["files"]
    problems = summary.get("errors", 0)
    warnings = max(summary.get("warnings", 0), ctx.warnings)
    ctx.log(f"restored {summary['files']} files, {summary['bytes']} bytes to "
            f"{target_dir}; skipped {summary.get('skipped', 0)}, "
            f"refused or failed {problems}")
    if summary.get("streams", 1) > 1:
        ctx.log(f"the files were restored in {summary['streams']} parallel streams "
                f"(processes) on {target_host['name']}")
    elif streams and streams > 1 and image["storage_host"] == target_host["name"]:
        ctx.log(f"the files were restored in one process on {target_host['name']}, not "
                f"in {streams} streams (see README, Restore choices)")
    if summary.get("direct_bytes"):
        ctx.log(f"{summary['direct_bytes']} of the bytes went past the page cache, straight "
                f"to the device (O_DIRECT)")
    ctx.flush(sample=True)
    damaged = summary.get("damaged", 0)
    if damaged:
        # Its own status, so that scripts tell damage in the image from files refused or
        # skipped at the target; every file the damage did not touch was restored.
        why = (f"{damaged} item(s) not restored because their data in the image is damaged (each "
               f"is named in the log); every other item was restored ({problems - damaged} other "
               f"item(s) not restored, {warnings} warning(s))")
        return JobResult(st.CHECKSUM_MISMATCH, message=why,
                         bytes=summary["bytes"], files=summary["files"])
    if problems or warnings:
        why = f"{problems} item(s) not restored, {warnings} warning(s): see the log"
        return JobResult(st.PARTIAL, message=why,
                         bytes=summary["bytes"], files=summary["files"])
    return JobResult(bytes=summary["bytes"], files=summary["files"])

