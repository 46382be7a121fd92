"""Which directories the disk pools claim, so that no two pools write into one directory or
one into another's: on one host always, and across hosts when the directory is on a shared
(parallel or network) file system, as when several storage servers write to one GPFS file
system, each into its own directory.

A pool's image files are named by the catalog's image ids, which one master hands out once,
so two pools in sibling directories can never write the same file; a pool whose volume were
the other's, or inside it, would see the other's images as its own (cleanup would remove
them, import would record them twice, a deduplicating pool's chunk store would be written
by two hosts at once). That is what is refused here.

Paths are compared as text, normalised: hosts of one Storage Scale cluster mount a file
system at the same mount point (its defaultMountPoint). A file system mounted at different
paths on different hosts is not seen as one here."""

from app.errors import ValidationError
from plugins.storage import registry

#: file system classes (plugins/filesystems/posix.classify) that other hosts may mount too
SHARED_CLASSES = ("parallel", "network")


def inside(path, parent):
    """Whether `path` is `parent` or below it (both normalised absolute paths)."""
    return path == parent or parent == "/" or path.startswith(parent.rstrip("/") + "/")


def relation(path, other):
    """'is the same directory as', 'is inside' or 'holds' when the two directories overlap, else None."""
    if path == other:
        return "is the same directory as"
    if inside(path, other):
        return "is inside"
    if inside(other, path):
        return "holds"
    return None


def is_shared(filesystem):
    """Whether a volume's file system (check_volumes' "filesystem") may be mounted by other
    hosts too; False when not known."""
    return bool(filesystem) and filesystem.get("class") in SHARED_CLASSES


def _rows(db, sql):
    # the catalog (app.store.db.Database), or a plain sqlite connection (the catalog check
    # reads the file read-only)
    return db.all(sql) if hasattr(db, "all") else db.execute(sql).fetchall()


def claims(db):
    """Every directory a pool writes to: [{"path", "host", "pool", "server", "what"}]: the
    volumes of every disk pool, and the storage path of each server whose type makes it (a
    deduplicating server's chunk store, also before its pool exists)."""
    out = [{"path": r[0], "pool": r[1], "server": r[2], "host": r[3], "type": r[4],
            "what": f"volume {r[0]} of disk pool {r[1]!r}"}
           for r in _rows(db, "SELECT v.path, d.name, s.name, h.name, s.type "
                              "FROM pool_volumes v "
                              "JOIN disk_pools d ON d.id=v.pool_id JOIN storage_servers s "
                              "ON s.id=d.server_id JOIN hosts h ON h.id=s.host_id "
                              "ORDER BY d.name, v.position")]
    seen = {(c["path"], c["server"]) for c in out}
    for path, server, type_, host in _rows(
            db, "SELECT s.path, s.name, s.type, h.name FROM storage_servers s JOIN hosts h "
                "ON h.id=s.host_id WHERE s.path IS NOT NULL ORDER BY s.name"):
        t = registry.get(type_)
        if (path, server) in seen or t is None or not t.makes_path:
            continue
        out.append({"path": path, "pool": None, "server": server, "host": host,
                    "type": type_, "what": f"storage path {path} of storage server {server!r}"})
    return out


def check(db, paths, host, *, shared=None, what="volume", server=None):
    """Refuses directories that overlap one another pool claims: on `host` always; on other
    hosts when shared[path] is true (the directory is on a shared file system; not given:
    not known, so only this host counts). server: the storage server the paths are for,
    whose own storage path its pool may take."""
    shared = shared or {}
    found = claims(db)
    for p in paths:
        for c in found:
            if c["pool"] is None and c["server"] == server:
                continue
            rel = relation(p, c["path"])
            if rel is None:
                continue
            same_host = c["host"] == host
            if not same_host and not shared.get(p):
                continue
            where = f"storage server {c['server']!r} on host {c['host']}"
            why = "" if same_host else (
                f"; {p} is on a shared file system, which host {c['host']} sees too")
            raise ValidationError(
                f"{what} {p} {rel} {c['what']} ({where}){why}",
                hint="give each disk pool its own directory beside the others', never one "
                     "inside another: e.g. /gpfs/fs1/cairn/ss2 beside /gpfs/fs1/cairn/ss1")


def overlaps(db):
    """Pools of one host whose directories overlap, as made before they were refused:
    [(claim, relation, other claim)], each pair once."""
    found = claims(db)
    out = []
    for i, a in enumerate(found):
        for b in found[i + 1:]:
            if a["host"] != b["host"] or (a["server"] == b["server"] and
                                          (a["pool"] is None or b["pool"] is None)):
                continue
            rel = relation(a["path"], b["path"])
            if rel:
                out.append((a, rel, b))
    return out


def _folder(claim):
    """The directory a pool's files are in: a one-pool type's whole storage path, another's
    image folder under the volume; None for a type this version does not know."""
    t = registry.get(claim["type"])
    if t is None:
        return None
    return claim["path"] if t.capabilities.one_pool else \
        claim["path"].rstrip("/") + "/" + t.image_dir


def _whose(claim):
    return (f"disk pool {claim['pool']!r}" if claim["pool"] else
            f"storage server {claim['server']!r}") + f" (host {claim['host']})"


def check_restore_target(db, target):
    """Refuses a restore into a pool's files (on any host: the folder's name is the pool
    type's own): the pool would take the restored files for its own, and a cleanup of it
    would remove them."""
    for c in claims(db):
        folder = _folder(c)
        if folder and inside(target, folder):
            raise ValidationError(
                f"restore target {target} is inside the images of {_whose(c)}: the pool "
                "would take the restored files for its own, and its cleanup would remove "
                "them",
                hint="restore to a directory outside every disk pool")


def pool_folders(db):
    """{folder: why} of every pool's files (_folder of each claim), for what backups leave
    out and the warnings about selections (app/backup_excludes.py)."""
    out = {}
    for c in claims(db):
        path = _folder(c)
        if path:
            out.setdefault(path, f"the images of {_whose(c)}")
    return out


def pool_excludes(db, selections):
    """{directory: why} of every pool's files below a backup's selections, on any host:
    where the selection is on a shared file system they are other storage servers' images
    (a backup of them would grow with every night), elsewhere another pool of the client's
    host. A type that holds one pool keeps all of its storage path; another, the image
    folder of each volume. (A client's own directory that has the very path of another
    host's pool folder, on a file system not shared, is left out too: the job log says so
    when the walk meets it.)"""
    out = {}
    for c in claims(db):
        path = _folder(c)
        if path and any(inside(path, s) for s in selections or [] if isinstance(s, str)):
            out.setdefault(path, f"the images of {_whose(c)}")
    return out
