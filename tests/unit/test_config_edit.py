"""Deleting and editing configuration objects: dependents are named, nothing in use goes."""

import pytest

from app import config_edit
from app.config import Config
from app.errors import NotFound, ValidationError
from app.store.db import Database


@pytest.fixture
def db(tmp_path):
    d = Database(str(tmp_path / "catalog.db"))
    cfg = Config(d)
    cfg.add_host("me", local=True)
    cfg.add_storage_server("ss1", type="advanced-disk", host="me")
    cfg.add_disk_pool("dp1", server="ss1", volumes=[str(tmp_path / "v1")])
    cfg.add_storage_unit("stu1", pool="dp1")
    cfg.add_storage_unit("stu2", pool="dp1")
    cfg.add_policy("p1", storage_unit="stu1")
    cfg.add_policy_client("p1", "me")
    return d


def names(deps):
    return [(d["kind"], d["name"]) for d in deps]


def test_dependents_along_the_chain(db):
    assert names(config_edit.dependents(db, "host", "me")) == [("storage-server", "ss1"),
                                                               ("policy", "p1")]
    assert names(config_edit.dependents(db, "storage-server", "ss1")) == [("disk-pool", "dp1")]
    assert names(config_edit.dependents(db, "disk-pool", "dp1")) == [("storage-unit", "stu1"),
                                                                     ("storage-unit", "stu2")]
    assert names(config_edit.dependents(db, "storage-unit", "stu1")) == [("policy", "p1")]
    assert config_edit.dependents(db, "storage-unit", "stu2") == []
    assert config_edit.dependents(db, "policy", "p1") == []
    assert config_edit.describe(config_edit.dependents(db, "disk-pool", "dp1")) \
        == "2 storage units (stu1, stu2)"


def test_delete_refuses_while_used_and_changes_nothing(db):
    with pytest.raises(ValidationError, match=r"still used by 2 storage units \(stu1, stu2\)"):
        config_edit.delete(db, "disk-pool", "dp1")
    assert db.one("SELECT count(*) FROM disk_pools")[0] == 1
    with pytest.raises(NotFound, match="no storage unit named 'nope'"):
        config_edit.delete(db, "storage-unit", "nope")
    with pytest.raises(ValidationError, match="kind 'tape' is unknown"):
        config_edit.delete(db, "tape", "x")


def test_queued_jobs_and_images_count(db):
    db.execute("INSERT INTO jobs(type, state, policy, storage_unit, client, created) "
               "VALUES ('backup', 'queued', 'p1', 'stu1', 'me', 'x')")
    assert names(config_edit.dependents(db, "policy", "p1")) == [("job", "1")]
    db.execute("UPDATE jobs SET state='done', status=0")
    assert config_edit.dependents(db, "policy", "p1") == []
    db.execute("INSERT INTO images(id, client, policy, schedule, schedule_type, created, bytes,"
               " files, storage_unit, pool, storage_host, path, image_bytes) VALUES "
               "('me_1','me','p1','s','full','x',0,0,'stu1','dp1','me','/v/i.tar',0)")
    deps = config_edit.dependents(db, "disk-pool", "dp1")
    assert ("image", "me_1") in names(deps)
    assert "1 backup image (me_1)" in config_edit.describe(deps)


def test_delete_in_order(db):
    for kind, name in [("policy", "p1"), ("storage-unit", "stu1"), ("storage-unit", "stu2"),
                       ("disk-pool", "dp1"), ("storage-server", "ss1"), ("host", "me")]:
        assert config_edit.delete(db, kind, name) == {"deleted": name, "kind": kind}
    for table in ("hosts", "storage_servers", "disk_pools", "pool_volumes", "storage_units",
                  "policies", "policy_clients"):
        assert db.one(f"SELECT count(*) FROM {table}")[0] == 0, table


