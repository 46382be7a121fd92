"""Configuration objects (hosts, storage servers, disk pools, storage units, policies,
schedules) with their validation. Every rejected input gets a message that names the field,
what is wrong and how to fix it. Checks that need a host (does a volume exist there?) are the
master's; this module only guards the catalog."""

import json
import os
import posixpath
import re

from app import shared_volumes, timeutil
from app.errors import NotFound, ValidationError
from app.schedule_rules import _DAYS, DEFAULT_FREQUENCY, SCHEDULE_TYPES, _schedule_timing, \
    check_calendar, check_frequency, check_windows
from plugins.storage import registry
from plugins.storage.dedup.master import check_compression, check_level, \
    compression_refusal, default_compression
from plugins.storage.dedup.master import check_mode as check_dedup_mode

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
ADDRESS_RE = re.compile(r"^[A-Za-z0-9._:\-\[\]%]+$")
MAX_CONCURRENT_JOBS = 1000
CHECKSUMS = ("crc32", "sha256")  # the agent's tarfmt.PIECE_HASHES
# none: the live tree; filesystem: a snapshot of the whole Storage Scale file system holding
# each selection; fileset: a snapshot of the fileset holding it (independent filesets).
SNAPSHOT_MODES = ("none", "filesystem", "fileset")
# auto: the Storage Scale policy engine lists the files where the selection is on Storage
# Scale, a tree walk elsewhere; walk: always walk.
FILE_LIST_MODES = ("auto", "walk")
# Variables a host's agent may be started with: Cairn's own, and the search paths (PYTHONPATH:
# where the host's python3 finds accelerators such as pyfastcdc installed outside its own).
AGENT_ENV_RE = re.compile(r"^(CAIRN_[A-Z0-9_]+|PATH|PYTHONPATH|TMPDIR)$")


def check_snapshot_mode(mode):
    if mode not in SNAPSHOT_MODES:
        raise ValidationError(f"snapshot mode {mode!r} is unknown",
                              hint="choose none, filesystem (a snapshot of the Storage Scale "
                                   "file system) or fileset (of the fileset holding each "
                                   "selection)")
    return mode


def check_file_list(mode):
    if mode not in FILE_LIST_MODES:
        raise ValidationError(f"file list mode {mode!r} is unknown",
                              hint="choose auto (the Storage Scale policy engine where it "
                                   "applies, a tree walk elsewhere) or walk")
    return mode


def check_agent_env(env):
    """{name: value} from a dict or "NAME=value,NAME2=value" text; empty -> None."""
    if env in (None, "", {}):
        return None
    if isinstance(env, str):
        pairs = {}
        for part in env.split(","):
            if not part.strip():
                continue
            name, eq, value = part.strip().partition("=")
            if not eq:
                raise ValidationError(f"agent environment entry {part.strip()!r} is not "
                                      "NAME=value", hint="e.g. CAIRN_MMFS_SUDO=1")
            pairs[name.strip()] = value.strip()
        env = pairs
    if not isinstance(env, dict):
        raise ValidationError("the agent environment must be NAME=value pairs")
    for name, value in env.items():
        if not AGENT_ENV_RE.match(str(name)):
            raise ValidationError(f"{name!r} cannot be set in an agent's environment",
                                  hint="allowed: CAIRN_* variables (e.g. CAIRN_MMFS_SUDO=1, "
                                       "CAIRN_MMFS_BIN=/usr/lpp/mmfs/bin), PATH, PYTHONPATH and "
                                       "TMPDIR")
        if not isinstance(value, str) or "\0" in value or "\n" in value or len(value) > 4096:
            raise ValidationError(f"the value of {name} is not valid",
                                  hint="a single line of text")
    return dict(env) or None
MAX_IO_STREAMS = 1000
# Space reclaim compacts a deduplicating pool's container whose live bytes are below this
# share of its size (percent): lower frees less space per reclaim but copies less.
DEFAULT_COMPACT_BELOW = 50


