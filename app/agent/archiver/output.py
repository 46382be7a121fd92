"""The image byte stream a backup writes: see Output."""

from app.agent.archiver.common import CHUNK, why
from app.errors import StorageError
from app.formats import entry

_ZEROS = memoryview(bytes(CHUNK))


class Output:
    """The image byte stream: coalesces headers and file data into large writes, counts
    offsets (`out` need not be seekable) and feeds the hash worker.

    Data is read straight into the free part of the current ring buffer (space/data), so each
    byte is copied once in and once out, as with tar. An `out` that offers its own memory
    (space(limit) and advance(n), as a deduplication pool's ingest does) is filled in place
    instead: nothing is copied out."""

    def __init__(self, out, worker):
        self.out = out
        self.worker = worker
        self.in_place = hasattr(out, "space") and hasattr(out, "advance")
        self.bufsize = len(worker.views[0])
        self.idx = None
        self._next_buffer()
        self.fill = 0
        self.jobs = []
        self.pos = 0       # bytes of the image produced so far (== the next member's offset)
        self.written = 0   # bytes of the image `out` has accepted
        self.ref = None    # [source, offset, length]: a reference not yet passed to `out`

    def reference(self, source, offset, length):
        """The next `length` bytes of the image are those at `offset` of a base image's
        stream (a files cache): `out` gets the reference instead of the bytes. References to
        adjoining members are passed on as one."""
        ref = self.ref
        if ref is not None and not self.fill and ref[0] == source and ref[1] + ref[2] == offset:
            ref[2] += length
        else:
            self.flush()
            self.ref = [source, offset, length]
        self.pos += length

    def put(self, data):
        n = len(data)
        fill = self.fill
        if fill + n < self.size:
            self.buf[fill:fill + n] = data
            self.fill = fill + n
            self.pos += n
            return
        mv = memoryview(data)
        while mv:
            space = self.space()
            k = min(len(space), len(mv))
            space[:k] = mv[:k]
            self.fill += k
            self.pos += k
            mv = mv[k:]

    def zeros(self, n, h=None):
        while n > 0:
            space = self.space()
            k = min(len(space), n)
            space[:k] = _ZEROS[:k]
            if h is not None:
                self.jobs.extend(h.jobs(space[:k]))
            self.fill += k
            self.pos += k
            n -= k

    def space(self):
        if self.fill >= self.size:
            self.flush()
        return self.buf[self.fill:]

    def data(self, n, h):
        """`n` bytes were read into space(): account for them and queue them for hashing."""
        fill = self.fill
        self.jobs.extend(h.jobs(self.buf[fill:fill + n]))
        self.fill = fill + n
        self.pos += n

    def finish(self, h, row):
        self.jobs.extend(h.close(lambda digest, r=row: r.__setitem__(entry.CHECKSUM, digest)))

    def cut(self):
        """Where `out` cuts the stream into chunks (a deduplication pool's ingest), the chunk
        ends here; other destinations have no chunks."""
        cut = getattr(self.out, "cut", None)
        if cut is not None:
            self.flush()
            cut()

    def flush(self):
        if self.ref is not None:
            ref, self.ref = self.ref, None
            try:
                self.out.reference(*ref)
            except OSError as e:
                raise StorageError("writing the backup image failed: %s" % why(e))
            self.written += ref[2]
        if not self.fill:
            return
        self.worker.put(self.jobs)
        self.jobs = []
        try:
            if self.in_place:
                self.out.advance(self.fill)
            else:
                self.out.write(self.buf[:self.fill])
        except OSError as e:
            raise StorageError("writing the backup image failed: %s" % why(e))
        self.written += self.fill
        self.fill = 0
        self._next_buffer()

    def _next_buffer(self):
        if self.in_place:
            # a view of the sink's memory; hash jobs still to run on it keep it from reuse
            self.buf = self.out.space(self.bufsize)
        else:
            if self.idx is not None:
                self.worker.release(self.idx)
            self.idx = self.worker.acquire()
            self.buf = self.worker.views[self.idx]
        self.size = len(self.buf)

