"""Damage and a full volume, for every storage type: a verify finds nothing wrong in an intact
image; a byte changed in a file's data where the pool keeps it costs that file only, on
restore and in a verify, which names it; a missing image file and a damaged catalog index get
a clear status and message; a volume that fills up fails the backup cleanly, leaves no image,
and the pool takes the next backup once there is room."""

import os

import pytest

from app import status
from app.errors import CairnError
from app.master import Master
from storage_sites import damage_data, image_files, log_of, make_pool
from treegen import assert_trees_equal

VICTIM = os.urandom(200_000)   # incompressible and unique: found where the pool keeps it


def configure(m, storage_type, where, src, **pool_kw):
    m.config.add_host("me", local=True)
    make_pool(m, storage_type, where, **pool_kw)
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))


def backup(m):
    [jid] = m.start_backup("p1")
    [job] = m.wait_for([jid])
    return job, log_of(m, jid)


@pytest.fixture
def backed_up(tmp_path, storage_type):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"A" * 5000)
    (src / "b.txt").write_bytes(b"B" * 5000)
    (src / "victim.bin").write_bytes(VICTIM)
    m = Master(str(tmp_path / "home"))
    configure(m, storage_type, tmp_path / "vol", src)
    job, log = backup(m)
    assert job["status"] == 0, log
    yield m, m.images()[0], src, tmp_path
    m.close()


def verify(m, image):
    [job] = m.wait_for([m.start_verify(image=image["id"])])
    return m.jobs.get(job["id"])


def test_damaged_data_costs_that_file_on_restore_and_verify_names_it(backed_up):
    m, img, src, tmp = backed_up
    intact = verify(m, img)
    assert intact["status"] == status.OK, log_of(m, intact["id"])
    damage_data(m, img, VICTIM)

    jid = m.start_restore(img["id"], [str(src)], str(tmp / "out"))
    [job] = m.wait_for([jid])
    log = log_of(m, jid)
    assert job["status"] == status.CHECKSUM_MISMATCH, log
    assert f"{src}/victim.bin" in log
    restored = tmp / "out" / str(src).lstrip("/")
    assert not (restored / "victim.bin").exists()
    os.unlink(src / "victim.bin")
    assert_trees_equal(str(src), str(restored))      # every other file, byte for byte
    assert [n for n in os.listdir(restored) if "tmp" in n or n.startswith(".cairn")] == []

    found = verify(m, img)
    assert found["status"] == status.CHECKSUM_MISMATCH, log_of(m, found["id"])
    assert [(h["image"], h["files"]) for h in found["result"]["images"]] == [
        (img["id"], [f"{src}/victim.bin"])]


def test_missing_image_file_is_reported(backed_up):
    m, img, src, tmp = backed_up
    os.unlink(img["path"])
    jid = m.start_restore(img["id"], [str(src)], str(tmp / "out"))
    [job] = m.wait_for([jid])
    log = log_of(m, jid)
    assert job["status"] == status.IMAGE_DAMAGED, log
    assert img["path"] in log
    found = verify(m, img)
    assert found["status"] == status.IMAGE_DAMAGED, log_of(m, found["id"])
    [hit] = found["result"]["images"]
    assert hit["image"] == img["id"] and img["path"] in log_of(m, found["id"])


def test_damaged_index_gives_a_clear_error(backed_up):
    m, img, src, tmp = backed_up
    path = m.home.index_path(img["id"])
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(CairnError, match="index of image .* is damaged") as e:
        m.browse(img["id"], str(src))
    assert e.value.status == status.IMAGE_DAMAGED


def test_a_full_volume_fails_the_backup_cleanly_and_the_pool_takes_the_next(tmp_path,
                                                                           small_tmpfs,
                                                                           storage_type):
    tiny = small_tmpfs("2m")
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(os.urandom(8 << 20))
    m = Master(str(tmp_path / "home"))
    try:
        configure(m, storage_type, tiny / "pool", src, high_water=100, low_water=99)
        job, log = backup(m)
        assert job["status"] == status.STORAGE_WRITE_FAILED, log
        assert "full" in log
        assert m.images() == [] and os.listdir(m.home.indexes) == []
        assert image_files(m) == []        # neither an image nor a partial one
        # with room again the same pool takes the backup
        os.unlink(src / "big")
        (src / "small").write_bytes(os.urandom(64 << 10))
        job, log = backup(m)
        assert job["status"] == status.OK, log
        [r] = m.wait_for([m.start_restore(job["image_id"], [str(src)], str(tmp_path / "out"))])
        assert r["status"] == status.OK, log_of(m, r["id"])
        assert_trees_equal(str(src), str(tmp_path / "out") + str(src))
    finally:
        m.close()
