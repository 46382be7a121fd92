"""The storage side of one image going into a deduplication pool.

Two ways in, one result (a recipe plus whatever chunks the pool lacked):
- server-side deduplication: the image stream arrives as plain bytes (write()); this side cuts
  it into chunks, fingerprints them and stores the new ones;
- client-side deduplication: the client cut and fingerprinted the stream itself and asks
  which chunks are new (query()); only those arrive (put()), each checked against its
  fingerprint, since a pool must never hold data under a fingerprint it does not match.

Both cut the same stream the same way (plugins/storage/dedup/segmenter.py), so images made
either way share their chunks.

A full with a files cache also passes references (reference()): "the next bytes are these
bytes of a base image", for members of unchanged files. Their recipe entries are copied from
the base image's recipe (parts of chunks where a member shares a chunk with others), so the
new recipe is a whole image of its own that needs no other image once written. The cutting
starts afresh after each reference: a reference always ends at a member border.

A backup holds a session on the pool from before its first lookup until its recipe is
durable, so space reclaim cannot remove a chunk it found already stored. Between finish() and
the commit (a rename done by commit_recipe) the complete partial recipe keeps its chunks
alive: reclaim counts partial recipes as referencing."""

import hashlib
import mmap
import os
import queue
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from plugins.storage.dedup.chunker import Params
from plugins.storage.dedup.encoding import CODEC_NAMES, CODEC_NONE, decode_sent
from plugins.storage.dedup.pool import IMAGE_DIR
from plugins.storage.dedup.recipe import RecipeDamaged, RecipeWriter, read_recipe
from plugins.storage.dedup.segmenter import GATHER, Segmenter
from plugins.storage.dedup.store import POOL_FILE, ChunkStore, fsync_dir
from app.errors import CairnError
from app.formats import private

SESSION_TIMEOUT = 600.0
# The stream is handed to the cutting and storing thread in blocks of this size (the
# segmenter cuts blocks this large in place), and this many blocks may wait: the caller's
# thread (the archiver, or the data connection) only gathers bytes.
BLOCK_BYTES = GATHER
QUEUE_DEPTH = 3
# One encoder more than cores: the stream's own thread (reading, cutting) runs part-time.
ENCODERS = min(8, (os.cpu_count() or 2) + 1)
# Tasks hashed and compressed at once: one for each encoder and two more, so that every
# encoder has its next task while the oldest is being stored; their memory (about this many
# times TASK_BYTES, twice) stays small.
IN_FLIGHT = ENCODERS + 2
# Consecutive pieces are encoded together, as one task, up to about this many bytes: each
# task costs a hand-over between threads and a compression context, which for the 100 KiB
# chunks of small files in 1 MiB tasks made a first full about 4% slower (bench/README.md).
TASK_BYTES = 4 << 20
# The pieces cut at the end of the stream (or before a reference) are all there is left to
# wait for: smaller tasks, so that the encoders share them. The image's index, its last
# member, arrives whole at the end; in one task it was hashed on one thread.
LAST_TASK_BYTES = 1 << 20


def _digest(data):
    return hashlib.sha256(data).digest()


class IngestError(CairnError):
    pass


# Stores opened by this process, kept for the next job: loading a large pool's index takes
# about a second per million chunks, and an open store only reads what was appended since.
STORES_KEPT = 4
_stores = {}  # (root, key, keyless or PLAIN) -> (pool.json identity, ChunkStore), oldest first
PLAIN = "plain"  # a plain pool's store serves callers with and without keyless alike
_stores_lock = threading.Lock()
# (root, remote's ident) -> the lock held while that pool's store is being opened
_opening = {}


def _pool_identity(root):
    """pool.json's inode and change time: a pool made anew at the same path has another."""
    try:
        st = os.stat(os.path.join(root, POOL_FILE))
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def open_store(root, key=None, keyless=False, remote=None):
    """The pool's chunk store. keyless: for work that never decodes a chunk (reclaim, index
    rebuild, usage), so that it also runs on an encrypted pool whose key was not sent. The
    same store object serves later jobs of this process on the same pool (it is safe to
    share between threads) while the pool is the same one; a caller that comes while another
    opens the pool waits for that store instead of reading the index a second time (the
    master asks for a pool to be opened ahead of a backup: DedupAgent.warm). remote: where
    the store's containers also live, for a store kept as a cache (a cloud pool): an object
    with `ident` (hashable) and make(root, key=, keyless=) -> the store."""
    key = bytes.fromhex(key) if isinstance(key, str) else key
    keyless = keyless and key is None
    root = os.path.abspath(root)
    where = None if remote is None else remote.ident
    with _stores_lock:
        opening = _opening.setdefault((root, where), threading.Lock())
    with opening:
        return _open_store(root, key, keyless, remote, where)


