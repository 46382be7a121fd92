"""A restore job: turn the chosen paths into a plan from the image's catalog index (which
members, in image order, with their checksums: app/jobs/restore_plan.py), then have the
storage host's agent read exactly those members and the target host's agent write them
under the target directory — in one agent when both are the same host, agent to agent over
the data plane otherwise.

A relocation (app/relocate.py) gives each plan item a "to": its path under the target
directory. The whole plan is mapped and checked before anything is read, so a rename that
would put two files on one target fails the job with nothing written."""

from app import status as st
from app.errors import CairnError, Canceled, NotFound
from app.jobs.context import JobContext, results, start_listening_side
from app.jobs.restore_plan import build_plan
from app.jobs.storage import image_storage
from app.relocate import Relocation
from app.jobs.result import JobResult


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


class RestoreJob:
    """A restore job (app/jobs/kinds.py): prepare() finds the image, the storage and target
    hosts and the relocation, and builds the plan from the image's catalog index, opened
    once; run() has the agents restore it."""

    def __init__(self, master, job):
        self.master = master
        self.job = job
        self.ctx = JobContext(master.jobs, job["id"])
        self.p = job["params"]
        self.image = self.storage_host = self.target_host = self.relocation = None
        self.plan = self.extents = None
        self.nfiles = self.nbytes = 0

    def prepare(self):
        master, p = self.master, self.p
        self.image = master.image(p["image"])
        self.storage_host = master.config.host(self.image["storage_host"])
        self.target_host = master.config.host(p["to_host"])
        self.relocation = Relocation.from_dict(p.get("relocate"))
        # The paths and the relocation were checked on the chosen paths when the restore was
        # queued; they are checked again here on everything below them, in the index as it
        # is now (it may have been rebuilt since).
        with master.open_index(self.image) as index:
            self.plan, self.extents, self.nfiles, self.nbytes = build_plan(
                index, p["paths"], self.relocation)

    def run(self):
        ctx, p, image, target_host = self.ctx, self.p, self.image, self.target_host
        master, storage_host, extents = self.master, self.storage_host, self.extents
        target_dir = p["to"]
        ctx.set_totals(self.nfiles, self.nbytes)
        ctx.log(f"restore of {', '.join(p['paths'])} from image {image['id']} to "
                f"{target_host['name']}:{target_dir} ({self.nfiles} files, {self.nbytes} "
                f"bytes; existing files: {p['overwrite']})")
        if self.relocation:
            ctx.log("relocated: " + describe(self.relocation))
        direct_io = p.get("direct_io", "auto")
        if direct_io == "off":
            ctx.log("direct I/O off: every file is written through the target host's page "
                    "cache")
        streams = p.get("parallel_streams")
        if streams is not None:
            if image["storage_host"] == target_host["name"]:
                ctx.log(f"parallel streams asked for: {streams}")
            else:
                ctx.log(f"parallel streams asked for: {streams}; a restore from "
                        f"{image['storage_host']} to another host runs in one stream")
        ctx.flush()
        # Looked up once the request is in the job's log: a source image gone from the
        # catalog fails the job with what it was asked to do logged.
        image_paths = image_files(master, image, extents)
        if len(image_paths) > 1:
            ctx.log(f"the files come from {len(image_paths)} images: {image['id']} and the "
                    f"images it builds on ({', '.join(image['sources'])})")

        spec = image_storage(master, image)
        storage = master.hosts.connect(storage_host)
        calls = []
        try:
            if storage_host["name"] == target_host["name"]:
                calls.append(storage.start("restore", {
                    "image_path": image["path"], "image_paths": image_paths,
                    "extents": extents, "plan": self.plan, "target_dir": target_dir,
                    "overwrite": p["overwrite"], "checksum": image["checksum"],
                    "storage": spec, "direct_io": direct_io,
                    **({"streams": streams} if streams is not None else {})},
                    on_event=ctx.on_event))
            else:
                self._start_between_hosts(calls, storage, image_paths, spec, direct_io)
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

    def _start_between_hosts(self, calls, storage, image_paths, spec, direct_io):
        """The storage host's agent sends the extents over the data plane, the target
        host's agent restores them: the receiving call first in `calls`."""
        ctx, p, image, extents = self.ctx, self.p, self.image, self.extents
        storage_host, target_host = self.storage_host, self.target_host
        target = self.master.hosts.connect(target_host)
        addr = self.master.hosts.data_address(storage_host, target_host)
        send, port, cert, token = start_listening_side(
            ctx, storage, "send_extents", {"image_path": image["path"],
                                           "image_paths": image_paths, "extents": extents,
                                           "storage": spec},
            self.job["id"], address=addr)
        calls.append(send)
        ctx.log(f"data plane: {storage_host['name']} -> {target_host['name']} "
                f"({addr}:{port}, TLS, per-job key)")
        recv = target.start("restore_receive", {
            "host": addr, "port": port, "cert": cert, "token": token,
            "plan": self.plan, "target_dir": p["to"], "overwrite": p["overwrite"],
            "checksum": image["checksum"], "direct_io": direct_io,
            "lengths": [e[1] for e in extents]},
            on_event=ctx.on_event)
        calls.insert(0, recv)


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

