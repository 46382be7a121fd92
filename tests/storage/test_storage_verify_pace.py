"""A pool's verify pace, for every storage type: with `verify_max_mb_s` set, a verify of an
image and of the whole pool read no faster than that (and say so); without it they run as
fast as they go."""

import os
import time

import pytest

from app.master import Master
from storage_sites import log_of, make_pool

DATA_MB = 2


@pytest.fixture
def pool_with_image(tmp_path, storage_type):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(DATA_MB):
        (src / f"f{i}").write_bytes(os.urandom(1 << 20))   # incompressible, unique
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    make_pool(m, storage_type, tmp_path / "vol")
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    [job] = m.wait_for(m.start_backup("p1"))
    assert job["status"] == 0, log_of(m, job["id"])
    yield m, job["image_id"]
    m.close()


def timed_verify(m, **what):
    t0 = time.monotonic()
    [job] = m.wait_for([m.start_verify(**what)])
    assert job["status"] == 0, log_of(m, job["id"])
    return time.monotonic() - t0, log_of(m, job["id"])


def test_a_verify_reads_no_faster_than_the_pools_pace(pool_with_image):
    m, image_id = pool_with_image
    m.update_object("disk-pool", "dp1", verify_max_mb_s=1)
    for what in ({"image": image_id}, {"pool": "dp1"}):
        took, log = timed_verify(m, **what)
        assert "at most 1 MB/s" in log
        # DATA_MB of data at 1 MB/s (the pace allows the first read at once)
        assert took >= DATA_MB * 0.75, (what, took)
    m.update_object("disk-pool", "dp1", verify_max_mb_s="unlimited")
    took, log = timed_verify(m, image=image_id)
    assert "at most" not in log and took < DATA_MB * 0.75
