"""How values read in the console: sizes in binary units like the CLI, times in local time
(the catalog keeps UTC; the tooltip shows it), durations as h:mm:ss."""

import stat
import time
from datetime import datetime, timezone

from app import timeutil
# Names and log lines from clients: a newline or another control character is shown as an
# escape (\n, \033, bytes that are not UTF-8 as \351), never let loose in a list row.
from app.terminal_text import escape as shown  # noqa: F401 - part of this module's API


def size(n):
    if n is None:
        return ""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def dedup_rate(ratio):
    """`99.2%`: the share of a job's data the pool held already. Short of all of it, never
    rounded up to 100%."""
    r = round(ratio, 1)
    if r >= 100 and ratio < 100:
        r = 99.9
    return f"{r:.1f}%"


def dedup_text(job):
    """`99.9% (8.9 MiB of 9.0 MiB)`: a job's dedup rate with the amount it stands for."""
    r = job["dedup_ratio"]
    data = job.get("bytes") or 0
    text = dedup_rate(r) + (f" ({size(data * r / 100)} of {size(data)})" if data else "")
    read = (job.get("result") or {}).get("read_bytes") if job.get("type") == "backup" else None
    if read is not None and read != data:
        text += f", {size(read) or '0 B'} read"
    return text


def rate(bytes_per_s):
    if not bytes_per_s:
        return ""
    return size(bytes_per_s) + "/s"


def duration(seconds):
    if seconds is None:
        return ""
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def epoch(iso_text):
    """Seconds since the epoch of a catalog time, or None."""
    if not iso_text:
        return None
    try:
        return timeutil.parse_iso(iso_text)
    except Exception:  # noqa: BLE001 - a bad time shows as blank, not as an error
        return None


def local_time(iso_text):
    ts = epoch(iso_text)
    if ts is None:
        return iso_text or ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def short_time(iso_text):
    """Today's times as the time of day only; older ones with their date."""
    ts = epoch(iso_text)
    if ts is None:
        return iso_text or ""
    t = time.localtime(ts)
    if time.strftime("%Y-%m-%d", t) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", t)
    return time.strftime("%Y-%m-%d %H:%M", t)


def local_time_ns(ns):
    if ns is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))


def utc_tooltip(iso_text):
    ts = epoch(iso_text)
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def percent(p):
    return "" if p is None else f"{p:.1f}%"


_KIND_BITS = {"f": stat.S_IFREG, "d": stat.S_IFDIR, "l": stat.S_IFLNK, "h": stat.S_IFREG,
              "p": stat.S_IFIFO, "c": stat.S_IFCHR, "b": stat.S_IFBLK}


def mode(kind, bits):
    """`drwxr-xr-x` like ls."""
    if bits is None:
        return ""
    return stat.filemode(_KIND_BITS.get(kind, 0) | (bits & 0o7777))


def joined(values, sep=", "):
    return sep.join(str(v) for v in (values or []))
