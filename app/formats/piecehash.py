"""File checksums computed beside the copy: each file's data cut into 1 MiB pieces, each piece
checked with CRC-32 or SHA-256 and the piece digests hashed together (TreeHash), on helper
threads while the caller reads and writes (HashWorker). app/formats/tarfmt.py gives these
names to the data movers with the tar format. Standard library only (an accelerator is used
when installed): this module runs on client hosts."""

import hashlib
import mmap
import queue
import threading
import zlib

PIECE = 1 << 20


try:
    # An optional accelerator: ISA-L computes the same CRC-32 (same polynomial, same
    # values) about twenty times faster than zlib. Hosts without it use zlib.
    from isal.isal_zlib import crc32
    CRC32_ACCELERATOR = "isal"
except ImportError:  # the standard library is enough
    crc32 = zlib.crc32
    CRC32_ACCELERATOR = None


class _Crc32:
    """A piece checksum with hashlib's interface. Both implementations release the GIL on
    large buffers."""

    __slots__ = ("value",)

    def __init__(self, data=b""):
        self.value = crc32(data)

    def update(self, data):
        self.value = crc32(data, self.value)

    def digest(self):
        return self.value.to_bytes(4, "big")


# How the pieces of a file are checked. crc32 catches media and transfer corruption at a
# fraction of the CPU (what backup products check blocks with); sha256 also makes the
# checksums in the catalog evidence against tampering on the storage server.
PIECE_HASHES = {"crc32": _Crc32, "sha256": hashlib.sha256}
DEFAULT_CHECKSUM = "crc32"


class TreeHash:
    """A file's checksum: SHA-256 over the digests of its stored data cut into 1 MiB pieces
    (the last one shorter; no data at all is one empty piece), each piece checked with the
    algorithm chosen (CRC-32 or SHA-256; see PIECE_HASHES).

    Pieces are checked independently, so the pieces of one large file spread over the hash
    threads. Hand jobs(view) and then close(callback) to a HashWorker; callback(hexdigest)
    runs once every piece is done, on whichever hash thread finishes last."""

    __slots__ = ("_piece", "_digests", "_cur", "_cur_len", "_index", "_pending", "_closed",
                 "_done", "_lock")

    def __init__(self, algorithm=DEFAULT_CHECKSUM):
        self._piece = piece_hash(algorithm)
        self._digests = []
        self._cur = None
        self._cur_len = 0
        self._index = -1
        self._pending = 0
        self._closed = False
        self._done = None
        self._lock = threading.Lock()

    def _open_piece(self):
        self._cur = self._piece()
        self._cur_len = 0
        self._index = len(self._digests)
        self._digests.append(None)
        with self._lock:
            self._pending += 1

    def _end_piece(self):
        job = (self._cur, None, self._piece_done(self._index))
        self._cur = None
        return job

    def _piece_done(self, index):
        def done(h):
            with self._lock:
                self._digests[index] = h.digest()
                self._pending -= 1
                last = self._closed and not self._pending
            if last:
                self._finish()
        return done

    def _finish(self):
        self._done(hashlib.sha256(b"".join(self._digests)).hexdigest())

    def jobs(self, mv):
        """(hash, view, callback) jobs for the next bytes of data."""
        out = []
        while len(mv):
            if self._cur is None:
                self._open_piece()
            k = min(len(mv), PIECE - self._cur_len)
            out.append((self._cur, mv[:k], None))
            self._cur_len += k
            mv = mv[k:]
            if self._cur_len == PIECE:
                out.append(self._end_piece())
        return out

    def close(self, callback):
        """The jobs that end the data; callback(hexdigest) follows the last piece."""
        out = []
        if self._cur is None and not self._digests:
            self._open_piece()
        if self._cur is not None:
            out.append(self._end_piece())
        self._done = callback
        with self._lock:
            self._closed = True
            last = not self._pending
        if last:
            self._finish()
        return out


def piece_hash(algorithm):
    try:
        return PIECE_HASHES[algorithm]
    except KeyError:
        raise ValueError("unknown checksum algorithm %r (known: %s)"
                         % (algorithm, ", ".join(sorted(PIECE_HASHES)))) from None


def tree_digest(data, algorithm=DEFAULT_CHECKSUM):
    """TreeHash of bytes in one call: for tests and for tools that check an image."""
    piece = piece_hash(algorithm)
    mv = memoryview(data)
    digests = [piece(mv[i:i + PIECE]).digest()
               for i in range(0, len(mv), PIECE)] or [piece(b"").digest()]
    return hashlib.sha256(b"".join(digests)).hexdigest()


