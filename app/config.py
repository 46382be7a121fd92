"""Configuration objects (hosts, storage servers, disk pools, storage units, policies,
schedules) with their validation. Every rejected input gets a message that names the field,
what is wrong and how to fix it. Checks that need a host (does a volume exist there?) are the
master's; this module only guards the catalog."""

import datetime
import json
import os
import posixpath
import re

from app import timeutil
from app.errors import NotFound, ValidationError
from plugins.storage import registry
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


WEEK_HOURS = 7 * 24
_CLOCK_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def check_windows(windows):
    """Start windows of a schedule: a list (or its JSON text) of {"day": 0-6 (0 = Monday),
    "start": "HH:MM", "hours": length}. A window may run past midnight into the next day,
    Sunday's into Monday's. Returns the windows in a canonical form, in week order; an empty
    list means the schedule only runs when started by hand."""
    if windows is None:
        return []
    if isinstance(windows, str):
        try:
            windows = json.loads(windows) if windows.strip() else []
        except ValueError as e:
            raise ValidationError(f"start windows are not valid JSON: {e}",
                                  hint='write them like [{"day": 0, "start": "22:00", '
                                       '"hours": 6}]') from None
    if not isinstance(windows, (list, tuple)):
        raise ValidationError("start windows must be a list",
                              hint='write them like [{"day": 0, "start": "22:00", "hours": 6}]')
    out, spans = [], []
    for i, w in enumerate(windows, 1):
        what = f"start window {i}"
        if not isinstance(w, dict):
            raise ValidationError(f"{what} is not an object with day, start and hours")
        missing = [k for k in ("day", "start", "hours") if k not in w]
        if missing:
            raise ValidationError(f"{what} has no {', '.join(missing)}",
                                  hint='give day (0 = Monday), start ("HH:MM") and hours')
        extra = sorted(set(w) - {"day", "start", "hours"})
        if extra:
            raise ValidationError(f"{what} has unknown fields: {', '.join(extra)}")
        day, start, hours = w["day"], w["start"], w["hours"]
        if isinstance(day, bool) or not isinstance(day, int) or not 0 <= day <= 6:
            raise ValidationError(f"{what}: day {day!r} is not a day of the week",
                                  hint="use 0 (Monday) to 6 (Sunday)")
        m = _CLOCK_RE.match(start) if isinstance(start, str) else None
        if not m:
            raise ValidationError(f"{what}: start {start!r} is not a time of day",
                                  hint="write it as HH:MM on the 24-hour clock, e.g. 22:00")
        if isinstance(hours, bool) or not isinstance(hours, (int, float)) \
                or not 0 < hours <= WEEK_HOURS:
            raise ValidationError(f"{what}: length {hours!r} hours is out of range",
                                  hint=f"a window lasts more than 0 and at most {WEEK_HOURS} "
                                       "hours")
        begin = day * 24 * 60 + int(m.group(1)) * 60 + int(m.group(2))
        spans.append((begin, begin + round(hours * 60), i))
        out.append({"day": day, "start": start, "hours": hours})
    # Overlaps are compared around the week, so Sunday night's window meets Monday morning's.
    week = WEEK_HOURS * 60
    for a, (b1, e1, i) in enumerate(spans):
        for b2, e2, j in spans[a + 1:]:
            for shift in (-week, 0, week):
                if b1 < e2 + shift and b2 + shift < e1:
                    raise ValidationError(
                        f"start windows {i} ({_DAYS[out[i - 1]['day']]} {out[i - 1]['start']}) "
                        f"and {j} ({_DAYS[out[j - 1]['day']]} {out[j - 1]['start']}) overlap",
                        hint="merge them into one window")
    total = sum(e - b for b, e, _ in spans)
    if total > week:
        raise ValidationError("start windows add up to more than a week")
    out.sort(key=lambda w: (w["day"], w["start"]))
    return out


# ---- schedules: frequency, calendar, start windows as admins write them -------------------

SCHEDULE_TYPES = ("full", "differential", "cumulative")
#: how often a schedule with start windows but neither a frequency nor a calendar is due
DEFAULT_FREQUENCY = {"full": 7 * 86400, "differential": 86400, "cumulative": 86400}
#: shorter than this, back-up jobs would queue behind each other all day
MIN_FREQUENCY_S = 15 * 60
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_WINDOW_LENGTH_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(h|m|d)?$", re.I)
_DAY_GROUPS = {"daily": range(7), "everyday": range(7), "weekdays": range(5),
               "weekend": (5, 6), "weekends": (5, 6)}
