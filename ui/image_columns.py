"""A list of backup images: its columns, and the texts they show (the backup level, the
snapshot read, one line naming an image)."""

import time

from ui import fmt
from ui.models import Column, number_column, text_column, time_column
from ui.wizards.schedule_text import LEVEL_LABELS

IMAGE_COLUMNS = [
    time_column("created", "Date"),
    text_column("policy", "Policy"),
    text_column("schedule", "Schedule"),
    Column("schedule_type", "Level", lambda r: level(r.get("schedule_type")),
           sort=lambda r: level(r.get("schedule_type")).lower(),
           tooltip=lambda r: level_tooltip(r),
           help="Full: every file; Differential: the changes since the previous backup; "
                "Cumulative: the changes since the last full. Each image lists every file as "
                "of its backup."),
    number_column("files", "Files"),
    number_column("bytes", "Bytes", format=fmt.size, tooltip=lambda r: f"{r['bytes']:,} bytes"),
    Column("expires", "Expires",
           lambda r: fmt.local_time(_kept_until(r)) if _kept_until(r) else "never",
           sort=lambda r: _kept_until(r) or "9999", tooltip=lambda r: expires_tooltip(r),
           help="When the image leaves the catalog: when its last copy expires"),
    Column("snapshot", "Snapshot", lambda r: snapshot_text(r),
           sort=lambda r: snapshot_text(r).lower(), tooltip=lambda r: snapshot_tooltip(r),
           help="The Storage Scale snapshot the backup read from (a consistent point in "
                "time); empty when it read the live files."),
    text_column("storage_unit", "Storage unit"),
    Column("copies", "Copies", lambda r: str(r.get("copies") or 1),
           sort=lambda r: r.get("copies") or 1, numeric=True,
           tooltip=lambda r: copies_tooltip(r),
           help="How many copies of the image its lifecycle made, each in another pool"),
    text_column("id", "Image ID"),
]


def _kept_until(image):
    """When the image's last copy expires (None: never)."""
    return image.get("kept_until", image.get("expires"))


def expires_tooltip(image):
    text = fmt.utc_tooltip(_kept_until(image))
    if (image.get("copies") or 1) > 1 and image.get("expires") != _kept_until(image):
        first = fmt.local_time(image["expires"]) if image.get("expires") else "never"
        text = (f"Kept until {text or 'forever'} by its last copy; its primary copy expires "
                f"{first}")
    return text


def copies_tooltip(image):
    n = image.get("copies") or 1
    if n == 1:
        return "One copy, in its storage unit's pool"
    return (f"{n} copies, each in another pool with its own retention; a restore reads the "
            "primary and falls back to the next (right-click: Copies…)")


def level(schedule_type):
    return LEVEL_LABELS.get(schedule_type, schedule_type or "")


def level_tooltip(image):
    base = image.get("base_image")
    if not base:
        return level(image.get("schedule_type")) or None
    return f"{level(image.get('schedule_type'))}: the changes since image {base}"


def snapshot_text(image):
    return ", ".join(s["name"] for s in image.get("snapshot") or [])


def snapshot_tooltip(image):
    lines = []
    for s in image.get("snapshot") or []:
        where = (f"fileset {s['fileset']} of {s['device']}" if s.get("fileset")
                 else f"file system {s['device']}")
        lines.append(f"Read from snapshot {s['name']} of {where}, taken "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(s['created']))}")
    return "\n".join(lines) or None


def image_line(image):
    """`img_1 — 2026-09-21 22:00:00, Full, 1.2 GiB`"""
    return (f"{image['id']} — {fmt.local_time(image['created'])}, "
            f"{level(image.get('schedule_type'))}, {fmt.size(image.get('bytes'))}")

