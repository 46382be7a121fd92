"""AdvancedDisk: backup images as plain pax tar files on the mounted file systems of a
storage server (for example a GPFS mount). The image format is documented in
docs/image-format.md; the data movers live in the agent (app/agent/archiver.py).

Master-side decisions only: where an image goes, whether the pool may take it."""

import posixpath

TYPE = "advanced-disk"
DESCRIPTION = ("Backup images stored as plain files on the storage server's mounted file "
               "systems: simple, fast, readable with standard tools.")
NEEDS_PATH = False

IMAGE_DIR = "cairn-images"


def image_paths(volume, client, image_id):
    """(partial path, final path) of an image on a volume. The partial name starts with a
    dot so that nobody mistakes it for a committed image."""
    d = posixpath.join(volume, IMAGE_DIR, client)
    return posixpath.join(d, f".{image_id}.tar.partial"), posixpath.join(d, f"{image_id}.tar")


SPREAD_SLACK = 1 << 30


def choose_volume(volume_stats, high_water, images_per_volume=None):
    """Pick a volume below the high-water mark: the one with the most free space, and among
    volumes within a GiB of that (several directories of one file system, say) the one
    holding the fewest images, so that images spread over the pool.

    volume_stats: list of dicts {"path", "ok", "size", "free", "error"} from the agent.
    Returns (volume path, None) or (None, reason)."""
    images_per_volume = images_per_volume or {}
    usable = []
    reasons = []
    for v in volume_stats:
        if not v.get("ok"):
            reasons.append(f"{v['path']}: {v.get('error') or 'unavailable'}")
            continue
        used_pct = 100.0 * (v["size"] - v["free"]) / v["size"] if v["size"] else 100.0
        if used_pct >= high_water:
            reasons.append(f"{v['path']} is {used_pct:.0f}% full (high-water mark {high_water}%)")
            continue
        usable.append(v)
    if not usable:
        return None, "; ".join(reasons) or "the disk pool has no volumes"
    most = max(v["free"] for v in usable)
    close = [v for v in usable if most - v["free"] <= SPREAD_SLACK]
    best = min(close, key=lambda v: (images_per_volume.get(v["path"], 0), -v["free"]))
    return best["path"], None
