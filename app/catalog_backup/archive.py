"""The catalog backup archive: one pax tar whose first member, manifest.json, says what the
archive is (format name and version), when and where it was made (time, master host, Cairn
version), what it holds (images and jobs in its catalog, the storage servers whose keys it
carries) and the size and sha256 of every other member; the escrow (escrow.py) that opens
its sealed keys travels in it too. The second member, manifest.mac, authenticates the
manifest's exact bytes (escrow.manifest_mac: a key only the passphrase or the master's own
catalog opens), and so, through the digests it lists, every member. A reader needs nothing
but the archive and the passphrase: not the catalog, not the pool's key, not Cairn's
storage engine; it checks the manifest's code before it keeps any member.

Members: catalog.db (sqlite's online backup of the catalog), known_hosts, indexes/ID.cidx
(the file index of every image in that catalog) and keys.json (the pool keys, each sealed
to the escrow). Their files are written 0600 wherever Cairn writes them.

File names: cairn-catalog-YYYYmmddTHHMMSSZ-JOB.tar once complete; written first under a
name starting with a dot and ending in .partial, so that a writer killed half-way leaves no
file that looks complete (find() skips them)."""

import calendar
import hashlib
import io
import json
import re
import tarfile
import time

from app import status as st
from app.errors import CairnError

FORMAT = "cairn-catalog-backup"
VERSION = 2  # 2: manifest.mac
FOLDER = "catalog-backups"
MANIFEST = "manifest.json"
MAC = "manifest.mac"
CATALOG = "catalog.db"
KNOWN_HOSTS = "known_hosts"
KEYS = "keys.json"
INDEX_DIR = "indexes"
_INDEX = re.compile(r"^indexes/[A-Za-z0-9_][A-Za-z0-9._-]*\.cidx$")
_NAME = re.compile(r"^cairn-catalog-(\d{8}T\d{6}Z)-(\d+)\.tar$")
_PARTIAL = re.compile(r"^\.cairn-catalog-(\d{8}T\d{6}Z)-(\d+)\.tar\.partial$")
_CHUNK = 1 << 20


