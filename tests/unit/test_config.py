import sqlite3

import pytest

from app.config import Config
from app.errors import NotFound, ValidationError
from app.store.db import MIGRATIONS, CatalogError, Database


@pytest.fixture
def cfg(tmp_path):
    return Config(Database(str(tmp_path / "catalog.db")))


def make_stu(cfg, tmp_path):
    cfg.add_host("me", local=True)
    cfg.add_storage_server("ss1", type="advanced-disk", host="me")
    cfg.add_disk_pool("dp1", server="ss1", volumes=[str(tmp_path / "v1")])
    cfg.add_storage_unit("stu1", pool="dp1", max_concurrent_jobs=2)


def test_catalog_is_wal_with_schema_version(tmp_path):
    db = Database(str(tmp_path / "c.db"))
    assert db.one("PRAGMA journal_mode")[0] == "wal"
    assert db.one("PRAGMA user_version")[0] == len(MIGRATIONS)


def test_migration_keeps_a_copy_and_upgrades(tmp_path, monkeypatch):
    path = str(tmp_path / "c.db")
    Database(path)
    extra = MIGRATIONS + ["CREATE TABLE extra (x INTEGER)"]
    monkeypatch.setattr("app.store.db.MIGRATIONS", extra)
    db = Database(path)
    assert db.one("PRAGMA user_version")[0] == len(extra)
    assert (tmp_path / f"c.db.bak-v{len(extra) - 1}").exists()
    db.execute("INSERT INTO extra VALUES (1)")


def test_failed_migration_changes_nothing(tmp_path, monkeypatch):
    path = str(tmp_path / "c.db")
    Database(path)
    monkeypatch.setattr("app.store.db.MIGRATIONS",
                        MIGRATIONS + ["CREATE TABLE ok (x); THIS IS NOT SQL"])
    with pytest.raises(sqlite3.Error):
        Database(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name='ok'").fetchone() is None


def test_newer_catalog_is_refused(tmp_path):
    path = str(tmp_path / "c.db")
    sqlite3.connect(path).execute("PRAGMA user_version=99")
    with pytest.raises(CatalogError, match="newer"):
        Database(path)


def test_not_a_catalog(tmp_path):
    path = tmp_path / "c.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(CatalogError, match="not a Cairn catalog"):
        Database(str(path))


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 64, "a/b", "ü"])
def test_bad_names_rejected(cfg, name):
    with pytest.raises(ValidationError, match="name"):
        cfg.add_host(name, local=True)


def test_unique_names_and_one_local_host(cfg):
    cfg.add_host("me", local=True)
    with pytest.raises(ValidationError, match="already exists"):
        cfg.add_host("me", address="10.0.0.1")
    with pytest.raises(ValidationError, match="already registered"):
        cfg.add_host("me2", local=True)


def test_ssh_host_checks(cfg, tmp_path):
    with pytest.raises(ValidationError, match="needs an address"):
        cfg.add_host("h1")
    with pytest.raises(ValidationError, match="out of range"):
        cfg.add_host("h1", address="example", port=70000)
    with pytest.raises(ValidationError, match="does not exist"):
        cfg.add_host("h1", address="example", key_file=str(tmp_path / "nokey"))
    h = cfg.add_host("h1", address="example", port=2222, user="backup")
    assert (h["kind"], h["port"], h["user"]) == ("ssh", 2222, "backup")


def test_references_must_exist_and_hint_known_names(cfg, tmp_path):
    cfg.add_host("me", local=True)
    with pytest.raises(NotFound, match="no host named 'nope'") as e:
        cfg.add_storage_server("ss1", type="advanced-disk", host="nope")
    assert "me" in e.value.hint
    with pytest.raises(ValidationError, match="unknown"):
        cfg.add_storage_server("ss1", type="tape", host="me")
    with pytest.raises(ValidationError, match="needs --path"):
        cfg.add_storage_server("ss1", type="dedup", host="me")
    with pytest.raises(ValidationError, match="average chunk size|avg"):
        cfg.add_storage_server("ss1", type="dedup", host="me", path="/x",
                               options={"min_size": 1 << 20, "avg_size": 1 << 16})
    with pytest.raises(ValidationError, match="unknown dedup option"):
        cfg.add_storage_server("ss1", type="dedup", host="me", path="/x",
                               options={"chunk": 5})
    with pytest.raises(ValidationError, match="has no options"):
        cfg.add_storage_server("ss1", type="advanced-disk", host="me",
                               options={"encrypted": True})
    with pytest.raises(NotFound):
        cfg.add_disk_pool("dp1", server="nope", volumes=["/v"])


