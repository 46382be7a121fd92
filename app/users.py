"""Cairn users (catalog tables of migration 26): a name, a role, the SSH public keys and the
login name the user is known by, and for the restore role its grants.

Roles, each able to do what the one before it can:

  viewer    reads: jobs, logs, configuration, images' list, health, reports, the audit log
  restore   and browses and restores the clients' paths granted to it (`--grant
            CLIENT:PATH`, a path covering its subtree) to the destinations granted to it
            (`--grant-dest HOST:DIR`, and the granted paths themselves on their own client);
            its lists of images hold its granted clients' only
  operator  and runs, cancels, restarts, suspends and resumes jobs (backups, verifies,
            expires, catalog backups) and restores anything anywhere; changes no configuration
  admin     everything: configuration, users, settings

What each master method needs is app/access.py; the audit log is app/audit.py."""

import base64
import binascii
import hashlib

from app import timeutil
from app.audit import SYSTEM_ACTORS
from app.config import check_abs_path
from app.errors import NotFound, ValidationError

ROLES = ("viewer", "restore", "operator", "admin")
KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
             "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com",
             "sk-ecdsa-sha2-nistp256@openssh.com")
SERVE_COMMAND = "cairn master serve --stdio --user {name}"


def rank(role):
    return ROLES.index(role)


def check_role(role):
    if role not in ROLES:
        raise ValidationError(f"role {role!r} is unknown",
                              hint="choose one of: admin, operator, restore, viewer")
    return role


def check_name(name):
    if not isinstance(name, str) or not name or len(name) > 64 or not all(
            c.isalnum() or c in "._-@" for c in name) or name.startswith("-"):
        raise ValidationError(f"user name {name!r} is not usable",
                              hint="use letters, digits, '.', '_', '-' or '@' (at most 64)")
    if name.lower() in SYSTEM_ACTORS:
        raise ValidationError(f"user name {name!r} is the master's own: the audit log names "
                              "its own work with it", hint="choose another name")
    return name


# ---- keys -----------------------------------------------------------------------------------

def parse_key(text):
    """(type, base64 data, comment, fingerprint) of one OpenSSH public key line (the
    contents of an id_*.pub file); options before the type (an authorized_keys line's) are
    skipped."""
    words = (text or "").strip().split()
    at = next((i for i, w in enumerate(words) if w in KEY_TYPES), None)
    if at is None or at + 1 >= len(words):
        raise ValidationError("this is not an SSH public key",
                              hint="give the .pub file of the key (one line: "
                                   "ssh-ed25519 AAAA... comment)")
    ktype, data = words[at], words[at + 1]
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(f"the {ktype} key's data is not base64") from None
    # the blob starts with its own type, length-prefixed
    n = int.from_bytes(blob[:4], "big") if len(blob) >= 4 else -1
    if blob[4:4 + n].decode("ascii", "replace") != ktype:
        raise ValidationError(f"the {ktype} key's data is not a {ktype} key")
    return ktype, data, " ".join(words[at + 2:]), fingerprint(blob)


