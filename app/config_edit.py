"""Changing and removing configuration objects, and what depends on each one.

An object that others still use is never removed: the caller gets the list of dependents
(to show before asking) and a refusal that names them. Images are not configuration, but a
pool or storage unit that still holds images would leave them unreachable, so they count as
dependents too. Only attributes that do not change where existing images live can be edited;
renaming is not offered because jobs and images record names."""

import os

import json

from app import timeutil
from app.config import ADDRESS_RE, MAX_CONCURRENT_JOBS, MAX_IO_STREAMS, CHECKSUMS, \
    id_of, check_agent_env, check_compact_below, check_file_list, check_int, \
    check_snapshot_mode
from app.errors import ValidationError
from app.lifecycles import Lifecycles
from app.stugroups import StorageUnitGroups
from plugins.storage import registry
from plugins.storage.dedup.master import check_compression, check_level
from plugins.storage.dedup.master import check_mode as check_dedup_mode

KINDS = ("host", "storage-server", "disk-pool", "storage-unit", "policy", "lifecycle",
         "storage-unit-group")

_TABLE = {"host": "hosts", "storage-server": "storage_servers", "disk-pool": "disk_pools",
          "storage-unit": "storage_units", "policy": "policies", "lifecycle": "lifecycles",
          "storage-unit-group": "storage_unit_groups"}
_CREATE = {"host": "host add", "storage-server": "storage-server create",
           "disk-pool": "disk-pool create", "storage-unit": "storage-unit create",
           "policy": "policy create", "lifecycle": "lifecycle create",
           "storage-unit-group": "storage-unit-group create"}

#: attributes the properties dialog may change, per kind (a storage server also its type's
#: settings: editable())
EDITABLE = {
    "host": ("port", "user", "key_file", "data_address", "max_jobs", "agent_env", "dedup",
             "comment"),
    "storage-server": ("comment",),
    "disk-pool": ("high_water", "low_water", "max_io_streams", "compact_below", "verify_every",
                  "verify_max_mb_s", "comment"),
    "storage-unit": ("max_concurrent_jobs", "comment"),
    "policy": ("storage_unit", "lifecycle", "storage_unit_group", "priority", "multiple_streams", "checksum",
               "snapshot", "file_list", "dedup", "compression", "compression_level",
               "skip_nodump", "active", "comment"),
    # a lifecycle's steps number its images' copies: a changed one is a new lifecycle
    "lifecycle": ("comment",),
    # its units and selection place jobs: a changed group is a new group
    "storage-unit-group": ("comment",),
}


def editable(kind, obj=None):
    """The attributes of one object that may change: EDITABLE, and for a storage server (obj:
    the server) the settings of its type (a dedup server's chunk sizes)."""
    allowed = EDITABLE[kind]
    storage_type = registry.get(obj["type"]) if kind == "storage-server" and obj else None
    if storage_type is not None:
        allowed = tuple(storage_type.settings) + allowed
    return allowed


def _settings_refusal(kind, name, key, obj, allowed):
    """Why `key` of the object cannot change: for a storage server, which types have it."""
    if kind == "storage-server":
        types = [t for t, st in registry.TYPES.items() if key in st.settings]
        if types:
            return ValidationError(
                f"{key!r} is a setting of {' and '.join(types)} storage servers; storage server "
                f"{name!r} is {obj['type']}", hint=f"settable: {', '.join(allowed)}")
    return ValidationError(f"{key!r} of a {kind.replace('-', ' ')} cannot be changed",
                           hint=f"changeable: {', '.join(allowed)}")


# Scheduled verify reads a whole pool back; more often than this it would leave the pool
# little time for backups.
MIN_VERIFY_EVERY_S = 3600
NO_VERIFY = ("", "0", "off", "no", "none", "never")


def check_verify_every(value):
    """A pool's verify interval in seconds from a duration such as `7d`, or None (verify only
    by hand) for `never`, `off` or 0."""
    if value is None or str(value).strip().lower() in NO_VERIFY:
        return None
    if isinstance(value, bool):
        raise ValidationError(f"verify interval {value!r} is not a duration")
    seconds = value if isinstance(value, int) else \
        timeutil.parse_duration(value, "verify interval")
    if seconds is None:
        return None
    if seconds < MIN_VERIFY_EVERY_S:
        raise ValidationError(f"a verify every {timeutil.format_duration(seconds)} is too often",
                              hint="verify at most every hour (1h); 7d is usual, or 'never'")
    timeutil.check_limit(seconds, "verify interval")
    return seconds


