"""Recovering a master from a catalog backup (`cairn catalog recover`): on an empty (or not
yet existing) CAIRN_HOME, the newest complete archive under a folder is checked member by
member against its manifest and restored: the catalog, its file indexes, known_hosts and the
pool keys, unsealed with the passphrase. The new home is built in a private folder beside
it and moved into place only when everything checked out: a damaged archive or a wrong
passphrase leaves the home as it was.

This runs without a master (there is no catalog to open yet) and reads nothing but the
archive: not the pool's key, not its storage engine.

Whoever recovers a master trusts what it restores (the hosts it reaches, their host keys, the
pool keys), so an archive is read only when nobody else could have put it there: the folder
and every folder above it belong to root or to the user recovering and are writable by no one
else (unless sticky, as /tmp), and so does the archive; its manifest must carry the code only
the passphrase opens (archive.py), and its name must be the one its manifest gives it (an
older archive renamed to look newest is refused)."""

import os
import re
import shutil
import sqlite3
import stat
import tempfile
import time

from app import status as st, timeutil
from app.audit import AuditLog
from app.catalog_backup import archive, escrow
from app.errors import CairnError, ValidationError
from app.formats import private
from app.formats.durable import sync_dir
from app.store.db import Database
from plugins.storage.cloud import keys as bucket_keys

_SERVER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


def find(from_dir):
    """The complete catalog backups under `from_dir` (a pool's path, or its catalog-backups
    folder), newest first. Partial files (a backup killed while writing) are skipped."""
    sub = os.path.join(from_dir, archive.FOLDER)
    folder = sub if os.path.isdir(sub) else from_dir
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        raise ValidationError(f"{from_dir} does not exist",
                              hint="--from names the pool's path (or its catalog-backups "
                                   "folder) as this machine sees it") from None
    except OSError as e:
        raise ValidationError(f"{folder} cannot be read: {e.strerror}") from None
    check_trusted_folder(folder)
    found = sorted((n for n in names if archive.is_complete_name(n)
                    and os.path.isfile(os.path.join(folder, n))),
                   key=archive.sort_key, reverse=True)
    if not found:
        raise ValidationError(f"there is no catalog backup in {folder}",
                              hint="catalog backups are in the folder catalog-backups at a "
                                   "pool's path; files ending in .partial were never "
                                   "completed")
    return [os.path.join(folder, n) for n in found]


def _trusted_owner(uid):
    return uid in (0, os.geteuid())


def _owner_name(uid):
    import pwd  # the name only for the message
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


UNTRUSTED_HINT = ("copy the archive into a folder of your own that only you can write "
                   "(cp, then chown and chmod 0600 it) after checking where it came from, "
                   "and give that folder to --from")


def check_trusted_folder(folder):
    """Refuses a folder that someone other than root or this user could have put an archive
    into: it, or any folder above it, owned by another user, or writable by group or others
    without the sticky bit."""
    path = os.path.realpath(folder)
    while True:
        try:
            s = os.stat(path)
        except OSError as e:
            raise ValidationError(f"{path} cannot be read: {e.strerror}") from None
        if not _trusted_owner(s.st_uid):
            raise CairnError(f"{path} belongs to {_owner_name(s.st_uid)}, who could have put "
                             "a catalog backup there; it is not read",
                             hint=UNTRUSTED_HINT, status_code=st.INVALID_REQUEST)
        if s.st_mode & 0o022 and not s.st_mode & stat.S_ISVTX:
            raise CairnError(f"{path} can be written by other users, who could have put a "
                             "catalog backup there; it is not read",
                             hint=UNTRUSTED_HINT, status_code=st.INVALID_REQUEST)
        if path == "/":
            return
        path = os.path.dirname(path)