_DAYS_HINT = "use mon, tue, wed, thu, fri, sat or sun (or 0 = Monday to 6 = Sunday)"


def parse_weekday(value, what="day of the week"):
    """0-6 (0 = Monday) from a number or an English day name (at least three letters:
    mon, tues, thursday)."""
    if isinstance(value, bool):
        raise ValidationError(f"{what} {value!r} is not a day of the week", hint=_DAYS_HINT)
    if isinstance(value, int):
        if 0 <= value <= 6:
            return value
        raise ValidationError(f"{what} {value} is not a day of the week", hint=_DAYS_HINT)
    if isinstance(value, str):
        t = value.strip().lower()
        if t.isdigit() and int(t) <= 6:
            return int(t)
        if len(t) >= 3:
            for i, name in enumerate(_DAYS):
                if name.lower().startswith(t):
                    return i
    raise ValidationError(f"{what} {value!r} is not a day of the week", hint=_DAYS_HINT)


def _day_spec(text):
    """Days of a start window as the CLI writes them: daily, weekdays, weekend, mon,
    mon,wed,fri or a range such as mon-fri (fri-mon wraps over the weekend)."""
    t = text.strip().lower()
    if t in _DAY_GROUPS:
        return list(_DAY_GROUPS[t])
    days = []
    for part in t.split(","):
        if "-" in part:
            a, _, b = part.partition("-")
            first, last = parse_weekday(a, "day"), parse_weekday(b, "day")
            days.extend((first + i) % 7 for i in range((last - first) % 7 + 1))
        else:
            days.append(parse_weekday(part, "day"))
    return sorted(set(days))


def parse_window_text(text):
    """One --window value, "DAYS HH:MM LENGTH" ("mon 22:00 8h", "daily 22:00 8h",
    "mon-fri 20:00 90m"), as start windows (one per day); check_windows checks them."""
    if not isinstance(text, str):
        raise ValidationError(f"start window {text!r} is not text")
    parts = text.split()
    hint = ('write it as "DAYS HH:MM LENGTH", e.g. "mon 22:00 8h", "daily 22:00 8h" or '
            '"mon-fri 20:00 90m"')
    if len(parts) != 3:
        raise ValidationError(f"start window {text!r} is not DAYS, a start time and a length",
                              hint=hint)
    days_text, start, length = parts
    try:
        days = _day_spec(days_text)
    except ValidationError as e:
        raise ValidationError(f"start window {text!r}: {e.message}",
                              hint="name the days as daily, weekdays, weekend, mon, mon,wed "
                                   "or mon-fri") from None
    if not _CLOCK_RE.match(start):
        raise ValidationError(f"start window {text!r}: start {start!r} is not a time of day",
                              hint="write it as HH:MM on the 24-hour clock, e.g. 22:00")
    m = _WINDOW_LENGTH_RE.match(length)
    if not m:
        raise ValidationError(f"start window {text!r}: length {length!r} is not a duration",
                              hint="give hours or minutes, e.g. 8h, 90m or 1d")
    per_unit = {"h": 60, "m": 1, "d": 24 * 60}[(m.group(2) or "h").lower()]
    minutes = round(float(m.group(1)) * per_unit)
    if minutes <= 0:
        raise ValidationError(f"start window {text!r} has no length",
                              hint="give a length of at least one minute, e.g. 8h")
    hours = minutes // 60 if minutes % 60 == 0 else round(minutes / 60, 4)
    return [{"day": d, "start": start, "hours": hours} for d in days]


def parse_windows_text(texts):
    """Every --window value at once (a string or a list of strings)."""
    if isinstance(texts, str):
        texts = [texts]
    out = []
    for t in texts or ():
        out.extend(parse_window_text(t))
    return out


def check_frequency(frequency):
    """Seconds from a duration ("12h", "1d", "1w") or a number of seconds; None when no
    frequency is given."""
    if frequency is None or (isinstance(frequency, str) and not frequency.strip()):
        return None
    hint = "use a number and a unit: 12h, 1d, 1w"
    if isinstance(frequency, bool):
        raise ValidationError(f"frequency {frequency!r} is not a duration", hint=hint)
    if isinstance(frequency, int):
        seconds = frequency
        timeutil.check_limit(seconds, "frequency")
    else:
        try:
            seconds = timeutil.parse_duration(frequency, limit=False)
        except ValidationError:
            raise ValidationError(f"frequency {frequency!r} is not a duration",
                                  hint=hint) from None
        timeutil.check_limit(seconds, "frequency", frequency)
        if seconds is None:
            raise ValidationError(f"frequency {frequency!r} is not a length of time",
                                  hint=hint + "; a schedule without start windows only runs "
                                              "when started by hand")
    if seconds < MIN_FREQUENCY_S:
        raise ValidationError(
            f"frequency {timeutil.format_duration(seconds) if seconds > 0 else frequency} "
            "is too short",
            hint=f"use at least {timeutil.format_duration(MIN_FREQUENCY_S)}")
    return seconds


