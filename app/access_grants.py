"""The restore role's grants, checked on its calls (app/access.py): which clients' paths it
may browse and restore (`--grant CLIENT:PATH`, covering the path's subtree) and where it may
restore to (`--grant-dest HOST:DIR`, or inside its granted paths on their own client). The
lists of images it reads hold its granted clients' only.

A directory above a granted path may be browsed, showing only the entries that lead to a
granted path, so the restore browser can walk down to it; a path with '..' is refused, and
every path is compared in its normalized form."""

import posixpath

from app import users
from app.errors import PermissionDenied, ValidationError


def check_grants(master, name, who, bound):
    """Raises PermissionDenied when the call reaches past the user's grants; returns None or
    a function that narrows the call's result to them."""
    return _CHECKS[name](master, who, bound)


def has_grant_check(name):
    return name in _CHECKS


def _grants(who, key, host):
    out = []
    for g in who.get(key) or ():
        h, _, p = g.partition(":")
        if h == host:
            out.append(p)
    return out


def _deny(message, hint=None):
    return PermissionDenied(message, hint=hint or "ask an admin for a grant "
                            "(`cairn user set NAME --grant CLIENT:PATH`)")


def _path(p):
    try:
        return users.norm_path(p)
    except ValidationError as e:
        raise _deny(f"path refused: {e.message}", hint="give the path without '..'") from None


def _client_tops(master, who, client):
    tops = _grants(who, "grants", client)
    if not tops:
        raise _deny(f"user {who['name']} has no grant on client {client}")
    return tops


def _image_tops(master, who, bound):
    img = master.image(bound.get("image_id"))
    return img["client"], _client_tops(master, who, img["client"])


def _within(tops, path):
    return any(users.covers(t, path) for t in tops)


def _on_the_way(tops, path):
    """Whether a directory lies above a granted path (browsing down to it)."""
    return any(users.covers(path, t) for t in tops)


def _browse_filter(tops, path, client, who):
    """None when `path` is inside a grant; a filter of entry paths when it is above one."""
    if _within(tops, path):
        return None
    if _on_the_way(tops, path):
        return lambda p: _within(tops, p) or _on_the_way(tops, p)
    raise _deny(f"user {who['name']} may not browse {client}:{path}: it is outside the "
                f"grants ({', '.join(f'{client}:{t}' for t in tops)})")


def _entry_path(e):
    p = e["path"] if isinstance(e, dict) else e.path
    return p.decode("utf-8", "surrogateescape") if isinstance(p, bytes) else p


def _browse(master, who, bound):
    client, tops = _image_tops(master, who, bound)
    keep = _browse_filter(tops, _path(bound.get("path")), client, who)
    if keep is None:
        return None

    def narrow(doc):
        return {**doc, "entries": [e for e in doc["entries"] if keep(_entry_path(e))]}
    return narrow


def _list_entries(master, who, bound):
    client, tops = _image_tops(master, who, bound)
    keep = _browse_filter(tops, _path(bound.get("path")), client, who)
    if keep is None:
        return None
    return lambda entries: [e for e in entries if keep(_entry_path(e))]


def _owner_names(master, who, bound):
    _image_tops(master, who, bound)
    return None


def _search(master, who, bound):
    _, tops = _image_tops(master, who, bound)

    def narrow(doc):
        kept = [m for m in doc.get("matches", []) if _within(tops, _entry_path(m))]
        return {**doc, "matches": kept, "count": len(kept)}
    return narrow


def _find_versions(master, who, bound):
    tops = _client_tops(master, who, bound.get("client"))

    def narrow(doc):
        kept = [v for v in doc.get("versions", []) if _within(tops, _entry_path(v))]
        return {**doc, "versions": kept, "count": len(kept)}
    return narrow


def _restore(master, who, bound):
    client, tops = _image_tops(master, who, bound)
    for p in bound.get("paths") or ():
        norm = _path(p)
        if not _within(tops, norm):
            raise _deny(f"user {who['name']} may not restore {client}:{norm}: it is outside "
                        f"the grants ({', '.join(f'{client}:{t}' for t in tops)})")
    host = bound.get("to_host") or client
    to = _path(bound.get("to"))
    dests = _grants(who, "dest_grants", host) + _grants(who, "grants", host)
    if not _within(dests, to):
        raise _deny(f"user {who['name']} may not restore to {host}:{to}: it is not a granted "
                    "destination", hint="restore into a granted path, or ask an admin for "
                                        "`cairn user set NAME --grant-dest HOST:DIR`")
    return None


def _list_host_dir(master, who, bound):
    host = bound.get("name")
    tops = _grants(who, "dest_grants", host) + _grants(who, "grants", host)
    if not tops:
        raise _deny(f"user {who['name']} has no grant on host {host}")
    path = _path(bound.get("path"))
    keep = _browse_filter(tops, path, host, who)
    if keep is None:
        return None

    def narrow(doc):
        return {**doc, "entries": [e for e in doc.get("entries", [])
                                   if keep(posixpath.join(path, e["name"]))]}
    return narrow


def _image_list(master, who, bound):
    """The images (or clients with images) of the granted clients only."""
    clients = {g.partition(":")[0] for g in who.get("grants") or ()}
    return lambda rows: [r for r in rows if r.get("client") in clients]


def _image_at(master, who, bound):
    _client_tops(master, who, bound.get("client"))
    return None


_CHECKS = {"images": _image_list, "images_in_range": _image_list,
           "image_clients": _image_list, "image_at": _image_at, "browse": _browse, "list_entries": _list_entries, "owner_names": _owner_names,
           "search": _search, "find_versions": _find_versions, "preview_restore": _restore,
           "start_restore": _restore, "list_host_dir": _list_host_dir}
