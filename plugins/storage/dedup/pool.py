"""Whole-pool work of a deduplication pool, run by the storage server's agent: which chunks the
pool's images still reference (for space reclaim), and reading images or the whole pool back
to find damage, reported per image as byte ranges of its stream (the master turns those into
file names with the catalog index).

Layout under the pool root: the chunk store's containers/ and index/
(plugins/storage/dedup/store.py) and images/CLIENT/IMAGE.recipe, with .IMAGE.recipe.partial
while a backup is being committed."""

import os
import time

from plugins.storage.dedup.recipe import RecipeDamaged, read_recipe
from plugins.storage.dedup.store import ChunkDamaged, ChunkNotFound, Damage
from app.errors import Canceled
from app.formats import private
from app.formats.poolfiles import list_files, parse_name

IMAGE_DIR = "images"
RECIPE_SUFFIX = ".recipe"
PARTIAL_SUFFIX = ".recipe.partial"
# A partial recipe older than this belongs to a backup whose master never came back to commit
# or abort it; reclaim removes it instead of keeping its chunks forever.
STALE_PARTIAL_S = 7 * 24 * 3600.0
PROGRESS_EVERY = 0.5


def recipes(root, partial=False):
    """Paths of the pool's committed recipes (and with partial=True, of the partial ones)."""
    base = os.path.join(root, IMAGE_DIR)
    out = []
    try:
        clients = sorted(os.listdir(base))
    except FileNotFoundError:
        return out
    for client in clients:
        d = os.path.join(base, client)
        try:
            names = sorted(os.listdir(d))
        except (NotADirectoryError, FileNotFoundError):
            continue
        for name in names:
            if name.endswith(PARTIAL_SUFFIX):
                if partial:
                    out.append(os.path.join(d, name))
            elif name.endswith(RECIPE_SUFFIX):
                out.append(os.path.join(d, name))
    return out


def live_fingerprints(root, now=None, known=None, min_age_s=None, orphans=None):
    """Every fingerprint a committed recipe or a complete partial recipe references. Called
    by reclaim with the pool locked, so no backup adds references meanwhile. A committed
    recipe that cannot be read stops the reclaim: its chunks would otherwise be removed.

    known (image ids the catalog holds or is committing) and min_age_s (the age of the oldest
    running backup, and some): a recipe, committed or partial, of an image the catalog does
    not know and older than that is an orphan (a backup killed before the catalog recorded
    it): it is removed and its path added to `orphans`, and its chunks are not kept."""
    now = time.time() if now is None else now
    known = None if known is None else set(known)
    live = set()
    removed = []
    for path in recipes(root, partial=True):
        if known is not None and min_age_s is not None:
            parsed = parse_name(os.path.basename(path))
            if parsed and parsed[0] not in known:
                try:
                    age = now - os.stat(path).st_mtime
                except FileNotFoundError:
                    continue
                if age > min_age_s:
                    os.unlink(path)
                    if orphans is not None:
                        orphans.append(path)
                    continue
        if path.endswith(PARTIAL_SUFFIX):
            try:
                age = now - os.stat(path).st_mtime
            except FileNotFoundError:
                continue
            try:
                r = read_recipe(path)
            except RecipeDamaged:
                # a backup that died while writing its recipe: never committed, references
                # nothing (its session lock would have kept reclaim out while it lived)
                os.unlink(path)
                removed.append(path)
                continue
            if age > STALE_PARTIAL_S:
                os.unlink(path)
                removed.append(path)
                continue
            live |= r.fingerprints()
        else:
            live |= read_recipe(path).fingerprints()
    return live, removed


def _ranges(recipe, bad, reasons):
    return [{"offset": off, "length": ln, "fingerprint": fp.hex(), "reason": reasons.get(fp)}
            for off, ln, fp in recipe.ranges_of(bad)]


def _missing(fp, notes):
    note = notes.get(fp)
    if note is None:
        return "the chunk is missing from the pool"
    return (f"set aside as damaged ({note['reason']}; {note['container']} at byte "
            f"{note['offset']}), not stored again since")


