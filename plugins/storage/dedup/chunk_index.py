"""The chunk index of a chunk store (plugins/storage/dedup/store.py): the index log
(index/chunks.log, fingerprint -> container, offset, stored length), its in-memory copy, and
the chunks set aside as damaged (index/damaged.log). See the store's docstring for the log's
format and how writers, reclaim and rebuilds share it."""

import json
import os
import struct
import time
from collections import namedtuple

from app.formats import private
from app.formats.tarfmt import crc32 as _crc32
from plugins.storage.dedup.encoding import FINGERPRINT_SIZE, _check_fingerprint
from plugins.storage.dedup.containers import container_name, fsync_dir
from plugins.storage.dedup.errors import ChunkNotFound, ChunkSetAside, StoreDamaged

INDEX_MAGIC = b"CRNDIDX2"
INDEX_HEADER = struct.Struct(">8sQ")  # magic, generation (changes on every rewrite)
INDEX_ENTRY = struct.Struct(">32sIQI")  # fp, container, record offset, stored length
INDEX_RECORD = struct.Struct(">32sIQII")  # the entry followed by its crc32

# How often a lookup that misses reads the index entries other writers appended (seconds).
HAS_REFRESH = 0.25
# Chunks set aside as damaged (index/damaged.log): one JSON object per line.
DAMAGED_LOG = "damaged.log"

Location = namedtuple("Location", "container offset stored_length")

# The in-memory index keeps a location as one int (container << 72 | offset << 32 | stored
# length): about half the memory of a Location per chunk, which is what bounds a pool's size
# on its storage host.
_OFFSET_BITS, _LENGTH_BITS = 40, 32
_LENGTH_MASK = (1 << _LENGTH_BITS) - 1
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1
_CONTAINER_SHIFT = _OFFSET_BITS + _LENGTH_BITS


def _pack_location(number, offset, length):
    return (number << _CONTAINER_SHIFT) | (offset << _LENGTH_BITS) | length


def _location(packed):
    return Location(packed >> _CONTAINER_SHIFT, (packed >> _LENGTH_BITS) & _OFFSET_MASK,
                    packed & _LENGTH_MASK)


Damage = namedtuple("Damage", "fingerprint container offset reason")


def _pack_entries(entries):
    out = bytearray()
    for fp, loc in entries:
        entry = INDEX_ENTRY.pack(fp, *loc)
        out += entry + struct.pack(">I", _crc32(entry))
    return out