class HashWorker:
    """Hashes data on helper threads while the calling thread reads and writes.

    SHA-256 (about 1.3 GB/s per core with SHA extensions) is slower than a page-cache copy,
    so hashing inline would make a backup or restore about half as fast as tar. The caller
    fills buffers from a small ring (acquire), hands over (hash object, memoryview, callback)
    jobs (put), and gives each buffer back with release() once it will not write to it again;
    the buffer returns to the ring after everything queued before was hashed. hashlib
    releases the GIL on large updates, so the threads really run in parallel.

    Each hash object stays on one thread (its updates must stay in order); with threads > 1
    different hash objects (the pieces of a TreeHash) are spread over the threads. With
    threads=0 the jobs run at put() in the caller's thread: for CRC-32, which checks a MiB in
    a fraction of what handing it to another thread costs.
    """

    def __init__(self, nbuf=4, bufsize=1 << 20, threads=2):
        # page-aligned (anonymous maps), so that data in them can be written with O_DIRECT
        self.bufs = [mmap.mmap(-1, bufsize) for _ in range(nbuf)]
        self.views = [memoryview(b) for b in self.bufs]
        self._free = queue.SimpleQueue()
        for i in range(nbuf):
            self._free.put(i)
        self._lock = threading.Lock()
        self._refs = [0] * nbuf
        self._owner = {}
        self._next = {}  # type of hash object -> the thread its next new one goes to
        self._error = None
        self._queues = [queue.SimpleQueue() for _ in range(threads)]
        self._threads = [threading.Thread(target=self._run, args=(q,), daemon=True,
                                          name="cairn-hash-%d" % i)
                         for i, q in enumerate(self._queues)]
        for t in self._threads:
            t.start()

    def _run(self, q):
        get = q.get
        while True:
            item = get()
            if item is None:
                return
            try:
                kind = type(item)
                if kind is int:
                    with self._lock:
                        self._refs[item] -= 1
                        last = not self._refs[item]
                    if last:
                        self._free.put(item)
                elif kind is threading.Event:
                    item.set()
                else:
                    for h, mv, done in item:
                        if mv is not None:
                            h.update(mv)
                        if done is not None:
                            done(h)
            except BaseException as e:  # surfaced to the caller's thread in check()
                self._error = e


    def acquire(self):
        while True:
            try:
                return self._free.get(timeout=1.0)
            except queue.Empty:
                self.check()

    def put(self, jobs):
        """jobs: list of (hash, memoryview or None, callback(hash) or None); a callback ends
        that hash object's work."""
        if not jobs:
            return
        queues = self._queues
        if not queues:
            for h, mv, done in jobs:
                if mv is not None:
                    h.update(mv)
                if done is not None:
                    done(h)
            return
        if len(queues) == 1:
            queues[0].put(jobs)
            return
        owner = self._owner
        turn = self._next
        split = [[] for _ in queues]
        for job in jobs:
            h = job[0]
            t = owner.get(h)
            if t is None:
                # each kind of object takes its own turns: a restore queues a file's writer
                # and its checksum together, and one shared turn would put every writer on
                # the same thread
                kind = type(h)
                t = owner[h] = turn.get(kind, 0)
                turn[kind] = (t + 1) % len(queues)
            split[t].append(job)
            if job[2] is not None:
                del owner[h]
        for q, part in zip(queues, split):
            if part:
                q.put(part)

    def release(self, idx):
        if not self._queues:
            self._free.put(idx)
            return
        with self._lock:
            self._refs[idx] = len(self._queues)
        for q in self._queues:
            q.put(idx)

    def wait(self):
        """Block until everything queued so far has been hashed."""
        self.wait_mark(self.mark())

    def mark(self):
        """A mark behind everything queued so far; wait_mark(mark) returns once all of it was
        processed. Marks let a caller wait for work queued a while ago, not for the newest."""
        events = []
        for q in self._queues:
            ev = threading.Event()
            q.put(ev)
            events.append(ev)
        return events

    def wait_mark(self, events):
        for ev in events:
            while not ev.wait(1.0):
                self.check()
        self.check()

    def check(self):
        if self._error is not None:
            raise self._error
        for t in self._threads:
            if not t.is_alive():
                raise RuntimeError("a hash thread stopped")

    def close(self):
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join()
