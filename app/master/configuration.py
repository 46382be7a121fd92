"""Policies, changing and deleting configuration objects, and the master's settings. Part of the
master API (app/master/__init__.py)."""

from app import config_edit, timeutil
from app.schedule_rules import CATALOG_SCHEDULE
from app.jobs import catalog_backup
from app.errors import NotFound, ValidationError


class ConfigurationAPI:
    def create_policy(self, name, *, storage_unit=None, lifecycle=None,
                      storage_unit_group=None, priority=0,
                      multiple_streams=False, checksum="crc32", snapshot="none",
                      file_list="auto", dedup="server", skip_nodump=False, clients=(),
                      selections=(), schedules=(), comment="", compression=False,
                      encryption=False):
        """A policy with its clients, backup selections and schedules (dicts of
        add_schedule's arguments plus `name`), all or nothing: when a later part is
        refused, the policy is removed again and the error raised. It writes to a storage
        unit or through a lifecycle (exactly one of them: app/lifecycles.py). compression and
        encryption are refused with the reason (Config.add_policy). A catalog schedule
        needs the catalog backup key to exist (add_schedule)."""
        if any(s.get("type") == CATALOG_SCHEDULE for s in schedules):
            catalog_backup.check_schedulable(self, None)
        group_id = lifecycle_id = None
        if storage_unit_group is not None and storage_unit is None and lifecycle is None:
            # Under a group the policy keeps the group's first unit (app/stugroups.py).
            g = self.storage_unit_groups_config.get(storage_unit_group)
            storage_unit, group_id = g["unit_names"][0], g["id"]
        elif storage_unit_group is not None:
            self.lifecycle_config.policy_target("", "")  # two targets: refused with the hint
        else:
            storage_unit, lifecycle_id = self.lifecycle_config.policy_target(storage_unit,
                                                                              lifecycle)
        self.config.add_policy(name, storage_unit=storage_unit, lifecycle_id=lifecycle_id,
                               storage_unit_group_id=group_id,
                               priority=priority,
                               compression=compression, encryption=encryption,
                               multiple_streams=multiple_streams, checksum=checksum,
                               snapshot=snapshot, file_list=file_list, dedup=dedup,
                               skip_nodump=skip_nodump, comment=comment)
        try:
            for host in clients:
                self.config.add_policy_client(name, host)
            for path in selections:
                self.config.add_policy_selection(name, path)
            for s in schedules:
                s = dict(s)
                self.config.add_schedule(name, s.pop("name"), **s)
        except BaseException:
            self._remove_policy(name)
            raise
        return self.config.policy(name)

    def policy(self, name):
        """One policy with its clients, backup selections and schedules."""
        return self.config.policy(name)

    def policies(self):
        """Every policy, by name, as policy() gives it."""
        return self.config.policies()

    def add_policy_client(self, policy, host):
        """Adds a registered host to a policy's clients; returns the policy."""
        return self.config.add_policy_client(policy, host)

    def add_policy_selection(self, policy, path):
        """Adds a backup selection (an absolute path, or NEW_STREAM) to a policy; returns
        the policy."""
        return self.config.add_policy_selection(policy, path)

    def add_schedule(self, policy, name, *, type, retention="2w", frequency=None, windows=None,
                     calendar=None, read_all=False, passphrase=None):
        """Adds a schedule to a policy (when it runs and what it keeps: Config.add_schedule);
        returns the policy. A catalog schedule's backups run without the passphrase, so the
        catalog backup key must exist: made now from `passphrase` (bytes), or by an earlier
        catalog backup."""
        if type == CATALOG_SCHEDULE:
            catalog_backup.check_schedulable(self, passphrase)
        return self.config.add_schedule(policy, name, type=type, retention=retention,
                                        frequency=frequency, windows=windows,
                                        calendar=calendar, read_all=read_all)

    def _remove_policy(self, name):
        # Clients, selections and schedules go with it (ON DELETE CASCADE).
        with self.db.tx() as c:
            c.execute("DELETE FROM policies WHERE name=?", (name,))

    # ---- editing --------------------------------------------------------------------------
    def dependents(self, kind, name):
        """What still uses a configuration object (kind: host, storage-server, disk-pool,
        storage-unit, policy, lifecycle); it can be deleted only when this is empty."""
        deps = config_edit.dependents(self.db, kind, name)
        return {"kind": kind, "name": name, "dependents": deps,
                "text": config_edit.describe(deps)}

    def delete_object(self, kind, name):
        return config_edit.delete(self.db, kind, name)

    def update_object(self, kind, name, **changes):
        return config_edit.update(self.db, self.config, kind, name, **changes)

    # ---- settings -------------------------------------------------------------------------
    SETTINGS = {"max_jobs_per_client": (4, "jobs of one client that may run at once"),
                "backup_tries": (2, "attempts of a failed backup or duplication, the first one "
                                 "included"),
                "retry_delay": ("10m", "wait before the next attempt of a failed backup or "
                                "duplication"),
                "stale_client_days": (3, "days without a successful backup after which "
                                      "`cairn status` warns about a client")}

    def setting(self, key):
        if key not in self.SETTINGS:
            raise NotFound(f"there is no setting {key!r}",
                           hint="settings: " + ", ".join(sorted(self.SETTINGS)))
        row = self.db.one("SELECT value FROM settings WHERE key=?", (key,))
        default = self.SETTINGS[key][0]
        if row is None:
            return default
        return int(row[0]) if isinstance(default, int) else row[0]

    def settings(self):
        return {k: {"value": self.setting(k), "default": d, "about": about}
                for k, (d, about) in sorted(self.SETTINGS.items())}

    def set_setting(self, key, value):
        self.setting(key)  # an unknown key is refused here
        default = self.SETTINGS[key][0]
        if isinstance(default, int):
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValidationError(f"{key} must be a whole number, not {value!r}") from None
            if value < 1:
                raise ValidationError(f"{key} must be at least 1")
        else:
            timeutil.parse_duration(value, what=key)
        with self.db.tx() as c:
            c.execute("INSERT INTO settings(key, value) VALUES (?,?) ON CONFLICT(key) DO UPDATE "
                      "SET value=excluded.value", (key, str(value)))
        return self.settings()
