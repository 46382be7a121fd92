"""Who may call what on the master, enforced in the master itself so that it holds for every
caller: the console, the CLI and `cairn master serve --stdio` alike.

METHODS classifies every public method of the master API (app/master/*.py) once, by the
least role that may call it (app/users.py: viewer < restore < operator < admin);
tests/integration/test_roles.py fails when a public method is missing from it. install() wraps
each of them on the Master class: a call from outside the master is checked against the
master's user (Master(user=..., origin=...); none given: the local admin), refused with a
PermissionDenied naming user, role and action, and written to the audit log when refused or
when it changes something (configuration with its before and after, jobs started, canceled,
restarted, restores, expiries, users). What the master calls on itself while doing so, and
the work of its own threads (the dispatcher's jobs, the alerter), is not checked again.

The restore role's methods check its grants: the clients' paths it may browse and restore
(a path covers its subtree; '..' is refused) and the hosts' directories it may restore to
(its destination grants, and its granted paths on their own client)."""

import functools
import inspect
import os

from app import users
from app.access_scope import inside, internal
from app.access_grants import check_grants, has_grant_check
from app.errors import CairnError, PermissionDenied

V, R, O, A = "viewer", "restore", "operator", "admin"

# name: the least role that may call it. Grouped by the module that defines it.
METHODS = {
    # hosts.py
    "host_list": V, "host_reachability": V, "probe_host": V, "host_volumes": V,
    "list_host_dir": R, "add_host": A, "trust_host_key": A, "ensure_local_host": A,
    "add_host_trusting_key": A,
    # configuration.py
    "policy": V, "policies": V, "pool_paths": V, "dependents": V, "setting": V,
    "settings": V, "create_policy": A, "add_policy_client": A, "add_policy_selection": A,
    "remove_policy_client": A, "remove_policy_selection": A, "set_schedule": A,
    "remove_schedule": A, "add_policy_exclude": A, "remove_policy_exclude": A,
    "change_policy_lists": A, "add_schedule": A, "delete_object": A, "update_object": A,
    "set_setting": A,
    # storage.py
    "storage_server": V, "storage_servers": V, "disk_pools": V, "storage_units": V,
    "disk_pools_checked": V, "disk_pool_report": V, "storage_benchmarks": V, "pool_usage": V,
    "create_storage_server": A, "check_volumes": A, "create_disk_pool": A,
    "create_storage_unit": A, "start_storage_benchmark": O, "start_verify": O,
    "verify_due": A, "start_cleanup": O, "start_import": A, "start_rebuild_index": O,
    "start_reclaim": O, "rebuild_pool_index": O,
    # images.py
    "images": V, "image": V, "image_at": V, "expire_preview": V, "images_in_range": V,
    "image_clients": V, "browse": R, "owner_names": R, "list_entries": R, "search": R,
    "find_versions": R, "start_expire": O, "expire_image": O, "expire_due": A,
    "remove_index": A, "open_index": A,
    # restores.py
    "preview_restore": R, "start_restore": R,
    # jobs.py
    "job": V, "job_list": V, "job_logs": V, "job_changes": V, "wait_for": V, "job_stats": V,
    "throughput": V, "start_backup": O, "restart_job": O, "cancel_job": O,
    "suspend_job": O, "resume_job": O, "queue_backup": A, "jobs_by_id": V,
    "dispatcher_active": V, "ensure_dispatcher": V,
    # reports.py
    "job_report": V, "report_choices": V, "schedule_runs": V,
    # catalog.py
    "catalog_backup_state": V, "start_catalog_backup": O, "change_catalog_passphrase": A,
    # lifecycles.py
    "lifecycle": V, "lifecycles": V, "image_copies": V, "duplication_problems": V,
    "duplicate_jobs": O, "create_lifecycle": A,
    # stugroups.py
    "storage_unit_group": V, "storage_unit_groups": V, "create_storage_unit_group": A,
    "delete_storage_unit_group": A,
    # health.py
    "health": V, "hosts_with_state": V, "storage_servers_with_state": V,
    "disk_pools_with_capacity": V, "disk_pool_capacity": V, "record_contact": A,
    # alerts.py
    "alert_settings": V, "alert_history": V, "alert_events": V, "alerts_test": O,
    "set_alert_settings": A, "set_alert_password": A, "alerts_round": A,
    # users.py
    "whoami": V, "audit_login": V, "audit_entries": V, "audit_verify": V, "users": A,
    "user": A, "add_user": A, "set_user": A, "remove_user": A,
    # __init__.py
    "close": V, "batch": V,
}