def _open_store(root, key, keyless, remote, where):
    idents = [(root, key, keyless, where)] + (
        [(root, None, PLAIN, where)] if key is None else [])
    before = _pool_identity(root)
    with _stores_lock:
        for ident in idents:
            kept = _stores.pop(ident, None)
            if kept is not None and before is not None and kept[0] == before:
                _stores[ident] = kept  # the newest at the end
                store = kept[1]
                store.note_loosened(store.make_private() + _private_images(root))
                return store
    if remote is None:
        store = ChunkStore(root, key=key, keyless=keyless)
    else:
        store = remote.make(root, key=key, keyless=keyless)
    store.note_loosened(_private_images(root))
    ident = (root, None, PLAIN, where) if not store.encrypted else idents[0]
    with _stores_lock:
        _stores[ident] = (_pool_identity(root), store)
        while len(_stores) > STORES_KEPT:
            del _stores[next(iter(_stores))]
    return store


def _private_images(root):
    """Makes the pool's recipe folders private (every open does: one descriptor per client);
    returns what was open to other users. The recipes themselves are checked by verify."""
    changed = []
    try:
        fd = private.private_dir(os.path.join(root, IMAGE_DIR), changed=changed, create=False)
    except FileNotFoundError:
        return changed  # no image yet: the first recipe makes the folder, private
    try:
        with os.scandir(fd) as it:
            clients = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        for name in clients:
            try:
                os.close(private.private_dir(name, dir_fd=fd, changed=changed, create=False,
                                             path=os.path.join(root, IMAGE_DIR, name)))
            except FileNotFoundError:
                continue
    finally:
        os.close(fd)
    return changed


class Stats:
    __slots__ = ("bytes", "chunks", "new_chunks", "new_bytes", "stored_bytes", "reused_bytes")

    def __init__(self):
        self.bytes = self.chunks = self.new_chunks = self.new_bytes = self.stored_bytes = 0
        self.reused_bytes = 0

    def as_dict(self):
        d = {k: getattr(self, k) for k in self.__slots__}
        # over the whole image, files taken from a files cache included, as the share of
        # the backup the pool held; read_bytes is what the client read and chunked
        d["dedup_ratio"] = ratio(self.bytes, self.new_bytes)
        d["read_bytes"] = self.bytes - self.reused_bytes
        return d


def ratio(total, new):
    """The share of the image's bytes the pool held already, in percent (None for an empty
    image)."""
    if not total:
        return None
    return round(100.0 * (1.0 - new / total), 3)


