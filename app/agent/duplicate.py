"""A copy of an image into another pool (a lifecycle's duplication, app/jobs/duplicate.py).

The source pool's storage type reads the image (its image_source: the file, or the stream of
a recipe) and the target pool's type writes it the way it takes a backup: through its client
sink over the data plane, to its receiving side on the target storage host (send_image), or
through its local write when both pools are on this host (copy_here). So any type copies to
any other. Where the source keeps chunks and the target's sink takes them (copy_entries),
the recipe goes over and only the chunks the target pool lacks follow it; otherwise the
image's stream goes over whole.

The target writes under a partial name, which the master commits afterwards like a backup's
image. Standard library only: this runs on storage hosts."""

import time

from app import status
from app.errors import Canceled, CairnError
from plugins.storage import agents

READ = 1 << 20
# Recipe entries offered to the target at a time: one round trip per batch (about 512 MiB of
# stream with the default chunk size).
BATCH_ENTRIES = 1024
PROGRESS_EVERY = 0.25


class _Progress:
    def __init__(self, emit, size):
        self.emit = emit
        self.last = 0.0
        emit("totals", {"bytes": size, "files": 0})

    def __call__(self, done, force=False):
        now = time.monotonic()
        if force or now - self.last >= PROGRESS_EVERY:
            self.last = now
            self.emit("progress", {"bytes": done, "files": 0})


def copy_image(source, sink, emit, is_cancelled):
    """Copies an ImageSource into a sink (plugins/storage/agent_base.py). Returns {"bytes":
    the image stream's length, "sent_bytes": what went to the sink, "chunks", "sent_chunks",
    "mode": "chunks" or "stream"}."""
    entries = source.entries()
    if entries is not None and hasattr(sink, "copy_entries"):
        return _copy_chunks(source, entries, sink, emit, is_cancelled)
    return _copy_stream(source, sink, emit, is_cancelled)


def _copy_stream(source, sink, emit, is_cancelled):
    size = source.size
    progress = _Progress(emit, size)
    mv = memoryview(bytearray(READ))
    pos = 0
    while pos < size:
        if is_cancelled():
            raise Canceled()
        n = source.preadinto(mv[:min(READ, size - pos)], pos)
        if n <= 0:
            raise CairnError(f"the image ended after {pos} of its {size} bytes",
                             status_code=status.IMAGE_DAMAGED)
        sink.write(mv[:n])
        pos += n
        progress(pos)
    progress(pos, force=True)
    return {"bytes": size, "sent_bytes": size, "chunks": None, "sent_chunks": None,
            "mode": "stream"}


def _copy_chunks(source, entries, sink, emit, is_cancelled):
    progress = _Progress(emit, source.size)
    out = {"bytes": 0, "sent_bytes": 0, "chunks": 0, "sent_chunks": 0, "mode": "chunks"}
    batch = []

    def flush():
        n, nbytes = sink.copy_entries(batch, source.chunk)
        out["chunks"] += len(batch)
        out["sent_chunks"] += n
        out["sent_bytes"] += nbytes
        out["bytes"] += sum(e[2] for e in batch)
        batch.clear()
        progress(out["bytes"])

    for e in entries:
        batch.append(e)
        if len(batch) >= BATCH_ENTRIES:
            if is_cancelled():
                raise Canceled()
            flush()
    if batch:
        flush()
    if out["bytes"] != source.size:
        raise CairnError(f"the image's recipe covers {out['bytes']} bytes, its stream has "
                         f"{source.size}", status_code=status.IMAGE_DAMAGED)
    progress(out["bytes"], force=True)
    return out


def send_image(req, image_path, storage, sink, host, port, cert, token):
    """The source side of a copy to another host: reads the image from its pool (`storage`)
    and sends it over the data plane to the target's receiving side, through the target
    type's client sink (`sink`: its spec for the sender)."""
    from app.agent import dataplane  # only here: its TLS stack is heavy to load for others
    source = agents.get(storage).image_source(storage, image_path)
    try:
        chan = dataplane.connect(host, port, cert, token)
        try:
            out, _note = agents.get(sink).client_sink(chan, sink)
            result = copy_image(source, out, req.emit, req.is_cancelled)
            out.finish()
        finally:
            chan.close()
    finally:
        source.close()
    return result


def copy_here(req, image_path, storage, partial, target, image_id):
    """A copy between two pools of this host: no network at all. The target type writes the
    partial image as it writes a backup made on its own host."""
    source = agents.get(storage).image_source(storage, image_path)
    try:
        write = agents.get(target).local_write(target, partial, emit=req.emit,
                                               image_id=image_id, references=False)
        try:
            result = copy_image(source, write.sink, req.emit, req.is_cancelled)
            received = dict(write.finish(), path=partial)
            # what the target took in: its pool's count of the stream, or the file's bytes
            received["bytes"] = (received.get("dedup") or {}).get(
                "bytes", getattr(write.sink, "bytes", None))
            result["received"] = received
        except BaseException:
            write.abort()
            raise
    finally:
        source.close()
    return result
