"""Dedup, the agent half: the chunk store (store.py and the modules beside it) written by a
backup's ingest (ingest.py: on the storage host, or fed by the data connection, wire.py),
read by restores through recipes (recipe.py), read back whole by verify and cleaned by space
reclaim (pool.py). A client cuts its own chunks for client-side deduplication (wire.py's
client sink). Standard library only (zstandard, cryptography and pyfastcdc when present).

The pool's modules are imported lazily, when a request needs them, as before a job: a
client's agent never loads the chunk store, an agent says hello without waiting for them
(app/agent/server.py preloads `preload` afterwards), and a host that cannot load them (a
missing optional library) still runs the requests of other types."""

import os

from app import status
from app.errors import Canceled, CairnError
from plugins.storage.agent_base import AgentStorage, Reading


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _IngestWrite:
    """The LocalWrite of a recipe: the client's archiver feeds the pool's ingest in place."""

    def __init__(self, ingest, path):
        self.sink = ingest
        self.path = path
        self.bases_problem = ingest.bases_problem

    def finish(self):
        return {"dedup": self.sink.finish({})}

    def abort(self):
        self.sink.abort()
        _remove(self.path)


class _IngestReceiver(_IngestWrite):
    """The Receiver of a recipe: a plain stream (server-side deduplication) or queries and
    new chunks only (client-side), and a files cache's references. The listening event says
    whether the files cache's base images can be used (bases_problem)."""

    def __init__(self, ingest, path, mode):
        super().__init__(ingest, path)
        self.mode = mode
        # codecs: what this side decodes of chunks a client compressed (wire.py's Z)
        from plugins.storage.dedup.encoding import _zstd
        self.listening = {"bases_problem": ingest.bases_problem,
                          "codecs": ["zlib"] + (["zstd"] if _zstd is not None else [])}

    def take(self, chan, is_cancelled):
        from plugins.storage.dedup import wire
        wire.serve(chan, self.sink, is_cancelled)

    def finish(self):
        stats = super().finish()["dedup"]
        stats["mode"] = self.mode or "server"
        return {"bytes": stats["bytes"], "path": self.path, "dedup": stats}


class RecipeReading(Reading):
    """How a restore reads recipes of a deduplication pool: under a session, so that space
    reclaim does not move chunks meanwhile."""

    def __init__(self, spec, remote=None):
        from plugins.storage.dedup.ingest import SESSION_TIMEOUT, open_store
        self.recipes = {}
        self.streams = []  # the recipe streams opened: a part may turn their read-ahead off
        self.store = open_store(spec["root"], spec.get("key"), remote=remote)
        self.session = self.store.session(timeout=SESSION_TIMEOUT)

    def opener(self, tolerant=False):
        """How to open an image's source; a tolerant one reads a damaged or missing chunk as
        zeros and notes it (its `damage`), so that only the files that use it are lost."""
        from plugins.storage.dedup.recipe import RecipeStream, read_recipe

        def open_recipe(path):
            # Through the session: its containers stay open while the restore reads them.
            # Each chunk's record is checked (crc32, length, an encrypted one's tag), and each
            # restored file against its checksum from the catalog, so the SHA-256 of every
            # chunk, about a sixth of a restore's CPU time, is left to verify jobs.
            recipe = self.recipes.get(path)
            if recipe is None:
                recipe = self.recipes[path] = read_recipe(path)  # read once for all streams
            source = RecipeSource()
            stream = RecipeStream(self.session, recipe, check_fingerprints=False,
                                  on_damage=source.damaged if tolerant else None)
            self.streams.append(stream)
            source.take(stream)
            return source
        return open_recipe

    def forked(self, parts):
        """In a forked process, one of `parts` that restore at once: locks of the store and
        the session that another thread may have held at the fork are made anew (see
        restore_streams). With at least as many parts as cores, each part decodes its
        chunks in its own thread: the processes keep the cores busy, and handing every
        chunk to read-ahead threads and back cost a sixth of the CPU time of a restore of
        small files, and as much of its time."""
        if self.session is not None:
            self.session.forked()
        if parts >= (os.cpu_count() or 1):
            for stream in self.streams:
                stream.stop_reading_ahead()

    def close_streams(self):
        for stream in self.streams:
            stream.close()

    def close(self):
        if self.session is not None:
            self.session.close()
            self.session = None


