"""Cloud, the agent half: the dedup agent half (plugins/storage/dedup/agent.py) over a store
kept as a cache of a bucket (store.py). What differs is where the store's containers also go
and come from; the commit waits until the bucket holds the whole image; a removed image
leaves the bucket too; a reclaim takes what the bucket holds first, so that it never frees a
chunk that an image only the bucket still lists uses. Standard library only but for boto3,
imported when the bucket is first reached (bucket.py).

The pool's modules are imported lazily, as dedup's are (plugins/storage/dedup/agent.py): an
agent that never serves a cloud pool never loads them, nor boto3."""

import os
import time

from app.errors import CairnError, ValidationError
from plugins.storage.dedup.agent import DedupAgent, _remove


def _object_name(root, path):
    """The bucket object of a pool file: its path below the pool's root."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if rel.startswith("..") or os.path.isabs(rel):
        raise ValidationError(f"{path} is not a file of the pool at {root}")
    return rel.replace(os.sep, "/")


# A multipart upload begun longer ago than this is one an agent killed halfway left.
STALE_UPLOAD_S = 24 * 3600


class CloudAgent(DedupAgent):
    name = "cloud"
    preload = DedupAgent.preload + ("plugins.storage.cloud.store",)

    def remote(self, spec):
        from plugins.storage.cloud.store import Remote
        return Remote(spec["bucket"], spec.get("cache_limit"),
                      upload_on_seal=spec.get("commit_at") != "cache")

    def before_commit(self, partial, final, spec=None, emit=None):
        if (spec or {}).get("commit_at") == "cache":
            return None  # the uploads are queued once the image is committed (commit)

        def progress(done, total, done_bytes, total_bytes):
            if emit is not None:
                emit("upload", {"containers": done, "of": total, "bytes": done_bytes,
                                "total_bytes": total_bytes})

        def upload(store):
            store.flush_uploads(progress=progress)
            store.put_recipe(_object_name(store.root, final), partial)
        return upload

    def commit(self, spec, partial, final, emit=None):
        store = self.open_store(spec)
        retried = store.bucket.retried
        out = super().commit(spec, partial, final, emit)
        queued = spec.get("commit_at") == "cache"
        if queued:
            store.queue_recipe(_object_name(store.root, final), final)
        try:
            trimmed, freed = store.trim()
        except OSError:
            trimmed = freed = 0  # the image is committed: a cache left full is trimmed later
        out["cloud"] = dict(store.cache_usage(), trimmed=trimmed, trimmed_bytes=freed,
                            retried=store.bucket.retried - retried, queued=queued)
        return out

    def remove_image(self, spec, path):
        store = self.open_store(spec, keyless=True)
        store.bucket.delete([_object_name(store.root, path)])
        _remove(path)

    def reclaim(self, req, spec, compact_below, known, min_age_s):
        store = self.open_store(spec, keyless=True)
        store.flush_uploads()
        taken = store.sync_from_bucket()
        stats = super().reclaim(req, spec, compact_below, known, min_age_s)
        gone = stats["stale_recipes_removed"] + stats["orphan_recipes_removed"]
        store.bucket.delete([_object_name(store.root, p) for p in gone])
        # the parts of uploads an agent killed halfway left: space no listing shows
        stale = store.bucket.uploads(begun_before=time.time() - STALE_UPLOAD_S)
        store.bucket.abort(stale)
        stats["uploads_aborted"] = len(stale)
        stats["cloud"] = dict(store.cache_usage(), taken_from_bucket=taken)
        return stats

    def verify(self, req, spec, images, pace=None):
        """A whole-pool verify first checks that the bucket holds every container the cache
        notes as uploaded (uploading again what the cache still has), then reads every chunk
        back as a dedup pool's verify does: containers trimmed from the cache are read from
        the bucket. The cache is trimmed again afterwards."""
        store = self.open_store(spec, keyless=True)
        checked = None
        if not images:
            store.flush_uploads()
            checked = store.check_bucket(req.emit)
        out = super().verify(req, spec, images, pace)
        try:
            store.trim()
        except OSError:
            pass
        if checked is not None:
            out["cloud"] = checked
        return out

    def usage(self, spec):
        store = self.open_store(spec, keyless=True)
        return dict(store.stats(), cloud=store.cache_usage())

    def prepare_import(self, spec):
        """The recipes and containers the bucket holds and the cache lacks are taken first:
        a pool is imported from its bucket alone."""
        self.open_store(spec, keyless=True).sync_from_bucket()

    def check_server(self, spec):
        """For a new storage server: the bucket is reachable with the credentials, and
        empty or a Cairn pool's already (a foreign bucket's objects are never mixed with a
        pool's)."""
        from plugins.storage.cloud.bucket import Bucket
        from plugins.storage.dedup.store import POOL_FILE
        bucket = Bucket(spec["bucket"])
        bucket.check()
        if bucket.size(POOL_FILE) is not None:
            return {"holds_pool": True}
        names = bucket.names()
        if names:
            where = spec["bucket"].get("prefix") or ""
            raise CairnError(
                f"bucket {bucket.name}{' under ' + where if where else ''} holds "
                f"{len(names)} object(s) that are not a Cairn pool's (e.g. {names[0][0]!r})",
                hint="give an empty bucket, or a prefix of its own (--prefix) for the pool")
        return {"holds_pool": False}


HALF = CloudAgent()
