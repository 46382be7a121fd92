"""`cairn catalog check`: whether the catalog can be trusted, and what to do where it cannot.

It reads CAIRN_HOME only (the catalog file and the file indexes beside it, plus the image
files of pools on this machine) and contacts no host. It opens the catalog without the
master, so that it also reports on a file the master refuses to open, and it writes nothing.

What it checks:

- sqlite's own view: `PRAGMA integrity_check` (pages, b-trees, indexes) and
  `PRAGMA foreign_key_check`, and that the schema version is one this Cairn knows;
- every image's file index (CAIRN_HOME/indexes/ID.cidx): present, readable and decodable to
  its last entry (header, trailer, every directory record and block with its CRC);
- the references between images: an image that reads data from another (an incremental's
  base, the streams of a multi-stream backup) finds it in the catalog;
- the image file of an image whose pool is on this machine exists.

Each problem comes with its fix. Index files that no image uses are listed as notes: an
interrupted backup leaves one, and a running backup writes its index before it records the
image."""

import json
import os
import pathlib
import sqlite3

from app import shared_volumes
from app.catalog_index import IndexReader, check_index, rebuild_command
from app.store.db import DAMAGED_HINT, MIGRATIONS, CatalogError

#: problems sqlite's integrity check lists at most
MAX_SQLITE_PROBLEMS = 100

RESTORE_COPY = ("stop every Cairn console and master, then put back a copy of catalog.db "
                "(the copy made before a schema upgrade is catalog.db.bak-vN beside it), or "
                "recover the newest catalog backup (`cairn catalog recover --from POOL "
                "--passphrase-file F` into an empty state directory); without either, "
                "`sqlite3 catalog.db .recover | sqlite3 recovered.db` saves "
                "what can be read, to be checked again before it replaces catalog.db")


def check_not_truncated(home):
    """Refuses to start on a catalog file of 0 bytes beside file indexes: sqlite would take it
    for a new, empty catalog and every image the indexes stand for would be forgotten. (A
    missing catalog.db is a deliberate fresh start.)"""
    if _empty_beside_indexes(home):
        raise CatalogError(
            f"the catalog {home.catalog} is empty (0 bytes) while {home.indexes} holds "
            f"{_indexes_text(home)}: it was truncated",
            hint=DAMAGED_HINT + "; to start an empty catalog on purpose, move catalog.db "
                                "away first")


def _index_files(home):
    try:
        return [n for n in os.listdir(home.indexes) if n.endswith(".cidx")]
    except OSError:
        return []


def _indexes_text(home):
    n = len(_index_files(home))
    return f"{n} image file index" + ("" if n == 1 else "es")


def _empty_beside_indexes(home):
    try:
        return os.path.getsize(home.catalog) == 0 and bool(_index_files(home))
    except OSError:
        return False


class _Report:
    def __init__(self, home):
        self.home = home
        self.problems = []
        self.notes = []
        self.checked = {"sqlite_integrity": False, "foreign_keys": False, "images": 0,
                        "indexes": 0, "index_entries": 0, "image_files": 0}

    def problem(self, what, fix, image=None):
        self.problems.append({"image": image, "problem": what, "fix": fix})

    def note(self, what, fix=None):
        self.notes.append({"note": what, "fix": fix})

    def doc(self):
        return {"catalog": self.home.catalog, "ok": not self.problems,
                "problems": self.problems, "notes": self.notes, "checked": self.checked}


def check_catalog(home):
    """The report: {"catalog", "ok", "problems": [{"image", "problem", "fix"}], "notes",
    "checked"}. `home` is an app.paths.Home."""
    r = _Report(home)
    path = home.catalog
    if not os.path.exists(path):
        r.problem(f"there is no catalog at {path}",
                  "point --home or CAIRN_HOME at the directory that holds catalog.db")
        return r.doc()
    if _empty_beside_indexes(home):
        r.problem(f"the catalog {path} is empty (0 bytes) while {home.indexes} holds "
                  f"{_indexes_text(home)}: it was truncated", RESTORE_COPY)
        return r.doc()
    try:
        # read-only: the check changes nothing, not even by checkpointing the log on close
        conn = sqlite3.connect(pathlib.Path(path).as_uri() + "?mode=ro", uri=True, timeout=30,
                               isolation_level=None)
    except sqlite3.Error as e:
        r.problem(f"cannot open the catalog {path}: {e}",
                  "check that this user can read it and its directory")
        return r.doc()
    readable = True
    try:
        readable = _sqlite_checks(conn, r)
        # Cairn's own checks also where sqlite found damage: the images may still be read.
        images = _images(conn, r, report=readable)
        if images is None:
            return r.doc()
        local_hosts = _local_hosts(conn, r)
        _check_pool_directories(conn, r)
    except sqlite3.Error as e:
        if readable:
            r.problem(f"the catalog {path} cannot be read: {e}", RESTORE_COPY)
        return r.doc()
    finally:
        conn.close()
    _check_references(images, r)
    for img in images:
        _check_index(home, img, r)
        _check_image_file(img, local_hosts, r)
    known = {f"{img['id']}.cidx" for img in images}
    for name in sorted(_index_files(home)):
        if name not in known:
            r.note(f"the index file {os.path.join(home.indexes, name)} belongs to no image in "
                   "the catalog (left by an interrupted backup, or a backup that is still "
                   "running)", "remove it once no backup runs")
    return r.doc()