def verify_images(store, paths, *, emit=None, is_cancelled=None, session=None, pace=None):
    """Reads every chunk of the given recipes back and checks it (crc32, decoding, SHA-256).
    Damaged chunks are set aside (store.set_aside), so the next backup of their data stores
    them again. Returns {"images": [{"path", "damage": [{"offset", "length", "fingerprint",
    "reason"}], "error"}], "chunks", "bytes", "damaged_chunks", "set_aside"}. With a
    `session` of the store, chunks are read through it (containers kept open)."""
    get = (session or store).get
    checked = {}  # fingerprint -> reason or None
    found = []  # Damage of the records read
    notes = store.damage_notes()
    out = {"images": [], "chunks": 0, "bytes": 0, "damaged_chunks": 0, "set_aside": 0}
    last = 0.0
    for path in paths:
        try:
            r = read_recipe(path)
        except RecipeDamaged as e:  # a missing recipe too
            out["images"].append({"path": path, "damage": [], "error": str(e)})
            continue
        bad = set()
        reasons = {}
        for fp in r.fingerprints():
            if is_cancelled is not None and is_cancelled():
                raise Canceled()
            if fp not in checked:
                try:
                    data = get(fp)
                    checked[fp] = None
                    out["chunks"] += 1
                    out["bytes"] += len(data)
                    if pace is not None:
                        pace(out["bytes"])
                except ChunkNotFound:
                    checked[fp] = _missing(fp, notes)
                except ChunkDamaged as e:
                    checked[fp] = str(e)
                    found.append(Damage(fp, e.container, e.offset, e.reason or str(e)))
                if checked[fp] is not None:
                    out["damaged_chunks"] += 1
            if checked[fp] is not None:
                bad.add(fp)
                reasons[fp] = checked[fp]
            if emit is not None and time.monotonic() - last > PROGRESS_EVERY:
                last = time.monotonic()
                emit("progress", {"bytes": out["bytes"], "files": out["chunks"]})
        out["images"].append({"path": path, "damage": _ranges(r, bad, reasons) if bad else [],
                              "error": None})
    out["set_aside"] = len(store.set_aside(found))
    return out


def verify_pool(store, root, *, emit=None, is_cancelled=None, pace=None):
    """Reads every container of the pool and checks every record, then names the images that
    reference a damaged or missing chunk; the damaged chunks are set aside as by
    verify_images. Returns {"containers", "damage": [container findings], "images": [as
    verify_images], "damaged_chunks", "set_aside"}."""
    findings = []
    found = []  # Damage of the records images use, for set_aside
    bad = {}
    broken_from = {}  # container path -> offset from which no record can be found
    for d in store.verify(pace=pace):
        if is_cancelled is not None and is_cancelled():
            raise Canceled()
        findings.append({"container": d.container, "offset": d.offset,
                         "fingerprint": d.fingerprint.hex() if d.fingerprint else None,
                         "reason": d.reason})
        if d.fingerprint is not None:
            # keyed by place: a damaged copy the index does not point at harms no image
            bad[(d.container, d.offset)] = d.reason
        if d.fingerprint is None or "torn" in d.reason:
            broken_from[d.container] = min(d.offset, broken_from.get(d.container, d.offset))
        if emit is not None:
            emit("log", {"level": "warning", "message": f"damaged: {d.container} at byte "
                                                        f"{d.offset}: {d.reason}"})
    usage = store.stats()
    # every image file, with its age: the master names those no catalog image owns
    listing = list_files([root], IMAGE_DIR)
    out = {"containers": usage["containers"], "bytes": usage["container_bytes"],
           "damage": findings, "images": [], "damaged_chunks": 0, "set_aside": 0,
           "files": listing["files"], "file_errors": listing["errors"]}
    notes = store.damage_notes()
    present = set(store.committed_containers())  # once, not a stat per chunk reference
    paths = recipes(root)
    for path in paths:
        try:
            r = read_recipe(path)
        except RecipeDamaged as e:
            out["images"].append({"path": path, "damage": [], "error": str(e)})
            continue
        hit = set()
        reasons = {}
        for fp in r.fingerprints():
            try:
                loc = store.locate(fp)
            except ChunkNotFound:
                hit.add(fp)
                reasons[fp] = _missing(fp, notes)
                continue
            cpath = store.container_path(loc.container)
            if (cpath, loc.offset) in bad:
                why = bad[(cpath, loc.offset)]
                reasons[fp] = f"{why} ({cpath} at byte {loc.offset})"
            elif cpath in broken_from and loc.offset >= broken_from[cpath]:
                why = reasons[fp] = (f"its container {cpath} is unreadable from byte "
                                     f"{broken_from[cpath]}")
            elif loc.container not in present:
                why = reasons[fp] = f"its container {cpath} is missing"
            else:
                continue
            hit.add(fp)
            found.append(Damage(fp, cpath, loc.offset, why))
        out["damaged_chunks"] += len(hit)
        out["images"].append({"path": path, "damage": _ranges(r, hit, reasons) if hit else [],
                              "error": None})
    out["set_aside"] = len(store.set_aside(found))
    return out


def check_modes(store, root, is_cancelled=None):
    """What in the pool is or was open to other users: what opens of the pool found (and made
    private) since the last verify, this one's included, then every folder and file now,
    each made private here. [{"path", "mode" found, "error" when it could not be changed}]."""
    found = store.take_loosened()
    private.walk(root, found, is_cancelled)
    seen, out = set(), []
    for f in found:
        if f["path"] not in seen:
            seen.add(f["path"])
            out.append({k: f.get(k) for k in ("path", "mode", "error")})
    return out


def check_recipe_modes(paths):
    """The recipes among `paths` that were open to other users, made private."""
    found = []
    for path in paths:
        private.private_file(path, changed=found)
    return found