def file_names(created, job_id):
    """(partial, final) file name of the archive a job writes at `created` (epoch)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(created))
    final = f"cairn-catalog-{stamp}-{job_id}.tar"
    return f".{final}.partial", final


def is_complete_name(name):
    return _NAME.match(name) is not None


def sort_key(name):
    """Newest last: by the time in the name, then the job."""
    m = _NAME.match(name)
    return (m.group(1), int(m.group(2)))


def made_at(name):
    """(epoch the name's time says, whether it is a partial name), or None for a name that
    is not a catalog backup's."""
    for pattern, partial in ((_NAME, False), (_PARTIAL, True)):
        m = pattern.match(name)
        if m:
            return calendar.timegm(time.strptime(m.group(1), "%Y%m%dT%H%M%SZ")), partial
    return None


def allowed_member(name):
    return name in (CATALOG, KNOWN_HOSTS, KEYS) or _INDEX.match(name) is not None


class Damaged(CairnError):
    status = st.IMAGE_DAMAGED


def sha256_of(path):
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(_CHUNK)
            if not b:
                return h.hexdigest(), size
            h.update(b)
            size += len(b)


class _Hashing(io.RawIOBase):
    """A file read through while its bytes are hashed: tarfile reads a member's bytes once."""

    def __init__(self, f):
        self.f = f
        self.h = hashlib.sha256()

    def readable(self):
        return True

    def read(self, n=-1):
        try:
            b = self.f.read(n)
        except OSError as e:
            raise _ReadFailed(e) from None  # not taken for a failed write by write()
        self.h.update(b)
        return b


class _ReadFailed(Exception):
    pass


def _info(name, size, mtime):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime, ti.type = size, 0o600, int(mtime), tarfile.REGTYPE
    return ti


def write(out, manifest, members, mac_of, is_cancelled=lambda: False):
    """Writes the archive to the file object `out`: the manifest first, its authentication
    code (mac_of(the manifest's bytes)), then `members` ([(name, path on this machine)]),
    whose sha256 and size the manifest already lists (taken by describe()). A member that
    changed since is refused: the archive would not match its own manifest."""
    listed = {m["name"]: m for m in manifest["members"]}
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tf:
        body = json.dumps(manifest, indent=1, sort_keys=True).encode()
        tf.addfile(_info(MANIFEST, len(body), manifest["created_epoch"]), io.BytesIO(body))
        mac = json.dumps({"algorithm": "hmac-sha256", "mac": mac_of(body)}).encode()
        tf.addfile(_info(MAC, len(mac), manifest["created_epoch"]), io.BytesIO(mac))
        for name, path in members:
            if is_cancelled():
                return False
            want = listed[name]
            with open(path, "rb") as f:
                src = _Hashing(f)
                try:
                    tf.addfile(_info(name, want["size"], manifest["created_epoch"]), src)
                except _ReadFailed as e:
                    raise CairnError(f"{path} cannot be read: {e.args[0]}",
                                     hint="run the catalog backup again",
                                     status_code=st.STORAGE_WRITE_FAILED) from None
                except OSError as e:
                    if e.errno is None:  # tarfile: the member ended before its size
                        raise CairnError(f"{path} changed while the catalog backup read it",
                                         hint="run the catalog backup again",
                                         status_code=st.STORAGE_WRITE_FAILED) from None
                    raise
            if src.h.hexdigest() != want["sha256"]:
                raise CairnError(f"{path} changed while the catalog backup read it",
                                 hint="run the catalog backup again",
                                 status_code=st.STORAGE_WRITE_FAILED)
    return True


def describe(members):
    """The manifest's entries of `members` ([(name, path)]): name, size, sha256."""
    out = []
    for name, path in members:
        digest, size = sha256_of(path)
        out.append({"name": name, "size": size, "sha256": digest})
    return out


# ---- reading ---------------------------------------------------------------------------------

def _damaged(path, why):
    return Damaged(f"the catalog backup {path} is damaged: {why}",
                   hint="nothing was restored; recover from an older catalog backup (move "
                        "this one out of the folder) or from another copy of it")


_SMALL = 1 << 20  # the manifest and its code: never near this


def _small_member(tf, path, name):
    ti = tf.next()
    if ti is None or ti.name != name or not ti.isfile() or ti.size > _SMALL:
        raise _damaged(path, f"it has no {name} where it belongs")
    return tf.extractfile(ti).read()


def read_manifest(tf, path):
    """(manifest, its exact bytes, its authentication code) of an open archive."""
    body = _small_member(tf, path, MANIFEST)
    try:
        manifest = json.loads(body)
    except ValueError:
        raise _damaged(path, f"{MANIFEST} is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _damaged(path, "it is not a Cairn catalog backup")
    if manifest.get("version") == 1:
        raise CairnError(f"the catalog backup {path} is of the first format, whose manifest "
                         "is not authenticated; it is not read any more",
                         hint="recover from a newer catalog backup (every catalog backup "
                              "made since is authenticated)",
                         status_code=st.INVALID_REQUEST)
    if manifest.get("version") != VERSION:
        raise CairnError(f"the catalog backup {path} has format version "
                         f"{manifest.get('version')}, which this Cairn does not read",
                         hint="recover with the Cairn version that wrote it, or newer",
                         status_code=st.INVALID_REQUEST)
    members = manifest.get("members")
    if not isinstance(members, list) or not all(
            isinstance(m, dict) and isinstance(m.get("name"), str) and allowed_member(m["name"])
            and isinstance(m.get("size"), int) and isinstance(m.get("sha256"), str)
            for m in members) or len({m["name"] for m in members}) != len(members):
        raise _damaged(path, "its manifest's member list is not valid")
    try:
        mac = json.loads(_small_member(tf, path, MAC))["mac"]
    except (ValueError, KeyError, TypeError):
        raise _damaged(path, f"{MAC} is not valid") from None
    return manifest, body, mac


def extract(f, path, authenticate, store):
    """Reads the archive in the open file `f` (found at `path`): authenticate(manifest,
    bytes, code) must accept the manifest before anything else is read; then every member's
    size and sha256 is checked against the manifest, and each good member's bytes go to
    store(name, chunks) (an iterator of bytes; the caller writes them, and forgets them if a
    later member turns out damaged). Returns the manifest. A damaged archive raises
    Damaged."""
    try:
        with tarfile.open(fileobj=f, mode="r:", format=tarfile.PAX_FORMAT) as tf:
            manifest, body, mac = read_manifest(tf, path)
            authenticate(manifest, body, mac)
            listed = {m["name"]: m for m in manifest["members"]}
            seen = set()
            while True:
                ti = tf.next()  # iterating tf would start again at the manifest
                if ti is None:
                    break
                want = listed.get(ti.name)
                if want is None or not ti.isfile() or ti.name in seen:
                    raise _damaged(path, f"it holds {ti.name!r}, which its manifest does not "
                                         "list")
                if ti.size != want["size"]:
                    raise _damaged(path, f"{ti.name} has {ti.size} bytes, its manifest says "
                                         f"{want['size']}")
                h = hashlib.sha256()
                f = tf.extractfile(ti)

                def chunks(f=f, h=h):
                    while True:
                        b = f.read(_CHUNK)
                        if not b:
                            return
                        h.update(b)
                        yield b
                store(ti.name, chunks())
                if h.hexdigest() != want["sha256"]:
                    raise _damaged(path, f"{ti.name} does not match its sha256 in the manifest")
                seen.add(ti.name)
            missing = sorted(set(listed) - seen)
            if missing:
                raise _damaged(path, f"it lacks {', '.join(missing[:5])}"
                                     + (" and more" if len(missing) > 5 else ""))
            return manifest
    except (tarfile.TarError, EOFError) as e:
        raise _damaged(path, f"it is not a complete tar file ({e})") from None
    except OSError as e:
        raise CairnError(f"the catalog backup {path} cannot be read: {e.strerror or e}",
                         status_code=st.IMAGE_DAMAGED) from None
