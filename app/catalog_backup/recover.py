"""Recovering a master from a catalog backup (`cairn catalog recover`): on an empty (or not
yet existing) CAIRN_HOME, the newest complete archive under a folder is checked member by
member against its manifest and restored: the catalog, its file indexes, known_hosts and the
pool keys, unsealed with the passphrase. The new home is built in a private folder beside
it and moved into place only when everything checked out: a damaged archive or a wrong
passphrase leaves the home as it was.

This runs without a master (there is no catalog to open yet) and reads nothing but the
archive: not the pool's key, not its storage engine."""

import os
import re
import shutil
import sqlite3
import tempfile
import time

from app import status as st, timeutil
from app.catalog_backup import archive, escrow
from app.errors import CairnError, ValidationError
from app.formats import private

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
    found = sorted((n for n in names if archive.is_complete_name(n)
                    and os.path.isfile(os.path.join(folder, n))),
                   key=archive.sort_key, reverse=True)
    if not found:
        raise ValidationError(f"there is no catalog backup in {folder}",
                              hint="catalog backups are in the folder catalog-backups at a "
                                   "pool's path; files ending in .partial were never "
                                   "completed")
    return [os.path.join(folder, n) for n in found]


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

    def move_into_place(self):
        check_empty(self.root)
        if os.path.isdir(self.root):
            os.rmdir(self.root)  # empty: checked above
        os.rename(self.dir, self.root)
        fd = os.open(os.path.dirname(self.root), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

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


def _check_catalog(staging, path):
    """The restored catalog opens and is sound; (images, jobs)."""
    try:
        conn = sqlite3.connect(os.path.join(staging.dir, archive.CATALOG))
        try:
            ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
            images = conn.execute("SELECT count(*) FROM images").fetchone()[0]
            jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as e:
        ok, images, jobs = str(e), 0, 0
    if ok != "ok":
        raise archive.Damaged(f"the catalog in the catalog backup {path} is damaged: {ok}")
    return images, jobs


def recover(root, from_dir, passphrase):
    """Recovers a master into the empty home `root` from the newest catalog backup under
    `from_dir`. Returns what it recovered (stable keys: see the CLI's --json)."""
    root = os.path.abspath(root)
    check_empty(root)
    path = find(from_dir)[0]
    staging = _Staging(root)
    try:
        manifest = archive.extract(path, staging.store)
        private_key = escrow.open_private(escrow.check(manifest.get("escrow") or {}),
                                          passphrase)
        images, jobs = _check_catalog(staging, path)
        restored = _unseal_keys(staging, manifest, private_key, path)
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
            "keys_restored": restored,
            "recovered_at": timeutil.iso(time.time())}
