"""How a schedule reads in the console: its level, how often it runs (every N hours/days/weeks,
or calendar days) and its start windows, the same words in the policy wizard, the properties
window and the policy list. Accepts both the wizard's schedule dicts (frequency as text like
"1d") and the catalog's (frequency_s in seconds)."""

from app import timeutil
from ui.wizards.week_grid import describe as describe_windows

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
TYPE_LABELS = {"full": "Full", "differential": "Differential incremental",
               "cumulative": "Cumulative incremental", "catalog": "Catalog backup"}
#: what each level copies, in one line
TYPE_HELP = {
    "full": "every file of the backup selections",
    "differential": "only the changes since the last backup of any type",
    "cumulative": "only the changes since the last full backup",
    "catalog": "the master's own state: catalog, file indexes, host keys, sealed pool keys",
}
#: an image's level as the image list shows it
LEVEL_LABELS = {"full": "Full", "differential": "Differential", "cumulative": "Cumulative"}

_UNIT_WORDS = {"y": "year", "w": "week", "d": "day", "h": "hour", "m": "minute", "s": "second"}
_UNIT_SECONDS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}


def spoken_seconds(seconds):
    """3600 * 36 as `36 hours`, 1209600 as `2 weeks`."""
    for unit in ("y", "w", "d", "h", "m", "s"):
        if seconds % _UNIT_SECONDS[unit] == 0:
            n = seconds // _UNIT_SECONDS[unit]
            return f"{n} {_UNIT_WORDS[unit]}{'s' if n != 1 else ''}"
    return f"{seconds} seconds"


def spoken(duration):
    """`2w` as `2 weeks`; None or `infinite` as `forever`."""
    seconds = timeutil.parse_duration(duration, limit=False)
    return "forever" if seconds is None else spoken_seconds(seconds)


def frequency_seconds(schedule):
    if schedule.get("frequency"):
        return timeutil.parse_duration(schedule["frequency"], limit=False)
    return schedule.get("frequency_s")


def _listed(items):
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def ordinal(n):
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def describe_calendar(calendar):
    """{"weekdays": [0, 2], "monthdays": [1, "last"], "exclude": ["2026-12-25"]} as
    `on Mon and Wed, and on the 1st and the last day of the month, except 2026-12-25`."""
    calendar = calendar or {}
    weekdays = sorted(set(calendar.get("weekdays") or ()))
    monthdays = calendar.get("monthdays") or ()
    numbers = sorted({d for d in monthdays if d != "last"})
    parts = []
    if len(weekdays) == 7:
        parts.append("every day")
    elif weekdays:
        parts.append("on " + _listed(DAYS[d] for d in weekdays))
    days = [f"the {ordinal(d)}" for d in numbers]
    if "last" in monthdays:
        days.append("the last day")
    if days:
        parts.append("on " + _listed(days) + " of the month")
    text = ", and ".join(parts) if parts else "on no day"
    exclude = sorted(calendar.get("exclude") or ())
    if exclude:
        text += ", except " + _listed(exclude)
    return text


def how_often(schedule):
    """`every day`, `every 12 hours`, `on Mon and Fri`; None for a schedule with neither (it
    has no start windows either: it runs only when started by hand)."""
    if schedule.get("calendar"):
        return describe_calendar(schedule["calendar"])
    freq = frequency_seconds(schedule)
    if freq:
        every = spoken_seconds(freq)
        return "every " + (every[2:] if every.startswith("1 ") else every)
    return None


def summary(schedule, windows_apart="; "):
    """One line: `nightly: differential incremental, every day, kept 2 weeks; starts
    within: Mon 22:00 for 6 hours.` (with "\n" for `windows_apart`, the windows on a line
    of their own)."""
    ret = schedule.get("retention") or "infinite"
    kept = ("kept forever" if timeutil.parse_duration(ret, limit=False) is None
            else f"kept {spoken(ret)}")
    level = TYPE_LABELS.get(schedule["type"], schedule["type"]).lower()
    windows = describe_windows(schedule.get("windows") or [])
    often = how_often(schedule)
    if schedule.get("read_all"):
        level += " reading every file"
    return (f"{schedule['name']}: {level}, {often + ', ' if often else ''}{kept}{windows_apart}"
            + (windows[0].lower() if windows_apart.endswith(" ") else windows[0])
            + windows[1:])
