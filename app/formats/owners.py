"""The owner and group names of an image's files, as the client knew them when it was backed
up: recorded once per image (not per entry) in the `.cairn/summary.json` member, the backup's
result and the catalog's image row, as

    {"users": {"0": "root", "1000": "alice"}, "groups": {"0": "root", "100": "users"}}

Ids are the JSON object's keys (decimal strings); an id the client had no name for is left out.
The names are the client's: a restore browsed from another host, or after the user was
removed, still shows who owned what on the client. An image made before names were recorded
has none, and its owners are shown as numbers.

Standard library only: master and agents share it."""

import json

# Names recorded per kind at most, and their bytes as JSON at most: a file system with more
# owners than this keeps the names of the lowest ids, the rest are shown as numbers. Bounds the
# summary member (its reader's limit is imagemeta.SUMMARY_LIMIT) and the catalog row.
MAX_IDS = 10_000
MAX_BYTES = 400_000
MAX_NAME = 256
KINDS = ("users", "groups")


def record(uids, gids, uname, gname):
    """The owners document of the ids seen, with uname(uid) / gname(gid) giving a name as
    bytes or str ("" or b"" when unknown)."""
    out = {}
    for kind, ids, lookup in (("users", uids, uname), ("groups", gids, gname)):
        names, budget = {}, MAX_BYTES // 2
        for i in sorted(ids)[:MAX_IDS]:
            n = lookup(i)
            if isinstance(n, bytes):
                # surrogate escapes keep a name that is not UTF-8 as the bytes it was
                n = n.decode("utf-8", "surrogateescape")
            if not n or len(n) > MAX_NAME:
                continue
            budget -= len(json.dumps(n)) + 16
            if budget < 0:
                break
            names[str(i)] = n
        out[kind] = names
    return out


def problem(owners):
    """Why an owners document read from an image cannot be believed, or None."""
    if not isinstance(owners, dict):
        return "owners is not a JSON object"
    for kind in KINDS:
        names = owners.get(kind, {})
        if not isinstance(names, dict) or len(names) > MAX_IDS:
            return f"owners has an invalid {kind} table"
        for k, v in names.items():
            if not (k.isdigit() and k.isascii() and len(k) <= 10 and isinstance(v, str)
                    and 0 < len(v) <= MAX_NAME and "\0" not in v):
                return f"owners has an invalid {kind} entry ({k!r:.20}: {v!r:.40})"
    return None


def to_column(owners):
    """The catalog column's text of an owners document (None: no names recorded)."""
    if not owners or problem(owners) or not any(owners.get(k) for k in KINDS):
        return None
    return json.dumps({k: owners.get(k, {}) for k in KINDS}, sort_keys=True,
                      separators=(",", ":"))


def from_column(text):
    """(users, groups): {id: name} of the catalog column's text; empty when none."""
    if not text:
        return {}, {}
    try:
        doc = json.loads(text)
    except ValueError:
        return {}, {}
    if problem(doc):
        return {}, {}
    return tuple({int(k): v for k, v in doc.get(kind, {}).items()} for kind in KINDS)


def merged(tables):
    """(users, groups) of several images' (users, groups), the first naming an id winning."""
    users, groups = {}, {}
    for u, g in tables:
        for i, n in u.items():
            users.setdefault(i, n)
        for i, n in g.items():
            groups.setdefault(i, n)
    return users, groups


def label(uid, gid, users, groups):
    """"owner:group" as ls shows them: the name where the client had one, else the number."""
    return f"{users.get(uid, uid)}:{groups.get(gid, gid)}"


def detail(uid, gid, users, groups):
    """Both names and numbers, for a tooltip: "user root (uid 0), group wheel (gid 10)"."""
    def one(word, short, i, names):
        n = names.get(i)
        return f"{word} {n} ({short} {i})" if n else f"{short} {i} (no name recorded)"
    return one("user", "uid", uid, users) + ", " + one("group", "gid", gid, groups)
