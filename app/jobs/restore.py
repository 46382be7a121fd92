"""A restore job: turn the chosen paths into a plan from the image's catalog index (which
members, in image order, with their checksums: app/jobs/restore_plan.py), then have the
storage host's agent read exactly those members and the target host's agent write them
under the target directory — in one agent when both are the same host, agent to agent over
the data plane otherwise. An image with several copies is read from its primary copy, or
from the next one where that cannot be read (app/jobs/restore_copies.py); items the copy
read held damaged are read again from the next copy.

A relocation (app/relocate.py) gives each plan item a "to": its path under the target
directory. The whole plan is mapped and checked before anything is read, so a rename that
would put two files on one target fails the job with nothing written."""

from app import status as st
from app.errors import CairnError, Canceled
from app.jobs import restore_copies
from app.jobs.context import JobContext, results, start_listening_side
from app.jobs.restore_copies import FALL_BACK, as_copy, describe as copy_text
from app.jobs.restore_plan import build_plan
from app.jobs.storage import image_storage
from app.relocate import Relocation
from app.jobs.result import JobResult


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
        self.image = self.target_host = self.relocation = None
        self.plan = self.extents = None
        self.nfiles = self.nbytes = 0

    def prepare(self):
        master, p = self.master, self.p
        self.image = master.image(p["image"])
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
        ctx.flush()
        tried = restore_copies.choices(self.master.db, image, p.get("copy"))
        summary, read, rest = self._first_pass(tried, streams, direct_io,
                                               chosen=p.get("copy") is not None)
        damaged = summary.get("damaged_paths") or []
        if damaged and rest:
            summary = self._second_pass(summary, damaged, rest, direct_io)
        return _report(ctx, summary, target_dir, target_host, as_copy(image, read), streams)

    def _first_pass(self, tried, streams, direct_io, chosen):
        """Restores from the first copy that can be read: (summary, the copy read, the copies
        after it). chosen: the copy was asked for, no other is read."""
        ctx, image = self.ctx, self.image
        for i, c in enumerate(tried):
            nxt = tried[i + 1] if i + 1 < len(tried) else None
            try:
                storage, paths = restore_copies.usable(self.master, image, c, self.extents)
                if chosen or len(tried) > 1 or c["copy"] != 1:
                    ctx.log(f"reading {copy_text(c)}"
                            + (", as asked, and no other copy" if chosen else ""))
                return self._restore(as_copy(image, c), storage, paths, self.plan,
                                     self.extents, streams, direct_io), c, tried[i + 1:]
            except CairnError as e:
                if nxt is None or ctx.files or e.status not in FALL_BACK:
                    if chosen or len(tried) > 1 or c["copy"] != 1:
                        e.message = f"{copy_text(c)} cannot be read: {e.message}"
                    ctx.flush()
                    raise
                ctx.log(f"{copy_text(c)} cannot be read: {e.message}; falling back to "
                        f"{copy_text(nxt)}", "warning")
                ctx.flush()
        raise CairnError(f"image {image['id']} has no copy to restore from",
                         status_code=st.IMAGE_DAMAGED)

    def _second_pass(self, summary, damaged, rest, direct_io):
        """The items whose data was damaged in the copy read first, read again from the
        next copy that can be read; the restore's summary with both."""
        ctx, image = self.ctx, self.image
        wanted = set(damaged)
        picks = [i for i, item in enumerate(self.plan) if item["path"] in wanted]
        plan = [self.plan[i] for i in picks]
        extents = [self.extents[i] for i in picks]
        for c in rest:
            try:
                storage, paths = restore_copies.usable(self.master, image, c, extents)
            except CairnError as e:
                ctx.log(f"{copy_text(c)} cannot be read either: {e.message}", "warning")
                continue
            ctx.log(f"{len(plan)} item(s) whose data is damaged in the copy read first are "
                    f"read again from {copy_text(c)}", "warning")
            ctx.flush()
            before = ctx.warnings
            try:
                again = self._restore(as_copy(image, c), storage, paths, plan, extents, None,
                                      direct_io)
            except CairnError as e:
                ctx.log(f"reading them from {copy_text(c)} failed: {e.message}", "warning")
                continue
            recovered = len(plan) - again.get("errors", 0)
            ctx.log(f"{recovered} of those {len(plan)} item(s) restored from {copy_text(c)}")
            out = dict(summary)
            for k in ("files", "bytes", "skipped", "direct_bytes"):
                out[k] = summary.get(k, 0) + again.get(k, 0)
            out["errors"] = summary.get("errors", 0) - len(plan) + again.get("errors", 0)
            out["damaged"] = again.get("damaged", 0)
            # the first pass's warnings about these items no longer stand
            ctx.warnings = before - len(plan) + (ctx.warnings - before)
            out["warnings"] = max(0, summary.get("warnings", 0) - len(plan)) + \
                again.get("warnings", 0)
            return out
        return summary

    def _restore(self, image, storage, image_paths, plan, extents, streams, direct_io):
        """One restore of `plan` from one copy (`image`: the image as that copy holds it);
        the agent's summary, with the paths of items whose data was damaged."""
        ctx, p, target_host = self.ctx, self.p, self.target_host
        if streams is not None:
            if image["storage_host"] == target_host["name"]:
                ctx.log(f"parallel streams asked for: {streams}")
            else:
                ctx.log(f"parallel streams asked for: {streams}; a restore from "
                        f"{image['storage_host']} to another host runs in one stream")
        if len(image_paths) > 1:
            ctx.log(f"the files come from {len(image_paths)} images: {image['id']} and the "
                    f"images it builds on ({', '.join(image['sources'])})")
        damaged = []

        def on_event(event, data):
            if event == "warning" and data.get("damaged") and data.get("path"):
                damaged.append(data["path"])
            ctx.on_event(event, data)

        spec = image_storage(self.master, image)
        storage_host = self.master.config.host(image["storage_host"])
        calls = []
        try:
            if storage_host["name"] == target_host["name"]:
                calls.append(storage.start("restore", {
                    "image_path": image["path"], "image_paths": image_paths,
                    "extents": extents, "plan": plan, "target_dir": p["to"],
                    "overwrite": p["overwrite"], "checksum": image["checksum"],
                    "storage": spec, "direct_io": direct_io,
                    **({"streams": streams} if streams is not None else {})},
                    on_event=on_event))
            else:
                self._start_between_hosts(calls, storage, storage_host, image, image_paths,
                                          plan, extents, spec, direct_io, on_event)
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
        summary["damaged_paths"] = damaged
        return summary

    def _start_between_hosts(self, calls, storage, storage_host, image, image_paths, plan,
                             extents, spec, direct_io, on_event):
        """The storage host's agent sends the extents over the data plane, the target
        host's agent restores them: the receiving call first in `calls`."""
        ctx, p, target_host = self.ctx, self.p, self.target_host
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
            "plan": plan, "target_dir": p["to"], "overwrite": p["overwrite"],
            "checksum": image["checksum"], "direct_io": direct_io,
            "lengths": [e[1] for e in extents]},
            on_event=on_event)
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