class Ingest:
    """bases: recipe paths of the images a files cache refers to (source 0, 1, ...). They are
    loaded under the session, so that their chunks stay whatever happens to the images
    meanwhile; `bases_problem` says why they cannot be used (None when they can)."""

    def __init__(self, root, recipe_path, *, params=None, key=None, image_id=None,
                 session_timeout=SESSION_TIMEOUT, bases=None, remote=None, compression=None):
        self.store = open_store(root, key, remote=remote)
        self.params = Params(**(params or {}))
        # {"at": server|client|off, "level": N} (None: the store's codec at its level): off
        # stores chunks as they are; a chunk a client sent compressed (put_compressed) is
        # stored as it came when the policy asked for that, every other one is compressed
        # here at the level.
        compression = compression or {}
        self.compress_at = compression.get("at") or "server"
        self.level = compression.get("level") or None
        self.codec = CODEC_NONE if self.compress_at == "off" else None
        self.from_client = 0  # chunks kept as the client compressed them
        self.client_codecs = set()  # their codecs
        self.in_transit = False  # the stream came compressed (wire.py's X)
        self.image_id = image_id
        self.stats = Stats()
        self._session = self.store.session(timeout=session_timeout)
        self._writer = None
        self._recipe = None
        self._done = False
        self._bases = []
        self.bases_problem = None
        try:
            self._writer = self.store.writer(background=True)
            self._recipe = RecipeWriter(recipe_path)
            if bases:
                self._load_bases(bases)
        except BaseException:
            self._close_parts(abort=True)
            raise
        self._segmenter = None
        # The block being filled with stream bytes: _fill of them, of which those before
        # _start were handed over already.
        self._block = None
        self._start = self._fill = 0
        self._blocks = _Blocks()
        self._started = False
        self._queue = None
        self._worker = None
        self._error = None
        self._wanted = {}  # client-side: fingerprint -> length, asked for and not yet put
        self._copied = {}  # a copy: fingerprint -> the bytes of it the recipe uses, not yet put
        self._seen = set()  # fingerprints this image stores or asked for

    def _load_bases(self, paths):
        try:
            # "": an image the catalog no longer has; nothing refers to it
            bases = [read_recipe(p) if p else None for p in paths]
        except RecipeDamaged as e:
            self.bases_problem = e.message
            return
        for r in filter(None, bases):
            missing = self.store.lacking(r)
            if missing:
                self.bases_problem = (f"{missing} chunk(s) of the image {r.path} are not in the "
                                      "pool")
                return
        self._bases = bases

    # ---- server-side: a plain stream --------------------------------------------------------
    def write(self, data):
        """The next bytes of the image stream (the caller may reuse its buffer afterwards).
        They are cut, hashed and stored on other threads; this one only gathers them."""
        if not self._started:
            self._start_worker()
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        at, n = 0, len(view)
        while at < n:
            if self._block is None:
                self._block = self._blocks.take()
            fill = self._fill
            k = min(n - at, BLOCK_BYTES - fill)
            self._block[fill:fill + k] = view[at:at + k]
            self._fill = fill + k
            at += k
            if self._fill == BLOCK_BYTES:
                self._hand_over_block()

    def space(self, limit):
        """Free space (at most `limit` bytes) for the next bytes of the image stream, to be
        filled in place and then passed with advance(): write() without the copy. The view
        stays valid until advance()."""
        if not self._started:
            self._start_worker()
        if self._block is None:
            self._block = self._blocks.take()
        fill = self._fill
        return memoryview(self._block)[fill:fill + limit]

    def advance(self, n):
        """The first n bytes of the last space() are the next bytes of the stream."""
        self._fill += n
        if self._fill == BLOCK_BYTES:
            self._hand_over_block()

    def _start_worker(self):
        self._started = True
        self._queue = queue.Queue(QUEUE_DEPTH)
        self._worker = threading.Thread(target=self._work, name="dedup-ingest", daemon=True)
        self._worker.start()

    # ---- both: a files cache's reference -------------------------------------------------
    def reference(self, source, offset, length):
        """The next `length` bytes of the image are those at `offset` of base image `source`.
        In server-side mode they are queued behind the stream's pieces, in client-side mode
        the client has ended its cutting before them."""
        if not 0 <= source < len(self._bases) or self._bases[source] is None:
            raise IngestError(f"the client referred to base image {source}, which this backup "
                              "does not have")
        base = self._bases[source]
        if length <= 0 or offset < 0 or offset + length > base.size:
            raise IngestError(f"the client referred to bytes {offset}..{offset + length} of "
                              f"{base.path}, which has {base.size}")
        entries = base.copy_range(offset, length)
        if self._started:
            self._hand_over_block()
            self._hand_over(_Copied(entries))
        else:
            self._add_copied(entries)

    def cut(self):
        """The chunk being cut ends here, and the next bytes begin one of their own. The
        archiver cuts around what changes at every backup (the image's first member, its
        summary and its index's header), so that an unchanged backup's other bytes, its
        index's rows too, are cut as the last image's were and stored once."""
        if self._started:
            self._hand_over_block()
            self._hand_over(_Copied(()))

    def _hand_over_block(self):
        """Hands the bytes gathered so far to the worker. A block not full yet goes on being
        filled after them (a space() taken before a reference is filled afterwards)."""
        block, start, fill = self._block, self._start, self._fill
        if fill > start:
            self._start = fill
            self._hand_over(memoryview(block)[start:fill])
        if fill == BLOCK_BYTES:
            self._block = None
            self._start = self._fill = 0
            self._blocks.handed_over(block)

    def _add_copied(self, entries):
        recipe, stats = self._recipe, self.stats
        for item in entries:
            if type(item) is tuple:
                fp, start, n = item
                recipe.add(fp, n, start)
                chunks = 1
            else:  # a run of whole entries, as the base recipe holds them
                recipe.add_entries(item)
                chunks, n = item.chunks, item.bytes
            stats.bytes += n
            stats.reused_bytes += n
            stats.chunks += chunks

    def _hand_over(self, pieces):
        while True:
            if self._error is not None:
                raise self._error
            try:
                self._queue.put(pieces, timeout=0.5)
                return
            except queue.Full:
                continue

    def _work(self):
        """Cuts the stream's blocks into pieces, then hashes, looks up, compresses and stores
        them in stream order. Each piece (or a few small ones together) is hashed and, unless
        the pool has it, compressed by one of a few threads (hashlib and zstd release the
        GIL); up to IN_FLIGHT tasks are under way at once, so the encoders never wait for the
        slowest piece of a batch. This thread keeps the order of the recipe and the
        containers and decides what is new: a piece met twice in flight is encoded twice,
        stored once."""
        pool = ThreadPoolExecutor(max_workers=ENCODERS, thread_name_prefix="dedup-encode")
        store, codec, level = self.store, self.codec, self.level

        def encode(fp, data):
            return store.encode_record(fp, data, codec, level)
        encode_records = self.store.encode_records
        has = self.store.has

        def task(datas):
            fps = [_digest(data) for data in datas]
            new = [i for i, fp in enumerate(fps) if not has(fp)]
            encoded = [None] * len(datas)
            if new:
                records = encode_records([fps[i] for i in new], [datas[i] for i in new],
                                         codec, level)
                for i, record in zip(new, records):
                    encoded[i] = record
            return list(zip(fps, encoded))

        inflight = deque()
        stats = self.stats
        writer = self._writer
        recipe = self._recipe

        def settle():
            fut, datas = inflight.popleft()
            for (fp, enc), data in zip(fut.result(), datas):
                n = len(data)
                recipe.add(fp, n)
                stats.bytes += n
                stats.chunks += 1
                if writer.wanted(fp):
                    if enc is None:  # the pool lost it since the lookup (a reclaim cannot run)
                        enc = encode(fp, data)
                    if writer.add_encoded(fp, n, enc):
                        stats.new_chunks += 1
                        stats.new_bytes += n
                        stats.stored_bytes += len(enc[1])

        def submit(datas):
            inflight.append((pool.submit(task, datas), datas))
            while len(inflight) > IN_FLIGHT:
                settle()

        try:
            while True:
                item = self._queue.get()
                if self._error is not None:
                    if item is None:
                        return
                    continue
                end = item is None or type(item) is _Copied
                if end:
                    # the end of the stream, or of the bytes before a reference: the cutting
                    # ends there and starts afresh after it
                    seg, self._segmenter = self._segmenter, None
                    pieces = seg.finish() if seg is not None else []
                else:
                    if self._segmenter is None:
                        # blocks are handed over, never changed: pieces are views of them
                        self._segmenter = Segmenter(self.params, views=True)
                    pieces = self._segmenter.feed(item)
                # Small pieces (the chunks of small files) go to the encoders a few at a time:
                # one hand-over between threads costs as much as hashing tens of KiB.
                group, size = [], 0
                limit = LAST_TASK_BYTES if end else TASK_BYTES
                for p in pieces:
                    group.append(p.data)
                    size += p.length
                    if size >= limit:
                        submit(group)
                        group, size = [], 0
                if group:
                    submit(group)
                if end:
                    while inflight:
                        settle()
                    if item is None:
                        return
                    self._add_copied(item.entries)
        except BaseException as e:  # noqa: BLE001 - re-raised in the stream's thread
            self._error = e
            for fut, _ in inflight:
                fut.cancel()
        finally:
            pool.shutdown(wait=False)

    def _drain(self):
        if not self._started:
            return
        self._hand_over_block()
        self._hand_over(None)
        self._worker.join()
        self._segmenter = None
        if self._error is not None:
            raise self._error

    # ---- client-side: fingerprints first, then the data the pool lacks ----------------------
    def query(self, entries):
        """entries: [(fingerprint, length)] in stream order. Returns a bytes of flags, 1 where
        the chunk's data must be sent. A fingerprint asked for twice is wanted once."""
        flags = bytearray(len(entries))
        for i, (fp, length) in enumerate(entries):
            self._recipe.add(fp, length)
            self.stats.bytes += length
            self.stats.chunks += 1
            if fp in self._seen:
                continue
            self._seen.add(fp)
            if not self.store.has(fp):
                self._wanted[fp] = length
                flags[i] = 1
        return bytes(flags)

    def put(self, fp, data):
        """The data of a chunk query() asked for."""
        length = self._wanted.pop(fp, None)
        if length is None:
            raise IngestError("the client sent a chunk that was not asked for")
        if len(data) != length or hashlib.sha256(data).digest() != fp:
            raise IngestError("the client sent a chunk whose content does not match its "
                              "fingerprint; nothing of it was stored",
                              hint="the client's data changed in transit or its agent is "
                                   "faulty; run the backup again")
        before = self._writer.stored_bytes
        if self._writer.add(fp, data, self.codec, self.level):
            self.stats.new_chunks += 1
            self.stats.new_bytes += length
            self.stats.stored_bytes += self._writer.stored_bytes - before

    def put_compressed(self, fp, codec, raw_length, stored):
        """The data of a chunk query() asked for, compressed by the client (codec: its
        byte). It is decoded and checked against its fingerprint like any other, then kept
        as the client compressed it (encrypted in an encrypted pool) when the policy
        compresses on the client, else stored as put() stores it."""
        length = self._wanted.get(fp)
        if length is None:
            raise IngestError("the client sent a chunk that was not asked for")
        try:
            if raw_length != length:
                raise ValueError(f"its length {raw_length} is not the {length} it asked about")
            data = decode_sent(codec, stored, length)
        except ValueError as e:
            raise IngestError(f"the client sent a compressed chunk that is not what it "
                              f"claims: {e}; nothing of it was stored",
                              hint="the client's data changed in transit or its agent is "
                                   "faulty; run the backup again") from None
        if self.compress_at != "client" or hashlib.sha256(data).digest() != fp:
            self.put(fp, data)  # checked there: a chunk that does not match is refused
            return
        del self._wanted[fp]
        self.from_client += 1
        if codec != CODEC_NONE:  # none: a chunk compression did not make smaller
            self.client_codecs.add(CODEC_NAMES[codec])
        writer = self._writer
        if writer.wanted(fp):
            record = self.store.compressed_record(fp, codec, length, stored)
            if writer.add_encoded(fp, length, record):
                self.stats.new_chunks += 1
                self.stats.new_bytes += length
                self.stats.stored_bytes += len(record[1])

    def compression_report(self):
        """Where this image's new chunks were compressed: {at, codec, level}."""
        if self.compress_at == "off":
            return {"at": "off", "codec": "none", "level": None}
        if self.from_client:
            return {"at": "client", "codec": "/".join(sorted(self.client_codecs)) or "none",
                    "level": self.level or 1}
        codec = CODEC_NAMES[self.store.codec]
        out = {"at": "server", "codec": codec,
               "level": min(self.level or 1, 9) if codec == "zlib" else self.level or 1}
        if self.in_transit:
            out["in_transit"] = "zstd"
        return out

    # ---- a copy from another pool that keeps chunks: its recipe, and the chunks it lacks ----
    def query_entries(self, entries):
        """entries: the source recipe's [(fingerprint, start, length)] in stream order, taken
        into this recipe as they are. Returns a bytes of flags, 1 where the chunk's data must
        be sent (the pool lacks it); a fingerprint is asked for once."""
        flags = bytearray(len(entries))
        add = self._recipe.add
        for i, (fp, start, length) in enumerate(entries):
            add(fp, length, start)
            self.stats.bytes += length
            self.stats.chunks += 1
            need = start + length
            if fp in self._copied:
                self._copied[fp] = max(self._copied[fp], need)
            if fp in self._seen:
                continue
            self._seen.add(fp)
            if not self.store.has(fp):
                self._copied[fp] = need
                flags[i] = 1
        return bytes(flags)

    def put_chunk(self, fp, data):
        """The whole data of a chunk query_entries() asked for, checked against its
        fingerprint before it is stored."""
        need = self._copied.pop(fp, None)
        if need is None:
            raise IngestError("a chunk arrived that was not asked for")
        if len(data) < need or hashlib.sha256(data).digest() != fp:
            raise IngestError("a chunk arrived whose content does not match its fingerprint; "
                              "nothing of it was stored",
                              hint="the source pool's data changed in transit or is damaged: "
                                   "verify the source pool, then duplicate again")
        before = self._writer.stored_bytes
        if self._writer.add(fp, data):
            self.stats.new_chunks += 1
            self.stats.new_bytes += len(data)
            self.stats.stored_bytes += self._writer.stored_bytes - before

    def copy_entries(self, entries, chunk_of):
        """A copy on this host: the entries taken, and the chunks the pool lacks read with
        chunk_of(fingerprint) and stored. Returns (chunks stored, their bytes)."""
        flags = self.query_entries(entries)
        n = nbytes = 0
        for (fp, _, _), flag in zip(entries, flags):
            if flag:
                data = chunk_of(fp)
                self.put_chunk(fp, data)
                n += 1
                nbytes += len(data)
        return n, nbytes

    # ---- the end ----------------------------------------------------------------------------
    def finish(self, meta):
        """Stores the rest, makes the chunks and the partial recipe durable, ends the session.
        Returns the statistics."""
        try:
            self._drain()
            if self._wanted or self._copied:
                raise IngestError(f"{len(self._wanted) + len(self._copied)} chunk(s) the client "
                                  "was asked for never arrived; the image is incomplete")
            self._writer.commit()
            # stats: what the image added to the pool, kept in its recipe too (version 2)
            info = self._recipe.finish(dict(meta, image_id=self.image_id,
                                            chunker=self.params.as_dict(),
                                            stats=self.stats.as_dict()))
        except BaseException:
            self.abort()
            raise
        self._done = True
        self._close_parts(abort=False)
        out = self.stats.as_dict()
        out["compression"] = self.compression_report()
        out["recipe_bytes"] = info.get("file_bytes") if isinstance(info, dict) else None
        return out

    def abort(self):
        if self._done:
            return
        self._done = True
        if self._queue is not None and self._worker is not None and self._worker.is_alive():
            self._error = self._error or IngestError("aborted")
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass
            self._worker.join(5)
        self._close_parts(abort=True)

    def _close_parts(self, abort):
        try:
            if abort:
                if self._recipe is not None:
                    self._recipe.abort()
                if self._writer is not None:
                    self._writer.abort()
        finally:
            self._session.close()


