"""Placing a backup job of a policy that writes to a storage unit group (app/stugroups.py) on
one of the group's units, when the dispatcher is about to start it.

A unit can take a job when it is available (its storage server's host answers and a volume
of its pool is below the high-water mark: what the backup itself checks, plugins/storage/
base.py choose_volume) and not busy (its limit of concurrent jobs and its pool's limit of I/O
streams are not reached: the dispatcher's own wait reasons). Availability costs a call to the
storage host, so it is remembered for AVAILABLE_TTL seconds, and a host that cannot be
reached for DOWN_TTL: asking a host that is down costs the dispatcher's tick up to the SSH
connect timeout, which must not be paid every few seconds while a host is down all night.

An incremental goes where its chain is (the pool of the image it would compare with) when a
unit of that pool is in the group and available, waiting while that unit is busy; otherwise
it is placed by the selection and made a full, and the log says why. The children of a
multi-stream backup go where their first sibling went, so that the set stays in one pool.
When no unit is available the job goes to the first unit, where it fails with the unit's own
status (and a scheduled backup's retry is placed again)."""

import json
import time

from plugins.storage import registry

AVAILABLE_TTL = 5.0
DOWN_TTL = 60.0
# How far back "recent throughput" looks for least-loaded placement.
RECENT_SECONDS = 600