# Closing its own master needs no right, not even a known user. A batch is checked call by
# call, each as if made alone.
UNCHECKED = {"close", "batch"}

# Calls above viewer that change nothing: not written to the audit log unless refused.
NOT_AUDITED = {"list_host_dir", "browse", "owner_names", "list_entries", "search",
               "find_versions", "preview_restore", "check_volumes", "open_index", "user",
               "users", "record_contact", "remove_index"}

# What a configuration change changes: (kind, the argument naming it), or (None, argument
# naming the kind, argument naming the object) for the calls that take a kind.
SUBJECTS = {
    "add_host": ("host", "name"), "trust_host_key": ("host", "name"),
    "add_host_trusting_key": ("host", "name"), "create_policy": ("policy", "name"),
    "set_setting": ("setting", "key"), "create_storage_server": ("storage-server", "name"),
    "create_disk_pool": ("disk-pool", "name"), "create_storage_unit": ("storage-unit", "name"),
    "create_lifecycle": ("lifecycle", "name"),
    "create_storage_unit_group": ("storage-unit-group", "name"),
    "delete_storage_unit_group": ("storage-unit-group", "name"),
    "add_user": ("user", "name"), "set_user": ("user", "name"),
    "remove_user": ("user", "name"), "set_alert_settings": ("alert-settings", None),
    "update_object": (None, "kind", "name"), "delete_object": (None, "kind", "name"),
    "ensure_local_host": ("local-host", None),
}
# Recorded only when they changed something (every console start calls it).
SKIP_UNCHANGED = {"ensure_local_host"}
for _m in ("add_policy_client", "add_policy_selection", "remove_policy_client",
           "remove_policy_selection", "set_schedule", "remove_schedule", "add_policy_exclude",
           "remove_policy_exclude", "change_policy_lists", "add_schedule"):
    SUBJECTS[_m] = ("policy", "policy")

# How an argument names what a call acts on, for the log's object column.
_OBJECT_ARGS = (("job_id", "job"), ("image_id", "image"), ("image", "image"),
                ("policy", "policy"), ("pool", "disk-pool"), ("server", "storage-server"),
                ("storage_unit", "storage-unit"), ("job_ids", "jobs"), ("name", ""))

# How the object of each kind is read, for its before and after.
_GETTERS = {
    "host": lambda m, n: m.config.host(n),
    "local-host": lambda m, n: m.config.local_host(),
    "storage-server": lambda m, n: m.config.storage_server(n),
    "disk-pool": lambda m, n: m.config.disk_pool(n),
    "storage-unit": lambda m, n: m.config.storage_unit(n),
    "policy": lambda m, n: m.config.policy(n),
    "lifecycle": lambda m, n: m.lifecycle(n),
    "storage-unit-group": lambda m, n: m.storage_unit_group(n),
    "setting": lambda m, n: {"value": m.setting(n)},
    "alert-settings": lambda m, n: {k: s["value"]
                                    for k, s in m.alert_settings()["settings"].items()},
    "user": lambda m, n: users.get(m.db, n),
}


def install(cls):
    """Wraps every classified method of the master class `cls` with its check."""
    for name in METHODS:
        if name in UNCHECKED:
            continue
        fn = getattr(cls, name)
        setattr(cls, name, _guarded(name, fn))
    return cls


def public_methods(cls):
    """The names of the master API: the public callables its classes define."""
    names = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        names.update(n for n, v in vars(klass).items()
                     if not n.startswith("_") and callable(v)
                     and not isinstance(v, (staticmethod, classmethod, type)))
    return names


def _guarded(name, fn):
    need = METHODS[name]
    # the signature is read at the method's first checked call: reading all of them when the
    # master class is made was a hundredth of every command's start
    sig = None

    @functools.wraps(fn)
    def call(self, *args, **kw):
        nonlocal sig
        if inside():
            return fn(self, *args, **kw)
        access = self.access
        if sig is None:
            sig = inspect.signature(fn)
        try:
            bound = sig.bind(self, *args, **kw).arguments
            bound.pop("self", None)
        except TypeError:
            bound = None
        with internal():
            who = access.who(name)
            access.check_role(name, need, who, bound or {})
            if bound is None:
                return fn(self, *args, **kw)    # Python's own error, as without the check
            narrow = access.check_grants(name, need, who, bound)
            audited = need != V and name not in NOT_AUDITED
            before = _state(self, name, bound) if audited else None
            result = fn(self, *args, **kw)
            after = _state(self, name, bound) if audited else None
            if audited:
                access.record(name, bound, result, before, after, who)
        return narrow(result) if narrow else result

    call.required_role = need
    return call


