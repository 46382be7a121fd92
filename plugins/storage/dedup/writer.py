"""Writing chunks into new containers of a chunk store (plugins/storage/dedup/store.py)."""

import os
import queue
import threading

from app.errors import ValidationError
from app.formats.directio import Appender
from app.formats.writeback import start_writeback
from plugins.storage.dedup.chunk_index import Location
from plugins.storage.dedup.encoding import MAX_CHUNK_SIZE, RECORD_HEADER, _check_fingerprint
from plugins.storage.dedup.containers import CONTAINER_HEADER, _container_header, fsync_dir
from plugins.storage.dedup.errors import _write_failed

# A writer gathers records into writes of about this size: one system call per few chunks.
WRITE_BUFFER = 4 << 20
# Writes (and seals) a writer with background=True may have queued for its writing thread.
BACKGROUND_WRITES = 4


class Writer:
    """Adds chunks to new containers of one store. One writer per thread; use several writers
    for parallel writing. Index entries are published when a container is sealed: when it is
    full, and at commit(). With publish=False (space reclaim) nothing is indexed; the caller
    takes the locations from the records it puts and the sealed containers.

    background=True: the writes, and the sealing of full containers (fsync, rename, index),
    run on a thread of the writer's own, in order, so that the caller goes on encoding while
    the device works (direct writes wait for it, and a busy device would stall a backup's
    whole pipeline). A failure there is raised by the next call that adds a chunk, or by
    commit(); after it nothing more is written, and abort() removes what was not sealed."""

    def __init__(self, store, publish=True, background=False):
        self.store = store
        self._publish = publish
        self._fd = None
        self._out = None  # the Appender of the open container
        self._bufs = []  # headers and stored bytes not yet written to the open container
        self._buffered = 0
        self._written = 0  # bytes of the open container written (and their writeback started)
        self._number = None
        self._size = 0
        self._pending = []  # (fp, Location) in the open container
        self._added = set()
        # chunks another writer of the store claimed first: fp -> their encoded record,
        # stored here at commit only if they never reach the index (claims.py)
        self._relied = {}
        self._claimed = set()  # chunks this writer claimed and has not indexed yet
        self._closed = False
        # containers opened and not sealed yet: number -> (fd, Appender)
        self._unsealed = {}
        self._background = background
        self._io_queue = None
        self._io_thread = None
        self._io_error = None
        self._dropping = False  # abort(): queued writes are skipped
        self.sealed = []  # (container number, size) of the containers this writer committed
        self.stored_chunks = 0
        self.stored_bytes = 0

    def add(self, fp, data, codec=None, level=None):
        """Stores one chunk unless the store or this writer already has it. Returns True when
        it was stored. codec, level: as store.encode takes them."""
        if self._closed:
            raise ValidationError("this chunk store writer is already committed or aborted",
                                  hint="Open a new writer with store.writer().")
        fp = _check_fingerprint(fp)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValidationError(f"chunk data must be bytes, not {type(data).__name__}")
        if len(data) > MAX_CHUNK_SIZE:
            raise ValidationError(f"a chunk of {len(data)} bytes is too large",
                                  hint="Chunks come from the chunker (at most 16 MiB).")
        if fp in self._added or fp in self._relied or self.store.has(fp):
            return False
        if not self._claim(fp):
            self._relied[fp] = self.store.encode_record(fp, data, codec, level)
            return False
        header, stored = self.store.encode_record(fp, data, codec, level)
        self._put(fp, header, stored)
        self.stored_chunks += 1
        self.stored_bytes += len(stored)
        return True

    def wanted(self, fp):
        """Whether a chunk is new to the store and to this writer (then encode it with
        store.encode_record, which may run in other threads, and give it to add_encoded)."""
        return fp not in self._added and fp not in self._relied and not self.store.has(fp)

    def _claim(self, fp):
        """Whether this writer is to store the chunk, not another writer of the store."""
        if not self._publish:
            return True  # space reclaim: its copies are what it is for
        if self.store.claims.claim(fp, self):
            self._claimed.add(fp)
            return True
        return False

    def add_encoded(self, fp, raw_length, encoded):
        """Stores a chunk encoded by store.encode_record(fp, data) unless it was stored
        meanwhile. Returns True when it was stored."""
        if self._closed:
            raise ValidationError("this chunk store writer is already committed or aborted",
                                  hint="Open a new writer with store.writer().")
        fp = _check_fingerprint(fp)
        if fp in self._added or fp in self._relied:
            return False
        if not self._claim(fp):
            self._relied[fp] = encoded
            return False
        header, stored = encoded
        self._put(fp, header, stored)
        self.stored_chunks += 1
        self.stored_bytes += len(stored)
        return True

    def _put_record(self, fp, record):
        """Appends a whole record (header and stored bytes) as it is; returns its Location."""
        return self._put(fp, record, b"")

    def _put(self, fp, header, stored):
        if self._io_error is not None:
            raise self._io_error
        record_size = len(header) + len(stored)
        if self._fd is not None and self._size + record_size > self.store.container_size:
            self._seal()
        if self._fd is None:
            self._number, self._fd = self.store._new_container()
            self._size = self._written = CONTAINER_HEADER.size
            try:
                # containers are written once and read rarely: past the page cache where
                # possible
                self._out = Appender(self.store.container_path(self._number, committed=False),
                                     self._fd, _container_header(self._number))
            finally:
                self._unsealed[self._number] = (self._fd, self._out)
        offset = self._size
        self._bufs.append(header)
        if stored:
            self._bufs.append(stored)
        self._buffered += record_size
        if self._buffered >= WRITE_BUFFER:
            self._flush()
        self._size += record_size
        loc = Location(self._number, offset, record_size - RECORD_HEADER.size)
        self._pending.append((fp, loc))
        self._added.add(fp)
        return loc

    def _flush(self):
        """Writes the buffered records (direct I/O: whole blocks, the rest stays staged; else
        with as few system calls as there are IOV_MAX-long runs of them, then starting their
        writeback, so that sealing the container waits for little)."""
        if not self._bufs:
            return
        bufs, n = self._bufs, self._buffered
        self._bufs, self._buffered = [], 0
        self._io(self._write_out, self._number, self._fd, self._out, bufs, self._written, n)
        self._written += n

    def _write_out(self, number, fd, out, bufs, offset, n):
        self._writing(number, out.write, bufs)
        if not out.direct:
            start_writeback(fd, offset, n)

    def _writing(self, number, write, *args):
        try:
            write(*args)
        except OSError as e:
            raise _write_failed(self.store.container_path(number, committed=False),
                                e) from None

    def _seal(self):
        """Makes the open container durable and committed, then indexes its chunks."""
        self._flush()
        args = (self._number, self._fd, self._out, self._size, self._pending)
        self._out = self._fd = self._number = None
        self._pending = []
        self._io(self._seal_container, *args)

    def _seal_container(self, number, fd, out, size, pending):
        self._writing(number, out.finish)
        self._writing(number, os.fsync, fd)
        os.rename(self.store.container_path(number, committed=False),
                  self.store.container_path(number))
        fsync_dir(self.store.containers_dir)
        del self._unsealed[number]
        os.close(fd)
        self.sealed.append((number, size))
        if self._publish:
            with self.store._locked():
                self.store._append_index(pending)
            fps = [fp for fp, _ in pending]
            self._claimed.difference_update(fps)
            self.store.claims.release(fps, self)
        self.store.container_sealed(number, size, pending)

    # ---- the writing thread (background=True) -----------------------------------------------
    def _io(self, fn, *args):
        if self._io_error is not None:
            raise self._io_error
        if not self._background:
            fn(*args)
            return
        if self._io_thread is None:
            self._io_queue = queue.Queue(BACKGROUND_WRITES)
            self._io_thread = threading.Thread(target=self._io_loop, name="dedup-write",
                                               daemon=True)
            self._io_thread.start()
        # the thread takes every item until the end (after a failure it skips them), so a
        # full queue always drains
        self._io_queue.put((fn, args))

    def _io_loop(self):
        get = self._io_queue.get
        while True:
            item = get()
            if item is None:
                return
            if self._io_error is not None or self._dropping:
                continue  # after a failure, or once aborted, nothing more is written
            fn, args = item
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - raised by the caller's next call
                self._io_error = e

    def _stop_io(self):
        """Waits for everything queued; raises what failed there."""
        thread, self._io_thread = self._io_thread, None
        if thread is not None:
            self._io_queue.put(None)
            thread.join()
        if self._io_error is not None:
            raise self._io_error

    def commit(self):
        """Seals the open container and makes its chunks' index entries durable."""
        if self._closed:
            return
        if self._fd is not None:
            self._seal()
        self._stop_io()
        if self._relied:
            self._store_relied()
        self._closed = True

    def _store_relied(self):
        """The chunks other writers were storing when this one met them must be in the index
        before this writer's image is: waits for them (its own are indexed already, so a
        writer waiting for this one goes on), then stores those that did not get there."""
        relied, self._relied = self._relied, {}
        self.store.claims.wait(relied)
        with self.store._mutex:
            self.store._refresh()  # what another store object of the pool indexed just now
        for fp, (header, stored) in relied.items():
            if not self.store.has(fp):
                self._put(fp, header, stored)
                self.stored_chunks += 1
                self.stored_bytes += len(stored)
        if self._fd is not None:
            self._seal()
        self._stop_io()

    def abort(self):
        """Drops the containers not sealed yet. Containers already sealed because they were
        full stay (their chunks are indexed and valid)."""
        if self._closed:
            return
        self._closed = True
        self._bufs, self._buffered = [], 0
        self._dropping = True
        try:
            self._stop_io()
        except BaseException:  # noqa: BLE001 - the failure being cleaned up after
            pass
        unsealed, self._unsealed = self._unsealed, {}
        self._fd = self._number = self._out = None
        self._pending = []
        self._relied = {}
        # what it claimed and will not store: writers relying on it store it themselves
        claimed, self._claimed = self._claimed, set()
        self.store.claims.release(claimed, self)
        for number, (fd, out) in sorted(unsealed.items()):
            path = self.store.container_path(number, committed=False)
            try:
                if out is not None:
                    out.close()
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            finally:
                os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False