#: in a policy's selection list, starts a new data stream (multiple data streams)
STREAM_MARKER = "NEW_STREAM"

def check_name(kind, name):
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError(
            f"{kind} name {name!r} is not valid",
            hint="use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


def check_abs_path(what, path):
    if not isinstance(path, str) or not path:
        raise ValidationError(f"{what} is empty", hint="give an absolute path such as /data")
    if "\0" in path:
        raise ValidationError(f"{what} {path!r} contains a NUL byte")
    if not path.startswith("/"):
        raise ValidationError(f"{what} {path!r} is not an absolute path",
                              hint="start it with '/', e.g. /data/projects")
    parts = path.split("/")
    if ".." in parts:
        raise ValidationError(f"{what} {path!r} contains '..'", hint="give the path without '..'")
    norm = posixpath.normpath(path)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return norm


def check_int(what, value, lo, hi):
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{what} {value!r} is not a whole number") from None
    if not lo <= v <= hi:
        raise ValidationError(f"{what} {v} is out of range", hint=f"choose a value from {lo} to {hi}")
    return v


def check_compact_below(value, server_type):
    if not registry.can(server_type, "reclaim"):
        raise ValidationError("only a deduplicating pool has containers to compact",
                              hint="leave out the compaction threshold for this pool")
    if isinstance(value, bool):
        raise ValidationError(f"compaction threshold {value!r} is not a whole number")
    return check_int("compaction threshold", value, 0, 100)


def _exists(db, table, name):
    return db.one(f"SELECT id FROM {table} WHERE name=?", (name,)) is not None


def _unique(db, table, kind, name):
    check_name(kind, name)
    if _exists(db, table, name):
        raise ValidationError(f"a {kind} named {name!r} already exists",
                              hint="choose another name, or edit the existing one")


def id_of(db, table, kind, name, listing):
    """The row id of the `kind` named `name` in `table`; NotFound that lists the known ones,
    or says how to make one (`cairn LISTING ...`) when there are none."""
    row = db.one(f"SELECT id FROM {table} WHERE name=?", (name,))
    if row is None:
        known = [r[0] for r in db.all(f"SELECT name FROM {table} ORDER BY name")]
        plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
        hint = (f"known {plural}: {', '.join(known)}" if known
                else f"create one first with `cairn {listing} ...`")
        raise NotFound(f"there is no {kind} named {name!r}", hint=hint)
    return row[0]


def check_schedule(name, *, type, retention, frequency, windows, calendar, read_all):
    """A schedule's columns (type, retention_s, frequency_s, windows, calendar, read_all) from
    what an admin gives, checked as a whole: for a new schedule and for a changed one alike."""
    if type not in SCHEDULE_TYPES:
        raise ValidationError(f"schedule type {type!r} is unknown",
                              hint="choose full, differential, cumulative or catalog")
    ret = retention if isinstance(retention, int) and not isinstance(retention, bool) \
        else timeutil.parse_duration(retention)
    freq = check_frequency(frequency)
    cal = check_calendar(calendar)
    wins = check_windows(windows)
    if freq is not None and cal is not None:
        raise ValidationError("a schedule runs either every so often or on calendar days, "
                              "not both",
                              hint="drop the frequency, or drop the weekdays and days of "
                                   "the month")
    if cal is not None:
        if not wins:
            raise ValidationError("a calendar schedule needs a start window",
                                  hint='give the hours it may start in, e.g. '
                                       '--window "daily 22:00 8h"')
        window_days = {w["day"] for w in wins}
        lost = [_DAYS[d] for d in cal["weekdays"] if d not in window_days]
        if lost:
            raise ValidationError(
                f"the calendar names {', '.join(lost)} but no start window opens on "
                f"{'that day' if len(lost) == 1 else 'those days'}, so it would never run "
                "then", hint='add a window on those days, e.g. --window "daily 22:00 8h"')
    if wins and freq is None and cal is None:
        freq = DEFAULT_FREQUENCY[type]
    if not isinstance(read_all, bool):
        raise ValidationError(f"read_all {read_all!r} is not yes or no")
    if read_all and type != "full":
        raise ValidationError(
            f"only a full schedule can read every file ({name!r} is {type})",
            hint="incrementals read only what changed; make it a full schedule")
    return {"type": type, "retention_s": -1 if ret is None else ret, "frequency_s": freq,
            "windows": json.dumps(wins), "calendar": None if cal is None else json.dumps(cal),
            "read_all": int(read_all)}


class Config:
    def __init__(self, db):
        self.db = db

    # ---- hosts ---------------------------------------------------------------------------
    def add_host(self, name, *, local=False, address=None, port=22, user=None, key_file=None,
                 data_address=None, comment=""):
        _unique(self.db, "hosts", "host", name)
        if local:
            if self.db.one("SELECT name FROM hosts WHERE kind='local'") is not None:
                existing = self.db.one("SELECT name FROM hosts WHERE kind='local'")[0]
                raise ValidationError(f"this machine is already registered as host {existing!r}",
                                      hint="a catalog has one local host")
            if address:
                raise ValidationError("a local host takes no address",
                                      hint="use --local or --address, not both")
            kind, port, user, key_file = "local", None, None, None
        else:
            if not address:
                raise ValidationError(f"host {name!r} needs an address",
                                      hint="give --address HOST (or --local for this machine)")
            if not ADDRESS_RE.match(address):
                raise ValidationError(f"address {address!r} is not a host name or IP address")
            port = check_int("port", port, 1, 65535)
            if key_file:
                key_file = os.path.abspath(os.path.expanduser(key_file))
                if not os.path.isfile(key_file):
                    raise ValidationError(f"key file {key_file} does not exist",
                                          hint="give the path of a private key readable here")
                if not os.access(key_file, os.R_OK):
                    raise ValidationError(f"key file {key_file} is not readable")
            if user is not None and not re.match(r"^[A-Za-z0-9._][A-Za-z0-9._-]*\$?$", user):
                raise ValidationError(f"user name {user!r} is not valid")
            kind = "ssh"
        if data_address is not None and not ADDRESS_RE.match(data_address):
            raise ValidationError(f"data address {data_address!r} is not valid")
        with self.db.tx() as c:
            c.execute("INSERT INTO hosts(name, kind, address, port, user, key_file, data_address,"
                      " comment, created) VALUES (?,?,?,?,?,?,?,?,?)",
                      (name, kind, address, port, user, key_file, data_address, comment,
                       timeutil.iso(timeutil.now())))
        return self.host(name)

    def host(self, name):
        row = self.db.one("SELECT * FROM hosts WHERE name=?", (name,))
        if row is None:
            id_of(self.db, "hosts", "host", name, "host add")
        return _host_dict(row)

    def hosts(self):
        return [_host_dict(r) for r in self.db.all("SELECT * FROM hosts ORDER BY name")]

    def local_host(self):
        row = self.db.one("SELECT * FROM hosts WHERE kind='local'")
        return _host_dict(row) if row else None

    # ---- storage servers -----------------------------------------------------------------
    def validate_storage_server(self, name, *, type, host, path=None, options=None):
        """Checks a new storage server; returns (clean path, clean options or None)."""
        _unique(self.db, "storage_servers", "storage server", name)
        plugin = registry.require(type)
        id_of(self.db, "hosts", "host", host, "host add")
        if path is None:
            path = plugin.default_path(name)
        if path is not None:
            path = check_abs_path("storage path", path)
        elif plugin.needs_path:
            raise ValidationError(f"a {type} storage server needs --path DIR",
                                  hint="the directory on the storage server that holds the "
                                       "pool, on a local or parallel file system")
        if path is not None and plugin.makes_path:
            shared_volumes.check(self.db, [path], host, what="storage path")
        return path, plugin.check_options(options)

    def add_storage_server(self, name, *, type, host, path=None, options=None, comment=""):
        path, options = self.validate_storage_server(name, type=type, host=host, path=path,
                                                     options=options)
        host_id = id_of(self.db, "hosts", "host", host, "host add")
        with self.db.tx() as c:
            c.execute("INSERT INTO storage_servers(name, type, host_id, path, options, comment, "
                      "created) VALUES (?,?,?,?,?,?,?)",
                      (name, type, host_id, path, json.dumps(options) if options else None,
                       comment, timeutil.iso(timeutil.now())))
        return self.storage_server(name)

    def storage_server(self, name):
        row = self.db.one("SELECT s.*, h.name AS host FROM storage_servers s "
                          "JOIN hosts h ON h.id=s.host_id WHERE s.name=?", (name,))
        if row is None:
            id_of(self.db, "storage_servers", "storage server", name, "storage-server create")
        return _server_dict(row)

    def storage_servers(self):
        return [_server_dict(r) for r in self.db.all(
            "SELECT s.*, h.name AS host FROM storage_servers s JOIN hosts h ON h.id=s.host_id "
            "ORDER BY s.name")]

    # ---- disk pools ------------------------------------------------------------------------
    def validate_disk_pool(self, name, *, server, volumes, high_water=98, low_water=80,
                           max_io_streams=None, compact_below=None):
        _unique(self.db, "disk_pools", "disk pool", name)
        id_of(self.db, "storage_servers", "storage server", server, "storage-server create")
        srv = self.storage_server(server)
        # The server's type says which volumes its pool has (dedup: its path, one pool).
        other = self.db.one("SELECT d.name FROM disk_pools d JOIN storage_servers s ON "
                            "s.id=d.server_id WHERE s.name=?", (srv["name"],))
        volumes = registry.of_server(srv).pool_volumes(
            srv, [check_abs_path("volume", v) for v in volumes or []], other and other[0])
        if not volumes:
            raise ValidationError("a disk pool needs at least one volume",
                                  hint="give --volume PATH (a directory on the storage server)")
        vols = []
        for v in volumes:
            p = check_abs_path("volume", v)
            if p in vols:
                raise ValidationError(f"volume {p} is given twice")
            for q in vols:
                rel = shared_volumes.relation(p, q)
                if rel:
                    raise ValidationError(f"volume {p} {rel} volume {q}, given too",
                                          hint="give a pool's volumes side by side, never "
                                               "one inside another")
            vols.append(p)
        for p in vols:
            other = self.db.one(
                "SELECT d.name FROM pool_volumes v JOIN disk_pools d ON d.id=v.pool_id "
                "JOIN storage_servers s ON s.id=d.server_id WHERE v.path=? AND s.name=?",
                (p, server))
            if other:
                raise ValidationError(f"volume {p} already belongs to disk pool {other[0]!r}")
        shared_volumes.check(self.db, vols, srv["host"], server=server)
        hw = check_int("high-water mark", high_water, 1, 100)
        lw = check_int("low-water mark", low_water, 0, 100)
        if lw >= hw:
            raise ValidationError(f"low-water mark {lw}% must be below the high-water mark {hw}%")
        if max_io_streams is not None:
            max_io_streams = check_int("maximum I/O streams", max_io_streams, 1, MAX_IO_STREAMS)
        compact_below = DEFAULT_COMPACT_BELOW if compact_below is None else \
            check_compact_below(compact_below, srv["type"])
        return vols, hw, lw, max_io_streams, compact_below

    def add_disk_pool(self, name, *, server, volumes, high_water=98, low_water=80,
                      max_io_streams=None, compact_below=None, comment=""):
        vols, hw, lw, mio, cb = self.validate_disk_pool(
            name, server=server, volumes=volumes, high_water=high_water, low_water=low_water,
            max_io_streams=max_io_streams, compact_below=compact_below)
        sid = id_of(self.db, "storage_servers", "storage server", server, "storage-server create")
        with self.db.tx() as c:
            cur = c.execute("INSERT INTO disk_pools(name, server_id, high_water, low_water, "
                            "max_io_streams, compact_below, comment, created) "
                            "VALUES (?,?,?,?,?,?,?,?)",
                            (name, sid, hw, lw, mio, cb, comment,
                             timeutil.iso(timeutil.now())))
            pid = cur.lastrowid
            for i, p in enumerate(vols):
                c.execute("INSERT INTO pool_volumes(pool_id, path, position) VALUES (?,?,?)",
                          (pid, p, i))
        return self.disk_pool(name)

    def disk_pool(self, name):
        row = self.db.one(_POOL_SQL + " WHERE d.name=?", (name,))
        if row is None:
            id_of(self.db, "disk_pools", "disk pool", name, "disk-pool create")
        return self._pool_dict(row)

    def disk_pools(self):
        return [self._pool_dict(r) for r in self.db.all(_POOL_SQL + " ORDER BY d.name")]

    def _pool_dict(self, row):
        d = dict(row)
        d["volumes"] = [r[0] for r in self.db.all(
            "SELECT path FROM pool_volumes WHERE pool_id=? ORDER BY position", (row["id"],))]
        return d

    # ---- storage units -------------------------------------------------------------------
    def add_storage_unit(self, name, *, pool, max_concurrent_jobs=1, comment=""):
        _unique(self.db, "storage_units", "storage unit", name)
        pid = id_of(self.db, "disk_pools", "disk pool", pool, "disk-pool create")
        mcj = check_int("maximum concurrent jobs", max_concurrent_jobs, 1, MAX_CONCURRENT_JOBS)
        with self.db.tx() as c:
            c.execute("INSERT INTO storage_units(name, pool_id, max_concurrent_jobs, comment, "
                      "created) VALUES (?,?,?,?,?)",
                      (name, pid, mcj, comment, timeutil.iso(timeutil.now())))
        return self.storage_unit(name)

    def storage_unit(self, name):
        row = self.db.one(_STU_SQL + " WHERE u.name=?", (name,))
        if row is None:
            id_of(self.db, "storage_units", "storage unit", name, "storage-unit create")
        return dict(row)

    def storage_units(self):
        return [dict(r) for r in self.db.all(_STU_SQL + " ORDER BY u.name")]

    # ---- policies ------------------------------------------------------------------------
    def add_policy(self, name, *, storage_unit, priority=0, compression=None, encryption=False,
                   multiple_streams=False, checksum="crc32", snapshot="none",
                   file_list="auto", dedup="server", skip_nodump=False, comment="",
                   lifecycle_id=None, storage_unit_group_id=None, compression_level=None):
        """compression: where backups are compressed (server, client, off; True: client;
        None or False: the default: server where a storage unit deduplicates, off where all
        are advanced-disk) and compression_level its zstd level. Asked for explicitly on a
        storage unit whose type does not compress, client and server are refused."""
        _unique(self.db, "policies", "policy", name)
        at, level = check_compression(compression), check_level(compression_level)
        check_snapshot_mode(snapshot)
        check_file_list(file_list)
        check_dedup_mode(dedup)
        sid = id_of(self.db, "storage_units", "storage unit", storage_unit,
                     "storage-unit create")
        prio = check_int("priority", priority, 0, 99999)
        units = [sid] + self.group_unit_ids(storage_unit_group_id)
        if compression not in (None, False, ""):
            self.check_compression_target(at, units)
        else:
            at = default_compression(self.unit_types(units))
        if encryption:
            raise ValidationError("encryption at rest is a property of the pool, not of a "
                                  "policy",
                                  hint="create a dedup storage server with --encrypt and "
                                       "point the policy's storage unit at its pool")
        if checksum not in CHECKSUMS:
            raise ValidationError(f"checksum {checksum!r} is unknown",
                                  hint="choose crc32 (fast; catches corruption) or sha256 "
                                       "(also evidence against tampering; costs CPU)")
        with self.db.tx() as c:
            c.execute("INSERT INTO policies(name, storage_unit_id, priority, compression_at, "
                      "compression_level, encryption, multiple_streams, checksum, snapshot, "
                      "file_list, dedup, skip_nodump, comment, created, lifecycle_id, "
                      "storage_unit_group_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      (name, sid, prio, at, level, int(bool(encryption)),
                       int(bool(multiple_streams)), checksum, snapshot, file_list, dedup,
                       int(bool(skip_nodump)), comment, timeutil.iso(timeutil.now()),
                       lifecycle_id, storage_unit_group_id))
        return self.policy(name)

    def group_unit_ids(self, group_id):
        """The storage units of a storage unit group (none for None)."""
        if group_id is None:
            return []
        return [r[0] for r in self.db.all("SELECT storage_unit_id FROM "
                                          "storage_unit_group_members WHERE group_id=?",
                                          (group_id,))]

    def unit_types(self, unit_ids):
        """The storage types (master halves) of storage units, by id."""
        out = []
        for uid in unit_ids:
            row = self.db.one("SELECT s.type FROM storage_units u JOIN disk_pools d ON "
                              "d.id=u.pool_id JOIN storage_servers s ON s.id=d.server_id "
                              "WHERE u.id=?", (uid,))
            out.append(registry.get(row["type"]) if row else None)
        return out

    def check_compression_target(self, at, unit_ids):
        """Refuses compression `at` when a storage unit the policy writes to does not
        compress (advanced-disk), naming the storage type."""
        for uid in unit_ids:
            row = self.db.one("SELECT u.name, s.type FROM storage_units u JOIN disk_pools d ON "
                              "d.id=u.pool_id JOIN storage_servers s ON s.id=d.server_id "
                              "WHERE u.id=?", (uid,))
            refusal = row and compression_refusal(at, registry.get(row["type"]), row["name"])
            if refusal:
                raise refusal

    def add_policy_client(self, policy, host):
        pid = id_of(self.db, "policies", "policy", policy, "policy create")
        hid = id_of(self.db, "hosts", "host", host, "host add")
        if self.db.one("SELECT 1 FROM policy_clients WHERE policy_id=? AND host_id=?",
                       (pid, hid)):
            raise ValidationError(f"{host!r} is already a client of policy {policy!r}")
        with self.db.tx() as c:
            c.execute("INSERT INTO policy_clients(policy_id, host_id) VALUES (?,?)", (pid, hid))
        return self.policy(policy)

    def add_policy_selection(self, policy, path):
        pid = id_of(self.db, "policies", "policy", policy, "policy create")
        if str(path).strip() == STREAM_MARKER:
            # Markers repeat; each row gets a number so the list keeps its order and its
            # uniqueness. The policy shows them as NEW_STREAM.
            n = self.db.one("SELECT count(*) FROM policy_selections WHERE policy_id=? AND "
                            "path LIKE ?", (pid, STREAM_MARKER + ":%"))[0]
            with self.db.tx() as c:
                c.execute("INSERT INTO policy_selections(policy_id, path) VALUES (?,?)",
                          (pid, f"{STREAM_MARKER}:{n + 1}"))
            return self.policy(policy)
        p = check_abs_path("backup selection", path)
        if self.db.one("SELECT 1 FROM policy_selections WHERE policy_id=? AND path=?", (pid, p)):
            raise ValidationError(f"{p} is already a backup selection of policy {policy!r}")
        with self.db.tx() as c:
            c.execute("INSERT INTO policy_selections(policy_id, path) VALUES (?,?)", (pid, p))
        return self.policy(policy)

    def add_schedule(self, policy, name, *, type, retention="2w", frequency=None, windows=None,
                     calendar=None, read_all=False):
        """A schedule of a policy. It runs by itself in its start windows: either every
        `frequency` ("12h", "1d", "1w"), or on the days of a `calendar` (see check_calendar);
        with windows but neither, a full is due weekly and an incremental daily. Without
        windows it only runs when started by hand. read_all: a full whose backups read every
        file instead of trusting the files cache (e.g. a monthly one beside nightly fulls)."""
        pid = id_of(self.db, "policies", "policy", policy, "policy create")
        check_name("schedule", name)
        if self.db.one("SELECT 1 FROM schedules WHERE policy_id=? AND name=?", (pid, name)):
            raise ValidationError(f"policy {policy!r} already has a schedule named {name!r}")
        row = check_schedule(name, type=type, retention=retention, frequency=frequency,
                             windows=windows, calendar=calendar, read_all=read_all)
        with self.db.tx() as c:
            c.execute("INSERT INTO schedules(policy_id, name, type, retention_s, frequency_s, "
                      "windows, calendar, read_all) VALUES (?,?,?,?,?,?,?,?)",
                      (pid, name, *row.values()))
        return self.policy(policy)

    def policy(self, name):
        row = self.db.one(_POLICY_SQL + " WHERE p.name=?", (name,))
        if row is None:
            id_of(self.db, "policies", "policy", name, "policy create")
        return self._policy_dict(row)

    def policies(self):
        return [self._policy_dict(r) for r in self.db.all(_POLICY_SQL + " ORDER BY p.name")]

    def _policy_dict(self, row):
        d = dict(row)
        for k in ("encryption", "multiple_streams", "skip_nodump", "active"):
            d[k] = bool(d[k])
        d["compression"] = d.pop("compression_at", None) or "server"
        d["clients"] = [r[0] for r in self.db.all(
            "SELECT h.name FROM policy_clients c JOIN hosts h ON h.id=c.host_id "
            "WHERE c.policy_id=? ORDER BY h.name", (row["id"],))]
        d["selections"] = [STREAM_MARKER if r[0].startswith(STREAM_MARKER + ":") else r[0]
                           for r in self.db.all("SELECT path FROM policy_selections WHERE "
                                                "policy_id=? ORDER BY id", (row["id"],))]
        d["schedules"] = [
            {"name": r["name"], "type": r["type"],
             "retention": timeutil.format_duration(None if r["retention_s"] < 0
                                                   else r["retention_s"]),
             "retention_s": None if r["retention_s"] < 0 else r["retention_s"],
             "read_all": bool(r["read_all"]), **_schedule_timing(r)}
            for r in self.db.all("SELECT * FROM schedules WHERE policy_id=? ORDER BY id",
                                 (row["id"],))]
        # excludes: for every client; client_excludes: {client: its own}
        d["excludes"], d["client_excludes"] = [], {}
        for r in self.db.all("SELECT e.pattern, h.name FROM policy_excludes e LEFT JOIN hosts "
                             "h ON h.id=e.host_id WHERE e.policy_id=? ORDER BY e.id",
                             (row["id"],)):
            if r[1] is None:
                d["excludes"].append(r[0])
            else:
                d["client_excludes"].setdefault(r[1], []).append(r[0])
        return d


