"""Lifecycles: the steps a policy's images go through. The first step is the backup to one
storage unit, then one or more duplications to other storage units (another pool, another
storage server, possibly another site), each copy kept for its own retention.

    cairn lifecycle create gold --step backup:stu-a:2w --step duplicate:stu-b:8w

A policy names either a storage unit or a lifecycle. Under a lifecycle its storage_unit_id is
the backup step's unit (so every backup writes where it always did), and after each backup
the master queues one duplicate job per duplicate step (app/jobs/duplicate.py). The copy
made by step N is copy N of the image; a lifecycle's retentions replace the schedules' ones
for the images of its policies, one retention per copy.

A lifecycle cannot be changed once made (its copies are numbered by its steps); a new one is
made and policies moved to it. One that a policy uses cannot be deleted."""

from app import timeutil
from app.config import check_name, id_of
from app.errors import NotFound, ValidationError

STEP_KINDS = ("backup", "duplicate")
# Copies beyond this help nobody and each costs a job per backup.
MAX_STEPS = 8
STEP_HINT = ("write each step as KIND:STORAGE_UNIT:RETENTION, the first a backup, then one "
             "or more duplicates, e.g. --step backup:stu-a:2w --step duplicate:stu-b:8w")

_STEPS_SQL = ("SELECT s.position, s.kind, s.retention_s, u.name AS storage_unit, "
              "d.name AS pool, h.name AS host FROM lifecycle_steps s "
              "JOIN storage_units u ON u.id=s.storage_unit_id "
              "JOIN disk_pools d ON d.id=u.pool_id JOIN storage_servers v ON v.id=d.server_id "
              "JOIN hosts h ON h.id=v.host_id WHERE s.lifecycle_id=? ORDER BY s.position")


def parse_step(text):
    """(kind, storage unit, retention in seconds or None for infinite) of one --step."""
    if not isinstance(text, str) or text.count(":") != 2:
        raise ValidationError(f"lifecycle step {text!r} is not KIND:STORAGE_UNIT:RETENTION",
                              hint=STEP_HINT)
    kind, stu, retention = (p.strip() for p in text.split(":"))
    if kind not in STEP_KINDS:
        raise ValidationError(f"lifecycle step {text!r}: {kind!r} is not a kind of step",
                              hint="a step is a backup (the first) or a duplicate (the "
                                   "others)")
    if not stu:
        raise ValidationError(f"lifecycle step {text!r} names no storage unit", hint=STEP_HINT)
    try:
        seconds = timeutil.parse_duration(retention, what="retention")
    except ValidationError as e:
        raise ValidationError(f"lifecycle step {text!r}: {e.message}", hint=e.hint) from None
    return kind, stu, seconds


def check_steps(db, steps):
    """The steps (texts or (kind, unit, seconds)) checked: exactly one backup, first, then
    one or more duplicates, each to an existing storage unit of another disk pool. Returns
    [(kind, storage unit id, retention seconds or -1)]."""
    parsed = [parse_step(s) if isinstance(s, str) else tuple(s) for s in steps or ()]
    if len(parsed) < 2:
        raise ValidationError("a lifecycle needs a backup step and at least one duplicate step",
                              hint=STEP_HINT)
    if len(parsed) > MAX_STEPS:
        raise ValidationError(f"a lifecycle has at most {MAX_STEPS} steps, not {len(parsed)}")
    kinds = [k for k, _, _ in parsed]
    if kinds[0] != "backup" or "backup" in kinds[1:]:
        raise ValidationError("a lifecycle's first step, and only its first, is the backup",
                              hint=STEP_HINT)
    out, pools = [], {}
    for n, (kind, stu, seconds) in enumerate(parsed, 1):
        sid = id_of(db, "storage_units", "storage unit", stu, "storage-unit create")
        pool = db.one("SELECT d.name FROM storage_units u JOIN disk_pools d ON d.id=u.pool_id "
                      "WHERE u.id=?", (sid,))[0]
        if pool in pools:
            raise ValidationError(
                f"steps {pools[pool]} and {n} both keep their copy in disk pool {pool}",
                hint="a second copy in the same pool protects nothing: give each step a "
                     "storage unit of another disk pool (ideally another storage server)")
        pools[pool] = n
        out.append((kind, sid, -1 if seconds is None else seconds))
    return out