class Placement:
    """Placement for one dispatcher: holds what it learnt of units' availability."""

    def __init__(self, master):
        self.master = master
        self.db = master.db
        self._available = {}  # storage unit -> (until, None or why not)

    def group_of(self):
        """{policy name: group dict} of the policies that write to a group."""
        groups, out = {}, {}
        for r in self.db.all("SELECT p.name AS policy, g.name AS grp FROM policies p JOIN "
                             "storage_unit_groups g ON g.id=p.storage_unit_group_id"):
            if r["grp"] not in groups:
                groups[r["grp"]] = self.master.storage_unit_groups_config.get(r["grp"])
            out[r["policy"]] = groups[r["grp"]]
        return out

    def unavailable(self, stu):
        """None when the unit's host answers and a volume of its pool has room, else why
        not."""
        now = time.monotonic()
        hit = self._available.get(stu)
        if hit and hit[0] > now:
            return hit[1]
        why, down = self._check(stu)
        self._available[stu] = (now + (DOWN_TTL if down else AVAILABLE_TTL), why)
        return why

    def _check(self, stu):
        """(why the unit cannot take a job or None, whether its host could not be asked)."""
        cfg = self.master.config
        unit = cfg.storage_unit(stu)
        pool = cfg.disk_pool(unit["pool"])
        server = cfg.storage_server(pool["server"])
        host = cfg.host(server["host"])
        try:
            storage = self.master.hosts.connect(host)
            vols = storage.call("check_volumes", {"paths": pool["volumes"]},
                                timeout=30)["volumes"]
        except Exception as e:  # noqa: BLE001 - any failure to ask means "down" here
            text = getattr(e, "message", None) or str(e).splitlines()[0]
            return f"its storage server's host {host['name']} cannot be reached ({text})", True
        _, why = registry.of_server(server).choose_volume(vols, pool["high_water"])
        return (f"no volume of disk pool {pool['name']} can take an image: {why}"
                if why else None), False

    def forget(self):
        self._available.clear()

    # Long: one decision with its reasons, read top to bottom
    def place(self, job, group, busy, load):
        """(storage unit or None, wait reason or None, log message, make it a full).
        busy(stu): why the unit cannot start one more job now, or None. load(stu): (running
        jobs on its storage server, bytes it wrote recently)."""
        units = group["unit_names"]
        gname, sel = group["name"], group["selection"]
        sibling = self._sibling_unit(job)
        if sibling in units:
            why = busy(sibling)
            if why:
                return None, f"waits for storage unit {sibling}, where its other streams " \
                             f"went: {why}", None, False
            return sibling, None, (f"placed on storage unit {sibling} (group {gname}): its "
                                   f"other streams went there"), False
        level = _level(job)
        chain_note = ""
        if level != "full":
            chain = self._chain_unit(job, level, group)
            if chain is not None:
                stu, pool = chain
                if stu is None:
                    chain_note = (f"its chain is in disk pool {pool}, which no unit of the group "
                                  f"has, so it runs as a full")
                else:
                    why = self.unavailable(stu)
                    if why is None:
                        busy_why = busy(stu)
                        if busy_why:
                            return None, (f"waits for storage unit {stu}, where its chain "
                                          f"is: {busy_why}"), None, False
                        return stu, None, (f"placed on storage unit {stu} (group {gname}, "
                                           f"{sel}): its {level} incremental goes where its "
                                           f"chain is (disk pool {pool})"), False
                    chain_note = (f"its chain's storage unit {stu} cannot take it ({why}), so "
                                  f"it runs as a full")
        full = bool(chain_note)
        skipped = []
        order = list(units)
        if sel == "round-robin":
            start = group["rr_next"] % len(units)
            order = units[start:] + units[:start]
        candidates = []
        for stu in order:
            why = self.unavailable(stu)
            if why:
                skipped.append(f"{stu}: {why}")
                continue
            why = busy(stu)
            if why:
                if sel == "failover":
                    return None, (f"waits for storage unit {stu}, the first available of "
                                  f"group {gname} (failover): {why}"), None, False
                skipped.append(f"{stu}: {why}")
                continue
            candidates.append(stu)
            if sel != "least-loaded":
                break
        if not candidates:
            if all(self.unavailable(u) for u in units):
                first = units[0]
                return first, None, (f"no unit of group {gname} can take it ("
                                     + "; ".join(skipped) + f"): it goes to {first}, the "
                                     f"first"), full
            return None, f"every storage unit of group {gname} is busy or unavailable: " \
                         + "; ".join(skipped), None, False
        if sel == "least-loaded":
            loads = {u: load(u) for u in candidates}
            chosen = min(candidates, key=lambda u: (*loads[u], units.index(u)))
            why = "least-loaded: " + ", ".join(
                f"{u} {loads[u][0]} running on its server, {loads[u][1]} bytes written "
                f"recently" for u in candidates)
        else:
            chosen = candidates[0]
            why = {"prioritized": "prioritized: the first unit that can take it",
                   "failover": "failover: the first available unit",
                   "round-robin": "round-robin: the next in turn"}[sel]
        if skipped:
            why += "; passed over " + "; ".join(skipped)
        msg = f"placed on storage unit {chosen} (group {gname}, {why})"
        if chain_note:
            msg += f"; {chain_note}"
        return chosen, None, msg, full

    def _sibling_unit(self, job):
        if not job["parent_id"]:
            return None
        row = self.db.one("SELECT storage_unit FROM jobs WHERE parent_id=? AND id!=? AND "
                          "state!='queued' AND storage_unit IS NOT NULL ORDER BY id LIMIT 1",
                          (job["parent_id"], job["id"]))
        return row[0] if row else None

    def _chain_unit(self, job, level, group):
        """(unit of the group in the pool of the image the incremental would compare with, or
        None when no unit of the group is in it; pool), or None when there is no such image."""
        params = json.loads(job["params"] or "{}")
        sql = ("SELECT pool FROM images WHERE client=? AND policy=? AND coalesce(stream, '')=? "
               "AND expiring IS NULL")
        if level == "cumulative":
            sql += " AND schedule_type='full'"
        row = self.db.one(sql + " ORDER BY created DESC, id DESC LIMIT 1",
                          (job["client"], job["policy"], params.get("stream") or ""))
        if row is None:
            return None
        pool = row[0]
        stu = next((u["storage_unit"] for u in group["units"] if u["pool"] == pool), None)
        return stu, pool

    def recent_bytes(self, since_iso):
        """{storage unit: bytes its backups that ended since then wrote}."""
        return {r[0]: r[1] for r in self.db.all(
            "SELECT storage_unit, sum(bytes) FROM jobs WHERE type='backup' AND state='done' "
            "AND ended>=? AND storage_unit IS NOT NULL GROUP BY storage_unit", (since_iso,))}

    def servers(self):
        """{storage unit: storage server}."""
        return {r[0]: r[1] for r in self.db.all(
            "SELECT u.name, v.name FROM storage_units u JOIN disk_pools d ON d.id=u.pool_id "
            "JOIN storage_servers v ON v.id=d.server_id")}



def _level(job):
    return json.loads(job["params"] or "{}").get("schedule_type") or "full"