class _Blocks:
    """The stream's blocks. The pieces cut from a block are views of it, alive until they
    are encoded and written; a block is filled again once none is left (a mapping refuses
    to change size while views of it exist), so a backup reuses a few blocks instead of
    faulting in fresh memory for every 8 MiB. A block is anonymous memory, as the hash
    worker's buffers are: only what is written to it is faulted in, where a bytearray's 8 MiB
    are all zeroed first (5 ms, each backup, even one that writes a few KiB)."""

    KEEP = QUEUE_DEPTH + 9  # handed-over blocks looked at for reuse, the oldest first

    def __init__(self):
        self._out = deque()

    def take(self):
        out = self._out
        for _ in range(len(out)):
            block = out.popleft()
            if _unused(block):
                return block
            out.append(block)
        return mmap.mmap(-1, BLOCK_BYTES)

    def handed_over(self, block):
        self._out.append(block)
        while len(self._out) > self.KEEP:
            self._out.popleft()


def _unused(block):
    """True when no view of the block exists: only then can it change size (to the size it
    has, which changes nothing)."""
    try:
        block.resize(len(block))
    except BufferError:
        return False
    except (OSError, SystemError, ValueError):
        return False  # a system that cannot resize a mapping: the block is not reused
    return True


class _Copied:
    """Recipe entries copied from a base image, queued in stream order with the pieces."""
    __slots__ = ("entries",)

    def __init__(self, entries):
        self.entries = entries


def commit_recipe(root, partial, final, key=None, remote=None, before=None):
    """Makes a finished recipe the committed image, under a session so that no reclaim runs
    while the name changes. before(store): what must be done first (a cloud pool: its
    containers and the recipe uploaded)."""
    store = open_store(root, key, remote=remote)
    with store.session(timeout=SESSION_TIMEOUT):
        if os.path.exists(final):
            raise IngestError(f"{final} exists already; the image was not committed")
        if before is not None:
            before(store)
        os.rename(partial, final)
        fsync_dir(os.path.dirname(final))
    return os.stat(final).st_size
