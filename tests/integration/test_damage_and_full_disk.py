"""Bad things on the storage side: a corrupted image, a full volume, a full restore target.
Each gets a clear status and message, and nothing half-done is left behind. What holds for
every storage type (damaged data, a missing image file, a damaged index, a full volume) is in
the conformance suite (tests/storage/test_storage_damage.py); these are the types' own
details."""

import os
import subprocess

import pytest

from app import status
from app.master import Master


def configure(m, vol, src):
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)], high_water=100, low_water=99)
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))


def backup(m):
    [jid] = m.start_backup("p1")
    [job] = m.wait_for([jid])
    return job, "\n".join(x["message"] for x in m.jobs.logs(jid))


@pytest.fixture
def backed_up(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"A" * 5000)
    (src / "b.txt").write_bytes(b"B" * 5000)
    m = Master(str(tmp_path / "home"))
    configure(m, vol, src)
    job, log = backup(m)
    assert job["status"] == 0, log
    yield m, m.images()[0], src, tmp_path
    m.close()


def test_corrupted_image_data_is_detected_and_not_put_in_place(backed_up):
    m, img, src, tmp = backed_up
    entry = next(e for e in m.browse(img["id"], str(src))["entries"] if e["name"] == "a.txt")
    with open(img["path"], "r+b") as f:
        f.seek(entry["offset"] + entry["length"] - 512 - 10)  # inside a.txt's data
        f.write(b"X")
    jid = m.start_restore(img["id"], [str(src)], str(tmp / "out"))
    [job] = m.wait_for([jid])
    log = "\n".join(x["message"] for x in m.jobs.logs(jid))
    assert job["status"] == status.CHECKSUM_MISMATCH, log
    assert "a.txt: checksum mismatch" in log
    restored = tmp / "out" / str(src).lstrip("/")
    assert not (restored / "a.txt").exists()
    assert (restored / "b.txt").read_bytes() == b"B" * 5000
    assert [n for n in os.listdir(restored) if "tmp" in n] == []


@pytest.fixture
def tiny_volume(small_tmpfs):
    return small_tmpfs("2m")


def test_full_volume_fails_cleanly(tmp_path, tiny_volume):
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(os.urandom(8 << 20))
    m = Master(str(tmp_path / "home"))
    configure(m, tiny_volume, src)
    job, log = backup(m)
    assert job["status"] == status.STORAGE_WRITE_FAILED, log
    assert "full" in log
    assert [f for _, _, fs in os.walk(tiny_volume) for f in fs] == []
    assert m.images() == [] and os.listdir(m.home.indexes) == []
    m.close()


@pytest.fixture(params=["tmpfs", "ext4"])
def tiny_pool_volume(request, tmp_path):
    """A small file system to fill: tmpfs, or ext4 on a loop device (where the pool writes
    its containers with O_DIRECT)."""
    if request.param == "tmpfs":
        yield request.getfixturevalue("tiny_volume")
        return
    vol, img = tmp_path / "tiny-ext4", tmp_path / "tiny-ext4.img"
    vol.mkdir()
    with open(img, "wb") as f:
        f.truncate(6 << 20)
    r = subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], capture_output=True, text=True)
    assert r.returncode == 0, f"mkfs.ext4 failed: {r.stderr}"
    r = subprocess.run(["mount", "-o", "loop", str(img), str(vol)], capture_output=True,
                       text=True)
    assert r.returncode == 0, f"cannot mount a small ext4 for the full-disk test: {r.stderr}"
    yield vol
    subprocess.run(["umount", str(vol)])


def test_full_dedup_pool_fails_cleanly_and_stays_usable(tmp_path, tiny_pool_volume):
    tiny_volume = tiny_pool_volume
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(os.urandom(8 << 20))
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.create_storage_server("dd", type="dedup", host="me", path=str(tiny_volume / "pool"))
    m.create_disk_pool("ddp", server="dd", volumes=[], high_water=100, low_water=99)
    m.config.add_storage_unit("stu1", pool="ddp")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    job, log = backup(m)
    assert job["status"] == status.STORAGE_WRITE_FAILED, log
    assert "full" in log
    # no image, no recipe, no container half written
    assert m.images() == [] and os.listdir(m.home.indexes) == []
    left = [f for _, _, fs in os.walk(tiny_volume) for f in fs]
    assert not [f for f in left if f.endswith((".recipe", ".partial"))], left
    # with room again the same pool takes the backup
    os.unlink(src / "big")
    (src / "small").write_bytes(os.urandom(64 << 10))
    job, log = backup(m)
    assert job["status"] == status.OK, log
    m.close()


def test_restore_to_a_full_target_stops_and_leaves_no_partial_file(tmp_path, tiny_volume):
    """Files are written on helper threads while the stream is read on: a write that finds
    the target full still stops the restore with a clear message, and no file is left there
    half written or under its temporary name."""
    vol = tmp_path / "vol"
    vol.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    data = {f"f{i}": os.urandom(700 << 10) for i in range(6)}
    for name, content in data.items():
        (src / name).write_bytes(content)
    m = Master(str(tmp_path / "home"))
    configure(m, vol, src)
    job, log = backup(m)
    assert job["status"] == 0, log
    image = m.images()[0]
    target = tiny_volume / "restored"
    jid = m.start_restore(image["id"], [str(src)], str(target))
    [job] = m.wait_for([jid])
    log = "\n".join(x["message"] for x in m.jobs.logs(jid))
    assert job["status"] == status.RESTORE_TARGET_INVALID, log
    assert "cannot be written" in log and "no space" in log.lower(), log
    left = {}
    for d, _, fs in os.walk(target):
        for f in fs:
            with open(os.path.join(d, f), "rb") as fh:
                left[f] = fh.read()
    assert not [f for f in left if f.startswith(".cairn-restore-")], sorted(left)
    # what is there is whole: the 2 MiB volume holds at most two of the six files
    assert len(left) < len(data)
    for name, content in left.items():
        assert content == data[name], name
    # what was put in place is counted, in the job and its log
    assert job["files"] == len(left), (job, sorted(left))
    if left:
        assert f"{len(left)} files" in log and "were put in place" in log, log
    m.close()
