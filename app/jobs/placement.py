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

import functools
import json
import time

from plugins.storage import registry

AVAILABLE_TTL = 5.0
DOWN_TTL = 60.0
# A storage host answers check_volumes in milliseconds; one that died with its connection
# still open is found out after this long (the dispatcher's round waits for it).
CHECK_TIMEOUT = 10.0
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
        if down:
            # the host's other units are down with it: not asked again, each its own wait
            for other in self._units_on_host_of(stu):
                self._available[other] = (now + DOWN_TTL, why)
        return why

    def _units_on_host_of(self, stu):
        return [r[0] for r in self.db.all(
            "SELECT u.name FROM storage_units u JOIN disk_pools d ON d.id=u.pool_id "
            "JOIN storage_servers v ON v.id=d.server_id WHERE v.host_id=(SELECT v2.host_id "
            "FROM storage_units u2 JOIN disk_pools d2 ON d2.id=u2.pool_id JOIN "
            "storage_servers v2 ON v2.id=d2.server_id WHERE u2.name=?)", (stu,))]

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
                                timeout=CHECK_TIMEOUT)["volumes"]
        except Exception as e:  # noqa: BLE001 - any failure to ask means "down" here
            text = getattr(e, "message", None) or str(e).splitlines()[0]
            return f"its storage server's host {host['name']} cannot be reached ({text})", True
        _, why = registry.of_server(server).choose_volume(vols, pool["high_water"])
        return (f"no volume of disk pool {pool['name']} can take an image: {why}"
                if why else None), False

    def forget(self):
        self._available.clear()

    def place(self, job, group, busy, load, memo=None, chains=None, siblings=None):
        """(storage unit or None, wait reason or None, log message, make it a full).
        busy(stu): why the unit cannot start one more job now, or None. load(stu, client):
        (running jobs on its storage server, bytes it wrote recently, running jobs of that
        client on it). memo: a dict kept while nothing starts (the dispatcher empties it when
        a job starts): a group none of whose units can take a job makes every other job that
        would be placed by its selection wait with the same reason, found once. chains:
        chain_pools() of the queue. siblings: {parent job: storage unit} of the streams
        started in this round, not yet in the catalog."""
        units = group["unit_names"]
        gname, sel = group["name"], group["selection"]
        sibling = self._sibling_unit(job, siblings)
        if sibling in units:
            why = busy(sibling)
            if why:
                return None, f"waits for storage unit {sibling}, where its other streams " \
                             f"went: {why}", None, False
            return sibling, None, (f"placed on storage unit {sibling} (group {gname}): its "
                                   f"other streams went there"), False
        level = _level(job["params"])
        chain_note = ""
        if level != "full":
            chain = self._chain_unit(job, level, group, chains)
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
        return self._by_selection(job, group, busy, load, memo, chain_note)

    def _by_selection(self, job, group, busy, load, memo, chain_note):
        """place() for a job that neither follows its streams nor its chain."""
        units = group["unit_names"]
        gname, sel = group["name"], group["selection"]
        if memo is not None and gname in memo:
            return None, memo[gname], None, False
        full = bool(chain_note)
        skipped = {}
        order = list(units)
        if sel == "round-robin":
            start = group["rr_next"] % len(units)
            order = units[start:] + units[:start]
        candidates = []
        for stu in order:
            why = self.unavailable(stu)
            if why:
                skipped[stu] = why
                continue
            why = busy(stu)
            if why:
                if sel == "failover":
                    wait = (f"waits for storage unit {stu}, the first available of group "
                            f"{gname} (failover): {why}")
                    if memo is not None:
                        memo[gname] = wait
                    return None, wait, None, False
                skipped[stu] = why
                continue
            candidates.append(stu)
            if sel in ("prioritized", "failover"):
                break
        if not candidates:
            if all(self.unavailable(u) for u in units):
                first = units[0]
                return first, None, (f"no unit of group {gname} can take it ("
                                     + _listed(skipped, order) + f"): it goes to {first}, the "
                                     f"first"), full
            # In the group's order, not round-robin's: the reason stays the same from one
            # tick to the next while the turn moves on, and is not written again.
            wait = f"every storage unit of group {gname} is busy or unavailable: " \
                   + _listed(skipped, units)
            if memo is not None:
                memo[gname] = wait
            return None, wait, None, False
        client = job["client"]
        if sel == "least-loaded":
            loads = {u: load(u, client) for u in candidates}
            # A job of the same client counts twice: its jobs spread over the servers rather
            # than queue up on one while another runs as many jobs but none of this client's.
            chosen = min(candidates, key=lambda u: (loads[u][0] + loads[u][2], loads[u][2],
                                                    loads[u][1], units.index(u)))
            why = "least-loaded: " + ", ".join(
                f"{u} {loads[u][0]} running on its server"
                + (f" ({loads[u][2]} of client {client}, counted twice)" if loads[u][2] else "")
                + f", {loads[u][1]} bytes written recently" for u in candidates)
        elif sel == "round-robin":
            # The next in turn, unless this client already runs more jobs on its server than
            # on another candidate's: then the next in turn of those where it runs fewest.
            mine = {u: load(u, client)[2] for u in candidates}
            chosen = min(candidates, key=lambda u: mine[u])
            why = "round-robin: the next in turn"
            if chosen != candidates[0]:
                why += "".join(f"; passed over {u}: client {client} runs {mine[u]} "
                               f"job{'s' if mine[u] != 1 else ''} on its storage server"
                               for u in candidates[:candidates.index(chosen)])
        else:
            chosen = candidates[0]
            why = {"prioritized": "prioritized: the first unit that can take it",
                   "failover": "failover: the first available unit"}[sel]
        if sel != "least-loaded":
            # Those before the chosen one in the order looked at.
            skipped = {u: w for u, w in skipped.items()
                       if order.index(u) < order.index(chosen)}
        if skipped:
            why += "; passed over " + _listed(skipped, order)
        msg = f"placed on storage unit {chosen} (group {gname}, {why})"
        if chain_note:
            msg += f"; {chain_note}"
        return chosen, None, msg, full

    def _sibling_unit(self, job, siblings=None):
        if not job["parent_id"]:
            return None
        if siblings and job["parent_id"] in siblings:
            return siblings[job["parent_id"]]
        row = self.db.one("SELECT storage_unit FROM jobs WHERE parent_id=? AND id!=? AND "
                          "state!='queued' AND storage_unit IS NOT NULL ORDER BY id LIMIT 1",
                          (job["parent_id"], job["id"]))
        return row[0] if row else None

    def _chain_unit(self, job, level, group, chains=None):
        """(unit of the group in the pool of the image the incremental would compare with, or
        None when no unit of the group is in it; pool), or None when there is no such image.
        chains: chain_pools() of the tick, when read."""
        key = _chain_key(job, level)
        if chains is not None and key in chains:
            pool = chains[key]
        else:
            sql = ("SELECT pool FROM images WHERE client=? AND policy=? AND "
                   "coalesce(stream, '')=? AND expiring IS NULL")
            if level == "cumulative":
                sql += " AND schedule_type='full'"
            row = self.db.one(sql + " ORDER BY created DESC, id DESC LIMIT 1", key[:3])
            pool = row[0] if row else None
        if pool is None:
            return None
        stu = next((u["storage_unit"] for u in group["units"] if u["pool"] == pool), None)
        return stu, pool

    def chain_pools(self, jobs):
        """{chain key: pool of the image the incremental would compare with, or None} for the
        incremental backups among `jobs`: the lookup _chain_unit makes per job, for a whole
        queue in one query."""
        keys = {_chain_key(j, lvl) for j in jobs
                if (lvl := _level(j["params"])) != "full"}
        if not keys:
            return {}
        rows = self.db.all(
            "WITH k AS (SELECT json_extract(value, '$[0]') AS client, "
            "json_extract(value, '$[1]') AS policy, json_extract(value, '$[2]') AS stream, "
            "json_extract(value, '$[3]') AS cumulative FROM json_each(?)) "
            "SELECT client, policy, stream, cumulative, (SELECT pool FROM images i WHERE "
            "i.client=k.client AND i.policy=k.policy AND coalesce(i.stream, '')=k.stream AND "
            "i.expiring IS NULL AND (k.cumulative=0 OR i.schedule_type='full') "
            "ORDER BY i.created DESC, i.id DESC LIMIT 1) FROM k",
            (json.dumps(sorted(keys)),))
        return {(r[0], r[1], r[2], bool(r[3])): r[4] for r in rows}

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



def _listed(why_of, order):
    return "; ".join(f"{u}: {why_of[u]}" for u in order if u in why_of)


def _chain_key(job, level):
    return job["client"], job["policy"], _stream(job["params"]), level == "cumulative"


# The jobs of one policy and schedule share their params text: each is parsed once.
@functools.lru_cache(maxsize=1024)
def _level(params):
    return json.loads(params or "{}").get("schedule_type") or "full"


@functools.lru_cache(maxsize=1024)
def _stream(params):
    return json.loads(params or "{}").get("stream") or ""
