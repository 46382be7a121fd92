"""Space reclaim of a chunk store (ChunkStore.reclaim, plugins/storage/dedup/store.py): the
containers whose chunks no image references any more are deleted, sparse ones compacted."""

import os
import time

from app.formats.tarfmt import crc32 as _crc32
from plugins.storage.dedup.chunk_index import _CONTAINER_SHIFT, _LENGTH_MASK, _location
from plugins.storage.dedup.encoding import RECORD_HEADER, RECORD_MAGIC, _valid_codec_byte
from plugins.storage.dedup.containers import CONTAINER_HEADER, container_name, fsync_dir
from plugins.storage.dedup.writer import Writer

# reclaim makes its work durable (index rewrite, old containers deleted) after this many new
# containers, so a nearly full pool gets space back before the compaction needs much more
RECLAIM_BATCH_CONTAINERS = 16


class _Reclaim:
    """One space reclaim, run with the pool lock held exclusively. Work is made durable in
    batches, each in the order that keeps every live chunk readable at every instant: new
    containers sealed, then the index replaced, then the old containers deleted."""

    def __init__(self, store, compact_below, is_cancelled, progress, checkpoint):
        self.store = store
        self.compact_below = compact_below
        self.is_cancelled = is_cancelled or (lambda: False)
        self.progress = progress
        self.checkpoint = checkpoint or (lambda step: None)
        self.result = {"live_chunks": 0, "removed_chunks": 0, "freed_bytes": 0,
                       "containers_deleted": 0, "containers_compacted": 0,
                       "containers_written": 0, "damaged_chunks": 0, "missing_chunks": 0,
                       "partials_removed": 0, "index_rebuilt": False, "cancelled": False}
        self.writer = None
        self.done = []  # (container number, size, compacted) handled in the open batch
        self.moved = {}  # fp -> new Location, in the open batch
        self.dropped = {}  # live fp -> (container name, offset) of its damaged record

    def run(self, live_fn):
        store, result = self.store, self.result
        for path, size in store._remove_stale_partials():
            result["partials_removed"] += 1
            result["freed_bytes"] += size
        numbers = store.committed_containers()
        live = live_fn()
        if not isinstance(live, (set, frozenset)):
            live = set(live)
        with store._mutex:
            store._refresh()
            index = dict(store._index)
        aside = store.damage_notes()
        if any(fp not in index and fp not in aside for fp in live):
            # a referenced chunk the index lacks may still sit in a container; deleting that
            # container would lose it for good, so the index is made whole first (chunks set
            # aside as damaged are known to be stored nowhere usable)
            store.rebuild_index()
            result["index_rebuilt"] = True
            numbers = store.committed_containers()
            with store._mutex:
                index = dict(store._index)
        missing = sum(1 for fp in live if fp not in index)
        result["missing_chunks"] = missing
        result["live_chunks"] = len(live) - missing

        per_container = {n: [] for n in numbers}
        for fp, packed in index.items():
            entries = per_container.get(packed >> _CONTAINER_SHIFT)
            if entries is not None:
                entries.append((fp, packed))
        empty, sparse = [], []
        for number in numbers:
            size = store.container_bytes(number)
            if size is None:
                continue
            live_bytes = sum(RECORD_HEADER.size + (packed & _LENGTH_MASK)
                             for fp, packed in per_container[number] if fp in live)
            if live_bytes == 0:
                empty.append((number, size))
            # the header counts as live: a container without garbage is never compacted
            elif live_bytes + CONTAINER_HEADER.size < self.compact_below * size:
                sparse.append((live_bytes / size, number, size))
        sparse.sort()
        total, done = len(empty) + len(sparse), 0
        try:
            # empty containers first: they free space without needing any
            for number, size in empty:
                if self.is_cancelled():
                    result["cancelled"] = True
                    break
                self.done.append((number, size, False))
                done += 1
                self._progress(done, total)
            if self.done:
                self._commit()
            for ratio, number, size in ([] if result["cancelled"] else sparse):
                if self.is_cancelled():
                    result["cancelled"] = True
                    break
                self._copy_live(number, per_container[number], live)
                self.done.append((number, size, True))
                done += 1
                self._progress(done, total)
                if self.writer is not None and \
                        len(self.writer.sealed) >= RECLAIM_BATCH_CONTAINERS:
                    self._commit()
            if self.done:
                self._commit()
        except BaseException:
            self._discard()
            raise
        result["live_chunks"] -= len(self.dropped)
        self._tidy_notes(live)
        return result

    def _tidy_notes(self, live):
        """Notes the live chunks this reclaim found damaged and dropped, and forgets the notes
        of chunks stored again since or no longer referenced."""
        store = self.store
        with store._locked():
            store._refresh()
            if self.dropped:
                store._append_notes({"fingerprint": fp.hex(), "container": container,
                                     "offset": offset, "time": int(time.time()),
                                     "reason": "damaged record found by space reclaim"}
                                    for fp, (container, offset) in self.dropped.items())
            index = store._index
            store._prune_notes(lambda fp: fp in live and fp not in index)

    def _progress(self, done, total):
        if self.progress is not None:
            self.progress(done, total)

    def _copy_live(self, number, entries, live):
        store = self.store
        with store._open_container(number) as f:
            for fp, loc in sorted(((fp, _location(packed)) for fp, packed in entries
                                   if fp in live), key=lambda e: e[1].offset):
                f.seek(loc.offset)
                raw = f.read(RECORD_HEADER.size + loc.stored_length)
                ok = len(raw) == RECORD_HEADER.size + loc.stored_length
                if ok:
                    magic, rfp, codec, raw_len, stored_len, crc = RECORD_HEADER.unpack_from(raw)
                    ok = magic == RECORD_MAGIC and rfp == fp and stored_len == loc.stored_length \
                        and _valid_codec_byte(codec) \
                        and _crc32(memoryview(raw)[RECORD_HEADER.size:]) == crc
                if not ok:
                    # copying it would spread the damage; left out of the index, the next
                    # backup that meets the chunk stores it afresh
                    self.dropped[fp] = (container_name(number), loc.offset)
                    self.result["damaged_chunks"] += 1
                    continue
                if self.writer is None:
                    self.writer = Writer(store, publish=False)
                self.moved[fp] = self.writer._put_record(fp, raw)

    def _commit(self):
        """Makes the open batch durable: seal the new containers, replace the index, delete
        the old containers."""
        store, result = self.store, self.result
        written = []
        if self.writer is not None:
            self.writer.commit()
            written = self.writer.sealed
            self.writer = None
            store.containers_written([number for number, size in written])
        self.checkpoint("sealed")
        gone = {number for number, size, compacted in self.done}
        with store._locked():
            store._refresh()  # entries appended meanwhile by writers without a session
            entries = []
            for fp, loc in store._locations():
                if loc.container not in gone:
                    entries.append((fp, loc))
                elif fp in self.moved:
                    entries.append((fp, self.moved[fp]))
                elif fp not in self.dropped:
                    result["removed_chunks"] += 1
            store._write_index(entries)
        self.moved = {}
        self.checkpoint("indexed")
        for number, size, compacted in self.done:
            if not store.delete_container(number):
                continue
            result["freed_bytes"] += size
            result["containers_compacted" if compacted else "containers_deleted"] += 1
        self.done = []
        fsync_dir(store.containers_dir)
        for number, size in written:
            result["freed_bytes"] -= size
        result["containers_written"] += len(written)
        self.checkpoint("deleted")

    def _discard(self):
        """After a failure before the batch's index was replaced: its new containers are
        unindexed copies, so removing them loses nothing."""
        if self.writer is None:
            return
        writer, self.writer = self.writer, None
        try:
            writer.abort()
            for number, size in writer.sealed:
                os.unlink(self.store.container_path(number))
        except OSError:
            pass  # garbage that the next reclaim removes