_POOL_SQL = ("SELECT d.*, s.name AS server, s.type AS server_type, h.name AS host "
             "FROM disk_pools d JOIN storage_servers s ON s.id=d.server_id "
             "JOIN hosts h ON h.id=s.host_id")
_STU_SQL = ("SELECT u.*, d.name AS pool, s.name AS server, h.name AS host, "
            "(SELECT count(*) FROM jobs j WHERE j.storage_unit=u.name AND j.state='active') "
            "AS active_jobs FROM storage_units u JOIN disk_pools d ON d.id=u.pool_id "
            "JOIN storage_servers s ON s.id=d.server_id JOIN hosts h ON h.id=s.host_id")
_POLICY_SQL = ("SELECT p.*, u.name AS storage_unit, l.name AS lifecycle, "
               "g.name AS storage_unit_group FROM policies p "
               "JOIN storage_units u ON u.id=p.storage_unit_id "
               "LEFT JOIN lifecycles l ON l.id=p.lifecycle_id "
               "LEFT JOIN storage_unit_groups g ON g.id=p.storage_unit_group_id")


def _host_dict(row):
    d = dict(row)
    env = d.get("agent_env")
    d["agent_env"] = json.loads(env) if env else {}
    return d


def _server_dict(row):
    d = dict(row)
    d["options"] = json.loads(d["options"]) if d.get("options") else {}
    return d