def _as_list(value, what):
    if value is None:
        return []
    if isinstance(value, str):
        return [p for p in (x.strip() for x in value.split(",")) if p]
    if isinstance(value, (int, datetime.date)) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple, set)):
        return list(value)
    raise ValidationError(f"{what} must be a list", hint="give a list such as [1, 15, \"last\"]")


def check_calendar(calendar):
    """A calendar schedule's days: {"weekdays": [0-6 or day names], "monthdays": [1-31 or
    "last"], "exclude": ["YYYY-MM-DD", ...]} (or its JSON text). A window starting on a
    listed weekday or day of the month, and not on an excluded date, runs the schedule.
    Returns the canonical form (sorted, without repeats), or None for no calendar."""
    if calendar is None:
        return None
    if isinstance(calendar, str):
        if not calendar.strip():
            return None
        try:
            calendar = json.loads(calendar)
        except ValueError as e:
            raise ValidationError(f"the calendar is not valid JSON: {e}",
                                  hint='write it like {"weekdays": [0, 2], "monthdays": '
                                       '[1, "last"], "exclude": ["2026-12-25"]}') from None
    if not isinstance(calendar, dict):
        raise ValidationError("a calendar must be an object with weekdays, monthdays and "
                              "exclude", hint='e.g. {"weekdays": [0, 2]}')
    extra = sorted(set(calendar) - {"weekdays", "monthdays", "exclude"})
    if extra:
        raise ValidationError(f"the calendar has unknown fields: {', '.join(map(str, extra))}",
                              hint="use weekdays, monthdays and exclude")
    weekdays = sorted({parse_weekday(d, "calendar weekday")
                       for d in _as_list(calendar.get("weekdays"), "calendar weekdays")})
    monthdays, last = set(), False
    for d in _as_list(calendar.get("monthdays"), "calendar days of the month"):
        if isinstance(d, str) and d.strip().lower() == "last":
            last = True
            continue
        n = d
        if isinstance(d, str) and d.strip().isdigit():
            n = int(d.strip())
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 31:
            raise ValidationError(f"calendar day of the month {d!r} is not valid",
                                  hint="use 1 to 31, or 'last' for the last day of each month")
        monthdays.add(n)
    exclude = set()
    for d in _as_list(calendar.get("exclude"), "calendar exclusion dates"):
        if isinstance(d, datetime.date):
            d = d.isoformat()
        ok = isinstance(d, str) and _DATE_RE.match(d.strip())
        if ok:
            try:
                datetime.date.fromisoformat(d.strip())
            except ValueError:
                ok = False
        if not ok:
            raise ValidationError(f"exclusion date {d!r} is not a date",
                                  hint="write it as YYYY-MM-DD, e.g. 2026-12-25")
        exclude.add(d.strip())
    if not weekdays and not monthdays and not last:
        raise ValidationError("a calendar schedule needs at least one weekday or day of the "
                              "month", hint="e.g. weekdays mon,wed or days of the month "
                                            "1,15,last")
    return {"weekdays": weekdays, "monthdays": sorted(monthdays) + (["last"] if last else []),
            "exclude": sorted(exclude)}


def calendar_from_text(weekdays=None, monthdays=None, exclude=None):
    """The calendar the CLI's --weekdays mon,wed --monthdays 1,15,last --exclude-date
    YYYY-MM-DD describe, or None when none of them is given."""
    if not weekdays and not monthdays:
        if exclude:
            raise ValidationError("exclusion dates belong to a calendar schedule",
                                  hint="give --weekdays or --monthdays as well, or drop "
                                       "--exclude-date")
        return None
    return check_calendar({"weekdays": weekdays or [], "monthdays": monthdays or [],
                           "exclude": list(exclude or [])})


def calendar_matches(calendar, day):
    """Whether a calendar runs on `day` (a datetime.date)."""
    if day.isoformat() in calendar["exclude"]:
        return False
    if day.weekday() in calendar["weekdays"] or day.day in calendar["monthdays"]:
        return True
    return "last" in calendar["monthdays"] and \
        (day + datetime.timedelta(days=1)).month != day.month


