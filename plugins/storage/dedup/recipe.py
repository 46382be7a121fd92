"""Recipes: an image of a deduplication pool as the ordered list of its chunks.

The image stream is the concatenation, in order, of the bytes each entry selects: `length`
bytes of the chunk `fp` from byte `start` of its data (start 0 and the chunk's full length
for the chunks the segmenter makes; a later recipe may reference part of a chunk). The
catalog addresses members by their offset in that stream, so a restore reads byte ranges of
it (RecipeStream).

File layout (big-endian):
    HEADER   magic b"CRNRCPE1", format version (u32), entry size (u32)
    ENTRY    fingerprint (32 bytes), start (u32), length (u32)         x count
    meta     JSON object (UTF-8): image id, chunker parameters and, from version 2 on,
             `stats`: what the image added to the pool (stream bytes, chunks, new chunks and
             bytes, bytes stored after compression, reused bytes, deduplication rate), so
             that an import records it from the pool alone
    TRAILER  count (u64), stream length (u64), meta length (u32),
             SHA-256 of every byte before it, end magic b"CRNRCPE."

A recipe is written once, front to back, and fsync'ed before it counts; a file without its
trailer (a crash while writing), with a digest that does not match, or with another magic is
refused as damaged, naming what is wrong. The trailer sits at the end so that the writer never
seeks and the reader finds it without knowing the count.

Standard library only: this runs in the agent on the storage server.
"""

import functools
import hashlib
import io
import json
import os
import struct
import sys
from array import array
from bisect import bisect_right
from collections import namedtuple
from itertools import accumulate

from app import status
from plugins.storage.dedup.store import ChunkDamaged, ChunkNotFound, ChunkSetAside, fsync_dir
from app.errors import CairnError, StorageError, ValidationError
from app.formats import private

MAGIC = b"CRNRCPE1"
END_MAGIC = b"CRNRCPE."
VERSION = 2
# Version 1 has the same layout; its meta lacks `stats`.
READABLE_VERSIONS = (1, 2)
HEADER = struct.Struct(">8sII")
ENTRY = struct.Struct(">32sII")
TRAILER_HEAD = struct.Struct(">QQI")   # count, stream length, meta length (hashed)
TRAILER = struct.Struct(">QQI32s8s")   # ... then the digest and the end magic
FINGERPRINT_SIZE = 32
MAX_U32 = 0xFFFFFFFF

# Entries are written in batches of this many bytes: one write per batch, none per entry.
FLUSH_BYTES = 1 << 20

Entry = namedtuple("Entry", "fp start length stream_offset")
# entries of a recipe in a row, as its file holds them (raw), with how many and their bytes
Run = namedtuple("Run", "raw chunks bytes")


class RecipeDamaged(CairnError):
    """A recipe file that cannot be trusted (cut short, altered, not a recipe), or a chunk it
    needs that the store cannot give as recorded. `path` names the recipe; `fingerprint` and
    `stream_offset` the chunk, when one is at fault."""
    status = status.IMAGE_DAMAGED

    def __init__(self, message, *, path=None, fingerprint=None, stream_offset=None, hint=None):
        super().__init__(message, hint=hint)
        self.path = path
        self.fingerprint = fingerprint
        self.stream_offset = stream_offset


class RecipeExists(StorageError):
    """The recipe file to be written exists already."""