class RecipeSource:
    """One image's stream as a restore source (app/agent/extents.py): size, preadinto, and
    the damage read past."""

    def __init__(self):
        self.stream = None
        self.size = 0
        self.damage = []  # (stream offset, length, what) read past

    def take(self, stream):
        self.stream = stream
        self.size = stream.size

    @property
    def recipe(self):
        """The recipe read, which names the chunk each byte of the stream is in."""
        return getattr(self.stream, "recipe", None)

    def damaged(self, offset, length, what):
        self.damage.append((offset, length, what))

    def preadinto(self, mv, pos):
        return self.stream.preadinto(mv, pos)

    def close(self):
        close = getattr(self.stream, "close", None)
        if close is not None:
            close()


class RecipeImage:
    """An image of the pool read whole (its ImageSource), under a session so that space
    reclaim leaves its chunks where they are: the stream through its recipe, or the recipe's
    entries and each chunk's data, for a copy into another pool that keeps chunks. Every
    chunk is checked against its fingerprint: a copy never carries damage on unnoticed."""

    def __init__(self, spec, path, remote=None):
        from plugins.storage.dedup.ingest import SESSION_TIMEOUT, open_store
        from plugins.storage.dedup.recipe import RecipeStream, read_recipe
        self.recipe = read_recipe(path)
        self.size = self.recipe.size
        self.session = open_store(spec["root"], spec.get("key"), remote=remote).session(
            timeout=SESSION_TIMEOUT)
        self.stream = None
        try:
            self.stream = RecipeStream(self.session, self.recipe)
        except BaseException:
            self.close()
            raise

    def preadinto(self, mv, pos):
        return self.stream.preadinto(mv, pos)

    def entries(self):
        return ((e.fp, e.start, e.length) for e in self.recipe)

    def chunk(self, fp):
        from plugins.storage.dedup.errors import ChunkDamaged, ChunkNotFound
        try:
            return self.session.get(fp)
        except (ChunkDamaged, ChunkNotFound) as e:
            raise CairnError(f"chunk {bytes(fp).hex()} of {self.recipe.path} cannot be read: "
                             f"{e.message}", status_code=status.IMAGE_DAMAGED,
                             hint="verify the pool (`cairn disk-pool verify POOL`); the copy "
                                  "can be made from another copy of the image") from None

    def close(self):
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if self.session is not None:
            self.session.close()
            self.session = None