def _schedule_timing(row):
    """How a schedule row runs by itself: its frequency (given, or the default of its type),
    calendar and windows, and its kind (manual: no windows, so it never fires)."""
    windows = json.loads(row["windows"])
    calendar = json.loads(row["calendar"]) if row["calendar"] else None
    freq = row["frequency_s"]
    kind = "manual" if not windows else "calendar" if calendar else "frequency"
    return {"frequency_s": freq,
            "frequency": timeutil.format_duration(freq) if freq else None,
            "windows": windows, "calendar": calendar, "kind": kind}


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
        if path is not None:
            path = check_abs_path("storage path", path)
        elif plugin.needs_path:
            raise ValidationError(f"a {type} storage server needs --path DIR",
                                  hint="the directory on the storage server that holds the "
                                       "pool, on a local or parallel file system")
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
            vols.append(p)
        for p in vols:
            other = self.db.one(
                "SELECT d.name FROM pool_volumes v JOIN disk_pools d ON d.id=v.pool_id "
                "JOIN storage_servers s ON s.id=d.server_id WHERE v.path=? AND s.name=?",
                (p, server))
            if other:
                raise ValidationError(f"volume {p} already belongs to disk pool {other[0]!r}")
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
    def add_policy(self, name, *, storage_unit, priority=0, compression=False, encryption=False,
                   multiple_streams=False, checksum="crc32", snapshot="none",
                   file_list="auto", dedup="server", skip_nodump=False, comment="",
                   lifecycle_id=None):
        _unique(self.db, "policies", "policy", name)
        check_snapshot_mode(snapshot)
        check_file_list(file_list)
        check_dedup_mode(dedup)
        sid = id_of(self.db, "storage_units", "storage unit", storage_unit,
                     "storage-unit create")
        prio = check_int("priority", priority, 0, 99999)
        if compression:
            raise ValidationError("compression is not available for advanced-disk storage in "
                                  "this version", hint="create the policy without --compression")
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
            c.execute("INSERT INTO policies(name, storage_unit_id, priority, compression, "
                      "encryption, multiple_streams, checksum, snapshot, file_list, dedup, "
                      "skip_nodump, comment, created, lifecycle_id) "
                      "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      (name, sid, prio, int(bool(compression)), int(bool(encryption)),
                       int(bool(multiple_streams)), checksum, snapshot, file_list, dedup,
                       int(bool(skip_nodump)), comment, timeutil.iso(timeutil.now()),
                       lifecycle_id))
        return self.policy(name)

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
        if type not in SCHEDULE_TYPES:
            raise ValidationError(f"schedule type {type!r} is unknown",
                                  hint="choose full, differential or cumulative")
        if self.db.one("SELECT 1 FROM schedules WHERE policy_id=? AND name=?", (pid, name)):
            raise ValidationError(f"policy {policy!r} already has a schedule named {name!r}")
        ret = timeutil.parse_duration(retention)
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
        with self.db.tx() as c:
            c.execute("INSERT INTO schedules(policy_id, name, type, retention_s, frequency_s, "
                      "windows, calendar, read_all) VALUES (?,?,?,?,?,?,?,?)",
                      (pid, name, type, -1 if ret is None else ret, freq,
                       json.dumps(wins), None if cal is None else json.dumps(cal),
                       int(read_all)))
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
        for k in ("compression", "encryption", "multiple_streams", "skip_nodump", "active"):
            d[k] = bool(d[k])
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
        return d


_POOL_SQL = ("SELECT d.*, s.name AS server, s.type AS server_type, h.name AS host "
             "FROM disk_pools d JOIN storage_servers s ON s.id=d.server_id "
             "JOIN hosts h ON h.id=s.host_id")
_STU_SQL = ("SELECT u.*, d.name AS pool, s.name AS server, h.name AS host, "
            "(SELECT count(*) FROM jobs j WHERE j.storage_unit=u.name AND j.state='active') "
            "AS active_jobs FROM storage_units u JOIN disk_pools d ON d.id=u.pool_id "
            "JOIN storage_servers s ON s.id=d.server_id JOIN hosts h ON h.id=s.host_id")
_POLICY_SQL = ("SELECT p.*, u.name AS storage_unit, l.name AS lifecycle FROM policies p "
               "JOIN storage_units u ON u.id=p.storage_unit_id "
               "LEFT JOIN lifecycles l ON l.id=p.lifecycle_id")


def _host_dict(row):
    d = dict(row)
    env = d.get("agent_env")
    d["agent_env"] = json.loads(env) if env else {}
    return d


def _server_dict(row):
    d = dict(row)
    d["options"] = json.loads(d["options"]) if d.get("options") else {}
    return d
