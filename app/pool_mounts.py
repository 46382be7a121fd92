"""Whether a disk pool's volumes are on the file system the pool expects, as warnings: a
volume on a Storage Scale (GPFS) file system that is not mounted on the storage server's node
(scale_view.volume_warning, as the disk pool wizard says it), and a volume below the mount
point of a shared file system that other storage servers' pools use on their hosts while on
this host something else is there (the shared file system is not mounted here and backups
would fill the host's own disk).

These are warnings, never refusals: a file system may be mounted before backups run. They
read the storage server's host (one probe: its mount table and its cluster) and, for the
second kind, the hosts of the other storage servers whose pools are below the same top
directory; a host that cannot be read adds no warning."""

from app import scale_view as sv
from app.errors import CairnError
from app.shared_volumes import SHARED_CLASSES, claims, inside


def _rows(probe):
    """A host's file systems (its mount table) with its cluster's GPFS file systems marked
    (scale_view.mark_volumes)."""
    return sv.mark_volumes(probe.get("filesystems") or [], probe.get("storage_scale"),
                           probe.get("hostname"))


def _mounted(fs):
    g = fs.get("gpfs") or {}
    return bool(fs.get("mounted", True) or g.get("mounted_here"))


def _shared(fs):
    return bool(fs.get("gpfs")) or fs.get("class") in SHARED_CLASSES


def _fs_text(fs):
    g = fs.get("gpfs")
    if g:
        return f"GPFS file system {g['device']}"
    return f"the {fs.get('type') or 'shared'} file system"


def expected_mounts(others):
    """The shared file systems the other storage servers' pools are on, from what their
    hosts report: [{"mount_point", "fs", "pool", "server", "host"}]. others: [{"path",
    "pool", "server", "host", "rows"}], rows: that host's _rows()."""
    out = []
    for o in others:
        fs = sv.mount_of(o["path"], o["rows"])
        if fs is None or not _shared(fs) or not _mounted(fs) or fs["mount_point"] == "/":
            continue
        if any(e["mount_point"] == fs["mount_point"] for e in out):
            continue
        out.append({"mount_point": fs["mount_point"], "fs": fs, "pool": o["pool"],
                    "server": o["server"], "host": o["host"]})
    return out


def volume_warnings(volumes, host, rows, expected=()):
    """[text] for the volumes of a storage server on `host`, whose file systems are `rows`
    (_rows of its probe): GPFS file systems not mounted on its node, and shared file systems
    that other pools use (expected_mounts) but that are not what holds the volume here."""
    out = []
    for v in volumes:
        fs = sv.mount_of(v, rows)
        w = sv.volume_warning(fs, host)
        if w:
            if w not in out:
                out.append(w)
            continue
        for e in expected:
            if not inside(v, e["mount_point"]):
                continue
            # on the shared file system, or on one mounted below it on purpose
            if fs is not None and _mounted(fs) and inside(fs["mount_point"],
                                                          e["mount_point"]):
                continue
            here = (f"on {fs['mount_point']} ({fs.get('type') or 'unknown type'})"
                    if fs is not None and _mounted(fs) else "on no mounted file system")
            what = _fs_text(e["fs"])
            user = (f"disk pool {e['pool']!r} uses on host {e['host']} (storage server "
                    f"{e['server']!r})" if e["pool"] else
                    f"storage server {e['server']!r} uses on host {e['host']}")
            out.append(
                f"volume {v} on host {host} is {here}, not on {what} mounted at "
                f"{e['mount_point']}, which {user}: mount it on host {host} before using "
                "the volume for backups, or backups fill the host's own disk.")
    return out


def _family(db, volumes, host, pool=None):
    """The other hosts' pools whose volumes share a top directory with these volumes (where
    one shared file system would be mounted): {host: [claim]}."""
    tops = {v.split("/")[1] for v in volumes if v.count("/") >= 1 and v != "/"}
    out = {}
    for c in claims(db):
        if c["host"] == host or (pool is not None and c["pool"] == pool) or \
                c["path"] == "/":
            continue
        if c["path"].split("/")[1] in tops:
            out.setdefault(c["host"], []).append(c)
    return out


def host_rows(m, host, read=None):
    """The host's file systems with its cluster's GPFS file systems marked (_rows), read
    through the master `m`; None when the host cannot be read. read: {host: rows} of hosts
    read already, for several pools at once (each host is probed once)."""
    if read is not None and host in read:
        return read[host]
    try:
        rows = _rows(m.probe_host(host))
    except CairnError:
        rows = None
    if read is not None:
        read[host] = rows
    return rows


def on_shared(path, rows):
    """Whether path is where a shared file system of the host is, or belongs: a parallel or
    network mount, or a GPFS file system of its cluster (also while not mounted there, as
    it will be)."""
    fs = sv.mount_of(path, rows or [])
    return fs is not None and fs.get("mount_point") != "/" and _shared(fs)


def warnings(m, server, volumes, pool=None, rows=None, read=None):
    """The warnings for these volumes of storage server `server` (a new pool's, or pool
    `pool`'s own), reading the hosts through the master `m`; rows: the server's host's
    host_rows when read already; read: as for host_rows."""
    host = m.config.storage_server(server)["host"]
    rows = rows if rows is not None else host_rows(m, host, read)
    if rows is None:
        return []
    others = []
    for other_host, cs in _family(m.db, volumes, host, pool).items():
        other_rows = host_rows(m, other_host, read)
        if other_rows is not None:
            others += [dict(c, rows=other_rows) for c in cs]
    return volume_warnings(volumes, host, rows, expected_mounts(others))
