"""Copies of images between pools of every pair of storage types (a lifecycle's duplication):
the source type reads the image whole (its agent half's image_source), the target type takes
it as a copy (its master half's duplicate_side, its agent half's sink), and the copy restores
byte for byte. Between two types that keep chunks only the chunks the target lacks go over.
On one host, so that each pair costs seconds; tests/integration/test_lifecycles.py copies
across a real sshd."""

import os

import pytest

from app import status
from app.master import Master
from app.jobs import copies
from app.jobs.duplicate_queue import queue_after_backup
from plugins.storage import registry
from plugins.storage.agent_base import AgentStorage
from plugins.storage.agents import HALVES
from plugins.storage.base import StorageType
from storage_sites import TYPE_NAMES, log_of, make_pool
from treegen import assert_trees_equal, make_tree

PAIRS = [(a, b) for a in TYPE_NAMES for b in TYPE_NAMES]


def lifecycle_setup(tmp_path, source, target):
    """A master with a local host, a pool of each type (dp1 the backups', dp2 the copies'), a
    lifecycle gold (backup to stu1, duplicate to stu2) and a policy p under it."""
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    make_pool(m, registry.TYPES[source], tmp_path / "pool1", server="ss1", pool="dp1")
    make_pool(m, registry.TYPES[target], tmp_path / "pool2", server="ss2", pool="dp2")
    m.create_storage_unit("stu1", pool="dp1")
    m.create_storage_unit("stu2", pool="dp2")
    m.create_lifecycle("gold", ["backup:stu1:2w", "duplicate:stu2:4w"])
    m.create_policy("p", lifecycle="gold", clients=["me"],
                    selections=[str(tmp_path / "src")])
    return m


def backup_and_duplicate(m):
    """(backup job, image, the duplicate job) of one backup of policy p."""
    [jid] = m.start_backup("p")
    [job] = m.wait_for([jid])
    assert job["status"] == status.OK, log_of(m, jid)
    [dup] = m.duplicate_jobs([jid])
    [dup] = m.wait_for([dup["id"]])
    assert dup["status"] == status.OK, log_of(m, dup["id"])
    return job, m.image(job["image_id"]), dup


@pytest.mark.parametrize("source, target", PAIRS)
def test_a_copy_between_any_two_types_restores_byte_for_byte(tmp_path, source, target):
    src = tmp_path / "src"
    make_tree(str(src))
    m = lifecycle_setup(tmp_path, source, target)
    try:
        job, img, dup = backup_and_duplicate(m)
        [c1, c2] = m.image_copies(img["id"])["copies"]
        assert (c1["copy"], c1["pool"], c2["copy"], c2["pool"]) == (1, "dp1", 2, "dp2")
        assert c2["state"] == "ok" and os.path.isfile(c2["path"])
        assert not os.path.basename(c2["path"]).startswith(".")
        assert c2["expires"] > c1["expires"]  # 4w against 2w, from the same backup time
        assert dup["parent_id"] == job["id"] and dup["storage_unit"] == "stu2"
        log = log_of(m, dup["id"])
        assert f"copy 2 of image {img['id']} committed in disk pool dp2" in log
        # nothing but the committed copy is left in the target pool's image folders
        partials = [f for d, _, fs in os.walk(tmp_path / "pool2") for f in fs
                    if f.endswith(".partial")]
        assert partials == []
        rid = m.start_restore(img["id"], [str(src)], str(tmp_path / "dst"), copy=2)
        [r] = m.wait_for([rid])
        assert r["status"] == status.OK, log_of(m, rid)
        assert "reading copy 2 (disk pool dp2 on me), as asked" in log_of(m, rid)
        assert_trees_equal(str(src), str(tmp_path / "dst") + str(src))
    finally:
        m.close()


@pytest.mark.parametrize("source, target", PAIRS)
def test_an_unchanged_second_full_is_copied_by_what_the_target_lacks(tmp_path, source, target):
    """Between two types that keep chunks only what the target pool lacks goes over (under
    1% of the image); between any other pair the stream goes whole."""
    src = tmp_path / "src"
    make_tree(str(src))
    (src / "more.bin").write_bytes(os.urandom(8 << 20))
    m = lifecycle_setup(tmp_path, source, target)
    try:
        backup_and_duplicate(m)
        _job, img, dup = backup_and_duplicate(m)
        result = m.job(dup["id"])["result"]
        [done] = result["copies"]
        assert done["image"] == img["id"] and done["image_bytes"] > 11 << 20
        chunks = all(registry.TYPES[t].capabilities.dedup for t in (source, target))
        if chunks:
            assert done["mode"] == "chunks"
            assert done["sent_bytes"] < done["image_bytes"] / 100, result
        else:
            assert done["mode"] == "stream"
            assert done["sent_bytes"] == done["image_bytes"]
    finally:
        m.close()


def test_every_type_reads_an_image_whole_and_takes_a_copy():
    """image_source (agent half) and duplicate_side (master half) are every type's own, or
    the type it builds on's (a cloud pool's are dedup's)."""
    for half in HALVES.values():
        assert type(half).image_source is not AgentStorage.image_source, half.name
    for t in registry.TYPES.values():
        assert type(t).duplicate_side is not StorageType.duplicate_side, t.name


def queue_copy(m, image_id):
    """The duplicate job a backup under lifecycle gold queues, for an image made without it."""
    img = dict(m.image(image_id), lifecycle="gold")
    with m.db.tx() as c:
        [jid] = queue_after_backup(m, c, img)
    return jid


@pytest.mark.parametrize("source, target", PAIRS)
def test_a_copy_of_a_damaged_image_fails_and_leaves_nothing(tmp_path, source, target):
    """The source image cut short (a tar without its end, a recipe without its trailer): the
    copy fails, nothing is recorded, no partial file stays in the target pool."""
    src = tmp_path / "src"
    make_tree(str(src))
    m = lifecycle_setup(tmp_path, source, target)
    try:
        m.update_object("policy", "p", storage_unit="stu1")
        [jid] = m.start_backup("p")
        [job] = m.wait_for([jid])
        img = m.image(job["image_id"])
        with open(img["path"], "r+b") as f:
            f.truncate(os.path.getsize(img["path"]) // 2)
        [dup] = m.wait_for([queue_copy(m, img["id"])])
        assert dup["status"] == status.IMAGE_DAMAGED, log_of(m, dup["id"])
        assert "cut short" in log_of(m, dup["id"])
        assert [c["copy"] for c in copies.copies(m.db, img["id"])] == [1]
        assert m.db.one("SELECT count(*) FROM copy_commits")[0] == 0
        left = [f for d, _, fs in os.walk(tmp_path / "pool2") for f in fs
                if f.endswith((".partial", ".tar", ".recipe"))]
        assert left == []
        # a duplication is tried again by itself, as a scheduled backup is
        again = m.db.one("SELECT id, attempt FROM jobs WHERE type='duplicate' AND "
                         "retry_of=?", (dup["id"],))
        assert again is not None and again["attempt"] == 2
    finally:
        m.close()