def test_dedup_pool_takes_its_servers_path_once(cfg, tmp_path):
    cfg.add_host("me", local=True)
    srv = cfg.add_storage_server("dd", type="dedup", host="me", path="/pool")
    assert srv["options"]["avg_size"] == 512 * 1024 and srv["options"]["encrypted"] is False
    with pytest.raises(ValidationError, match="one volume"):
        cfg.add_disk_pool("p", server="dd", volumes=["/elsewhere"])
    assert cfg.add_disk_pool("p", server="dd", volumes=[])["volumes"] == ["/pool"]
    with pytest.raises(ValidationError, match="already has its disk pool"):
        cfg.add_disk_pool("p2", server="dd", volumes=["/pool"])


def test_dedup_modes_of_policy_and_host(cfg, tmp_path):
    from app import config_edit
    from plugins.storage.dedup import master as dedup
    cfg.add_host("me", local=True)
    cfg.add_storage_server("ss1", type="advanced-disk", host="me")
    cfg.add_disk_pool("dp1", server="ss1", volumes=["/v"])
    cfg.add_storage_unit("stu1", pool="dp1")
    with pytest.raises(ValidationError, match="deduplication mode 'both'"):
        cfg.add_policy("p0", storage_unit="stu1", dedup="both")
    assert cfg.add_policy("p1", storage_unit="stu1", dedup="client")["dedup"] == "client"
    assert cfg.host("me")["dedup"] == "policy"
    config_edit.update(cfg.db, cfg, "host", "me", dedup="server")
    assert dedup.effective_mode("client", cfg.host("me")["dedup"]) == "server"
    assert dedup.effective_mode("client", "policy") == "client"
    with pytest.raises(ValidationError):
        config_edit.update(cfg.db, cfg, "policy", "p1", dedup="policy")


def test_dedup_path_warning_names_network_file_systems():
    from plugins.storage.dedup import master as dedup
    w = dedup.path_warning({"type": "nfs4", "class": "network", "device": "nas:/export"})
    assert "NFS or CIFS" in w and "nas:/export" in w
    assert dedup.path_warning({"type": "gpfs", "class": "parallel", "device": "fs1"}) is None
    assert dedup.path_warning({"type": "ext4", "class": "local", "device": "/dev/sda1"}) is None


def test_disk_pool_validation(cfg, tmp_path):
    cfg.add_host("me", local=True)
    cfg.add_storage_server("ss1", type="advanced-disk", host="me")
    with pytest.raises(ValidationError, match="not an absolute path"):
        cfg.add_disk_pool("dp1", server="ss1", volumes=["rel/path"])
    with pytest.raises(ValidationError, match="'..'"):
        cfg.add_disk_pool("dp1", server="ss1", volumes=["/a/../b"])
    with pytest.raises(ValidationError, match="twice"):
        cfg.add_disk_pool("dp1", server="ss1", volumes=["/a", "/a/"])
    with pytest.raises(ValidationError, match="below the high-water"):
        cfg.add_disk_pool("dp1", server="ss1", volumes=["/a"], high_water=50, low_water=60)
    with pytest.raises(ValidationError, match="at least one volume"):
        cfg.add_disk_pool("dp1", server="ss1", volumes=[])
    p = cfg.add_disk_pool("dp1", server="ss1", volumes=["/a", "/b//"])
    assert p["volumes"] == ["/a", "/b"]
    with pytest.raises(ValidationError, match="already belongs"):
        cfg.add_disk_pool("dp2", server="ss1", volumes=["/b"])
    # a rejected pool leaves nothing behind
    assert [d["name"] for d in cfg.disk_pools()] == ["dp1"]


def test_policy_building(cfg, tmp_path):
    make_stu(cfg, tmp_path)
    with pytest.raises(ValidationError, match="out of range"):
        cfg.add_storage_unit("stu2", pool="dp1", max_concurrent_jobs=0)
    cfg.add_policy("p1", storage_unit="stu1")
    cfg.add_policy_client("p1", "me")
    with pytest.raises(ValidationError, match="already a client"):
        cfg.add_policy_client("p1", "me")
    cfg.add_policy_selection("p1", "/data/x/")
    with pytest.raises(ValidationError, match="not an absolute"):
        cfg.add_policy_selection("p1", "data")
    with pytest.raises(ValidationError, match="not a duration"):
        cfg.add_schedule("p1", "daily", type="full", retention="soon")
    cfg.add_schedule("p1", "daily", type="full", retention="2w")
    p = cfg.policy("p1")
    assert p["clients"] == ["me"]
    assert p["selections"] == ["/data/x"]
    assert p["schedules"][0]["retention_s"] == 14 * 86400
    from app import config_edit
    with pytest.raises(ValidationError, match="still used"):
        config_edit.delete(cfg.db, "host", "me")


