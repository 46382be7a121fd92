"""The conformance suite of the storage types: every type plugins/storage/registry.py lists
passes the same tests of backup, browse, restore, incrementals and points in time, verify,
damage, expiry, a master killed at each step, concurrent jobs and a full volume, through the
master API and the CLI, with the loopback sshd where a second host matters. A new type passes
it before it ships; what it must say about itself is in tests/storage/storage_sites.py."""

import pytest

import storage_sites
from plugins.storage import registry
from storage_sites import TYPE_NAMES


def _site(request, name):
    """What a type's servers need in the tests: a cloud pool's server gets a new bucket of
    the loopback S3 server (started once for the session)."""
    if name == "cloud":
        s3 = request.getfixturevalue("s3_server")
        storage_sites.SITES["cloud"] = lambda: (
            {"endpoint": s3.endpoint, "bucket": s3.new_bucket("pool")},
            {"access_key": s3.access_key, "secret_key": s3.secret_key})
    return registry.TYPES[name]


@pytest.fixture(params=TYPE_NAMES)
def storage_type(request):
    """Each registered storage type in turn (its StorageType)."""
    return _site(request, request.param)


@pytest.fixture(scope="module", params=TYPE_NAMES)
def module_storage_type(request):
    """Each registered storage type in turn, for a module's shared fixtures."""
    return _site(request, request.param)


@pytest.fixture(autouse=True)
def _cloud_site_for_pairs(request):
    """Tests parametrized by type names (copies between two types) get the sites of those
    types too."""
    spec = getattr(request.node, "callspec", None)
    for value in (spec.params.values() if spec is not None else ()):
        if isinstance(value, str) and value in storage_sites.SITES or value == "cloud":
            _site(request, value)
