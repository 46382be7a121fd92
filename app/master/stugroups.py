"""Storage unit groups (ordered storage units a backup job is placed on when it starts). Part
of the master API (app/master/__init__.py)."""


class StorageUnitGroupsAPI:
    def create_storage_unit_group(self, name, units, selection, comment=""):
        """A group of storage units (names, in order; a list or "a,b,c") with its selection:
        prioritized, failover, round-robin or least-loaded (app/stugroups.py)."""
        return self.storage_unit_groups_config.add(name, units, selection, comment=comment)

    def storage_unit_group(self, name):
        """One group: its selection, units (storage unit, pool, server, host) in order and the
        policies that use it."""
        return self.storage_unit_groups_config.get(name)

    def storage_unit_groups(self):
        """Every storage unit group, by name, as storage_unit_group() gives it."""
        return self.storage_unit_groups_config.all()

    def delete_storage_unit_group(self, name):
        """Deletes a group no policy uses; refused (naming them) while policies use it."""
        return self.delete_object("storage-unit-group", name)
