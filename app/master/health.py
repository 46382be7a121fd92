"""Health at a glance: the summary `cairn status` and the console's dashboard show, and each
host's last contact. Part of the master API (app/master/__init__.py); the summary itself is
app/health.py."""

from app import health, pool_capacity, timeutil


class HealthAPI:
    def health(self, now=None, timeout=health.ASK_TIMEOUT, wait=True):
        """pools, hosts, jobs, clients, catalog_backup and warnings (README, `cairn status`).
        Every host is asked side by side; one that does not answer within `timeout` seconds
        is reported as not reachable. wait=False (the console): the hosts' answers at hand,
        at most half a minute old, asked again in the background; never waits."""
        answers = None if wait else (self._states() or {})
        return health.summary(self, now=now, timeout=timeout, answers=answers)

    def _states(self):
        cache = getattr(self, "_state_cache", None)
        if cache is None:
            cache = self._state_cache = health.StateCache()
        return cache.answers(self)

    def hosts_with_state(self):
        """host_list() with each host's "state" (reachable, or not and why, or "checking…"),
        "reachable" (None while unknown) and "last_contact", without waiting for any host:
        the answers are at most half a minute old, asked again in the background."""
        answers = self._states() or {}
        out = self.host_list()
        for h in out:
            a = answers.get(h["name"])
            h["state"] = health.state_text(a)
            h["reachable"] = None if a is None else a["reachable"]
            heard = self.hosts.last_heard(h["name"])
            if heard is not None and (h.get("last_contact") or "") < timeutil.iso(heard):
                h["last_contact"] = timeutil.iso(heard)
        return out

    def storage_servers_with_state(self):
        """storage_servers() with the state of each one's host (as hosts_with_state)."""
        answers = self._states() or {}
        out = self.storage_servers()
        for s in out:
            a = answers.get(s["host"])
            s["state"] = health.state_text(a)
            s["reachable"] = None if a is None else a["reachable"]
        return out

    def disk_pools_with_capacity(self):
        """disk_pools() with each pool's size_bytes, used_bytes, free_bytes, used_percent,
        above_high_water (app/pool_capacity.py; None while unknown) and "state", without
        waiting for any host (as hosts_with_state)."""
        answers = self._states() or {}
        out = self.disk_pools()
        for p in out:
            a = answers.get(p["host"])
            cap = pool_capacity.capacity(p, (a or {}).get("checks") or {})
            cap.pop("volumes")
            p.update(cap)
            p["state"] = ("checking…" if a is None else health.state_text(a)
                          if not a["reachable"] else (cap["error"] or "ok"))
        return out

    def disk_pool_capacity(self, name):
        """One pool's capacity asked of its storage host now (app/pool_capacity.py), with its
        high_water; "error" says why it is not known."""
        rep = self.disk_pool_report(name)
        cap = pool_capacity.capacity(rep, {v["path"]: v for v in rep["checks"]})
        if rep["error"]:
            cap["error"] = rep["error"]
        cap["high_water"] = rep["high_water"]
        return cap

    def record_contact(self, host, t):
        """Records that the master heard from a host at epoch seconds t (app/hosts.py calls
        it as connections are used)."""
        with self.db.tx() as c:
            c.execute("UPDATE hosts SET last_contact=? WHERE name=? AND "
                      "(last_contact IS NULL OR last_contact<?)",
                      (timeutil.iso(t), host, timeutil.iso(t)))