def fingerprint(blob):
    """As OpenSSH prints it: "SHA256:" and unpadded base64 of the key blob's hash."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def authorized_keys_line(name, key):
    """The line an admin puts in the master server's authorized_keys for a user's key: the
    key may do nothing but talk to the master as that user."""
    cmd = SERVE_COMMAND.format(name=name)
    line = f'command="{cmd}",restrict {key["type"]} {key["data"]}'
    return line + (f" {key['comment']}" if key["comment"] else "")


# ---- grants ---------------------------------------------------------------------------------

def parse_grant(text, what="grant"):
    """CLIENT:PATH (or HOST:DIR) → (host, normalized absolute path); '..' refused."""
    host, sep, path = (text or "").partition(":")
    if not sep or not host or not path:
        raise ValidationError(f"{what} {text!r} is not CLIENT:PATH",
                              hint="e.g. --grant fs1:/data/projects/alpha")
    return host, check_abs_path(f"{what} path", path)


def covers(top, path):
    """Whether `path` is `top` or inside it (both normalized absolute paths)."""
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def norm_path(path):
    """An absolute path normalized, '..' refused (a path sneaking out of a grant)."""
    return "/" if path in (None, "", "/") else check_abs_path("path", path)


# ---- the catalog ----------------------------------------------------------------------------

def get(db, name):
    row = db.one("SELECT * FROM users WHERE name=?", (name,))
    if row is None:
        raise NotFound(f"there is no Cairn user {name!r}", hint="see `cairn user list`")
    return _doc(db, row)


def find(db, name):
    """The user called `name`, or else the one bound to that login name; None if neither."""
    row = db.one("SELECT * FROM users WHERE name=?", (name,)) or \
        db.one("SELECT * FROM users WHERE login=?", (name,))
    return None if row is None else _doc(db, row)


def listing(db):
    return [_doc(db, r) for r in db.all("SELECT * FROM users ORDER BY name")]


def _doc(db, row):
    keys = [{"type": k["key_type"], "data": k["key_data"], "comment": k["key_comment"],
             "fingerprint": k["fingerprint"], "added": k["added"]}
            for k in db.all("SELECT * FROM user_keys WHERE user_id=? ORDER BY id", (row["id"],))]
    for k in keys:
        k["authorized_keys"] = authorized_keys_line(row["name"], k)
    grants = db.all("SELECT kind, host, path FROM user_grants WHERE user_id=? "
                    "ORDER BY kind, host, path", (row["id"],))
    return {"name": row["name"], "role": row["role"], "login": row["login"],
            "comment": row["comment"], "created": row["created"], "keys": keys,
            "grants": [f"{g['host']}:{g['path']}" for g in grants if g["kind"] == "data"],
            "dest_grants": [f"{g['host']}:{g['path']}" for g in grants if g["kind"] == "dest"]}


def add(db, name, role, *, keys=(), grants=(), dest_grants=(), login=None, comment=""):
    """A new user, all or nothing; keys: public key lines."""
    check_name(name)
    check_role(role)
    parsed = [parse_key(k) for k in keys]
    _check_grants_fit(name, role, list(grants) + list(dest_grants))
    with db.tx() as c:
        if c.execute("SELECT 1 FROM users WHERE name=?", (name,)).fetchone():
            raise ValidationError(f"there is already a Cairn user {name!r}",
                                  hint=f"change it with `cairn user set {name} ...`")
        _check_login(c, login, None)
        uid = c.execute("INSERT INTO users(name, role, login, comment, created) "
                        "VALUES (?,?,?,?,?)", (name, role, login or None, comment,
                                               timeutil.iso(timeutil.now()))).lastrowid
        for k in parsed:
            _add_key(c, uid, k)
        for kind, items in (("data", grants), ("dest", dest_grants)):
            for g in items:
                _add_grant(c, uid, kind, g)
    return get(db, name)


def change(db, name, *, role=None, login=None, comment=None, add_keys=(), remove_keys=(),
           grants=(), remove_grants=(), dest_grants=(), remove_dest_grants=()):
    """Changes a user, all or nothing. remove_keys: fingerprints (or key lines). login "":
    unbound. The last admin keeps the admin role."""
    if role is not None:
        check_role(role)
    parsed = [parse_key(k) for k in add_keys]
    with db.tx() as c:
        row = c.execute("SELECT * FROM users WHERE name=?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"there is no Cairn user {name!r}", hint="see `cairn user list`")
        uid = row["id"]
        _check_grants_fit(name, role or row["role"], list(grants) + list(dest_grants))
        if role is not None and role != row["role"]:
            if row["role"] == "admin":
                _check_not_last_admin(c, name, "take the admin role from")
            c.execute("UPDATE users SET role=? WHERE id=?", (role, uid))
        if login is not None:
            _check_login(c, login, uid)
            c.execute("UPDATE users SET login=? WHERE id=?", (login or None, uid))
        if comment is not None:
            c.execute("UPDATE users SET comment=? WHERE id=?", (comment, uid))
        for k in parsed:
            _add_key(c, uid, k)
        for k in remove_keys:
            fp = k if k.startswith("SHA256:") else parse_key(k)[3]
            if not c.execute("DELETE FROM user_keys WHERE user_id=? AND fingerprint=?",
                             (uid, fp)).rowcount:
                raise NotFound(f"user {name} has no key {fp}",
                               hint="see its keys with `cairn user list`")
        for kind, items, gone in (("data", grants, remove_grants),
                                  ("dest", dest_grants, remove_dest_grants)):
            for g in items:
                _add_grant(c, uid, kind, g)
            for g in gone:
                host, path = parse_grant(g)
                if not c.execute("DELETE FROM user_grants WHERE user_id=? AND kind=? AND "
                                 "host=? AND path=?", (uid, kind, host, path)).rowcount:
                    raise NotFound(f"user {name} has no grant {host}:{path}")
    return get(db, name)


def remove(db, name):
    with db.tx() as c:
        row = c.execute("SELECT role FROM users WHERE name=?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"there is no Cairn user {name!r}", hint="see `cairn user list`")
        if row["role"] == "admin":
            _check_not_last_admin(c, name, "remove")
        c.execute("DELETE FROM users WHERE name=?", (name,))
    return {"removed": name}


def _check_grants_fit(name, role, grants):
    for g in grants:
        parse_grant(g)      # a malformed one says so first
    if grants and role != "restore":
        raise ValidationError(f"grants limit the restore role only; {name} would have the "
                              f"{role} role",
                              hint="give the user --role restore, or leave out the grants "
                                   "(an operator or admin may restore anything anywhere)")


def _check_not_last_admin(c, name, doing):
    if c.execute("SELECT count(*) FROM users WHERE role='admin' AND name<>?",
                 (name,)).fetchone()[0] == 0:
        raise ValidationError(f"cannot {doing} {name}: it is the last user with the admin role",
                              hint="give another user the admin role first")


def _check_login(c, login, uid):
    if not login:
        return
    row = c.execute("SELECT name FROM users WHERE login=? AND id IS NOT ?", (login, uid)
                    ).fetchone()
    if row is not None:
        raise ValidationError(f"login name {login!r} is already bound to user {row[0]}")


def _add_key(c, uid, k):
    ktype, data, comment, fp = k
    row = c.execute("SELECT u.name FROM user_keys k JOIN users u ON u.id=k.user_id "
                    "WHERE k.fingerprint=?", (fp,)).fetchone()
    if row is not None:
        raise ValidationError(f"key {fp} already belongs to user {row[0]}",
                              hint="a key is one user's: give each user a key of their own")
    c.execute("INSERT INTO user_keys(user_id, key_type, key_data, key_comment, fingerprint, "
              "added) VALUES (?,?,?,?,?,?)",
              (uid, ktype, data, comment, fp, timeutil.iso(timeutil.now())))


def _add_grant(c, uid, kind, text):
    host, path = parse_grant(text, "grant" if kind == "data" else "destination grant")
    c.execute("INSERT OR IGNORE INTO user_grants(user_id, kind, host, path) VALUES (?,?,?,?)",
              (uid, kind, host, path))


def user_of_key(db, fp):
    row = db.one("SELECT u.name FROM user_keys k JOIN users u ON u.id=k.user_id "
                 "WHERE k.fingerprint=?", (fp,))
    return None if row is None else row[0]