def step_text(step):
    return f"{step['kind']}:{step['storage_unit']}:{step['retention']}"


class Lifecycles:
    """The lifecycles of a catalog (configuration, like app/config.Config)."""

    def __init__(self, db):
        self.db = db

    def add(self, name, steps, comment=""):
        check_name("lifecycle", name)
        if self.db.one("SELECT 1 FROM lifecycles WHERE name=?", (name,)):
            raise ValidationError(f"a lifecycle named {name!r} already exists",
                                  hint="choose another name (a lifecycle cannot be changed: "
                                       "make a new one and move the policies to it)")
        if len(comment or "") > 1000 or "\0" in (comment or ""):
            raise ValidationError("the comment is too long or contains a NUL byte")
        rows = check_steps(self.db, steps)
        with self.db.tx() as c:
            lid = c.execute("INSERT INTO lifecycles(name, comment, created) VALUES (?,?,?)",
                            (name, comment or "", timeutil.iso(timeutil.now()))).lastrowid
            c.executemany("INSERT INTO lifecycle_steps(lifecycle_id, position, kind, "
                          "storage_unit_id, retention_s) VALUES (?,?,?,?,?)",
                          [(lid, n, kind, sid, sec)
                           for n, (kind, sid, sec) in enumerate(rows, 1)])
        return self.get(name)

    def get(self, name):
        row = self.db.one("SELECT * FROM lifecycles WHERE name=?", (name,))
        if row is None:
            id_of(self.db, "lifecycles", "lifecycle", name, "lifecycle create")
        return self._dict(row)

    def all(self):
        return [self._dict(r) for r in self.db.all("SELECT * FROM lifecycles ORDER BY name")]

    def _dict(self, row):
        d = dict(row)
        d["steps"] = []
        for s in self.db.all(_STEPS_SQL, (row["id"],)):
            seconds = None if s["retention_s"] < 0 else s["retention_s"]
            step = {"copy": s["position"], "kind": s["kind"], "storage_unit": s["storage_unit"],
                    "pool": s["pool"], "host": s["host"], "retention_s": seconds,
                    "retention": timeutil.format_duration(seconds)}
            step["text"] = step_text(step)
            d["steps"].append(step)
        d["policies"] = [r[0] for r in self.db.all(
            "SELECT name FROM policies WHERE lifecycle_id=? ORDER BY name", (row["id"],))]
        return d

    def policy_target(self, storage_unit=None, lifecycle=None):
        """Where a policy's backups go: (storage unit name, lifecycle id or None), from
        exactly one of a storage unit and a lifecycle."""
        if (storage_unit is None) == (lifecycle is None):
            raise ValidationError("a policy writes to a storage unit, through a lifecycle or "
                                  "to a storage unit group: give exactly one of them",
                                  hint="--storage-unit NAME (one copy), --lifecycle NAME "
                                       "(a backup and its duplicates) or --storage-unit-group "
                                       "NAME (placed on one of its units when a job starts)")
        if lifecycle is None:
            return storage_unit, None
        lc = self.get(lifecycle)
        return lc["steps"][0]["storage_unit"], lc["id"]

    def of_policy(self, policy_name):
        """The lifecycle a policy uses, or None."""
        row = self.db.one("SELECT l.name FROM policies p JOIN lifecycles l ON "
                          "l.id=p.lifecycle_id WHERE p.name=?", (policy_name,))
        return self.get(row[0]) if row else None

    def by_id(self, lifecycle_id):
        row = self.db.one("SELECT name FROM lifecycles WHERE id=?", (lifecycle_id,))
        if row is None:
            raise NotFound(f"there is no lifecycle {lifecycle_id}")
        return self.get(row[0])
