"""The storage types an agent knows: their agent halves (plugins/storage/agent_base.py), by the
"type" of the storage spec a request carries. The master's list of the same types is
plugins/storage/registry.py. Standard library only: this travels to every host."""

from app.errors import ValidationError
from plugins.storage.advanced_disk.agent import HALF as _ADVANCED_DISK
from plugins.storage.cloud.agent import HALF as _CLOUD
from plugins.storage.dedup.agent import HALF as _DEDUP

HALVES = {h.name: h for h in (_ADVANCED_DISK, _DEDUP, _CLOUD)}

# The half of a request that names no storage spec: a plain image file.
DEFAULT = _ADVANCED_DISK.name

# What backups and restores into every type import when they begin (app/agent/server.py).
PRELOAD = tuple(m for h in HALVES.values() for m in h.preload)


def get(spec):
    """The agent half for a storage spec (None: DEFAULT)."""
    name = DEFAULT if spec is None else spec.get("type")
    half = HALVES.get(name)
    if half is None:
        raise ValidationError(f"storage type {name!r} is unknown to this agent",
                              hint="the agent and the master come from one Cairn; reconnect "
                                   "the host so that it runs the master's agent")
    return half
