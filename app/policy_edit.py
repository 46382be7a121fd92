"""A policy's clients, backup selections, schedules and excludes changed after it was created
(day two). Adding them is Config's (app/config.py); this module removes and changes them.

Jobs already queued or running keep what they were queued with (their selections, excludes,
schedule type and retention are in their parameters), as NetBackup's do: an edit applies to
the jobs queued after it, the scheduler's next pass included. Removing the last selection or
schedule is allowed: the policy then backs up nothing by itself until one is added; the
answer says which queued or running jobs keep the old values."""

import json

from app import backup_excludes
from app.config import STREAM_MARKER, check_abs_path, check_schedule, id_of
from app.errors import NotFound, ValidationError
from app.schedule_rules import DEFAULT_FREQUENCY

#: set_schedule's "not given" (None is a value: no frequency, no calendar)
UNSET = object()


def _pid(db, policy):
    return id_of(db, "policies", "policy", policy, "policy create")


def _jobs_note(db, policy, what, client=None):
    """A note that queued or running jobs keep what they were queued with, or []."""
    sql = "SELECT id FROM jobs WHERE policy=? AND state IN ('queued','active') AND type='backup'"
    args = [policy]
    if client is not None:
        sql += " AND client=?"
        args.append(client)
    ids = [str(r[0]) for r in db.all(sql + " ORDER BY id", args)]
    if not ids:
        return []
    shown = ", ".join(ids[:5]) + (f", … {len(ids) - 5} more" if len(ids) > 5 else "")
    if len(ids) == 1:
        return [f"1 queued or running job ({shown}) keeps the {what} it was queued with"]
    return [f"{len(ids)} queued or running jobs ({shown}) keep the {what} they were queued "
            "with"]


def with_warnings(doc, warnings):
    doc = dict(doc)
    doc["warnings"] = list(warnings)
    return doc


def remove_client(config, policy, host):
    db = config.db
    pid = _pid(db, policy)
    hid = id_of(db, "hosts", "host", host, "host add")
    pol = config.policy(policy)
    if host not in pol["clients"]:
        raise NotFound(f"{host!r} is not a client of policy {policy!r}",
                       hint="its clients: " + (", ".join(pol["clients"]) or "none"))
    with db.tx() as c:
        c.execute("DELETE FROM policy_clients WHERE policy_id=? AND host_id=?", (pid, hid))
        # its own excludes mean nothing without it
        c.execute("DELETE FROM policy_excludes WHERE policy_id=? AND host_id=?", (pid, hid))
    return with_warnings(config.policy(policy),
                         _jobs_note(db, policy, "client's backups", client=host))


def remove_selection(config, policy, path):
    db = config.db
    pid = _pid(db, policy)
    pol = config.policy(policy)
    if str(path).strip() == STREAM_MARKER:
        # the last marker goes: the streams after it join the one before
        row = db.one("SELECT id FROM policy_selections WHERE policy_id=? AND path LIKE ? "
                     "ORDER BY id DESC", (pid, STREAM_MARKER + ":%"))
    else:
        p = check_abs_path("backup selection", path)
        row = db.one("SELECT id FROM policy_selections WHERE policy_id=? AND path=?", (pid, p))
    if row is None:
        raise NotFound(f"{path!r} is not a backup selection of policy {policy!r}",
                       hint="its selections: " + (", ".join(pol["selections"]) or "none"))
    with db.tx() as c:
        c.execute("DELETE FROM policy_selections WHERE id=?", (row[0],))
    doc = config.policy(policy)
    warnings = _jobs_note(db, policy, "selections")
    if not [s for s in doc["selections"] if s != STREAM_MARKER]:
        warnings.append(f"policy {policy!r} has no backup selections left: its schedules "
                        "back up nothing until one is added")
    return with_warnings(doc, warnings)


def _stored_schedule(db, pid, policy, name):
    row = db.one("SELECT * FROM schedules WHERE policy_id=? AND name=?", (pid, name))
    if row is None:
        known = [r[0] for r in db.all("SELECT name FROM schedules WHERE policy_id=? "
                                      "ORDER BY id", (pid,))]
        raise NotFound(f"policy {policy!r} has no schedule named {name!r}",
                       hint="its schedules: " + (", ".join(known) or "none"))
    return row


