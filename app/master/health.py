"""Health at a glance: the summary `cairn status` and the console's dashboard show, and each
host's last contact. Part of the master API (app/master/__init__.py); the summary itself is
app/health.py."""

from app import health, timeutil


class HealthAPI:
    def health(self, now=None, timeout=health.ASK_TIMEOUT):
        """pools, hosts, jobs, clients, catalog_backup and warnings (README, `cairn status`).
        Every host is asked side by side; one that does not answer within `timeout` seconds
        is reported as not reachable."""
        return health.summary(self, now=now, timeout=timeout)

    def record_contact(self, host, t):
        """Records that the master heard from a host at epoch seconds t (app/hosts.py calls
        it as connections are used)."""
        with self.db.tx() as c:
            c.execute("UPDATE hosts SET last_contact=? WHERE name=? AND "
                      "(last_contact IS NULL OR last_contact<?)",
                      (timeutil.iso(t), host, timeutil.iso(t)))