class ChunkIndex:
    """ChunkStore's index: lookups, appends and rewrites of the log, rebuilding it from the
    containers, and the chunks set aside as damaged. Mixed into ChunkStore; uses its paths,
    _mutex, _locked() and containers."""

    def _refresh(self):
        """Reads index entries appended since the last read (by any process). A rewritten log
        (reclaim, rebuild_index: another inode or generation) is read again from the start,
        so no stale location survives it."""
        self._refreshed = time.monotonic()
        try:
            f = open(self.index_path, "rb")
        except FileNotFoundError:
            self._index, self._index_pos, self._index_id = {}, 0, None
            return
        with f:
            st = os.fstat(f.fileno())
            head = f.read(INDEX_HEADER.size)
            if len(head) < INDEX_HEADER.size or head[:len(INDEX_MAGIC)] != INDEX_MAGIC:
                # empty, being created, or not an index (the next append says so)
                self._index, self._index_pos, self._index_id = {}, 0, None
                return
            ident = (st.st_ino, INDEX_HEADER.unpack(head)[1])
            if ident != self._index_id:
                self._index, self._index_pos, self._index_id = {}, INDEX_HEADER.size, ident
            f.seek(self._index_pos)
            size = INDEX_RECORD.size
            # only whole entries: a torn tail stays unread until it is completed or cut off
            blob = f.read(((st.st_size - self._index_pos) // size) * size)
        # every entry's crc first, then the entries: no Python call per entry but the crc's
        # (a pool's whole index is read at each backup's start)
        view = memoryview(blob)
        esize = INDEX_ENTRY.size
        crcs = [_crc32(view[at:at + esize]) for at in range(0, len(blob), size)]
        index = self._index
        for (fp, number, offset, length, crc), actual in zip(INDEX_RECORD.iter_unpack(view),
                                                             crcs):
            # a damaged entry only loses a lookup; rebuild_index restores it
            if actual == crc and fp not in index:
                index[fp] = (number << _CONTAINER_SHIFT) | (offset << _LENGTH_BITS) | length
        self._index_pos += len(blob)

    def _index_generation(self):
        """The current log's generation, or None when there is no valid log."""
        try:
            with open(self.index_path, "rb") as f:
                head = f.read(INDEX_HEADER.size)
        except FileNotFoundError:
            return None
        if len(head) == INDEX_HEADER.size and head[:len(INDEX_MAGIC)] == INDEX_MAGIC:
            return INDEX_HEADER.unpack(head)[1]
        return None

    @staticmethod
    def _next_generation(current):
        if current is None:
            # a fresh start: random, so it cannot repeat a generation an open store has seen
            return int.from_bytes(os.urandom(8), "big") >> 1
        return (current + 1) & 0xFFFFFFFFFFFFFFFF

    def _append_index(self, entries):
        """Appends (fp, Location) entries durably; call with the lock held. Returns how many
        were new (a concurrent writer may have indexed the same chunk first)."""
        self._refresh()
        fresh = [(fp, loc) for fp, loc in entries if fp not in self._index]
        if not fresh:
            return 0
        fd = private.create(self.index_path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            created = size < INDEX_HEADER.size
            if created:
                os.ftruncate(fd, 0)
                os.pwrite(fd, INDEX_HEADER.pack(INDEX_MAGIC, self._next_generation(None)), 0)
                size = INDEX_HEADER.size
            elif os.pread(fd, len(INDEX_MAGIC), 0) != INDEX_MAGIC:
                raise StoreDamaged(
                    f"{self.index_path} is not a chunk index of this format",
                    hint="Rebuild it from the containers (ChunkStore.rebuild_index()).")
            whole = INDEX_HEADER.size + ((size - INDEX_HEADER.size) // INDEX_RECORD.size) \
                * INDEX_RECORD.size
            if whole != size:
                os.ftruncate(fd, whole)  # a torn entry from a crashed append
            os.pwrite(fd, bytes(_pack_entries(fresh)), whole)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.index_dir)  # the log may have just been created
        self._refresh()
        return len(fresh)

    def _write_index(self, entries):
        """Replaces the log with `entries` as the next generation: new file, fsync, rename,
        fsync of the directory. Call with the lock held."""
        tmp = self.index_path + ".rewrite"
        generation = self._next_generation(self._index_generation())
        with os.fdopen(private.create(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as f:
            f.write(INDEX_HEADER.pack(INDEX_MAGIC, generation) + _pack_entries(entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.index_path)
        fsync_dir(self.index_dir)
        self._refresh()
    def has(self, fp):
        """Whether the store holds the chunk. Reads what other writers published since (and
        a rewritten index) at most every HAS_REFRESH seconds: a chunk another job stored a
        moment ago is at worst stored twice (the index keeps one), and one set aside as
        damaged a moment ago may still be referenced once more."""
        fp = _check_fingerprint(fp)
        with self._mutex:
            if time.monotonic() - self._refreshed >= HAS_REFRESH:
                self._refresh()
            return fp in self._index

    def lacking(self, recipe):
        """How many of the chunks a recipe (plugins/storage/dedup/recipe.py) refers to the
        store does not hold: has() for a whole recipe at once."""
        with self._mutex:
            if time.monotonic() - self._refreshed >= HAS_REFRESH:
                self._refresh()
            return len(recipe.fingerprints_not_in(self._index))

    def _lookup(self, fp):
        """The Location the index holds for fp, or None; call with the mutex held."""
        packed = self._index.get(fp)
        return None if packed is None else _location(packed)

    def locate(self, fp):
        fp = _check_fingerprint(fp)
        with self._mutex:
            loc = self._lookup(fp)
            if loc is None:
                self._refresh()
                loc = self._lookup(fp)
        if loc is not None:
            return loc
        note = self.damage_notes().get(fp)
        if note is not None:
            raise ChunkSetAside(
                f"chunk {fp.hex()} was found damaged ({note['reason']}; {note['container']} "
                f"at byte {note['offset']}) and set aside, and no backup has stored it again "
                f"since",
                hint="The next backup of the same data stores it again, which makes the images "
                     "that use it whole; until then those files cannot be restored from this "
                     "pool.")
        raise ChunkNotFound(f"no chunk {fp.hex()} in the store at {self.root}",
                            hint="It was never committed, or the index lost it: "
                                 "rebuild_index() rescans the containers.")

    def _locations(self):
        """(fingerprint, Location) of every indexed chunk; call with the mutex held."""
        for fp, packed in self._index.items():
            yield fp, _location(packed)

    def __len__(self):
        with self._mutex:
            self._refresh()
            return len(self._index)

    def fingerprints(self):
        with self._mutex:
            self._refresh()
            return dict(self._locations())
    def rebuild_index(self):
        """Replaces the index with one made from the committed containers alone. Records that
        fail their crc32 or were set aside as damaged are left out (so the chunk can be stored
        again); a container's torn end is skipped. Returns counts."""
        counts = {"containers": 0, "chunks": 0, "duplicates": 0, "damaged": 0, "torn": 0}
        with self._locked():
            # a record a verification set aside may pass its crc32 (damage found by decoding
            # or SHA-256): it stays out
            aside = {(n["container"], n["offset"], fp) for fp, n in self.damage_notes().items()}
            entries = {}
            for number in self.committed_containers():
                counts["containers"] += 1
                name = container_name(number)
                for offset, header, error in self._scan(number, decode=False):
                    if header is None or "torn" in (error or ""):
                        counts["torn"] += 1
                    elif error or (name, offset, header[1]) in aside:
                        counts["damaged"] += 1
                    elif header[1] in entries:
                        counts["duplicates"] += 1
                    else:
                        entries[header[1]] = Location(number, offset, header[4])
            counts["chunks"] = len(entries)
            self._write_index(entries.items())
        return counts
    # ------------------------------------------------------------------ damaged chunks

    def set_aside(self, damage):
        """Takes chunks found damaged out of the index, so that the next backup that meets
        their data stores them afresh (its files cache does not vouch for them either), which
        makes whole again every image that references them. `damage`: Damage tuples; an entry
        is taken out only while it still points at the damaged record (a chunk stored again
        elsewhere stays). Each is noted in index/damaged.log first, so that messages can say
        what happened, reclaim knows it need not look for the chunk, and an index rebuild does
        not bring the record back. Returns the fingerprints taken out."""
        found = {d.fingerprint: d for d in damage if d.fingerprint is not None}
        if not found:
            return []
        with self._locked():
            self._refresh()
            out = []
            for fp, d in found.items():
                loc = self._lookup(fp)
                if loc is not None and loc.offset == d.offset \
                        and self.container_path(loc.container) == d.container:
                    out.append(fp)
            if out:
                now = int(time.time())
                self._append_notes(
                    {"fingerprint": fp.hex(), "container": os.path.basename(found[fp].container),
                     "offset": found[fp].offset, "reason": found[fp].reason, "time": now}
                    for fp in out)
                gone = set(out)
                self._write_index([(fp, loc) for fp, loc in self._locations()
                                   if fp not in gone])
        return out

    def damage_notes(self):
        """{fingerprint: {"container", "offset", "reason", "time"}} of the chunks set aside as
        damaged that are still needed (the newest note of each)."""
        try:
            with open(self.damaged_path, "rb") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return {}
        notes = {}
        for line in lines:
            try:
                n = json.loads(line)
                fp = bytes.fromhex(n["fingerprint"])
                if len(fp) != FINGERPRINT_SIZE or not isinstance(n.get("offset"), int):
                    continue
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a torn last line of a crashed append
            notes[fp] = {k: n.get(k) for k in ("container", "offset", "reason", "time")}
        return notes

    @staticmethod
    def _note_lines(notes):
        return b"".join(json.dumps(n, sort_keys=True).encode() + b"\n" for n in notes)

    def _append_notes(self, notes):
        data = self._note_lines(notes)
        fd = private.create(self.damaged_path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _prune_notes(self, keep):
        """Rewrites damaged.log with the notes whose fingerprint `keep(fp)` wants; call with
        the lock held."""
        notes = self.damage_notes()
        kept = {fp: n for fp, n in notes.items() if keep(fp)}
        if len(kept) == len(notes):
            return
        if not kept:
            os.unlink(self.damaged_path)
        else:
            tmp = self.damaged_path + ".rewrite"
            with os.fdopen(private.create(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as f:
                f.write(self._note_lines(dict(n, fingerprint=fp.hex()) for fp, n in kept.items()))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.damaged_path)
        fsync_dir(self.index_dir)
