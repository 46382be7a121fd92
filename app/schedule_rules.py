"""Schedules as admins write them: start windows ("mon 22:00 8h"), frequencies, calendar
days and the schedule types, checked with messages that name what is wrong and how to fix
it; and how a stored schedule runs by itself. The configuration (app/config.py) keeps
schedules with these checks; the scheduler (app/scheduler.py) reads them back."""

import datetime
import json
import re

from app import timeutil
from app.errors import ValidationError


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

#: a catalog schedule's runs back up the master itself to the policy's storage unit
CATALOG_SCHEDULE = "catalog"
SCHEDULE_TYPES = ("full", "differential", "cumulative", CATALOG_SCHEDULE)
#: how often a schedule with start windows but neither a frequency nor a calendar is due
DEFAULT_FREQUENCY = {"full": 7 * 86400, "differential": 86400, "cumulative": 86400,
                     CATALOG_SCHEDULE: 86400}
#: a schedule's retention when none is given, and that of a backup started by hand on a
#: policy without schedules
DEFAULT_RETENTION = "2w"
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
