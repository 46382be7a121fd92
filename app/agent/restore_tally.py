"""What a restore counts and tells: the counts of its summary, its warnings and log lines, and
progress events at most every PROGRESS_EVERY seconds (_Tally, a part of
app/agent/extract.py's _Restore; restore_streams adds its parts' counts to the parent's).

Standard library only: this runs on client hosts."""

import time


PROGRESS_EVERY = 0.25


class _Tally:
    """The counts and the events of one restore (see app/agent/extract.py, _Restore)."""

    def __init__(self, emit):
        self.emit = emit
        self.files = 0
        self.dirs = 0
        self.bytes = 0
        self.direct_bytes = 0
        self.warnings = 0
        self.skipped = 0
        self.errors = 0
        self.damaged = 0  # of the errors, items whose data in the image is damaged
        self.once = set()
        self.last_progress = 0.0

    def warn(self, path, message):
        self.warnings += 1
        self.emit("warning", {"path": path, "message": message})

    def warn_once(self, key, path, message):
        if key not in self.once:
            self.once.add(key)
            self.warn(path, message)

    def log(self, message):
        self.emit("log", {"message": message})

    def lost(self, path, message):
        """An item not restored because the image's data for it is damaged: its warning says
        so, for a restore that reads such items again from another copy of the image."""
        self.errors += 1
        self.damaged += 1
        self.warnings += 1
        self.emit("warning", {"path": path, "message": message, "damaged": True})

    def progress(self, force=False):
        now = time.monotonic()
        if force or now - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = now
            self.emit("progress", {"files": self.files, "bytes": self.bytes})

    def progress_at_end(self):
        """The last progress of a restore that fails: what is in place is counted."""
        try:
            self.progress(force=True)
        except Exception:  # noqa: BLE001 - the failure itself is what is reported
            pass

    def counts(self):
        return {"files": self.files, "dirs": self.dirs, "bytes": self.bytes,
                "direct_bytes": self.direct_bytes, "warnings": self.warnings,
                "skipped": self.skipped, "errors": self.errors, "damaged": self.damaged}

    def add_counts(self, counts):
        """Adds what another process restored for this restore (see restore_streams)."""
        self.files += counts["files"]
        self.dirs += counts["dirs"]
        self.bytes += counts["bytes"]
        self.direct_bytes += counts["direct_bytes"]
        self.warnings += counts["warnings"]
        self.skipped += counts["skipped"]
        self.errors += counts["errors"]
        self.damaged += counts["damaged"]


def damage_note(reader, start, stop):
    """What the image's reader found damaged in stream bytes start..stop, as a clause for a
    message ("" when it knows of nothing: the data itself is wrong)."""
    between = getattr(reader, "damage_between", None)
    found = between(start, stop) if between is not None else []
    return ": " + "; ".join(found) if found else ""
