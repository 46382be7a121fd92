"""Catalog protection: queueing a catalog backup of the master's own state to a pool. Part of
the master API (app/master/__init__.py). Recovering a master (app/catalog_backup/recover.py)
is no method: there is no master to open until it is done."""

from app.jobs import catalog_backup


class CatalogAPI:
    def start_catalog_backup(self, storage_unit, passphrase):
        """Queues a catalog backup to a storage unit's pool (app/jobs/catalog_backup.py). The
        passphrase (bytes) makes the escrow key pair on first use and must open it after; it
        is not kept anywhere."""
        return catalog_backup.make_job(self, storage_unit, passphrase)