MAX_VERIFY_MB_S = 1_000_000


def check_verify_pace(value):
    """A pool's verify pace in MB/s (10**6 bytes), or None (no limit) for `unlimited`, 0 or
    empty."""
    if value is None or str(value).strip().lower() in NO_VERIFY + ("unlimited",):
        return None
    text = str(value).strip().lower()
    if text.endswith("mb/s"):
        text = text[:-4].strip()
    return check_int("verify pace (MB/s)", text, 1, MAX_VERIFY_MB_S)


def _check_kind(kind):
    if kind not in KINDS:
        raise ValidationError(f"object kind {kind!r} is unknown",
                              hint=f"choose one of: {', '.join(KINDS)}")


def _object_id(db, kind, name):
    _check_kind(kind)
    return id_of(db, _TABLE[kind], kind.replace("-", " "), name, _CREATE[kind])


def _count(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def dependents(db, kind, name):
    """What still uses the object, as [{"kind", "name"}]; empty when it can be removed.
    Jobs that are queued or running count, finished jobs do not."""
    oid = _object_id(db, kind, name)
    out = []

    def add(k, rows):
        out.extend({"kind": k, "name": r[0]} for r in rows)

    if kind == "host":
        add("storage-server", db.all("SELECT name FROM storage_servers WHERE host_id=? "
                                     "ORDER BY name", (oid,)))
        add("policy", db.all("SELECT p.name FROM policies p JOIN policy_clients c "
                             "ON c.policy_id=p.id WHERE c.host_id=? ORDER BY p.name", (oid,)))
        add("job", db.all("SELECT id FROM jobs WHERE client=? AND state IN ('queued','active')",
                          (name,)))
    elif kind == "storage-server":
        add("disk-pool", db.all("SELECT name FROM disk_pools WHERE server_id=? ORDER BY name",
                                (oid,)))
    elif kind == "disk-pool":
        add("storage-unit", db.all("SELECT name FROM storage_units WHERE pool_id=? "
                                   "ORDER BY name", (oid,)))
        add("image", db.all("SELECT id FROM images WHERE pool=? UNION SELECT image_id FROM "
                            "image_copies WHERE pool=? ORDER BY 1", (name, name)))
    elif kind == "storage-unit":
        add("policy", db.all("SELECT name FROM policies WHERE storage_unit_id=? ORDER BY name",
                             (oid,)))
        add("lifecycle", db.all("SELECT DISTINCT l.name FROM lifecycles l JOIN lifecycle_steps "
                                "s ON s.lifecycle_id=l.id WHERE s.storage_unit_id=? "
                                "ORDER BY l.name", (oid,)))
        add("storage-unit-group", db.all(
            "SELECT DISTINCT g.name FROM storage_unit_groups g JOIN storage_unit_group_members "
            "m ON m.group_id=g.id WHERE m.storage_unit_id=? ORDER BY g.name", (oid,)))
        add("job", db.all("SELECT id FROM jobs WHERE storage_unit=? "
                          "AND state IN ('queued','active')", (name,)))
    elif kind == "policy":
        add("job", db.all("SELECT id FROM jobs WHERE policy=? AND state IN ('queued','active')",
                          (name,)))
    elif kind == "lifecycle":
        add("policy", db.all("SELECT name FROM policies WHERE lifecycle_id=? ORDER BY name",
                             (oid,)))
    elif kind == "storage-unit-group":
        add("policy", db.all("SELECT name FROM policies WHERE storage_unit_group_id=? "
                             "ORDER BY name", (oid,)))
    for d in out:
        if d["kind"] == "job":
            d["name"] = str(d["name"])
    return out


def describe(deps):
    """'2 disk pools (p1, p2), 1 policy (nightly)': for messages and confirmations."""
    by_kind = {}
    for d in deps:
        by_kind.setdefault(d["kind"], []).append(d["name"])
    parts = []
    for k, names in by_kind.items():
        shown = ", ".join(names[:5]) + (f", … {len(names) - 5} more" if len(names) > 5 else "")
        word = {"job": "queued or running job", "image": "backup image"}.get(
            k, k.replace("-", " "))
        parts.append(f"{_count(len(names), word)} ({shown})")
    return ", ".join(parts)


_HOW = {"storage-server": "delete its disk pools first",
        "disk-pool": "delete its storage units and expire its images first",
        "storage-unit": "move its policies to another storage unit or delete them first, and "
                        "delete the lifecycles and storage unit groups that use it",
        "lifecycle": "move its policies to another lifecycle or storage unit first "
                     "(`cairn policy set POLICY storage_unit STU`)",
        "storage-unit-group": "move its policies to a storage unit, lifecycle or another "
                              "group first (`cairn policy set POLICY storage_unit STU`)",
        "host": "remove it from those policies and delete its storage servers first",
        "policy": "wait for its jobs to end or cancel them first"}


def delete(db, kind, name):
    oid = _object_id(db, kind, name)
    deps = dependents(db, kind, name)
    if deps:
        raise ValidationError(f"{kind.replace('-', ' ')} {name!r} is still used by "
                              f"{describe(deps)}", hint=_HOW[kind])
    with db.tx() as c:
        c.execute(f"DELETE FROM {_TABLE[kind]} WHERE id=?", (oid,))
    return {"deleted": name, "kind": kind}


def update(db, config, kind, name, **changes):
    """Changes the given attributes; unknown or fixed ones are refused by name. Returns the
    object as it is now."""
    oid = _object_id(db, kind, name)
    obj = config.storage_server(name) if kind == "storage-server" else None
    allowed = editable(kind, obj)
    for k in changes:
        if k not in allowed:
            raise _settings_refusal(kind, name, k, obj, allowed)
    values = _server_values(obj, changes) if kind == "storage-server" else {}
    if kind == "host":
        host = config.host(name)
        for k in ("port", "user", "key_file", "data_address"):
            if k in changes and host["kind"] == "local" and changes[k] not in (None, ""):
                raise ValidationError(f"host {name!r} is this machine; it has no {k}")
        if "port" in changes and host["kind"] == "ssh":
            values["port"] = check_int("port", changes["port"], 1, 65535)
        if "user" in changes:
            values["user"] = changes["user"] or None
        if changes.get("key_file"):
            path = os.path.abspath(os.path.expanduser(changes["key_file"]))
            if not os.path.isfile(path):
                raise ValidationError(f"key file {path} does not exist")
            values["key_file"] = path
        elif "key_file" in changes:
            values["key_file"] = None
        if "data_address" in changes:
            a = changes["data_address"] or None
            if a is not None and not ADDRESS_RE.match(a):
                raise ValidationError(f"data address {a!r} is not valid")
            values["data_address"] = a
        if "max_jobs" in changes:
            # empty: the master's limit of jobs per client applies
            values["max_jobs"] = (None if changes["max_jobs"] in (None, "") else
                                  check_int("maximum jobs", changes["max_jobs"], 1, 1000))
        if "agent_env" in changes:
            env = check_agent_env(changes["agent_env"])
            values["agent_env"] = json.dumps(env, sort_keys=True) if env else None
        if "dedup" in changes:
            values["dedup"] = check_dedup_mode(changes["dedup"], host=True)
    elif kind == "disk-pool":
        pool = config.disk_pool(name)
        hw = check_int("high-water mark", changes.get("high_water", pool["high_water"]), 1, 100)
        lw = check_int("low-water mark", changes.get("low_water", pool["low_water"]), 0, 100)
        if lw >= hw:
            raise ValidationError(f"low-water mark {lw}% must be below the high-water mark "
                                  f"{hw}%")
        values["high_water"], values["low_water"] = hw, lw
        if "max_io_streams" in changes:
            m = changes["max_io_streams"]
            values["max_io_streams"] = (None if m in (None, "", 0)
                                        else check_int("maximum I/O streams", m, 1,
                                                       MAX_IO_STREAMS))
        if "compact_below" in changes:
            values["compact_below"] = check_compact_below(changes["compact_below"],
                                                          pool["server_type"])
        if "verify_every" in changes:
            values["verify_every"] = check_verify_every(changes["verify_every"])
        if "verify_max_mb_s" in changes:
            values["verify_max_mb_s"] = check_verify_pace(changes["verify_max_mb_s"])
    elif kind == "storage-unit":
        if "max_concurrent_jobs" in changes:
            values["max_concurrent_jobs"] = check_int(
                "maximum concurrent jobs", changes["max_concurrent_jobs"], 1,
                MAX_CONCURRENT_JOBS)
    elif kind == "policy":
        values.update(_policy_target(db, changes))
        if "priority" in changes:
            values["priority"] = check_int("priority", changes["priority"], 0, 99999)
        for k in ("multiple_streams", "skip_nodump", "active"):
            if k in changes:
                values[k] = int(bool(changes[k]))
        if "checksum" in changes:
            if changes["checksum"] not in CHECKSUMS:
                raise ValidationError(f"checksum {changes['checksum']!r} is unknown",
                                      hint=f"choose one of: {', '.join(CHECKSUMS)}")
            values["checksum"] = changes["checksum"]
        if "snapshot" in changes:
            values["snapshot"] = check_snapshot_mode(changes["snapshot"])
        if "file_list" in changes:
            values["file_list"] = check_file_list(changes["file_list"])
        if "dedup" in changes:
            values["dedup"] = check_dedup_mode(changes["dedup"])
        values.update(_policy_compression(db, config, oid, changes, values))
    if "comment" in changes:
        c = changes["comment"] or ""
        if len(c) > 1000 or "\0" in c:
            raise ValidationError("the comment is too long or contains a NUL byte",
                                  hint="keep it under 1000 characters")
        values["comment"] = c
    if values:
        cols = ", ".join(f"{k}=?" for k in values)
        with db.tx() as c:
            c.execute(f"UPDATE {_TABLE[kind]} SET {cols} WHERE id=?", (*values.values(), oid))
    return get(config, kind, name)


def _server_values(server, changes):
    """A storage server's settings changed: its options, checked whole by its type before
    anything is written. The pool on the storage host needs no word of it: each backup is
    given the chunk sizes it cuts with."""
    settings = {k: v for k, v in changes.items() if k != "comment"}
    if not settings:
        return {}
    return {"options": json.dumps(registry.get(server["type"]).change_options(server,
                                                                              settings))}


def _policy_compression(db, config, oid, changes, values):
    """A policy's compression and level, changed. client or server given (or client kept
    while the policy moves) is refused where a storage unit it writes to does not compress
    (every shipped type does: advanced-disk compresses its image files)."""
    out = {}
    if "compression" in changes:
        out["compression_at"] = check_compression(changes["compression"])
    if "compression_level" in changes:
        out["compression_level"] = check_level(changes["compression_level"])
    row = db.one("SELECT storage_unit_id, storage_unit_group_id, compression_at FROM policies "
                 "WHERE id=?", (oid,))
    at = out.get("compression_at", row["compression_at"])
    moved = "storage_unit_id" in values or "storage_unit_group_id" in values
    if "compression" in changes or (moved and at == "client"):
        sid = values.get("storage_unit_id", row["storage_unit_id"])
        gid = values.get("storage_unit_group_id", row["storage_unit_group_id"])
        config.check_compression_target(at, [sid] + config.group_unit_ids(gid))
    return out


def _policy_target(db, changes):
    """A policy's storage unit, lifecycle or storage unit group, changed: one replaces the
    others. A lifecycle or group of "none" (or empty) leaves the policy on the storage unit it
    writes to now (the lifecycle's backup unit, the group's first unit)."""
    given = [k for k in ("storage_unit", "lifecycle", "storage_unit_group") if k in changes]
    if len(given) > 1:
        raise ValidationError("give a policy a storage unit, a lifecycle or a storage unit "
                              "group, one at a time")
    if "storage_unit" in changes:
        return {"storage_unit_id": id_of(db, "storage_units", "storage unit",
                                         changes["storage_unit"], "storage-unit create"),
                "lifecycle_id": None, "storage_unit_group_id": None}
    if not given:
        return {}
    key = given[0]
    name = changes[key]
    if name in (None, "") or str(name).strip().lower() in ("none", "no", "off"):
        return {f"{key}_id": None}
    if key == "storage_unit_group":
        sid, gid = StorageUnitGroups(db).target(name)
        return {"storage_unit_id": sid, "lifecycle_id": None, "storage_unit_group_id": gid}
    stu, lid = Lifecycles(db).policy_target(lifecycle=name)
    return {"storage_unit_id": id_of(db, "storage_units", "storage unit", stu,
                                     "storage-unit create"), "lifecycle_id": lid,
            "storage_unit_group_id": None}


def get(config, kind, name):
    _check_kind(kind)
    if kind == "lifecycle":
        return Lifecycles(config.db).get(name)
    if kind == "storage-unit-group":
        return StorageUnitGroups(config.db).get(name)
    return {"host": config.host, "storage-server": config.storage_server,
            "disk-pool": config.disk_pool, "storage-unit": config.storage_unit,
            "policy": config.policy}[kind](name)
