"""Repair from a second copy, for every pair of storage types: a byte damaged where the
primary copy's pool keeps a file's data is found by a verify, which queues a repair; the
repair writes the copy again from the copy in the other pool, and the primary copy then
verifies clean and restores byte for byte, the damaged file included. A scheduled verify of
the whole pool repairs the same way; an image without another copy is named, not touched."""

import os
import time

import pytest

from app import status
from storage_sites import damage_data, log_of
from test_storage_duplicate import PAIRS, backup_and_duplicate, lifecycle_setup
from treegen import assert_trees_equal, make_tree

VICTIM = os.urandom(300_000)  # incompressible and unique: found where the pool keeps it


def damaged_site(tmp_path, source, target):
    src = tmp_path / "src"
    make_tree(str(src))
    (src / "victim.bin").write_bytes(VICTIM)
    m = lifecycle_setup(tmp_path, source, target)
    _job, img, _dup = backup_and_duplicate(m)
    damage_data(m, img, VICTIM)
    return m, img, src


def repaired(m, verify_job):
    """The repair jobs a verify queued, waited for."""
    result = m.job(verify_job["id"])["result"]
    ids = [r["job"] for r in result.get("repairs") or []]
    assert ids, log_of(m, verify_job["id"])
    return m.wait_for(ids)


def restores_whole(m, img, src, dst):
    rid = m.start_restore(img["id"], [str(src)], str(dst), copy=1)
    [r] = m.wait_for([rid])
    assert r["status"] == status.OK, log_of(m, rid)
    assert_trees_equal(str(src), str(dst) + str(src))


@pytest.mark.parametrize("source, target", PAIRS)
def test_a_verify_repairs_the_damaged_primary_copy_from_the_second(tmp_path, source, target):
    m, img, src = damaged_site(tmp_path, source, target)
    try:
        [v] = m.wait_for([m.start_verify(image=img["id"])])
        assert v["status"] in (status.CHECKSUM_MISMATCH, status.IMAGE_DAMAGED)
        assert "repair job" in log_of(m, v["id"])
        [rep] = repaired(m, v)
        log = log_of(m, rep["id"])
        assert rep["status"] == status.OK, log
        assert rep["type"] == "repair" and rep["parent_id"] == v["id"]
        assert "from copy 2 (disk pool dp2" in log and "the damaged file is set aside" in log
        [again] = m.wait_for([m.start_verify(image=img["id"])])
        assert again["status"] == status.OK, log_of(m, again["id"])
        restores_whole(m, img, src, tmp_path / "dst")
        leftovers = [f for d, _, fs in os.walk(tmp_path / "pool1") for f in fs
                     if f.endswith(".partial")]
        assert leftovers == []
    finally:
        m.close()


def test_a_scheduled_verify_repairs_a_damaged_chunk_from_the_copy(tmp_path):
    m, img, src = damaged_site(tmp_path, "dedup", "dedup")
    try:
        m.update_object("disk-pool", "dp1", verify_every="1d")
        [vid] = m.verify_due(time.time())
        [v] = m.wait_for([vid])
        assert v["params"]["scheduled"] and v["status"] == status.CHECKSUM_MISMATCH
        [rep] = repaired(m, v)
        log = log_of(m, rep["id"])
        assert rep["status"] == status.OK, log
        # only the chunks the damaged pool lacked were sent
        done = m.job(rep["id"])["result"]
        assert done["sent_bytes"] < done["image_bytes"] / 2, done
        restores_whole(m, img, src, tmp_path / "dst")
    finally:
        m.close()


def test_an_image_without_another_copy_is_named_and_left(tmp_path):
    m, img, src = damaged_site(tmp_path, "advanced-disk", "dedup")
    try:
        with m.db.tx() as c:  # the second copy gone (expired by hand)
            c.execute("DELETE FROM image_copies WHERE image_id=?", (img["id"],))
        [v] = m.wait_for([m.start_verify(image=img["id"])])
        assert v["status"] == status.CHECKSUM_MISMATCH
        assert "has no copy in another pool: it cannot be repaired" in log_of(m, v["id"])
        assert not (m.job(v["id"])["result"] or {}).get("repairs")
    finally:
        m.close()
