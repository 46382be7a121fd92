"""Dedup: a deduplicating pool on one storage path of the storage server. Image streams are cut
into content-defined chunks, each chunk is compressed and stored once in container files, and an
image is a recipe: the list of its chunks (docs/dedup-pool.md). The chunk store lives in the
agent (app/dedup/); this module holds the master-side decisions only.

The catalog addresses an image's members by their offsets in the image stream, as for
AdvancedDisk, so browsing, incrementals and restores work alike on both types."""

import posixpath

from app.dedup.chunker import DEFAULT_AVG_SIZE, DEFAULT_MAX_SIZE, DEFAULT_MIN_SIZE, \
    DEFAULT_NORMALIZATION, validate_sizes
from app.errors import ValidationError

TYPE = "dedup"
DESCRIPTION = ("Backup data cut into content-defined chunks, compressed and stored once: far "
               "less space when backups repeat the same data, and with client-side "
               "deduplication only new chunks cross the network.")
NEEDS_PATH = True

# Recipes live next to the chunk store under the storage path; the store's own folders are
# containers/ and index/.
IMAGE_DIR = "images"

MODES = ("server", "client")
HOST_MODES = ("policy",) + MODES

# File systems a deduplication pool should not live on: random reads of containers and the
# index's locks over a network file system are slow and, for locks, not always reliable.
WARN_CLASSES = {"network"}


def image_paths(volume, client, image_id):
    """(partial, final) path of an image's recipe. The partial name starts with a dot so that
    nobody mistakes it for a committed image."""
    d = posixpath.join(volume, IMAGE_DIR, client)
    return (posixpath.join(d, f".{image_id}.recipe.partial"),
            posixpath.join(d, f"{image_id}.recipe"))


def choose_volume(volume_stats, high_water, images_per_volume=None):
    """A dedup pool has its one volume, the storage path: usable unless it is unavailable or
    above the high-water mark."""
    from plugins.storage import advanced_disk
    return advanced_disk.choose_volume(volume_stats, high_water, images_per_volume)


def default_options():
    return {"min_size": DEFAULT_MIN_SIZE, "avg_size": DEFAULT_AVG_SIZE,
            "max_size": DEFAULT_MAX_SIZE, "normalization": DEFAULT_NORMALIZATION,
            "encrypted": False}


def check_options(options):
    """The storage server's options, completed with the defaults and validated. Chunk sizes are
    fixed when the pool is created: other sizes would cut the same data differently and nothing
    would deduplicate against what is stored."""
    out = default_options()
    unknown = set(options or {}) - set(out)
    if unknown:
        raise ValidationError(f"unknown dedup option(s): {', '.join(sorted(unknown))}",
                              hint=f"known options: {', '.join(out)}")
    out.update({k: v for k, v in (options or {}).items() if v is not None})
    validate_sizes(out["min_size"], out["avg_size"], out["max_size"], out["normalization"])
    out["encrypted"] = bool(out["encrypted"])
    return out


def chunk_params(options):
    o = check_options(options)
    return {k: o[k] for k in ("min_size", "avg_size", "max_size", "normalization")}


def check_mode(mode, *, host=False):
    allowed = HOST_MODES if host else MODES
    if mode not in allowed:
        raise ValidationError(
            f"deduplication mode {mode!r} is unknown",
            hint="choose server (the client sends a plain stream; the storage server chunks "
                 "it), client (the client chunks and sends only chunks the pool lacks)"
                 + (" or policy (as the policy says)" if host else ""))
    return mode


def effective_mode(policy_mode, host_mode):
    """Where chunking happens for one client of a policy: a client's own setting wins."""
    if host_mode and host_mode != "policy":
        return host_mode
    return policy_mode or "server"


def path_warning(filesystem):
    """A warning for a storage path on a file system a deduplication pool should not use, or
    None. `filesystem`: the agent's description of the path's file system (type, class)."""
    if not filesystem:
        return None
    if filesystem.get("class") in WARN_CLASSES:
        return (f"the storage path is on {filesystem.get('type')} (a network file system, "
                f"mounted from {filesystem.get('device')}): a deduplication pool reads its "
                "containers at random and locks its index, which is slow and not always safe "
                "over NFS or CIFS. Prefer a local or parallel file system such as GPFS.")
    return None