def _state(master, name, bound):
    """The object a configuration change acts on, as it is now (None: none, or not yet)."""
    subject = SUBJECTS.get(name)
    if subject is None:
        return None
    kind, key = (bound.get(subject[1]), subject[2]) if subject[0] is None else subject
    obj = bound.get(key) if key else None
    getter = _GETTERS.get(kind) if isinstance(kind, str) else None
    try:
        return getter(master, obj) if getter is not None else None
    except CairnError:
        return None


def object_text(name, bound):
    subject = SUBJECTS.get(name)
    if subject is not None:
        kind, key = (bound.get(subject[1]), subject[2]) if subject[0] is None else subject
        return f"{kind} {bound.get(key)}" if key else str(kind)
    for arg, word in _OBJECT_ARGS:
        if bound.get(arg) is not None:
            value = bound[arg]
            value = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
            return f"{word} {value}".strip()
    return ""


class Access:
    """The user a master acts for and the checks of its calls."""

    def __init__(self, master, user, origin):
        self.master = master
        self.user = user            # None: the local admin (the embedded console, local CLI)
        self.origin = origin or "local"
        self._audit = None

    @property
    def audit(self):
        if self._audit is None:
            from app.audit import AuditLog   # lazily: only a master that writes loads it
            m = self.master
            self._audit = AuditLog(m.db, os.path.join(m.home.root, "audit.head"),
                                   lambda: m.setting("audit_syslog"))
        return self._audit

    def who(self, action=None):
        """{"name", "role", "grants", "dest_grants"} of the user now (a role changed by
        another process counts from the next call); an unknown user is refused."""
        if self.user is None:
            return {"name": "admin", "role": A, "grants": [], "dest_grants": [],
                    "local": True}
        doc = users.find(self.master.db, self.user)
        if doc is None:
            err = PermissionDenied(
                f"{self.user!r} is not a Cairn user: the master refuses every request",
                user=self.user, action=action,
                hint="an admin adds the user with `cairn user add NAME --role ROLE`")
            self._refused(action, {}, err, None)
            raise err
        return doc

    def check_role(self, name, need, who, bound):
        """Refuses a call the user's role may not make."""
        if users.rank(who["role"]) < users.rank(need):
            err = PermissionDenied(
                f"user {who['name']} (role {who['role']}) may not {name.replace('_', ' ')}: "
                f"it needs the {need} role", user=who["name"], role=who["role"], action=name,
                hint="ask an admin (`cairn user set NAME --role ROLE`)")
            self._refused(name, bound, err, who)
            raise err

    def check_grants(self, name, need, who, bound):
        """Refuses a restore-role call past the user's grants; returns a function narrowing
        its result to them, or None."""
        if who["role"] != R or not has_grant_check(name):
            return None
        try:
            return check_grants(self.master, name, who, bound)
        except PermissionDenied as err:
            err.user, err.role, err.action = who["name"], who["role"], name
            self._refused(name, bound, err, who)
            raise

    def record(self, name, bound, result, before, after, who):
        if name in SKIP_UNCHANGED and before == after:
            return
        details = {"args": bound, "result": _result_summary(result)}
        if SUBJECTS.get(name) is not None:
            details.update(before=before, after=after)
        self.audit.append(who["name"], who["role"], self.origin, name,
                          object_text(name, bound), "ok", details)

    def _refused(self, name, bound, err, who):
        self.audit.append(who["name"] if who else self.user, who["role"] if who else None,
                          self.origin, name or "call", object_text(name or "", bound),
                          "refused", {"args": bound, "reason": err.message})


def _result_summary(result):
    """The part of a call's result worth keeping: job ids, the object's id, not a listing."""
    if isinstance(result, int) and not isinstance(result, bool):
        return {"job": result}
    if isinstance(result, list):
        ids = [r.get("id") if isinstance(r, dict) else r for r in result[:50]]
        return {"jobs": [i for i in ids if isinstance(i, int)]} if ids else None
    if isinstance(result, dict):
        keep = {k: result[k] for k in ("id", "job", "expired", "removed", "name")
                if k in result}
        return keep or None
    return None
