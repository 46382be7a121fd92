"""Cairn users, who the master acts for, and the audit log. Part of the master API
(app/master/__init__.py); users are app/users.py, the checks app/access.py, the log
app/audit.py."""

from app import access, users
from app.errors import PermissionDenied


class UsersAPI:
    # ---- who is asking --------------------------------------------------------------------
    def whoami(self):
        """The user this master acts for: name, role, origin, grants, and `can`: the master
        methods the role may call (the console hides the rest)."""
        who = self.access.who("whoami")
        rank = users.rank(who["role"])
        return {"user": who["name"], "role": who["role"], "origin": self.access.origin,
                "local": bool(who.get("local")), "grants": who["grants"],
                "dest_grants": who["dest_grants"],
                "can": sorted(n for n, need in access.METHODS.items()
                              if users.rank(need) <= rank)}

    def audit_login(self, method="ssh", key_fingerprint=None, client=None):
        """Records a login (what `cairn master serve --stdio` calls on each connection):
        the user, its origin (the client's address), how it logged in and with which key
        (its fingerprint, and the user it belongs to). An unknown user is refused, and so is
        a key bound to another user; each refusal is recorded."""
        who = self.access.who("login")
        details = {"method": method, "client": client}
        if key_fingerprint:
            details["key"] = key_fingerprint
            details["key_user"] = owner = users.user_of_key(self.db, key_fingerprint)
            if owner is not None and owner != who["name"]:
                err = PermissionDenied(
                    f"key {key_fingerprint} belongs to user {owner}, not {who['name']}",
                    user=who["name"], role=who["role"], action="login",
                    hint="check the command= of that key's line in authorized_keys "
                         "(`cairn user list` prints the right one)")
                self.access.audit.append(who["name"], who["role"], self.access.origin,
                                         "login", f"user {who['name']}", "refused",
                                         {**details, "reason": err.message})
                raise err
        return self.access.audit.append(who["name"], who["role"], self.access.origin,
                                        "login", f"user {who['name']}", "ok", details)

    # ---- the audit log --------------------------------------------------------------------
    def audit_entries(self, since=None, user=None, limit=None, verify=True):
        """Audit entries oldest first (the newest `limit` of them), each with `chain_ok`
        when verify (app/audit.py); since: ISO 8601 or a time back from now (24h)."""
        return self.access.audit.entries(since=since, user=user, limit=limit, verify=verify)

    def audit_verify(self, last=None):
        """Walks the audit log's hash chain: ok, entries, broken [{seq, problem}], head."""
        return self.access.audit.verify(last=last)

    # ---- users ----------------------------------------------------------------------------
    def users(self):
        """Every user with its role, login name, keys (fingerprint and authorized_keys
        line) and grants."""
        return users.listing(self.db)

    def user(self, name):
        return users.get(self.db, name)

    def add_user(self, name, role, *, keys=(), grants=(), dest_grants=(), login=None,
                 comment=""):
        """A new user; keys: OpenSSH public key lines; grants and dest_grants:
        CLIENT:PATH and HOST:DIR (the restore role's)."""
        return users.add(self.db, name, role, keys=keys, grants=grants,
                         dest_grants=dest_grants, login=login, comment=comment)

    def set_user(self, name, *, role=None, login=None, comment=None, add_keys=(),
                 remove_keys=(), grants=(), remove_grants=(), dest_grants=(),
                 remove_dest_grants=()):
        """Changes a user's role, login name, keys and grants; the last admin keeps its
        role."""
        return users.change(self.db, name, role=role, login=login, comment=comment,
                            add_keys=add_keys, remove_keys=remove_keys, grants=grants,
                            remove_grants=remove_grants, dest_grants=dest_grants,
                            remove_dest_grants=remove_dest_grants)

    def remove_user(self, name):
        """Removes a user with its keys and grants; the last admin stays."""
        return users.remove(self.db, name)