def open_trusted(path):
    """The archive at `path` opened for reading, if it is a regular file (not a link) of root
    or this user that no one else can write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise CairnError(f"the catalog backup {path} cannot be opened: {e.strerror}",
                         status_code=st.IMAGE_DAMAGED) from None
    s = os.fstat(fd)
    why = None
    if not stat.S_ISREG(s.st_mode):
        why = "it is not a regular file"
    elif not _trusted_owner(s.st_uid):
        why = f"it belongs to {_owner_name(s.st_uid)}"
    elif s.st_mode & 0o022:
        why = "other users can write it"
    if why:
        os.close(fd)
        raise CairnError(f"the catalog backup {path} is not read: {why}",
                         hint=UNTRUSTED_HINT, status_code=st.INVALID_REQUEST)
    return os.fdopen(fd, "rb")


def _authenticator(path, passphrase, keys):
    """What checks an archive's manifest before any member is kept: the passphrase opens its
    escrow, the escrow's manifest key accepts its code, and its name is the one the manifest
    gives. The escrow's private key goes into `keys`."""
    def authenticate(manifest, body, mac):
        private, mac_key = escrow.open_keys(escrow.check(manifest.get("escrow") or {}),
                                            passphrase)
        if not escrow.mac_matches(mac_key, body, mac):
            raise archive.Damaged(
                f"the catalog backup {path} is not authentic: its manifest was altered or "
                "made without this passphrase's key",
                hint="nothing was restored; recover from another catalog backup, and find out "
                     "who could write this one")
        created, job_id = manifest.get("created_epoch"), manifest.get("job_id")
        named = archive.file_names(created, job_id)[1] \
            if isinstance(created, int) and isinstance(job_id, int) else None
        if named != os.path.basename(path):
            raise archive.Damaged(
                f"the catalog backup {path} was renamed: its manifest names it {named}",
                hint="nothing was restored; an older catalog backup under a newer name is not "
                     "taken for the newest")
        keys.update(private=private, mac=mac_key)
    return authenticate


def check_empty(root):
    """Refuses a home that holds anything: a recovery never mixes with a master's state."""
    if not os.path.lexists(root):
        return
    if not os.path.isdir(root) or os.path.islink(root):
        raise ValidationError(f"{root} is not a folder",
                              hint="name a new, empty CAIRN_HOME (or --home) to recover into")
    names = sorted(os.listdir(root))
    if names:
        shown = ", ".join(names[:5]) + (" and more" if len(names) > 5 else "")
        raise ValidationError(
            f"the state directory {root} is not empty (it holds {shown})",
            hint="recover into a new, empty CAIRN_HOME (or --home), or move this one away "
                 "first; a recovery never overwrites a master's state")


