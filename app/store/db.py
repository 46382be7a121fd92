"""The catalog: one sqlite file in CAIRN_HOME, WAL mode so that the console, the CLI and a
headless master can read while one of them writes.

Schema changes are numbered migrations. Before a migration runs, the file is copied next to
itself (`catalog.db.bak-vN`) so that a failed upgrade loses nothing.

A catalog file that is damaged, unreadable, full or locked for too long is reported as a
CatalogError that names the file, what sqlite found and what to do (catalog_error), never as
sqlite's own exception: `cairn catalog check` (app/catalog_check.py) then tells what is
wrong in detail."""

import os
import shutil
import sqlite3
import threading
from contextlib import contextmanager

from app import status
from app.errors import CairnError
from app.store.migrations import MIGRATIONS


class CatalogError(CairnError):
    status = status.CATALOG_FAILED


DAMAGED_HINT = ("`cairn catalog check` lists what is damaged; stop every Cairn console and "
                "master, then put back a copy of catalog.db (the copy made before a schema "
                "upgrade is catalog.db.bak-vN beside it), or move this state directory aside "
                "and run `cairn catalog recover --from POOL --passphrase-file F` to bring back "
                "the newest catalog backup on a pool (README, Disaster recovery)")

# sqlite's primary result codes (the low byte of an extended code): what each says about
# the catalog file, and what to do about it.
_FILE_ERRORS = {
    11: ("the catalog {path} is damaged ({detail})", DAMAGED_HINT),                # CORRUPT
    26: ("the catalog {path} is damaged or is not a Cairn catalog ({detail})",
         DAMAGED_HINT),                                                            # NOTADB
    10: ("cannot read the catalog {path}: {detail}",
         "the disk or file system holding it reports errors (see dmesg); once it is sound, "
         "run `cairn catalog check`"),                                             # IOERR
    13: ("the catalog {path} cannot grow: {detail}",
         "free space on the file system that holds it"),                           # FULL
    14: ("cannot open the catalog {path}: {detail}",
         "check that this user can read and write its directory and the files catalog.db, "
         "catalog.db-wal and catalog.db-shm in it"),                               # CANTOPEN
    3: ("cannot use the catalog {path}: {detail}",
        "check that this user can read and write its directory and the files catalog.db, "
        "catalog.db-wal and catalog.db-shm in it"),                                # PERM
    8: ("cannot write the catalog {path}: {detail}",
        "check that this user can write its directory and the files catalog.db, "
        "catalog.db-wal and catalog.db-shm in it"),                                # READONLY
    5: ("the catalog {path} stayed locked by another process: {detail}",
        "another Cairn command or console held it for a long write; try again"),   # BUSY
    6: ("the catalog {path} stayed locked: {detail}",
        "another Cairn command or console held it for a long write; try again"),   # LOCKED
}
# The same, for sqlite builds or Pythons that do not say the code (before 3.11).
_MESSAGES = (("malformed", 11), ("not a database", 26), ("disk i/o error", 10),
             ("database or disk is full", 13), ("unable to open", 14),
             ("database is locked", 5), ("readonly database", 8))


def _code(e):
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF
    text = str(e).lower()
    return next((c for words, c in _MESSAGES if words in text), None)


def catalog_error(path, e, any_error=False):
    """The CatalogError for sqlite error `e` on the catalog at `path`, or None when the error
    is not about the file (a mistake in a statement, a broken constraint). any_error: make
    one of every error anyway, for the last line of defence in front of a user."""
    known = _FILE_ERRORS.get(_code(e))
    if known is None:
        if not any_error:
            return None
        known = ("the catalog {path} could not be used: {detail}",
                 "run `cairn catalog check` to see whether it is damaged")
    message, hint = known
    err = CatalogError(message.format(path=path, detail=e), hint=hint)
    if _code(e) == 13:
        err.status = status.STORAGE_WRITE_FAILED
    return err


class Database:
    """A sqlite catalog file. Each thread gets its own connection."""

    def __init__(self, path):
        self.path = path
        self._local = threading.local()
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._migrate()

    def _connect(self):
        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as e:
            raise catalog_error(self.path, e, any_error=True) from None
        conn.row_factory = sqlite3.Row
        try:
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as e:
            conn.close()
            raise catalog_error(self.path, e, any_error=True) from None
        return conn

    @property
    def conn(self):
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._local.conn = self._connect()
        return c

    def close(self):
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    def _migrate(self):
        conn = self._connect()
        try:
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.Error as e:
                raise catalog_error(self.path, e, any_error=True) from None
            if version > len(MIGRATIONS):
                raise CatalogError(
                    f"the catalog {self.path} has schema version {version}, newer than this "
                    f"Cairn knows ({len(MIGRATIONS)})", hint="upgrade Cairn")
            if version == len(MIGRATIONS):
                return
            if version > 0:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                shutil.copy2(self.path, f"{self.path}.bak-v{version}")
            for n in range(version, len(MIGRATIONS)):
                conn.execute("BEGIN IMMEDIATE")
                # Another process (a console and a `cairn` command started together) may have
                # applied this step while we waited for the write lock.
                if conn.execute("PRAGMA user_version").fetchone()[0] > n:
                    conn.execute("ROLLBACK")
                    continue
                try:
                    # executescript would commit on its own; run statements one by one so the
                    # migration and the version bump land together or not at all.
                    for stmt in _split_sql(MIGRATIONS[n]):
                        conn.execute(stmt)
                    conn.execute(f"PRAGMA user_version={n + 1}")
                    conn.execute("COMMIT")
                except Exception:
                    conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as e:
            # A damaged or full file; a mistake in a migration stays what it is.
            raise (catalog_error(self.path, e) or e) from None
        finally:
            conn.close()

    @contextmanager
    def tx(self):
        """A write transaction, taken at once so that two writers queue instead of failing."""
        c = self.conn
        with self._reported():
            c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException as e:
            try:
                c.execute("ROLLBACK")
            except sqlite3.Error:
                pass    # a damaged file: the error that brought us here says more
            if isinstance(e, sqlite3.Error):
                raise (catalog_error(self.path, e) or e) from None
            raise
        else:
            with self._reported():
                c.execute("COMMIT")

    @contextmanager
    def _reported(self):
        """sqlite errors about the file become CatalogErrors that name it."""
        try:
            yield
        except sqlite3.Error as e:
            raise (catalog_error(self.path, e) or e) from None

    def one(self, sql, args=()):
        with self._reported():
            return self.conn.execute(sql, args).fetchone()

    def all(self, sql, args=()):
        with self._reported():
            return self.conn.execute(sql, args).fetchall()

    def execute(self, sql, args=()):
        with self._reported():
            return self.conn.execute(sql, args)


def _split_sql(script):
    return [s.strip() for s in script.split(";") if s.strip()]
