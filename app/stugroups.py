"""Storage unit groups: ordered storage units, and how a backup job of a policy that writes to
a group is placed on one of them when it starts (app/jobs/placement.py).

    cairn storage-unit-group create spread --units stu-a,stu-b --selection least-loaded

Selections:
  prioritized   the first unit in the list that can take the job now (not full, its host up,
                its limits not reached); a busy unit is passed over for the next one.
  failover      the first unit that is available (not full, its host up); while that unit is
                only busy the job waits for it rather than going to the next.
  round-robin   the units in turn, one job after the other, passing over those that cannot
                take the job, and those on whose storage server the job's client runs more
                jobs than on another's.
  least-loaded  the unit whose storage server runs the fewest jobs (a job of the same client
                counting twice), then the one that wrote the fewest bytes in the last
                minutes, passing over those that cannot take it.

With both, a client's jobs that run at the same time (several policies) go to several storage
servers, not all to one; the streams of one multi-stream job stay together.

A policy names a storage unit, a lifecycle or a storage unit group (exactly one). Under a
group its storage_unit_id is the group's first unit; a job is queued with that unit and moved
to the chosen one when it starts. A group that a policy uses cannot be deleted; its units
cannot be changed (a new group is made and the policies moved to it)."""

from app import timeutil
from app.config import check_name, id_of
from app.errors import ValidationError

SELECTIONS = ("prioritized", "failover", "round-robin", "least-loaded")
# More units than this in one group is a list nobody reads; make several groups.
MAX_UNITS = 64

_UNITS_SQL = ("SELECT m.position, u.name AS storage_unit, d.name AS pool, v.name AS server, "
              "h.name AS host FROM storage_unit_group_members m "
              "JOIN storage_units u ON u.id=m.storage_unit_id "
              "JOIN disk_pools d ON d.id=u.pool_id JOIN storage_servers v ON v.id=d.server_id "
              "JOIN hosts h ON h.id=v.host_id WHERE m.group_id=? ORDER BY m.position")


def parse_units(units):
    """The unit names of --units (a comma-separated text or a list), in order."""
    if isinstance(units, str):
        units = units.split(",")
    names = [u.strip() for u in units or () if u and u.strip()]
    if not names:
        raise ValidationError("a storage unit group needs at least one storage unit",
                              hint="--units STU,STU[,...] (in the order the selection uses)")
    seen = set()
    for n in names:
        if n in seen:
            raise ValidationError(f"storage unit {n!r} is named twice in --units",
                                  hint="name each storage unit of the group once")
        seen.add(n)
    if len(names) > MAX_UNITS:
        raise ValidationError(f"a storage unit group has at most {MAX_UNITS} units, "
                              f"not {len(names)}")
    return names


def check_selection(selection):
    if selection not in SELECTIONS:
        raise ValidationError(f"selection {selection!r} is unknown",
                              hint=f"choose one of: {', '.join(SELECTIONS)}")
    return selection


class StorageUnitGroups:
    """The storage unit groups of a catalog (configuration, like app/config.Config)."""

    def __init__(self, db):
        self.db = db

    def add(self, name, units, selection, comment=""):
        check_name("storage unit group", name)
        if self.db.one("SELECT 1 FROM storage_unit_groups WHERE name=?", (name,)):
            raise ValidationError(f"a storage unit group named {name!r} already exists",
                                  hint="choose another name")
        check_selection(selection)
        if len(comment or "") > 1000 or "\0" in (comment or ""):
            raise ValidationError("the comment is too long or contains a NUL byte")
        ids = [id_of(self.db, "storage_units", "storage unit", u, "storage-unit create")
               for u in parse_units(units)]
        with self.db.tx() as c:
            gid = c.execute("INSERT INTO storage_unit_groups(name, selection, comment, created) "
                            "VALUES (?,?,?,?)", (name, selection, comment or "",
                                                 timeutil.iso(timeutil.now()))).lastrowid
            c.executemany("INSERT INTO storage_unit_group_members(group_id, position, "
                          "storage_unit_id) VALUES (?,?,?)",
                          [(gid, n, sid) for n, sid in enumerate(ids, 1)])
        return self.get(name)

    def get(self, name):
        row = self.db.one("SELECT * FROM storage_unit_groups WHERE name=?", (name,))
        if row is None:
            id_of(self.db, "storage_unit_groups", "storage unit group", name,
                  "storage-unit-group create")
        return self._dict(row)

    def all(self):
        return [self._dict(r) for r in
                self.db.all("SELECT * FROM storage_unit_groups ORDER BY name")]

    def _dict(self, row):
        d = dict(row)
        d["units"] = [dict(r) for r in self.db.all(_UNITS_SQL, (row["id"],))]
        d["unit_names"] = [u["storage_unit"] for u in d["units"]]
        d["policies"] = [r[0] for r in self.db.all(
            "SELECT name FROM policies WHERE storage_unit_group_id=? ORDER BY name",
            (row["id"],))]
        return d

    def advance(self, name, position, c=None):
        """Round-robin: the next job looks first at the unit at 0-based `position` (modulo
        the number of units): the one after the unit the last job went to. `c`: an open
        write transaction."""
        if c is None:
            with self.db.tx() as c:
                return self.advance(name, position, c)
        c.execute("UPDATE storage_unit_groups SET rr_next=? WHERE name=?", (position, name))

    def target(self, name):
        """(first storage unit id, group id) of a group a policy is to write to."""
        g = self.get(name)
        sid = id_of(self.db, "storage_units", "storage unit", g["units"][0]["storage_unit"],
                    "storage-unit create")
        return sid, g["id"]
