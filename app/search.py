"""Finding files in backup images by name, from the catalog file index alone.

A pattern is a shell glob, matched case-insensitively unless asked otherwise:

- without "/" it is matched against each file's name (`*.log`, `report-202?.pdf`);
- with "/" it is matched against the whole path, "*" crossing directories
  (`/data/*/raw/*.dat`);
- without any wildcard it finds the names that contain it (`report` is `*report*`).

The search reads the index's directory table in order and matches the names of one
directory block at a time (the layout is described in app/catalog_index/layout.py), so an
image of millions of files is searched in seconds without building an entry for every file;
only the directories that hold a match are decoded in full. It stops early when cancelled and
keeps counting past the limit, so that the user learns how many matches there are in all.
"""

import fnmatch
import re


WILDCARDS = "*?["
DEFAULT_LIMIT = 10_000


def has_wildcards(pattern):
    return any(c in pattern for c in WILDCARDS)


def compile_pattern(pattern, case_sensitive=False):
    """(regex, whole_path) for a user's pattern; ValueError for an empty one."""
    p = (pattern or "").strip()
    if not p:
        raise ValueError("type a name or a pattern to search for, e.g. *.log")
    if not has_wildcards(p):
        p = f"*{p}*"
    flags = 0 if case_sensitive else re.IGNORECASE
    return re.compile(fnmatch.translate(p), flags), "/" in p


def search_index(reader, pattern, *, limit=DEFAULT_LIMIT, case_sensitive=False,
                 cancel=None):
    """{"matches": [entry dict, ...] (at most `limit`), "count": all matches found,
    "truncated": count > limit, "cancelled": stopped early}."""
    rx, whole_path = compile_pattern(pattern, case_sensitive)
    match = rx.match
    matches, count, cancelled = [], 0, False
    for n_dir, (dirpath, names) in enumerate(reader.directory_names()):
        if cancel is not None and n_dir % 64 == 0 and cancel.is_set():
            cancelled = True
            break
        if whole_path:
            prefix = "/" if dirpath == "/" else dirpath + "/"
            hits = [i for i, name in enumerate(names) if match(prefix + name)]
        else:
            hits = [i for i, name in enumerate(names) if match(name)]
        if not hits:
            continue
        room = limit - len(matches)
        if room > 0:
            # list_dir gives the entries in the block's order (name bytes), as `names`
            entries = reader.list_dir(dirpath)
            matches.extend(entries[i].to_dict() for i in hits[:room])
        count += len(hits)
    return {"matches": matches, "count": count, "truncated": count > len(matches),
            "cancelled": cancelled}
