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


@pytest.mark.parametrize("source, target", [("advanced-disk", "dedup"),
                                            ("dedup", "advanced-disk")])
def test_an_import_records_a_pool_s_copies_as_copies(tmp_path, source, target):
    """The catalog lost; the pool of the backups imported, then the pool of the copies: the
    images there are recorded as second copies of those the catalog now has (not as new
    primaries), and a restore falls back to them when the first pool is lost."""
    import shutil

    from app.master import Master
    from plugins.storage import registry
    from storage_sites import make_pool
    src = tmp_path / "src"
    make_tree(str(src))
    m = lifecycle_setup(tmp_path, source, target)
    try:
        _job, img, _dup = backup_and_duplicate(m)
    finally:
        m.close()
    shutil.rmtree(tmp_path / "home")
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        make_pool(m, registry.TYPES[source], tmp_path / "pool1", server="ss1", pool="dp1")
        make_pool(m, registry.TYPES[target], tmp_path / "pool2", server="ss2", pool="dp2")
        m.create_storage_unit("stu1", pool="dp1")
        m.create_storage_unit("stu2", pool="dp2")
        for pool in ("dp1", "dp2"):
            [j] = m.wait_for([m.start_import(pool)])
            assert j["status"] == status.OK, log_of(m, j["id"])
        result = m.job(j["id"])["result"]
        assert result["imported"] == [] and [c["image"] for c in result["copies"]] == \
            [img["id"]]
        [c1, c2] = m.image_copies(img["id"])["copies"]
        assert (c1["pool"], c2["pool"], c2["copy"]) == ("dp1", "dp2", 2)
        [again] = m.wait_for([m.start_import("dp2")])
        assert m.job(again["id"])["result"]["copies"] == []  # nothing recorded twice
        lost = [f for f in image_files_of(tmp_path / "pool1") if img["id"] in f]
        assert lost
        for f in lost:
            os.unlink(f)
        rid = m.start_restore(img["id"], [str(src)], str(tmp_path / "dst"))
        [r] = m.wait_for([rid])
        assert r["status"] == status.OK, log_of(m, rid)
        assert "copy 2" in log_of(m, rid)
        assert_trees_equal(str(src), str(tmp_path / "dst") + str(src))
    finally:
        m.close()


def image_files_of(top):
    return [os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs
            if "cairn-images" in d or f.endswith((".recipe", ".tar"))]
