"""Policies, changing and deleting configuration objects, and the master's settings. Part of the
master API (app/master/__init__.py).

The catalog backup job's module is imported lazily, by the methods that check a catalog
backup's schedule: every command opens the master, few change one."""

from app import audit, backup_excludes, config_edit, policy_edit, shared_volumes, timeutil
from app.schedule_rules import CATALOG_SCHEDULE
from app.errors import NotFound, ValidationError


class ConfigurationAPI:
    def create_policy(self, name, *, storage_unit=None, lifecycle=None,
                      storage_unit_group=None, priority=0,
                      multiple_streams=False, checksum="crc32", snapshot="none",
                      file_list="auto", dedup="server", skip_nodump=False, clients=(),
                      selections=(), schedules=(), comment="", compression=None,
                      encryption=False, excludes=(), compression_level=None):
        """A policy with its clients, backup selections and schedules (dicts of
        add_schedule's arguments plus `name`) and excludes ({"pattern", "client"}), all or
        nothing: when a later part is
        refused, the policy is removed again and the error raised. It writes to a storage
        unit or through a lifecycle (exactly one of them: app/lifecycles.py). compression
        (server, client or off; True: client; None: the storage's default) and
        compression_level: where backups are compressed and how hard (chunks in
        deduplicating pools, image files in advanced-disk pools); encryption is refused with the
        reason (Config.add_policy). A catalog schedule
        needs the catalog backup key to exist (add_schedule)."""
        if any(s.get("type") == CATALOG_SCHEDULE for s in schedules):
            from app.jobs import catalog_backup
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
                               compression_level=compression_level,
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
            for e in excludes:
                policy_edit.add_exclude(self.config, name, e["pattern"], e.get("client"))
        except BaseException:
            self._remove_policy(name)
            raise
        return policy_edit.with_warnings(self.config.policy(name), [
            w for path in selections for w in backup_excludes.selection_warnings(self.db, path)])

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
        the policy, with `warnings` when the backups leave the selection (or part of it)
        out: a pseudo file system, a pool (app/backup_excludes.py)."""
        doc = self.config.add_policy_selection(policy, path)
        added = doc["selections"][-1]   # as stored: normalized
        return policy_edit.with_warnings(doc, backup_excludes.selection_warnings(self.db,
                                                                                 added))

    def pool_paths(self):
        """{folder: why} of every pool's files: backups leave them out where a selection
        holds them or lies in them (app/backup_excludes.py)."""
        return shared_volumes.pool_folders(self.db)

    # Day two: what policy_edit changes. Each returns the policy with `warnings` (queued or
    # running jobs that keep the old values, a policy left with nothing to run).
    def remove_policy_client(self, policy, host):
        """Removes a client from a policy, with its own excludes."""
        return policy_edit.remove_client(self.config, policy, host)

    def remove_policy_selection(self, policy, path):
        return policy_edit.remove_selection(self.config, policy, path)

    def set_schedule(self, policy, name, passphrase=None, **changes):
        """Changes the given options of a schedule (add_schedule's keywords); the others
        stay."""
        if changes.get("type") == CATALOG_SCHEDULE:
            from app.jobs import catalog_backup
            catalog_backup.check_schedulable(self, passphrase)
        return policy_edit.set_schedule(self.config, policy, name, **changes)

    def remove_schedule(self, policy, name):
        return policy_edit.remove_schedule(self.config, policy, name)

    def add_policy_exclude(self, policy, pattern, client=None):
        """Adds a name glob (*.tmp) or an absolute path to what the policy's backups leave
        out, for every client or for `client`."""
        return policy_edit.add_exclude(self.config, policy, pattern, client)

    def remove_policy_exclude(self, policy, pattern, client=None):
        return policy_edit.remove_exclude(self.config, policy, pattern, client)

    def change_policy_lists(self, policy, *, clients=None, selections=None, schedules=None,
                            excludes=None):
        """Makes a policy's clients, selections, schedules and excludes the lists given
        (None: unchanged), checked first; the console's policy pages save through this."""
        if any(s.get("type") == CATALOG_SCHEDULE for s in schedules or ()):
            from app.jobs import catalog_backup
            catalog_backup.check_schedulable(self, None)
        return policy_edit.change_lists(self, policy, clients=clients, selections=selections,
                                        schedules=schedules, excludes=excludes)

    def add_schedule(self, policy, name, *, type, retention="2w", frequency=None, windows=None,
                     calendar=None, read_all=False, passphrase=None):
        """Adds a schedule to a policy (when it runs and what it keeps: Config.add_schedule);
        returns the policy. A catalog schedule's backups run without the passphrase, so the
        catalog backup key must exist: made now from `passphrase` (bytes), or by an earlier
        catalog backup."""
        if type == CATALOG_SCHEDULE:
            from app.jobs import catalog_backup
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
                                      "`cairn status` warns about a client"),
                "audit_syslog": ("off", "the syslog facility the audit log is also sent to "
                                 "(journald reads it): off, auth, authpriv, daemon, user, "
                                 "local0 to local7")}

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
        elif key == "audit_syslog":
            value = str(value).strip().lower()
            if value not in audit.SYSLOG_FACILITIES:
                raise ValidationError(f"{value!r} is not a syslog facility",
                                      hint="choose one of: " + ", ".join(audit.SYSLOG_FACILITIES))
        else:
            timeutil.parse_duration(value, what=key)
        with self.db.tx() as c:
            c.execute("INSERT INTO settings(key, value) VALUES (?,?) ON CONFLICT(key) DO UPDATE "
                      "SET value=excluded.value", (key, str(value)))
        return self.settings()
