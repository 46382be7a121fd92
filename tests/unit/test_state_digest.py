"""The digest an incremental and a files cache compare entries by: the master computes it from
the base image's index, the client's agent from lstat. Both must agree, whatever the values,
and any change of a field must change it."""

import pytest

from app.formats.changes import file_digest, state_digest

BASE = dict(mode=0o644, uid=1000, gid=100, size=4096, mtime_ns=1_700_000_000_123_456_789,
            ctime_ns=1_700_000_001_000_000_000, ino=123456)


def test_a_regular_files_digest_is_its_state_digest():
    assert file_digest(**BASE) == state_digest("f", link="", **BASE)
    assert file_digest(**BASE) == state_digest("f", link=b"", **BASE)


@pytest.mark.parametrize("field", sorted(BASE))
def test_every_field_counts(field):
    changed = dict(BASE, **{field: BASE[field] + 1})
    assert file_digest(**changed) != file_digest(**BASE)


def test_kind_and_link_count():
    assert state_digest("l", link="a", **BASE) != state_digest("l", link="b", **BASE)
    assert state_digest("p", link="", **BASE) != file_digest(**BASE)


@pytest.mark.parametrize("far", [2**64 * 10**9, -(2**64) * 10**9])
def test_times_beyond_64_bits_are_digested_not_refused(far):
    # a file system with 64-bit seconds can report times that do not fit in 64-bit
    # nanoseconds; the walk must not fail on them
    odd = dict(BASE, mtime_ns=far)
    assert file_digest(**odd) == state_digest("f", link="", **odd)
    assert file_digest(**odd) != file_digest(**dict(odd, mtime_ns=far + 1))
    assert file_digest(**odd) != file_digest(**BASE)
