"""Chunks that a writer of a store is writing and has not indexed yet, shared by the writers
of that store in one process (the storage host's agent runs every job on its pools).

Without them, backups of the same data running at once each store every chunk, because a
chunk enters the index only when its container is sealed: four concurrent backups of one
tree filled the pool with nearly four copies. The first writer to meet a chunk claims it;
another that meets it keeps the chunk's encoded record aside instead of storing it, and at
its commit waits until the chunk is in the index (the claiming writer seals its containers,
full ones as it goes and the last at its commit) and stores only what never got there: the
claimant failed, or kept it past RELY_WAIT. Writers seal their own containers before they
wait, so two writers relying on each other never wait for each other."""

import threading
import time

# How long a commit waits for chunks another writer is storing before it stores them itself.
RELY_WAIT = 60.0


_lock = threading.Lock()
_by_pool = {}


def claims_of(root):
    """The claims of the pool at `root`, shared by every store object this process opens on
    it: jobs that start together on a new pool each open their own."""
    with _lock:
        return _by_pool.setdefault(root, Claims())


class Claims:
    def __init__(self):
        self._cond = threading.Condition()
        self._owner = {}

    def claim(self, fp, writer):
        """True when `writer` is to store the chunk: no other writer of the store is."""
        with self._cond:
            return self._owner.setdefault(fp, writer) is writer

    def release(self, fps, writer):
        """The chunks `writer` claimed are in the index now, or will never be."""
        with self._cond:
            owner = self._owner
            for fp in fps:
                if owner.get(fp) is writer:
                    del owner[fp]
            self._cond.notify_all()

    def wait(self, fps, timeout=RELY_WAIT):
        """Waits until no writer holds a claim on any of fps, or for `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if not any(fp in self._owner for fp in fps):
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)