def test_update_validates_and_applies(db):
    cfg = Config(db)
    p = config_edit.update(db, cfg, "disk-pool", "dp1", high_water=90, low_water=70,
                           max_io_streams=4, comment="GPFS fs1")
    assert (p["high_water"], p["low_water"], p["max_io_streams"], p["comment"]) \
        == (90, 70, 4, "GPFS fs1")
    with pytest.raises(ValidationError, match="must be below"):
        config_edit.update(db, cfg, "disk-pool", "dp1", low_water=95)
    assert cfg.disk_pool("dp1")["low_water"] == 70
    assert config_edit.update(db, cfg, "disk-pool", "dp1", max_io_streams=None)[
        "max_io_streams"] is None
    u = config_edit.update(db, cfg, "storage-unit", "stu1", max_concurrent_jobs=4)
    assert u["max_concurrent_jobs"] == 4
    pol = config_edit.update(db, cfg, "policy", "p1", storage_unit="stu2", priority=5,
                             active=False, checksum="sha256")
    assert (pol["storage_unit"], pol["priority"], pol["active"], pol["checksum"]) \
        == ("stu2", 5, False, "sha256")
    with pytest.raises(ValidationError, match="'volumes' of a disk pool cannot be changed"):
        config_edit.update(db, cfg, "disk-pool", "dp1", volumes=["/x"])
    with pytest.raises(ValidationError, match="is this machine"):
        config_edit.update(db, cfg, "host", "me", port=2222)
    with pytest.raises(NotFound):
        config_edit.update(db, cfg, "policy", "p1", storage_unit="nope")


def test_agent_environment_and_snapshot_settings_refuse_bad_values(tmp_path):
    from app.errors import ValidationError
    from app.master import Master
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        h = m.update_object("host", "me", agent_env="CAIRN_MMFS_SUDO=1, PATH=/usr/bin")
        assert h["agent_env"] == {"CAIRN_MMFS_SUDO": "1", "PATH": "/usr/bin"}
        for bad, says in (("LD_PRELOAD=/x.so", "cannot be set"), ("CAIRN_X", "NAME=value"),
                          ({"CAIRN_X": "a\nb"}, "not valid")):
            with pytest.raises(ValidationError, match=says):
                m.update_object("host", "me", agent_env=bad)
        assert m.config.host("me")["agent_env"] == {"CAIRN_MMFS_SUDO": "1", "PATH": "/usr/bin"}
        assert m.update_object("host", "me", agent_env="")["agent_env"] == {}
        m.config.add_storage_server("ss", type="advanced-disk", host="me")
        vol = tmp_path / "vol"
        vol.mkdir()
        m.create_disk_pool("dp", server="ss", volumes=[str(vol)])
        m.config.add_storage_unit("stu", pool="dp")
        with pytest.raises(ValidationError, match="snapshot mode 'volume' is unknown"):
            m.config.add_policy("p", storage_unit="stu", snapshot="volume")
        m.config.add_policy("p", storage_unit="stu", snapshot="fileset")
        with pytest.raises(ValidationError, match="file list mode"):
            m.update_object("policy", "p", file_list="find")
        assert m.config.policy("p")["snapshot"] == "fileset"
        assert m.update_object("policy", "p", file_list="walk")["file_list"] == "walk"
    finally:
        m.close()


def test_compaction_threshold_is_for_deduplicating_pools_only(db, tmp_path):
    cfg = Config(db)
    with pytest.raises(ValidationError, match="only a deduplicating pool"):
        config_edit.update(db, cfg, "disk-pool", "dp1", compact_below=30)
    with pytest.raises(ValidationError, match="only a deduplicating pool"):
        cfg.add_disk_pool("dp2", server="ss1", volumes=[str(tmp_path / "v2")], compact_below=30)
    cfg.add_storage_server("dd", type="dedup", host="me", path=str(tmp_path / "pool"))
    p = cfg.add_disk_pool("ddp", server="dd", volumes=[])
    assert p["compact_below"] == 50  # the default
    p = cfg.add_disk_pool("ddp2", server=cfg.add_storage_server(
        "dd2", type="dedup", host="me", path=str(tmp_path / "pool2"))["name"], volumes=[],
        compact_below=20)
    assert p["compact_below"] == 20
    assert config_edit.update(db, cfg, "disk-pool", "ddp", compact_below=0)["compact_below"] == 0
    for bad in (101, -1, "half", True):
        with pytest.raises(ValidationError, match="compaction threshold"):
            config_edit.update(db, cfg, "disk-pool", "ddp", compact_below=bad)
    assert cfg.disk_pool("ddp")["compact_below"] == 0
