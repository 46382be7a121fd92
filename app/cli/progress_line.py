"""The live lines a waiting command shows on a terminal, one per running job, as restic's:
elapsed time, phase, percent, bytes and files done (of their totals once known), rate and
time left, redrawn in place.

Whatever a job's row holds that a client chose (its client's name) passes escape() before it
reaches the terminal, and a line never grows past the terminal's width: a line that wrapped
would break the cursor moves that redraw the block."""

import math
import os
import shutil
import unicodedata

from app.cli.output import size
from app.terminal_text import escape

CLEAR_LINE = "\x1b[K"
CLEAR_BELOW = "\x1b[J"
BOLD, RESET = "\x1b[1m", "\x1b[0m"


def clock(seconds):
    """3:25 for 205 seconds, 1:00:05 for 3605."""
    s = int(max(0, seconds))
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def job_line(j, color=False):
    """The progress line of one job (a dict as JobStore.get gives it)."""
    head = f"[{clock(j.get('elapsed_s') or 0)}] job {j['id']} {escape(j['type'])}"
    if j.get("client"):
        head += f" {escape(j['client'])}"
    if j["state"] == "queued":
        why = j.get("wait_reason")
        return head + ": queued" + (f", {escape(why)}" if why else "")
    if j["state"] == "done":
        return head + f": ended with status {j['status']}"
    phase = escape(j.get("phase") or "running")
    if j.get("cancel_requested"):
        phase += " (canceling)"
    phase = BOLD + phase + RESET if color else phase
    parts = [phase + (f" {j['percent']:.1f}%" if j.get("percent") is not None else "")]
    tb, tf = j.get("total_bytes"), j.get("total_files")
    parts.append(size(j["bytes"] or 0) + (f" / {size(tb)}" if tb else ""))
    parts.append(f"{j['files'] or 0:,}" + (f" / {tf:,}" if tf else "") + " files")
    if j.get("rate_bytes_per_s"):
        parts.append(f"{size(j['rate_bytes_per_s'])}/s")
    rate = j.get("rate_bytes_per_s")
    if tb and rate and j["bytes"] < tb:
        # rounded up: "0:00:00" while data remains would say it is done
        parts.append(f"ETA {clock(math.ceil((tb - j['bytes']) / rate))}")
    return head + ": " + "  ".join(parts)


def fit(text, width):
    """text cut to `width` terminal columns (wide characters count two; escape sequences of
    the line's own colouring none)."""
    out, used, i = [], 0, 0
    while i < len(text):
        if text[i] == "\x1b":
            end = text.index("m", i) + 1
            out.append(text[i:end])
            i = end
            continue
        ch = text[i]
        w = 2 if unicodedata.east_asian_width(ch) in ("W", "F") else \
            0 if unicodedata.combining(ch) else 1
        if used + w > width:
            break
        out.append(ch)
        used += w
        i += 1
    return "".join(out)


def use_color(stream):
    """Colour on a terminal that has it, unless NO_COLOR is set (no-color.org)."""
    return (stream.isatty() and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM", "") != "dumb")


class Block:
    """The lines drawn on the terminal, redrawn in place: back to the first of them (a
    carriage return and cursor up), each line written and the rest of it cleared, then
    whatever is below cleared (lines of jobs that ended)."""

    def __init__(self, stream):
        self.stream = stream
        self.drawn = 0   # lines of the block on the screen; the cursor is on the last

    def _home(self):
        if not self.drawn:
            return ""
        return "\r" + (f"\x1b[{self.drawn - 1}A" if self.drawn > 1 else "")

    def draw(self, lines):
        # One column less than the width: a line that fills the last column wraps on some
        # terminals.
        width = max(10, shutil.get_terminal_size().columns - 1)
        text = [fit(t, width) + CLEAR_LINE for t in lines]
        self.stream.write(self._home() + "\n".join(text) + CLEAR_BELOW)
        self.stream.flush()
        self.drawn = len(lines)

    def clear(self):
        """Removes the block; the cursor is left where its first line was."""
        if self.drawn:
            self.stream.write(self._home() + CLEAR_BELOW)
            self.stream.flush()
        self.drawn = 0