class RecipeWriter:
    """Writes one recipe file: add() the entries in stream order, then finish(meta).

    The file is created with O_EXCL (RecipeExists when it is there already), its folder when
    missing. Entries are gathered and written in batches. Used as a context manager, a writer
    that was not finished is aborted."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            # like an image file: the pool's per-client folder appears with its first image,
            # private (0700) like the recipe (0600): either tells whose data the pool holds
            dfd = private.makedirs(os.path.dirname(os.path.abspath(self.path)))
            try:
                self._fd = private.create(os.path.basename(self.path),
                                          os.O_WRONLY | os.O_EXCL, dir_fd=dfd)
            finally:
                os.close(dfd)
        except FileExistsError:
            raise RecipeExists(f"the recipe {self.path} exists already",
                               hint="An image is written once: use a new image id, or remove "
                                    "the leftover of an earlier attempt first.") from None
        except OSError as e:
            raise StorageError(f"cannot create the recipe {self.path}: {e.strerror}") from None
        self._hash = hashlib.sha256()
        self._buf = bytearray(HEADER.pack(MAGIC, VERSION, ENTRY.size))
        self._written = 0
        self.chunks = 0
        self.bytes = 0
        self._finished = False

    def _check_open(self):
        if self._fd is None:
            raise ValidationError(f"the recipe writer for {self.path} is already "
                                  f"{'finished' if self._finished else 'aborted'}",
                                  hint="Open a new RecipeWriter for another recipe.")

    def add(self, fp, length, start=0):
        """Appends an entry: `length` bytes of chunk `fp` (32-byte SHA-256 digest) from byte
        `start` of its data."""
        self._check_open()
        if type(fp) is not bytes:
            if not isinstance(fp, (bytearray, memoryview)):
                fp = None
            else:
                fp = bytes(fp)
        if fp is None or len(fp) != FINGERPRINT_SIZE:
            raise ValidationError("a recipe entry needs a 32-byte chunk fingerprint",
                                  hint="Pass the raw SHA-256 digest, not its hex.")
        if type(length) is not int or type(start) is not int or length <= 0 or start < 0 \
                or start + length > MAX_U32:
            raise ValidationError(f"invalid recipe entry: start {start!r}, length {length!r}",
                                  hint=f"Use whole numbers with length > 0, start >= 0 and "
                                       f"start + length <= {MAX_U32}.")
        self._buf += ENTRY.pack(fp, start, length)
        self.chunks += 1
        self.bytes += length
        if len(self._buf) >= FLUSH_BYTES:
            self._flush()

    def add_entries(self, run):
        """Appends the entries of a recipe as they are (a Run from Recipe.copy_range): they
        were checked when that recipe was read."""
        self._check_open()
        self._buf += run.raw
        self.chunks += run.chunks
        self.bytes += run.bytes
        if len(self._buf) >= FLUSH_BYTES:
            self._flush()

    def _write(self, data):
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def _flush(self):
        if not self._buf:
            return
        try:
            self._write(self._buf)
        except OSError as e:
            raise StorageError(f"writing the recipe {self.path} failed: {e.strerror}") from None
        self._hash.update(self._buf)
        self._written += len(self._buf)
        self._buf = bytearray()

    def finish(self, meta):
        """Writes the meta (a JSON object: image id, chunker parameters, ...) and the trailer,
        makes the file durable and closes it. Returns {"chunks": entries, "bytes": stream
        length, "file_bytes": size of the recipe file}. On failure the file is removed."""
        self._check_open()
        if not isinstance(meta, dict):
            raise ValidationError(f"recipe meta must be a dict, not {type(meta).__name__}")
        try:
            meta_bytes = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            raise ValidationError(f"recipe meta cannot be stored as JSON: {e}") from None
        try:
            self._buf += meta_bytes
            self._buf += TRAILER_HEAD.pack(self.chunks, self.bytes, len(meta_bytes))
            self._hash.update(self._buf)
            self._buf += self._hash.digest() + END_MAGIC
            self._write(self._buf)
            self._written += len(self._buf)
            self._buf = bytearray()
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            # the name must be durable too, or a crash could lose a recipe that counted
            fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except OSError as e:
            self.abort()
            raise StorageError(f"writing the recipe {self.path} failed: {e.strerror}") from None
        except BaseException:
            self.abort()
            raise
        self._finished = True
        return {"chunks": self.chunks, "bytes": self.bytes, "file_bytes": self._written}

    def abort(self):
        """Closes and removes an unfinished recipe; does nothing once finished."""
        if self._finished:
            return
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._finished:
            self.abort()
        return False


class Recipe:
    """A loaded, checked recipe. `meta` (dict), `size` (stream length), len() (entries),
    iteration of Entry(fp, start, length, stream_offset), fingerprints(), ranges_of(fps),
    entry(i) and index_at(stream offset).

    Entries stay in one bytes object as stored, plus an array of their stream offsets."""

    __slots__ = ("path", "meta", "size", "_blob", "_offsets", "_count")

    @classmethod
    def load(cls, path):
        path = os.fspath(path)

        def damaged(what, hint="The image must be taken again; its recipe cannot be "
                               "trusted."):
            return RecipeDamaged(f"the recipe {path} {what}", path=path, hint=hint)
        try:
            with open(path, "rb") as f:
                data = f.read(len(MAGIC))
                if data == MAGIC:  # a foreign file, however large, is not read whole
                    data += f.read()
        except FileNotFoundError:
            raise RecipeDamaged(f"the recipe {path} is missing", path=path) from None
        except OSError as e:
            raise RecipeDamaged(f"the recipe {path} cannot be read: {e.strerror}",
                                path=path) from None
        n = len(data)
        if n < len(MAGIC) or data[:len(MAGIC)] != MAGIC:
            if not n:
                raise damaged("is empty (its writing was cut short)")
            if MAGIC.startswith(data[:len(MAGIC)]):
                raise damaged(f"is cut short: only {n} bytes")
            raise damaged(f"is not a recipe (it starts with {data[:8]!r})",
                          hint="A file of another kind is where the image's recipe should be.")
        if n < HEADER.size + TRAILER.size:
            raise damaged(f"is cut short: only {n} bytes")
        _, version, entry_size = HEADER.unpack_from(data)
        if version not in READABLE_VERSIONS or entry_size != ENTRY.size:
            raise damaged(f"has format version {version} with {entry_size}-byte entries; "
                          f"this Cairn reads versions "
                          f"{', '.join(map(str, READABLE_VERSIONS))} with {ENTRY.size}-byte "
                          "entries",
                          hint="Read it with the Cairn version that wrote it.")
        count, size, meta_len, digest, end = TRAILER.unpack_from(data, n - TRAILER.size)
        if end != END_MAGIC:
            raise damaged("is incomplete: its trailer is missing (the write was cut short, or "
                          "the end of the file is damaged)")
        entries_end = HEADER.size + count * ENTRY.size
        if entries_end + meta_len + TRAILER.size != n:
            raise damaged(f"is damaged: it is {n} bytes long, but its trailer records {count} "
                          f"entries and {meta_len} bytes of meta")
        if hashlib.sha256(memoryview(data)[:n - TRAILER.size + TRAILER_HEAD.size]).digest() \
                != digest:
            raise damaged("is damaged: its SHA-256 does not match its content")
        try:
            meta = json.loads(data[entries_end:entries_end + meta_len])
        except (ValueError, UnicodeDecodeError):
            meta = None
        if not isinstance(meta, dict):
            raise damaged("is damaged: its meta is not a JSON object")
        self = cls.__new__(cls)
        self.path = path
        self.meta = meta
        self._blob = data[HEADER.size:entries_end]
        self._count = count
        words = array("I")
        words.frombytes(self._blob)
        if sys.byteorder == "little":
            words.byteswap()
        per = ENTRY.size // words.itemsize
        lengths = words[per - 1::per]
        self._offsets = array("Q", accumulate(lengths, initial=0))
        self.size = self._offsets[-1]
        if self.size != size:
            raise damaged(f"is damaged: its entries add up to {self.size} bytes, its trailer "
                          f"says {size}")
        return self

    def __len__(self):
        return self._count

    def __repr__(self):
        return f"Recipe({self.path!r}, {self._count} entries, {self.size} bytes)"

    def entry(self, i):
        if not 0 <= i < self._count:
            raise IndexError(f"recipe entry {i} out of range (0..{self._count - 1})")
        at = i * ENTRY.size
        fp, start, length = ENTRY.unpack_from(self._blob, at)
        return Entry(fp, start, length, self._offsets[i])

    def __iter__(self):
        offsets = self._offsets
        for i, (fp, start, length) in enumerate(ENTRY.iter_unpack(self._blob)):
            yield Entry(fp, start, length, offsets[i])

    def copy_range(self, offset, length):
        """The entries that give bytes offset..offset+length of the stream, for a recipe that
        refers to them (a files cache): (fp, start, length) of an entry only partly in the
        range, a Run for whole entries in a row (their bytes copied as they are here)."""
        end = offset + length
        first, last = self.index_at(offset), self.index_at(end - 1)
        offsets = self._offsets
        out = []
        i = first
        if offsets[first] < offset or (first == last and offsets[first + 1] > end):
            e = self.entry(first)
            skip = offset - e.stream_offset
            n = min(e.length - skip, length)
            out.append((e.fp, e.start + skip, n))
            if first == last:
                return out
            i = first + 1
        k = last + 1 if offsets[last + 1] <= end else last
        if k > i:
            out.append(Run(bytes(self._blob[i * ENTRY.size:k * ENTRY.size]), k - i,
                           offsets[k] - offsets[i]))
        if k == last:
            e = self.entry(last)
            out.append((e.fp, e.start, end - e.stream_offset))
        return out

    def index_at(self, pos):
        """Index of the entry holding stream byte pos (ValueError outside the stream)."""
        if not 0 <= pos < self.size:
            raise ValueError(f"stream offset {pos} is outside the image (0..{self.size - 1})")
        return bisect_right(self._offsets, pos) - 1

    def fingerprints(self):
        """The set of chunk fingerprints the recipe references."""
        blob = self._blob
        step = ENTRY.size
        return {blob[i:i + FINGERPRINT_SIZE] for i in range(0, len(blob), step)}

    def fingerprints_not_in(self, held):
        """The set of the recipe's chunk fingerprints that are not in `held` (a set or a
        dict's keys): no set of all of them is made first, which cost twice as much at each
        backup from a files cache."""
        blob = self._blob
        size = FINGERPRINT_SIZE
        return {blob[i:i + size] for i in range(0, len(blob), ENTRY.size)
                if blob[i:i + size] not in held}

    def ranges_of(self, fps):
        """[(stream_offset, length, fp)] of the entries whose chunk is in fps, in stream order:
        what a damaged or missing chunk takes away from the image."""
        wanted = {bytes(fp) for fp in fps}
        offsets = self._offsets
        return [(offsets[i], length, fp)
                for i, (fp, _, length) in enumerate(ENTRY.iter_unpack(self._blob))
                if fp in wanted]


def read_recipe(path):
    """Recipe.load(path)."""
    return Recipe.load(path)


def read_meta(path):
    """{"version", "meta", "bytes" (the file's size), "chunks", "stream_bytes"} of a recipe,
    from its header, trailer and meta alone: what an import needs to know of it without
    reading its entries (reading its stream loads and checks the whole recipe)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER.size)
            size = os.fstat(f.fileno()).st_size
            if len(head) < HEADER.size or head[:len(MAGIC)] != MAGIC \
                    or size < HEADER.size + TRAILER.size:
                raise RecipeDamaged(f"the recipe {path} is not a recipe or is cut short",
                                    path=path)
            _, version, entry_size = HEADER.unpack_from(head)
            f.seek(size - TRAILER.size)
            count, stream, meta_len, _digest, end = TRAILER.unpack(f.read(TRAILER.size))
            if end != END_MAGIC or version not in READABLE_VERSIONS \
                    or entry_size != ENTRY.size \
                    or HEADER.size + count * ENTRY.size + meta_len + TRAILER.size != size:
                raise RecipeDamaged(f"the recipe {path} is damaged or of an unknown version "
                                    f"({version})", path=path)
            f.seek(size - TRAILER.size - meta_len)
            meta = json.loads(f.read(meta_len))
    except OSError as e:
        raise RecipeDamaged(f"the recipe {path} cannot be read: {e.strerror}",
                            path=path) from None
    except (ValueError, UnicodeDecodeError):
        meta = None
    if not isinstance(meta, dict):
        raise RecipeDamaged(f"the recipe {path} is damaged: its meta is not a JSON object",
                            path=path)
    return {"version": version, "meta": meta, "bytes": size, "chunks": count,
            "stream_bytes": stream}


class RecipeStream(io.RawIOBase):
    """The image stream of a recipe, read from a chunk store (anything with get(fp) ->
    bytes, and get(fp, check_fingerprint=False) for check_fingerprints=False): random
    access with preadinto(buf, pos), and file-like sequential reading (readinto, read,
    seek, tell). The last CACHE chunks read stay decoded, since a restore reads many members
    in order out of one chunk.

    Read-ahead: while one chunk is copied out, the next AHEAD chunks are read, decrypted,
    decompressed and checked in READERS threads (file reads, zstd, AES-GCM and SHA-256 all
    release the GIL), so a sequential restore decodes on both cores."""

    CACHE = 2
    AHEAD = 32              # chunks read ahead at most,
    AHEAD_BYTES = 8 << 20   # and about this many bytes of them
    READERS = 2

    def __init__(self, store, recipe, read_ahead=True, check_fingerprints=True,
                 on_damage=None):
        """on_damage(stream offset, length, what): for a reader that goes on past damage (a
        restore, which loses only the files there): a damaged or missing chunk is told to
        it and reads as zeros. Without it, such a chunk raises RecipeDamaged."""
        super().__init__()
        self.on_damage = on_damage
        self.store = store
        # the store's get; without the SHA-256 of each chunk for a reader that checks what
        # it makes of the data itself (see ChunkStore.get)
        self._get = store.get if check_fingerprints else functools.partial(
            store.get, check_fingerprint=False)
        self.recipe = recipe
        self.size = recipe.size
        self._pos = 0
        self._cache = {}  # fp -> data, at most CACHE, oldest first
        self._ahead = {}  # entry index -> future of its chunk's data, in index order
        self._planned = {}  # fingerprint -> the entry index it is read ahead for
        self._next = 0  # the first entry not yet looked at for reading ahead
        self._last = -1  # the entry fetched last
        self._pool = None
        self._read_ahead = read_ahead and len(recipe) > 1

    def _fetch(self, i, fp, end):
        """The data of entry i's chunk; end: where entry i ends in the stream. Plans the read
        of the entries after it that fall in the window (AHEAD entries, AHEAD_BYTES of
        stream); each entry is looked at once as the window moves, not at every fetch."""
        ahead = self._ahead
        fut = ahead.pop(i, None)
        if fut is not None and self._planned.get(fp) == i:
            del self._planned[fp]
        if self._read_ahead:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor
                self._pool = ThreadPoolExecutor(self.READERS,
                                                thread_name_prefix="recipe-read-ahead")
            if i < self._last or i > self._next:
                self._drop_ahead()  # a jump: what was read ahead is not wanted
                self._next = i + 1
            elif ahead and next(iter(ahead)) < i:
                for j in [j for j in ahead if j < i]:
                    self._drop(j)
            self._last = i
            j = max(self._next, i + 1)
            stop = min(i + 1 + self.AHEAD, len(self.recipe))
            entry = self.recipe.entry
            planned = self._planned
            while j < stop:
                e = entry(j)
                if e.stream_offset + e.length - end > self.AHEAD_BYTES:
                    break
                nfp = e.fp
                if nfp != fp and nfp not in self._cache and nfp not in planned:
                    planned[nfp] = j
                    ahead[j] = self._pool.submit(self._get, nfp)
                j += 1
            self._next = j
        if fut is not None:
            return fut.result()
        return self._get(fp)

    def stop_reading_ahead(self):
        """From here on each chunk is read when it is needed, in the reading thread: for a
        reader whose process already has a core of its own to keep busy (see
        app/agent/ops.py), where the hand-overs to and from the read-ahead threads cost
        more than they win."""
        self._read_ahead = False
        self._drop_ahead()

    def _drop(self, j):
        self._ahead.pop(j).cancel()
        fp = self.recipe.entry(j).fp
        if self._planned.get(fp) == j:
            del self._planned[fp]

    def _drop_ahead(self):
        for fut in self._ahead.values():
            fut.cancel()
        self._ahead.clear()
        self._planned.clear()

    def readable(self):
        return True

    def seekable(self):
        return True

    def _chunk(self, i):
        fp, start, length, offset = self.recipe.entry(i)
        data = self._cache.get(fp)
        if data is None:
            try:
                data = self._decoded(i, fp, start, length, offset)
            except RecipeDamaged as e:
                if self.on_damage is None:
                    raise
                self.on_damage(offset, length, e.message)
                return bytes(start + length), start, length, offset  # not kept
            if len(self._cache) >= self.CACHE:
                del self._cache[next(iter(self._cache))]
            self._cache[fp] = data
        return data, start, length, offset

    def _decoded(self, i, fp, start, length, offset):
        """The data of entry i's chunk, checked; RecipeDamaged where it cannot be had."""
        try:
            data = self._fetch(i, fp, offset + length)
        except ChunkSetAside as e:
            raise RecipeDamaged(
                f"at stream offset {offset} of {self.recipe.path}: {e.message}",
                path=self.recipe.path, fingerprint=fp, stream_offset=offset,
                hint=e.hint) from None
        except ChunkNotFound:
            raise RecipeDamaged(
                f"chunk {fp.hex()} at stream offset {offset} of {self.recipe.path} is "
                f"missing from the chunk store", path=self.recipe.path, fingerprint=fp,
                stream_offset=offset,
                hint="The pool lost data this image needs: verify the pool; the files "
                     "in this part of the image cannot be restored.") from None
        except ChunkDamaged as e:
            raise RecipeDamaged(
                f"chunk {fp.hex()} at stream offset {offset} of {self.recipe.path} is "
                f"damaged: {e.reason or e.message}", path=self.recipe.path,
                fingerprint=fp, stream_offset=offset, hint=e.hint) from e
        if len(data) < start + length:
            raise RecipeDamaged(
                f"chunk {fp.hex()} at stream offset {offset} of {self.recipe.path} holds "
                f"{len(data)} bytes, but the recipe needs bytes {start}..{start + length}",
                path=self.recipe.path, fingerprint=fp, stream_offset=offset)
        return data

    def preadinto(self, buf, pos):
        """Fills buf with the stream's bytes from pos, across chunk borders, as far as the
        stream goes; returns how many (0 at or after the end)."""
        if self.closed:
            raise ValueError("read from a closed recipe stream")
        mv = memoryview(buf)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        if pos < 0:
            raise ValueError(f"negative stream position {pos}")
        want = min(len(mv), self.size - pos)
        if want <= 0:
            return 0
        i = self.recipe.index_at(pos)
        done = 0
        while done < want:
            data, start, length, offset = self._chunk(i)
            inner = pos + done - offset
            k = min(length - inner, want - done)
            at = start + inner
            mv[done:done + k] = memoryview(data)[at:at + k]
            done += k
            i += 1
        return done

    def readinto(self, buf):
        n = self.preadinto(buf, self._pos)
        self._pos += n
        return n

    def read(self, n=-1):
        if n is None or n < 0:
            n = max(0, self.size - self._pos)
        buf = bytearray(min(n, max(0, self.size - self._pos)))
        got = self.readinto(buf)
        del buf[got:]
        return bytes(buf)

    readall = read

    def seek(self, pos, whence=io.SEEK_SET):
        if self.closed:
            raise ValueError("seek on a closed recipe stream")
        if whence == io.SEEK_SET:
            new = pos
        elif whence == io.SEEK_CUR:
            new = self._pos + pos
        elif whence == io.SEEK_END:
            new = self.size + pos
        else:
            raise ValueError(f"invalid whence {whence!r}")
        if new < 0:
            raise ValueError(f"negative seek position {new}")
        self._pos = new
        return new

    def tell(self):
        return self._pos

    def close(self):
        self._cache = {}
        self._drop_ahead()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        super().close()
