"""The image files of a disk pool as its storage server sees them, for finding files no catalog
image owns (orphans) and removing them. Both pool types name their files alike
(plugins/storage/*.image_paths): VOLUME/IMAGE_DIR/CLIENT/IMAGE_ID.tar or .recipe once
committed, VOLUME/IMAGE_DIR/CLIENT/.IMAGE_ID.tar.partial or .recipe.partial while written.

Ages are measured here, with this host's clock (now minus the file's modification time), so
the master compares them with its own durations without trusting the two clocks to agree."""

import os
import stat
import time

SUFFIXES = (".tar", ".recipe")
PARTIAL = ".partial"


def parse_name(name):
    """(image id, partial) of a pool file name, or None for a name Cairn does not make."""
    partial = name.startswith(".") and name.endswith(PARTIAL)
    stem = name[1:-len(PARTIAL)] if partial else name
    for suffix in SUFFIXES:
        if stem.endswith(suffix) and len(stem) > len(suffix) and not stem.startswith("."):
            return stem[:-len(suffix)], partial
    return None


def list_files(volumes, image_dir, now=None):
    """Every file under VOLUME/IMAGE_DIR/CLIENT/ of each volume: {"files": [{"path", "image"
    (None for a name Cairn does not make), "partial", "size", "age_s"}], "errors": [text]}."""
    now = time.time() if now is None else now
    files, errors = [], []
    for vol in volumes:
        base = os.path.join(vol, image_dir)
        try:
            clients = sorted(os.listdir(base))
        except FileNotFoundError:
            continue
        except OSError as e:
            errors.append(f"{base}: {e.strerror}")
            continue
        for client in clients:
            d = os.path.join(base, client)
            if os.path.islink(d):
                continue  # Cairn makes client folders, never links
            try:
                with os.scandir(d) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except NotADirectoryError:
                continue
            except OSError as e:
                errors.append(f"{d}: {e.strerror}")
                continue
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                parsed = parse_name(e.name)
                files.append({"path": e.path, "image": parsed[0] if parsed else None,
                              "partial": bool(parsed and parsed[1]), "size": st.st_size,
                              "age_s": round(now - st.st_mtime, 3)})
    return {"files": files, "errors": errors}


def remove_files(paths, volumes, image_dir, min_age_s, now=None):
    """Removes the given pool files, each only if it is a regular file Cairn names, directly
    in a client folder of one of the pool's volumes, and still older than min_age_s (a file
    written since the master looked is left). Returns {"removed": [paths], "skipped":
    [{"path", "why"}]}."""
    now = time.time() if now is None else now
    dirs = {os.path.normpath(os.path.join(v, image_dir)) for v in volumes}
    removed, skipped = [], []
    for given in paths:
        p = os.path.normpath(given)
        why = None
        if os.path.dirname(os.path.dirname(p)) not in dirs:
            why = "not in the pool's image folders"
        elif os.path.islink(os.path.dirname(p)):
            why = "its folder is a link"
        elif parse_name(os.path.basename(p)) is None:
            why = "not a file name Cairn makes"
        else:
            try:
                st = os.stat(p, follow_symlinks=False)
            except FileNotFoundError:
                why = "gone already"
            else:
                if not stat.S_ISREG(st.st_mode):
                    why = "not a regular file"
                elif now - st.st_mtime <= min_age_s:
                    why = "written to since it was listed"
        if why is None:
            try:
                os.unlink(p)
                removed.append(given)
                continue
            except OSError as e:
                why = e.strerror or str(e)
        skipped.append({"path": given, "why": why})
    return {"removed": removed, "skipped": skipped}
