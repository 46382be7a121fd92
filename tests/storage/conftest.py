"""The conformance suite of the storage types: every type plugins/storage/registry.py lists
passes the same tests of backup, browse, restore, incrementals and points in time, verify,
damage, expiry, a master killed at each step, concurrent jobs and a full volume, through the
master API and the CLI, with the loopback sshd where a second host matters. A new type passes
it before it ships; what it must say about itself is in tests/storage/storage_sites.py."""

import pytest

from plugins.storage import registry
from storage_sites import TYPE_NAMES


@pytest.fixture(params=TYPE_NAMES)
def storage_type(request):
    """Each registered storage type in turn (its StorageType)."""
    return registry.TYPES[request.param]


@pytest.fixture(scope="module", params=TYPE_NAMES)
def module_storage_type(request):
    """Each registered storage type in turn, for a module's shared fixtures."""
    return registry.TYPES[request.param]
