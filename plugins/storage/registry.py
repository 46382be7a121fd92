"""The storage types the master knows: the one place that lists them (their master halves;
plugins/storage/agents.py lists the agent halves). See plugins/storage/base.py."""

from app.errors import ValidationError
from plugins.storage.advanced_disk.master import ADVANCED_DISK
from plugins.storage.cloud.master import CLOUD
from plugins.storage.dedup.master import DEDUP

TYPES = {t.name: t for t in (ADVANCED_DISK, DEDUP, CLOUD)}

# Types named in the CLI contract but not shipped in this version; creating one says so.
PLANNED = {}


def get(type_name):
    """The StorageType of that name, or None."""
    return TYPES.get(type_name)


def require(type_name):
    """The StorageType of that name; a type this version does not ship is refused, naming
    the choices."""
    storage_type = TYPES.get(type_name)
    if storage_type is None:
        if type_name in PLANNED:
            raise ValidationError(PLANNED[type_name],
                                  hint=f"choose one of: {', '.join(TYPES)}")
        raise ValidationError(f"storage type {type_name!r} is unknown",
                              hint=f"choose one of: {', '.join(TYPES)}")
    return storage_type


def of_server(server):
    """The StorageType of a storage server (a catalog row: its type was checked when it was
    created)."""
    return TYPES[server["type"]]


def can(type_name, capability):
    """Whether the type of that name has a capability (plugins/storage/base.Capabilities);
    False for a type this version does not know."""
    t = TYPES.get(type_name)
    return bool(t is not None and getattr(t.capabilities, capability))