def set_schedule(config, policy, name, *, type=UNSET, retention=UNSET, frequency=UNSET,
                 windows=UNSET, calendar=UNSET, read_all=UNSET):
    """Changes the given options of a schedule and keeps the others; the whole schedule is
    then checked as add_schedule checks a new one. A frequency given replaces a calendar and
    a calendar given replaces a frequency (a schedule has one or the other). windows=[]
    leaves it with no start window (it runs only when started by hand)."""
    db = config.db
    pid = _pid(db, policy)
    row = _stored_schedule(db, pid, policy, name)
    stored_cal = json.loads(row["calendar"]) if row["calendar"] else None
    freq = row["frequency_s"] if frequency is UNSET else frequency
    cal = stored_cal if calendar is UNSET else calendar
    if frequency is not UNSET and frequency is not None and calendar is UNSET:
        cal = None
    if calendar is not UNSET and calendar is not None and frequency is UNSET:
        freq = None
    new_type = row["type"] if type is UNSET else type
    if type is not UNSET and frequency is UNSET and calendar is UNSET and freq is not None \
            and freq == DEFAULT_FREQUENCY.get(row["type"]):
        freq = None     # the old type's default follows the type: the new default applies
    values = check_schedule(
        name, type=new_type,
        retention=(None if row["retention_s"] < 0 else row["retention_s"])
        if retention is UNSET else retention,
        frequency=freq, windows=json.loads(row["windows"]) if windows is UNSET else windows,
        calendar=cal, read_all=bool(row["read_all"]) if read_all is UNSET else read_all)
    if (row["type"] == "catalog") != (new_type == "catalog"):
        raise ValidationError(
            f"schedule {name!r} cannot change between a catalog backup and a client backup",
            hint="remove it and add a new schedule of the other kind")
    cols = ", ".join(f"{k}=?" for k in values)
    with db.tx() as c:
        c.execute(f"UPDATE schedules SET {cols} WHERE id=?", (*values.values(), row["id"]))
    return with_warnings(config.policy(policy), _jobs_note(db, policy, "schedule settings"))


def remove_schedule(config, policy, name):
    db = config.db
    pid = _pid(db, policy)
    row = _stored_schedule(db, pid, policy, name)
    with db.tx() as c:
        c.execute("DELETE FROM schedules WHERE id=?", (row["id"],))
    doc = config.policy(policy)
    warnings = _jobs_note(db, policy, "schedule type and retention")
    if not doc["schedules"]:
        warnings.append(f"policy {policy!r} has no schedules left: it runs only when started "
                        "by hand (a full)")
    return with_warnings(doc, warnings)


def _exclude_target(db, policy, client):
    pid = _pid(db, policy)
    if client is None:
        return pid, None
    hid = id_of(db, "hosts", "host", client, "host add")
    if not db.one("SELECT 1 FROM policy_clients WHERE policy_id=? AND host_id=?", (pid, hid)):
        raise ValidationError(f"{client!r} is not a client of policy {policy!r}",
                              hint=f"add it first with `cairn policy add-client {policy} "
                                   f"{client}`, or leave out --client")
    return pid, hid


def _exclude_row(db, pid, hid, pattern):
    return db.one("SELECT id FROM policy_excludes WHERE policy_id=? AND pattern=? AND "
                  + ("host_id IS NULL" if hid is None else "host_id=?"),
                  (pid, pattern) if hid is None else (pid, pattern, hid))


def add_exclude(config, policy, pattern, client=None):
    db = config.db
    pid, hid = _exclude_target(db, policy, client)
    p = backup_excludes.check_pattern(pattern)
    if _exclude_row(db, pid, hid, p):
        raise ValidationError(f"{p!r} is already excluded by policy {policy!r}"
                              + (f" for {client}" if client else ""))
    with db.tx() as c:
        c.execute("INSERT INTO policy_excludes(policy_id, host_id, pattern) VALUES (?,?,?)",
                  (pid, hid, p))
    return with_warnings(config.policy(policy), _jobs_note(db, policy, "excludes", client))


def remove_exclude(config, policy, pattern, client=None):
    db = config.db
    pid, hid = _exclude_target(db, policy, client)
    p = backup_excludes.check_pattern(pattern)
    row = _exclude_row(db, pid, hid, p)
    if row is None:
        pol = config.policy(policy)
        known = pol["client_excludes"].get(client, []) if client else pol["excludes"]
        raise NotFound(f"policy {policy!r} does not exclude {p!r}"
                       + (f" for {client}" if client else ""),
                       hint="its excludes" + (f" for {client}" if client else "") + ": "
                            + (", ".join(known) or "none"))
    with db.tx() as c:
        c.execute("DELETE FROM policy_excludes WHERE id=?", (row[0],))
    return with_warnings(config.policy(policy), _jobs_note(db, policy, "excludes", client))