def _sqlite_checks(conn, r):
    """sqlite's integrity and foreign key checks and the schema version; False when sqlite
    could not run them (the damage was reported)."""
    path = r.home.catalog
    try:
        rows = [row[0] for row in conn.execute(
            f"PRAGMA integrity_check({MAX_SQLITE_PROBLEMS})")]
    except sqlite3.Error as e:
        r.problem(f"the catalog {path} is damaged beyond sqlite's integrity check: {e}",
                  RESTORE_COPY)
        return False
    r.checked["sqlite_integrity"] = True
    if rows != ["ok"]:
        for text in rows:
            r.problem(f"sqlite integrity check of {path}: {text}", RESTORE_COPY)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            r.problem(f"the catalog {path} has schema version {version}, newer than this Cairn "
                      f"knows ({len(MIGRATIONS)})", "use the newer Cairn that wrote it")
        elif version < len(MIGRATIONS):
            r.note(f"the catalog {path} has schema version {version}; this Cairn upgrades it to "
                   f"{len(MIGRATIONS)} when it next opens it (keeping a copy)")
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
    except sqlite3.Error as e:
        r.problem(f"the catalog {path} cannot be read: {e}", RESTORE_COPY)
        return False
    r.checked["foreign_keys"] = True
    for table, rowid, parent, _ in fk[:MAX_SQLITE_PROBLEMS]:
        r.problem(f"row {rowid} of table {table} refers to a row of {parent} that does not "
                  "exist", RESTORE_COPY)
    return True


def _images(conn, r, report=True):
    """The catalog's images, or None when they cannot be read (reported unless the damage
    was already)."""
    try:
        rows = conn.execute("SELECT * FROM images ORDER BY created, id").fetchall()
        names = [d[0] for d in conn.execute("SELECT * FROM images LIMIT 0").description]
        deps = conn.execute("SELECT image_id, depends_on FROM image_deps").fetchall()
    except sqlite3.Error as e:
        if report:
            r.problem(f"the images of the catalog {r.home.catalog} cannot be read: {e}",
                      RESTORE_COPY)
        return None
    images = []
    for row in rows:
        img = dict(zip(names, row))
        try:
            img["sources"] = json.loads(img.get("sources") or "[]")
        except ValueError:
            r.problem(f"image {img['id']}: its list of source images is not readable",
                      RESTORE_COPY, image=img["id"])
            img["sources"] = []
        img["depends_on"] = sorted({d for i, d in deps if i == img["id"]})
        images.append(img)
    r.checked["images"] = len(images)
    return images


def _check_pool_directories(conn, r):
    """Pools of one host in one directory or one inside another (made before such pools
    were refused): each sees the other's files as its own."""
    for a, rel, b in shared_volumes.overlaps(conn):
        r.note(f"on host {a['host']}, {a['what']} {rel} {b['what']}: each pool sees the "
               "other's files (a cleanup or import of one would take the other's images)",
               "make a new pool in a directory of its own beside the other, move the "
               "policies' storage units to it, and let the old pool's images expire; do not "
               "run a cleanup or import of either pool meanwhile")


def _local_hosts(conn, r):
    try:
        return {row[0] for row in conn.execute("SELECT name FROM hosts WHERE kind='local'")}
    except sqlite3.Error:
        return set()    # image files are then not looked for; sqlite's damage is reported


def _check_references(images, r):
    ids = {img["id"] for img in images}
    for img in images:
        wanted = set(img["sources"]) | set(img["depends_on"])
        if img.get("base_image"):
            wanted.add(img["base_image"])
        for other in sorted(wanted - ids):
            r.problem(f"image {img['id']} reads data from image {other}, which is not in the "
                      f"catalog: files of {img['id']} kept in {other} cannot be restored",
                      f"restore what can be restored from {img['id']}, then expire it "
                      f"(`cairn images expire {img['id']}`); if {other} should exist, put "
                      "back a copy of catalog.db", image=img["id"])
        part_of = img.get("part_of")
        if part_of and part_of not in ids:
            r.problem(f"image {img['id']} is a stream of image {part_of}, which is not in the "
                      "catalog", f"expire it: `cairn images expire {img['id']}`",
                      image=img["id"])


def _check_index(home, img, r):
    iid = img["id"]
    path = home.index_path(iid)
    fix = (f"rebuild it from the image: `{rebuild_command(iid)}`; until then the image "
           f"cannot be browsed or restored through Cairn")
    problems = check_index(path)  # reads every block back
    if problems:
        if not os.path.exists(path):
            r.problem(f"the file index of image {iid} is missing ({path})", fix, image=iid)
        elif not os.access(path, os.R_OK):
            r.problem(f"the file index of image {iid} cannot be read ({path})",
                      "check the file's permissions and the disk that holds it (dmesg); if "
                      "the file itself is bad, " + fix, image=iid)
        else:
            r.problem(f"the file index of image {iid} is damaged: {'; '.join(problems)} "
                      f"({path})", fix, image=iid)
        return
    with IndexReader(path) as idx:
        entries = idx.count()
    r.checked["indexes"] += 1
    r.checked["index_entries"] += entries


def _check_image_file(img, local_hosts, r):
    """The image's file on its pool, where the pool is on this machine (remote pools are
    checked by `cairn images verify`, which reads them back on their host)."""
    path = img.get("path")
    if not path or img.get("storage_host") not in local_hosts:
        return
    if os.path.isfile(path):
        r.checked["image_files"] += 1
        return
    iid = img["id"]
    r.problem(f"the image file of image {iid} is missing ({path} on {img['storage_host']})",
              f"if its volume is not mounted, mount it; otherwise the image is lost: expire "
              f"it (`cairn images expire {iid}`)", image=iid)