class DedupAgent(AgentStorage):
    name = "dedup"
    preload = ("plugins.storage.dedup.ingest", "plugins.storage.dedup.recipe")
    image_suffix = ".recipe"

    def remote(self, spec):
        """Where the pool's containers also live (ingest.open_store's remote): nowhere, here;
        a pool kept as a cache of other storage says where."""
        return None

    def open_store(self, spec, keyless=False):
        from plugins.storage.dedup.ingest import open_store
        return open_store(spec["root"], spec.get("key"), keyless=keyless,
                          remote=self.remote(spec))

    def warm(self, spec):
        # the chunk index is read once, here, and the chunker's native code loaded: the
        # backup's Ingest takes the open store, and its first cut waits for no import
        from plugins.storage.dedup import chunker
        chunker.ACCELERATOR
        self.open_store(spec)

    def local_write(self, spec, path, *, emit, image_id, references):
        from plugins.storage.dedup.ingest import Ingest
        ingest = Ingest(spec["root"], path, params=spec.get("params"), key=spec.get("key"),
                        image_id=image_id, bases=spec.get("bases") if references else None,
                        remote=self.remote(spec), compression=spec.get("compression"))
        return _IngestWrite(ingest, path)

    def client_sink(self, chan, spec):
        from plugins.storage.dedup.wire import client_sink
        return client_sink(chan, spec.get("mode"), spec.get("params"),
                           compression=spec.get("compression"))

    def client_report(self, sink):
        from plugins.storage.dedup.wire import ClientSink
        if isinstance(sink, ClientSink):
            return {"client_dedup": sink.report(), "dedup_mode": "client"}
        stream = sink.report()
        return {"dedup_mode": "server", **({"client_stream": stream} if stream else {})}

    def receiver(self, spec, path, emit):
        from plugins.storage.dedup.ingest import Ingest
        try:
            ingest = Ingest(spec["root"], path, params=spec.get("params"),
                            key=spec.get("key"), image_id=spec.get("image_id"),
                            bases=spec.get("bases"), remote=self.remote(spec),
                            compression=spec.get("compression"))
        except BaseException:
            _remove(path)
            raise
        return _IngestReceiver(ingest, path, spec.get("mode"))

    def commit(self, spec, partial, final, emit=None):
        from plugins.storage.dedup.ingest import commit_recipe
        if not os.path.exists(partial):
            raise CairnError(f"{partial} is gone; the image cannot be committed",
                             status_code=status.IMAGE_DAMAGED)
        size = commit_recipe(spec["root"], partial, final, key=spec.get("key"),
                             remote=self.remote(spec),
                             before=self.before_commit(partial, final, spec, emit))
        return {"path": final, "bytes": size}

    def before_commit(self, partial, final, spec=None, emit=None):
        """What commit does first, under the pool's session (None: nothing)."""
        return None

    def reading(self, spec):
        return RecipeReading(spec, self.remote(spec))

    def image_source(self, spec, path):
        return RecipeImage(spec, path, self.remote(spec))

    def image_info(self, spec, path):
        """The recipe's version and meta (with, from version 2 on, what the image added to
        the pool), its size, chunks and stream length: from its header, trailer and meta."""
        from plugins.storage.dedup.recipe import read_meta
        return read_meta(path)

    def verify(self, req, spec, images, pace=None):
        """Reads images (recipes given) or the whole pool back and checks every chunk;
        damage is reported per image as byte ranges of its stream."""
        from plugins.storage.dedup import pool
        from plugins.storage.dedup.ingest import SESSION_TIMEOUT
        root = spec["root"]
        store = self.open_store(spec)
        # "modes": what was open to other users (and is private now)
        modes = (pool.check_recipe_modes(images) if images
                 else pool.check_modes(store, root, req.is_cancelled))
        with store.session(timeout=SESSION_TIMEOUT) as session:
            if images:
                out = pool.verify_images(store, images, emit=req.emit,
                                         is_cancelled=req.is_cancelled, session=session,
                                         pace=pace)
            else:
                out = pool.verify_pool(store, root, emit=req.emit,
                                       is_cancelled=req.is_cancelled, pace=pace)
        out["modes"] = modes
        return out

    def reclaim(self, req, spec, compact_below, known, min_age_s):
        """Removes chunks no image references any more and compacts containers. Refused
        (PoolBusy) while a backup, restore or verify uses the pool. known, min_age_s: the
        image ids the catalog knows and the age beyond which a recipe no catalog image owns
        is an orphan, whose chunks are not kept (see pool.live_fingerprints)."""
        from plugins.storage.dedup import pool
        root = spec["root"]
        store = self.open_store(spec, keyless=True)
        removed = []
        orphans = []

        def live():
            fps, gone = pool.live_fingerprints(root, known=known, min_age_s=min_age_s,
                                               orphans=orphans)
            removed.extend(gone)
            return fps
        stats = store.reclaim(live, compact_below=compact_below, is_cancelled=req.is_cancelled)
        if stats.get("cancelled"):
            raise Canceled()
        stats["stale_recipes_removed"] = removed
        stats["orphan_recipes_removed"] = orphans
        stats["pool"] = store.stats()
        return stats

    def usage(self, spec):
        return self.open_store(spec, keyless=True).stats()

    def rebuild_index(self, spec):
        """Rebuilds the chunk index from the containers alone."""
        from plugins.storage.dedup.ingest import SESSION_TIMEOUT
        store = self.open_store(spec, keyless=True)
        with store.session(timeout=SESSION_TIMEOUT):
            return store.rebuild_index()


HALF = DedupAgent()