def client_excludes(db, policy, client, c=None):
    """What one client's backups under a policy leave out: {"paths", "names"}."""
    q = (c or db.conn).execute(
        "SELECT e.pattern, h.name FROM policy_excludes e JOIN policies p ON p.id=e.policy_id "
        "LEFT JOIN hosts h ON h.id=e.host_id WHERE p.name=? ORDER BY e.id", (policy,))
    rows = q.fetchall()
    return backup_excludes.job_excludes([r[0] for r in rows if r[1] is None],
                                        [r[0] for r in rows if r[1] == client])


_SCHEDULE_KEYS = ("type", "retention", "frequency", "windows", "calendar", "read_all")


def _schedule_columns(name, s):
    return check_schedule(name, type=s["type"], retention=s.get("retention", "2w"),
                          frequency=s.get("frequency"), windows=s.get("windows"),
                          calendar=s.get("calendar"), read_all=bool(s.get("read_all")))


def change_lists(master, policy, *, clients=None, selections=None, schedules=None,
                 excludes=None):
    """Makes a policy's lists what is given (None: left as it is), as the console's pages
    edit them: clients (host names), selections (paths; NEW_STREAM lines are left as they
    are), schedules (add_schedule's dicts with their name: a new name is added, a missing one
    removed, a changed one set) and excludes ([{"pattern", "client" or None}]). Everything
    is checked before anything is written. Returns the policy with `warnings`."""
    db, config = master.db, master.config
    pol = config.policy(policy)
    for h in clients or ():
        id_of(db, "hosts", "host", h, "host add")
    want_sel = None if selections is None else \
        [check_abs_path("backup selection", p) for p in selections if p != STREAM_MARKER]
    want_sched = {}
    for s in schedules or ():
        if s["name"] in want_sched:
            raise ValidationError(f"two schedules are named {s['name']!r}")
        want_sched[s["name"]] = (s, _schedule_columns(s["name"], s))
    want_exc = []
    for e in excludes or ():
        want_exc.append((backup_excludes.check_pattern(e["pattern"]), e.get("client")))
    final_clients = set(pol["clients"] if clients is None else clients)
    for _, client in want_exc:
        if client is not None and client not in final_clients:
            raise ValidationError(f"{client!r} is not a client of policy {policy!r}",
                                  hint="check it as a client, or exclude for every client")
    warnings = []
    if clients is not None:
        for h in clients:
            if h not in pol["clients"]:
                config.add_policy_client(policy, h)
        for h in pol["clients"]:
            if h not in clients:
                warnings += remove_client(config, policy, h)["warnings"]
    if want_sel is not None:
        have = [p for p in pol["selections"] if p != STREAM_MARKER]
        for p in have:
            if p not in want_sel:
                warnings += remove_selection(config, policy, p)["warnings"]
        for p in want_sel:
            if p not in have:
                config.add_policy_selection(policy, p)
                warnings += backup_excludes.selection_warnings(db, p)
    if schedules is not None:
        stored = {s["name"]: s for s in pol["schedules"]}
        for name in stored:
            if name not in want_sched:
                warnings += remove_schedule(config, policy, name)["warnings"]
        pid = _pid(db, policy)
        for name, (s, cols) in want_sched.items():
            if name not in stored:
                master.add_schedule(policy, name, **{k: s[k] for k in _SCHEDULE_KEYS
                                                     if k in s})
                continue
            row = db.one("SELECT type, retention_s, frequency_s, windows, calendar, read_all "
                         "FROM schedules WHERE policy_id=? AND name=?", (pid, name))
            if dict(row) != cols:
                given = {k: s.get(k) for k in _SCHEDULE_KEYS}
                given.update(read_all=bool(s.get("read_all")),
                             retention=s.get("retention", "2w"))
                warnings += set_schedule(config, policy, name, **given)["warnings"]
    if excludes is not None:
        have = [(p, None) for p in pol["excludes"]] + \
            [(p, c) for c, pats in pol["client_excludes"].items() for p in pats]
        for p, c in have:
            if (p, c) not in want_exc and (c is None or c in final_clients):
                remove_exclude(config, policy, p, c)
        for p, c in want_exc:
            if (p, c) not in have:
                add_exclude(config, policy, p, c)
    return with_warnings(config.policy(policy), list(dict.fromkeys(warnings)))