def test_upgrade_from_version_1_keeps_data_and_marks_old_images_sha256(tmp_path, monkeypatch):
    path = str(tmp_path / "c.db")
    monkeypatch.setattr("app.store.db.MIGRATIONS", MIGRATIONS[:1])
    old = Database(path)
    old.execute("INSERT INTO hosts(name, kind, created) VALUES ('me', 'local', 'x')")
    old.execute("INSERT INTO images(id, client, policy, schedule, schedule_type, created, bytes,"
                " files, storage_unit, pool, storage_host, path, image_bytes) VALUES "
                "('me_1','me','p','s','full','x',0,0,'u','d','me','/v/i.tar',0)")
    old.close()
    monkeypatch.setattr("app.store.db.MIGRATIONS", MIGRATIONS)
    db = Database(path)
    assert db.one("SELECT checksum FROM images WHERE id='me_1'")[0] == "sha256"
    assert (tmp_path / "c.db.bak-v1").exists()
    cfg = Config(db)
    cfg.add_storage_server("ss1", type="advanced-disk", host="me")
    cfg.add_disk_pool("dp1", server="ss1", volumes=["/v"])
    cfg.add_storage_unit("stu1", pool="dp1")
    assert cfg.add_policy("p1", storage_unit="stu1")["checksum"] == "crc32"
    with pytest.raises(ValidationError, match="checksum 'md5' is unknown"):
        cfg.add_policy("p2", storage_unit="stu1", checksum="md5")


def test_upgrade_to_catalog_schedules_keeps_every_schedule(tmp_path, monkeypatch):
    """Migration 11 makes the schedules table anew (sqlite changes a check no other way):
    every schedule, its calendar and read_all survive; catalog schedules are allowed."""
    path = str(tmp_path / "c.db")
    monkeypatch.setattr("app.store.db.MIGRATIONS", MIGRATIONS[:10])
    cfg = Config(Database(path))
    cfg.add_host("me", local=True)
    cfg.add_storage_server("ss1", type="advanced-disk", host="me")
    cfg.add_disk_pool("dp1", server="ss1", volumes=["/v"])
    cfg.add_storage_unit("stu1", pool="dp1")
    # a policy as a catalog of schema 10 held it (add_policy writes later columns too)
    cfg.db.execute("INSERT INTO policies(name, storage_unit_id, created) SELECT 'p1', id, "
                   "'2026-01-01T00:00:00Z' FROM storage_units WHERE name='stu1'")
    # and its schedules (add_schedule reads the policy back with later tables)
    for name, kind, cal, read_all in (
            ("monthly", "full", '{"weekdays": [], "monthdays": [1], "exclude": []}', 1),
            ("nightly", "differential", None, 0)):
        cfg.db.execute("INSERT INTO schedules(policy_id, name, type, retention_s, "
                       "frequency_s, windows, calendar, read_all) SELECT id, ?, ?, 604800, "
                       "86400, '[]', ?, ? FROM policies WHERE name='p1'",
                       (name, kind, cal, read_all))
    rows = "SELECT * FROM schedules ORDER BY id"
    before = [tuple(r) for r in cfg.db.all(rows)]
    assert len(before) == 2
    cfg.db.close()
    monkeypatch.setattr("app.store.db.MIGRATIONS", MIGRATIONS)
    cfg = Config(Database(path))
    assert [tuple(r) for r in cfg.db.all(rows)] == before
    cfg.add_schedule("p1", "catalog", type="catalog", retention="4w")
    assert [s["type"] for s in cfg.policy("p1")["schedules"]] == \
        ["full", "differential", "catalog"]
    # the table's cascade still holds: removing the policy takes its schedules
    with cfg.db.tx() as c:
        c.execute("DELETE FROM policies WHERE name='p1'")
    assert cfg.db.one("SELECT count(*) FROM schedules")[0] == 0


def test_a_migration_another_process_applied_meanwhile_is_not_applied_again(tmp_path,
                                                                           monkeypatch):
    """Two processes open an old catalog at once: the second reads the old version, waits for
    the write lock while the first migrates, and must then find nothing left to do."""
    import threading
    import time
    from app.store import db as dbmod
    path = str(tmp_path / "c.db")
    monkeypatch.setattr("app.store.db.MIGRATIONS", MIGRATIONS[:1])
    Database(path).close()
    monkeypatch.setattr("app.store.db.MIGRATIONS", MIGRATIONS)
    first = sqlite3.connect(path, isolation_level=None)
    first.execute("BEGIN IMMEDIATE")           # the first process holds the write lock
    errors = []

    def second():
        try:
            Database(path).close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=second)
    t.start()
    time.sleep(0.5)                            # the second one now waits for the lock
    for n in range(1, len(MIGRATIONS)):
        for stmt in dbmod._split_sql(MIGRATIONS[n]):
            first.execute(stmt)
    first.execute(f"PRAGMA user_version={len(MIGRATIONS)}")
    first.execute("COMMIT")
    first.close()
    t.join(60)
    assert errors == []
    assert Database(path).one("PRAGMA user_version")[0] == len(MIGRATIONS)