class _Staging:
    """The new home, built in a private folder beside it."""

    def __init__(self, root):
        self.root = root
        parent = os.path.dirname(root)
        os.makedirs(parent, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix=".cairn-recover-", dir=parent)
        self.keys_file = None

    def store(self, name, chunks):
        if name == archive.KEYS:
            self.keys_file = b"".join(chunks)  # small: unsealed once the archive checked out
            return
        path = os.path.join(self.dir, *name.split("/"))
        os.close(private.makedirs(os.path.dirname(path)))
        with os.fdopen(private.create(path, os.O_WRONLY | os.O_EXCL), "wb") as f:
            for b in chunks:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())

    def write_key(self, server, key_hex):
        """As plugins/storage/dedup/keys.py writes a key: 64 hex digits, 0600."""
        d = os.path.join(self.dir, "keys")
        os.close(private.makedirs(d))
        with os.fdopen(private.create(os.path.join(d, f"{server}.key"),
                                      os.O_WRONLY | os.O_EXCL), "w") as f:
            f.write(key_hex + "\n")
            f.flush()
            os.fsync(f.fileno())

    def write_credentials(self, server, text):
        """As plugins/storage/cloud/keys.py keeps a bucket's credentials: 0600."""
        d = os.path.join(self.dir, "keys")
        os.close(private.makedirs(d))
        with os.fdopen(private.create(os.path.join(d, f"{server}.s3"),
                                      os.O_WRONLY | os.O_EXCL), "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def move_into_place(self):
        check_empty(self.root)
        if os.path.isdir(self.root):
            os.rmdir(self.root)  # empty: checked above
        os.rename(self.dir, self.root)
        sync_dir(os.path.dirname(self.root))

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def _unseal_keys(staging, manifest, private_key, path):
    import json
    try:
        sealed = json.loads(staging.keys_file or b"{}")["keys"]
    except (ValueError, KeyError, TypeError):
        raise archive.Damaged(f"the catalog backup {path} is damaged: {archive.KEYS} is not "
                              "valid") from None
    if not isinstance(sealed, dict) or sorted(sealed) != sorted(manifest.get("keys") or []):
        raise archive.Damaged(f"the catalog backup {path} is damaged: its keys do not match "
                              "its manifest")
    for server in sorted(sealed):
        if not _SERVER.match(server):
            raise archive.Damaged(f"the catalog backup {path} names a key {server!r}")
        key_hex = escrow.unseal(private_key, sealed[server], "pool-key:" + server).decode()
        if len(key_hex) != 64 or not all(c in "0123456789abcdef" for c in key_hex):
            raise archive.Damaged(f"the pool key of {server!r} in {path} is not a key")
        staging.write_key(server, key_hex)
    return sorted(sealed)


def _unseal_credentials(staging, manifest, private_key, path):
    """The bucket credentials of cloud pools (an archive from before they existed has
    none)."""
    import json
    sealed = json.loads(staging.keys_file or b"{}").get("credentials") or {}
    if not isinstance(sealed, dict) or \
            sorted(sealed) != sorted(manifest.get("credentials") or []):
        raise archive.Damaged(f"the catalog backup {path} is damaged: its bucket credentials "
                              "do not match its manifest")
    for server in sorted(sealed):
        if not _SERVER.match(server):
            raise archive.Damaged(f"the catalog backup {path} names credentials {server!r}")
        text = escrow.unseal(private_key, sealed[server],
                             "bucket-credentials:" + server).decode()
        try:
            bucket_keys.parse(text, f"the credentials of {server!r} in {path}")
        except ValidationError as e:
            raise archive.Damaged(e.message) from None
        staging.write_credentials(server, text)
    return sorted(sealed)


def _check_catalog(staging, path, mac_key):
    """The restored catalog opens and is sound; (images, jobs). The manifest key goes back
    into it (an archive's catalog never holds it)."""
    try:
        conn = sqlite3.connect(os.path.join(staging.dir, archive.CATALOG))
        try:
            ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
            images = conn.execute("SELECT count(*) FROM images").fetchone()[0]
            jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
            if ok == "ok":
                with conn:
                    conn.execute("INSERT INTO settings(key, value) VALUES (?,?) ON "
                                 "CONFLICT(key) DO UPDATE SET value=excluded.value",
                                 (escrow.MAC_SETTING, mac_key.hex()))
        finally:
            conn.close()
    except sqlite3.Error as e:
        ok, images, jobs = str(e), 0, 0
    if ok != "ok":
        raise archive.Damaged(f"the catalog in the catalog backup {path} is damaged: {ok}")
    return images, jobs


def _record_recovery(staging, path, manifest):
    """The audit log of the recovered catalog goes on in a new segment (app/audit.py): an
    entry chained to the last one the backup holds says where the catalog came from and
    that what was recorded after the backup is not in it. The catalog is brought to this
    Cairn's schema for it, as the master's first start would. Returns that entry's number."""
    db = Database(os.path.join(staging.dir, archive.CATALOG))
    try:
        entry = AuditLog(db, os.path.join(staging.dir, "audit.head")).recovered(
            path, created=manifest.get("created"), master_host=manifest.get("master_host"),
            os_user=_owner_name(os.geteuid()))
    except sqlite3.Error as e:
        raise archive.Damaged(f"the catalog in the catalog backup {path} cannot be "
                              f"written: {e}") from None
    finally:
        db.close()
    return entry["seq"]


def recover(root, from_dir, passphrase, archive_path=None):
    """Recovers a master into the empty home `root` from the newest catalog backup under
    `from_dir` (or from `archive_path` in it). Returns what it recovered (stable keys: see
    the CLI's --json)."""
    root = os.path.abspath(root)
    check_empty(root)
    if archive_path is None:
        path = find(from_dir)[0]
    else:
        check_trusted_folder(from_dir)
        path = archive_path
    keys = {}
    with open_trusted(path) as f:
        staging = _Staging(root)
        try:
            manifest = archive.extract(f, path, _authenticator(path, passphrase, keys),
                                       staging.store)
            images, jobs = _check_catalog(staging, path, keys["mac"])
            restored = _unseal_keys(staging, manifest, keys["private"], path)
            credentials = _unseal_credentials(staging, manifest, keys["private"], path)
            segment = _record_recovery(staging, path, manifest)
            staging.move_into_place()
        except BaseException:
            staging.remove()
            raise
    created = manifest.get("created_epoch")
    return {"status": st.OK, "home": root, "backup": path, "created": manifest.get("created"),
            "age_s": int(time.time() - created) if isinstance(created, int) else None,
            "master_host": manifest.get("master_host"),
            "cairn_version": manifest.get("cairn_version"),
            "images": images, "jobs": jobs,
            "indexes": sum(1 for m in manifest["members"]
                           if m["name"].startswith(archive.INDEX_DIR + "/")),
            "known_hosts": any(m["name"] == archive.KNOWN_HOSTS for m in manifest["members"]),
            "keys_restored": restored, "credentials_restored": credentials,
            "authenticated": True, "audit_segment": segment,
            "recovered_at": timeutil.iso(time.time())}
