"""How the commands print: one JSON document with --json, else lines for a person (tables,
sizes), with whatever a name or a host holds escaped for the terminal."""

import json
import sys

from app.terminal_text import escape_all


def out(args, doc, human=None):
    if getattr(args, "json", False):
        # ASCII escapes keep names that are not UTF-8 (surrogate escapes) valid JSON; a
        # reader gets the exact bytes back with os.fsencode.
        json.dump(doc, sys.stdout, indent=2, ensure_ascii=True, default=str)
        sys.stdout.write("\n")
    elif human is not None:
        # Names, log lines and whatever a host reported reach the terminal escaped, never as
        # control characters (see app/terminal_text.py).
        human(escape_all(doc))
    else:
        print(json.dumps(doc, indent=2, ensure_ascii=True, default=str))


def table(rows, cols):
    if not rows:
        print("(none)")
        return
    data = [[("" if r.get(c) is None else str(r.get(c))) for c in cols] for r in rows]
    widths = [max(len(c), *(len(d[i]) for d in data)) for i, c in enumerate(cols)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)))
    for d in data:
        print("  ".join(v.ljust(w) for v, w in zip(d, widths)))


def size(n):
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
