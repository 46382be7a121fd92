"""Catalog protection: queueing a catalog backup of the master's own state to a pool. Part of
the master API (app/master/__init__.py). Recovering a master (app/catalog_backup/recover.py)
is no method: there is no master to open until it is done.

The catalog backup job's module (with the archive writer and its tar machinery) is imported
lazily, by the methods that use it: every command opens the master, few ask for this."""

import time

from app import timeutil
from app.catalog_backup import escrow

# With images in the catalog and no catalog backup for this long, the console warns: a lost
# CAIRN_HOME would lose them (README, Disaster recovery).
CATALOG_BACKUP_DUE_S = 86400


class CatalogAPI:
    def catalog_backup_state(self, now=None):
        """When the newest catalog backup that ended well ran, and whether one is overdue (none
        for CATALOG_BACKUP_DUE_S while the catalog holds images), and the storage servers
        whose pool key no catalog backup holds yet: {"last": ISO time or None, "age_s",
        "images", "overdue", "keys_not_escrowed", "has_passphrase" (whether the first
        catalog backup set it)}."""
        from app.jobs import catalog_backup
        now = time.time() if now is None else now
        last = self.db.one("SELECT max(ended) FROM jobs WHERE type=? AND status=0",
                           (catalog_backup.JOB_TYPE,))[0]
        images = self.db.one("SELECT count(*) FROM images")[0]
        age = now - timeutil.parse_iso(last) if last else None
        servers = {r[0] for r in self.db.all("SELECT name FROM storage_servers")}
        done = escrow.escrowed(self.db)
        return {"last": last, "age_s": age, "images": images,
                "overdue": bool(images) and (age is None or age > CATALOG_BACKUP_DUE_S),
                "keys_not_escrowed": [n for n in catalog_backup.pool_key_names(self.home)
                                      if n in servers and n not in done],
                "has_passphrase": self.db.one("SELECT 1 FROM settings WHERE key=?",
                                              (escrow.SETTING,)) is not None}

    def change_catalog_passphrase(self, old, new):
        """Seals the catalog backup key with a new passphrase (bytes both). Catalog backups
        made before still need the old one; those made from now on need the new one."""
        escrow.change_passphrase(self.db, old, new)
        return {"status": 0, "changed": timeutil.iso(time.time()),
                "older_archives_need": "the old passphrase"}

    def start_catalog_backup(self, storage_unit, passphrase, retention=None):
        """Queues a catalog backup to a storage unit's pool (app/jobs/catalog_backup.py). The
        passphrase (bytes) makes the escrow key pair on first use and must open it after; it
        is not kept anywhere. retention (a duration such as "4w"): older catalog backups in
        the same folder are removed once this one is written."""
        from app.jobs import catalog_backup
        keep = timeutil.parse_duration(retention) if retention else None
        return catalog_backup.make_job(self, storage_unit, passphrase, retention_s=keep)

