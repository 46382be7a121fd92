"""Times as the CLI contract writes them (ISO 8601, UTC, `Z`) and retention durations."""

import re
import time
from datetime import datetime, timezone

from app.errors import ValidationError


def now():
    return time.time()


def iso(ts):
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text):
    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise ValidationError(f"{text!r} is not a time",
                              hint="write it as ISO 8601, e.g. 2026-11-21T20:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
# The longest duration accepted (retention, frequency, delays): longer ones are typing
# mistakes, and an expiry date past the year 9999 cannot be written at all.
MAX_DURATION_S = 100 * _UNITS["y"]
_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d|w|y|sec|min|hours?|days?|weeks?|years?)\s*$", re.I)


def parse_duration(text, what="retention", limit=True):
    """`2w`, `30d`, `12h`, `1y` or `infinite` → seconds (None for infinite), at most
    MAX_DURATION_S unless limit=False (for showing what was saved before the limit). `what`
    names the value in errors."""
    if text is None:
        return None
    if str(text).strip().lower() in ("infinite", "infinity", "forever", "never"):
        return None
    m = _DURATION.match(str(text))
    if not m:
        raise ValidationError(f"{what} {text!r} is not a duration",
                              hint="use a number and a unit: 12h, 30d, 2w, 1y, or 'infinite'")
    unit = m.group(2)[0].lower()
    seconds = int(m.group(1)) * _UNITS[unit]
    if seconds <= 0:
        raise ValidationError(f"{what} must be longer than zero")
    if limit:
        check_limit(seconds, what, text)
    return seconds


def check_limit(seconds, what, text=None):
    """Refuses a duration longer than MAX_DURATION_S."""
    if seconds is not None and seconds > MAX_DURATION_S:
        shown = str(text).strip() if text is not None else format_duration(seconds)
        raise ValidationError(
            f"{what} {shown!r} is longer than {format_duration(MAX_DURATION_S)}",
            hint=f"use at most {format_duration(MAX_DURATION_S)}"
                 + (", or 'infinite' to keep images forever" if what == "retention" else ""))


def format_duration(seconds):
    if seconds is None:
        return "infinite"
    for unit in ("y", "w", "d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"
