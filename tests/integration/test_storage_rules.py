"""What the storage and the backup refuse, and how they say it; images spread over volumes."""

import os

from app import status
from app.master import Master
from plugins.storage.base import choose_volume


def configure(m, vols, selections, high_water=98):
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=vols, high_water=high_water,
                       low_water=min(80, high_water - 1))
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    for s in selections:
        m.config.add_policy_selection("p1", s)


def run_backup(m):
    [jid] = m.start_backup("p1")
    [job] = m.wait_for([jid])
    return job, "\n".join(x["message"] for x in m.jobs.logs(jid))


def files_under(d):
    return [os.path.join(a, f) for a, _, fs in os.walk(d) for f in fs]


def test_pool_above_high_water_refuses_with_its_status(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("data")
    m = Master(str(tmp_path / "home"))
    configure(m, [str(vol)], [str(src)], high_water=1)  # any real disk is fuller than 1%
    job, log = run_backup(m)
    assert job["status"] == status.POOL_FULL
    assert "high-water mark 1%" in log
    assert files_under(vol) == [] and m.images() == []


def test_volume_gone_after_pool_creation(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    m = Master(str(tmp_path / "home"))
    configure(m, [str(vol)], [str(src)])
    vol.rmdir()
    job, log = run_backup(m)
    assert job["status"] == status.VOLUME_UNAVAILABLE
    assert f"{vol}: does not exist" in log


def test_disk_pool_volume_checked_on_the_host(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    import pytest
    from app.errors import ValidationError
    with pytest.raises(ValidationError, match="does not exist") as e:
        m.create_disk_pool("dp1", server="ss1", volumes=[str(tmp_path / "nope")])
    assert "create the directory" in e.value.hint
    assert m.config.disk_pools() == []


def test_missing_selection_is_partial_and_all_missing_is_nothing_to_back_up(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("data")
    m = Master(str(tmp_path / "home"))
    configure(m, [str(vol)], [str(src), str(tmp_path / "gone")])
    job, log = run_backup(m)
    assert job["status"] == status.PARTIAL, log
    assert "gone" in log and len(m.images()) == 1
    m.close()

    m2 = Master(str(tmp_path / "home2"))
    vol2 = tmp_path / "vol2"
    vol2.mkdir()
    configure(m2, [str(vol2)], [str(tmp_path / "gone")])
    job, log = run_backup(m2)
    assert job["status"] == status.NOTHING_TO_BACKUP, log
    assert files_under(vol2) == [] and m2.images() == []


def test_images_spread_over_the_pools_volumes(tmp_path):
    vols = [tmp_path / "v1", tmp_path / "v2"]
    for v in vols:
        v.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("data")
    m = Master(str(tmp_path / "home"))
    configure(m, [str(v) for v in vols], [str(src)])
    for _ in range(2):
        job, log = run_backup(m)
        assert job["status"] == 0, log
    used = {os.path.dirname(os.path.dirname(os.path.dirname(i["path"]))) for i in m.images()}
    assert used == {str(v) for v in vols}


def test_choose_volume_prefers_free_space_and_skips_full_and_broken():
    G = 1 << 30
    stats = [{"path": "/a", "ok": True, "size": 100 * G, "free": 1 * G},
             {"path": "/b", "ok": True, "size": 100 * G, "free": 50 * G},
             {"path": "/c", "ok": False, "error": "does not exist", "size": None, "free": None}]
    assert choose_volume(stats, 98) == ("/b", None)
    vol, reason = choose_volume(stats[:1] + stats[2:], 98)
    assert vol is None and "99% full" in reason and "/c: does not exist" in reason


def test_pool_inside_the_selection_is_not_backed_up_into_itself(tmp_path):
    src = tmp_path / "src"
    vol = src / "backups"  # the pool's volume lies inside what is backed up
    vol.mkdir(parents=True)
    (src / "f").write_text("data")
    m = Master(str(tmp_path / "home"))
    configure(m, [str(vol)], [str(src)])
    for _ in range(2):
        job, log = run_backup(m)
        assert job["status"] == 0, log
    assert "is not backed up: it is excluded (the image directory of disk pool dp1)" in log
    newest = m.images()[0]
    names = {e["name"] for e in m.browse(newest["id"], str(vol))["entries"]}
    assert "cairn-images" not in names
    assert {e["name"] for e in m.browse(newest["id"], str(src))["entries"]} == {"backups", "f"}
    assert newest["image_bytes"] < 64 * 1024, "the image holds the earlier image"
