"""No two disk pools in one directory or one inside another (app/shared_volumes.py): on one
host always, across hosts when the directory is on a shared file system, against a real
catalog file."""

import pytest

from app import shared_volumes
from app.config import Config
from app.errors import ValidationError
from app.store.db import Database


@pytest.fixture
def cfg(tmp_path):
    c = Config(Database(str(tmp_path / "catalog.db")))
    c.add_host("me", local=True)
    c.add_host("media-2", address="media-2.example.com")
    c.add_storage_server("ss1", type="advanced-disk", host="me")
    c.add_storage_server("ss1b", type="advanced-disk", host="me")
    c.add_storage_server("ss2", type="advanced-disk", host="media-2")
    c.add_disk_pool("dp1", server="ss1", volumes=["/gpfs/fs1/cairn/ss1"])
    return c


def test_relation_of_two_directories():
    r = shared_volumes.relation
    assert r("/a/b", "/a/b") == "is the same directory as"
    assert r("/a/b/c", "/a/b") == "is inside"
    assert r("/a", "/a/b") == "holds"
    assert r("/a/bc", "/a/b") is None and r("/a/b", "/a/bc") is None
    assert r("/x", "/") == "is inside"
    assert shared_volumes.is_shared({"class": "parallel"})
    assert shared_volumes.is_shared({"class": "network"})
    assert not shared_volumes.is_shared({"class": "local"}) and not shared_volumes.is_shared(None)


@pytest.mark.parametrize("server", ["ss1", "ss1b"])
@pytest.mark.parametrize("volume, rel", [
    ("/gpfs/fs1/cairn/ss1", "is the same directory as"),
    ("/gpfs/fs1/cairn/ss1/images", "is inside"),
    ("/gpfs/fs1/cairn", "holds"),
    ("/gpfs", "holds"),
])
def test_one_host_refuses_overlapping_volumes_of_any_pool(cfg, server, volume, rel):
    with pytest.raises(ValidationError) as e:
        cfg.add_disk_pool("dp2", server=server, volumes=["/elsewhere", volume])
    if rel == "is the same directory as" and server == "ss1":
        assert e.value.message == "volume /gpfs/fs1/cairn/ss1 already belongs to disk pool 'dp1'"
    else:
        assert e.value.message == (
            f"volume {volume} {rel} volume /gpfs/fs1/cairn/ss1 of disk pool 'dp1' (storage "
            "server 'ss1' on host me)")
        assert "its own directory" in e.value.hint
    assert [p["name"] for p in cfg.disk_pools()] == ["dp1"]


def test_sibling_directories_are_fine(cfg):
    assert cfg.add_disk_pool("dp2", server="ss1b", volumes=["/gpfs/fs1/cairn/ss1b"])
    assert cfg.add_disk_pool("dp3", server="ss2", volumes=["/gpfs/fs1/cairn/ss2"])
    # another host's local /gpfs/fs1/cairn/ss1 is another directory (not known to be shared)
    assert cfg.add_disk_pool("dp4", server="ss2", volumes=["/gpfs/fs1/cairn/ss1"])


def test_another_host_is_refused_when_the_directory_is_shared(cfg):
    for volume, rel in (("/gpfs/fs1/cairn/ss1", "is the same directory as"),
                        ("/gpfs/fs1/cairn/ss1/x", "is inside"), ("/gpfs/fs1", "holds")):
        with pytest.raises(ValidationError) as e:
            shared_volumes.check(cfg.db, [volume], "media-2", shared={volume: True},
                                 server="ss2")
        assert e.value.message == (
            f"volume {volume} {rel} volume /gpfs/fs1/cairn/ss1 of disk pool 'dp1' (storage "
            f"server 'ss1' on host me); {volume} is on a shared file system, which host me "
            "sees too")
    shared_volumes.check(cfg.db, ["/gpfs/fs1/cairn/ss2"], "media-2",
                         shared={"/gpfs/fs1/cairn/ss2": True}, server="ss2")
    shared_volumes.check(cfg.db, ["/gpfs/fs1"], "media-2", shared={"/gpfs/fs1": False})


def test_volumes_of_one_pool_side_by_side(cfg):
    with pytest.raises(ValidationError, match=r"volume /v/a is inside volume /v, given too"):
        cfg.add_disk_pool("dp2", server="ss1b", volumes=["/v", "/v/a"])
    with pytest.raises(ValidationError, match=r"volume /v holds volume /v/a, given too"):
        cfg.add_disk_pool("dp2", server="ss1b", volumes=["/v/a", "/v"])
    assert cfg.add_disk_pool("dp2", server="ss1b", volumes=["/v/a", "/v/b"])


def test_a_dedup_servers_storage_path_is_claimed_before_its_pool(cfg):
    cfg.add_storage_server("dd", type="dedup", host="me", path="/gpfs/fs1/dedup")
    with pytest.raises(ValidationError, match=r"volume /gpfs/fs1/dedup/x is inside storage "
                                              r"path /gpfs/fs1/dedup of storage server 'dd'"):
        cfg.add_disk_pool("dp2", server="ss1b", volumes=["/gpfs/fs1/dedup/x"])
    with pytest.raises(ValidationError, match=r"storage path /gpfs/fs1/cairn holds volume "
                                              r"/gpfs/fs1/cairn/ss1 of disk pool 'dp1'"):
        cfg.add_storage_server("dd2", type="dedup", host="me", path="/gpfs/fs1/cairn")
    with pytest.raises(ValidationError, match=r"storage path /gpfs/fs1/dedup is the same "
                                              r"directory as storage path /gpfs/fs1/dedup"):
        cfg.add_storage_server("dd2", type="dedup", host="me", path="/gpfs/fs1/dedup")
    # its own pool takes it
    assert cfg.add_disk_pool("dd-pool", server="dd", volumes=[])["volumes"] == \
        ["/gpfs/fs1/dedup"]
    with pytest.raises(ValidationError, match=r"storage path /gpfs/fs1/dedup/sub is inside "
                                              r"volume /gpfs/fs1/dedup of disk pool 'dd-pool'"):
        cfg.add_storage_server("dd3", type="dedup", host="me", path="/gpfs/fs1/dedup/sub")


def test_the_catalog_check_notes_pools_made_overlapping_before(tmp_path):
    """A catalog from before the refusal may hold pools of one host one inside another:
    `catalog check` says so, as a note with what to do."""
    from app.catalog_check import check_catalog
    from app.paths import Home
    home = Home(str(tmp_path / "home")).ensure()
    db = Database(home.catalog)
    c = Config(db)
    c.add_host("me", local=True)
    c.add_host("other", address="other.example.com")
    for s in ("ss1", "ss2", "ss3"):
        c.add_storage_server(s, type="advanced-disk", host="other" if s == "ss3" else "me")
    c.add_disk_pool("dp1", server="ss1", volumes=["/b/pool"])
    c.add_disk_pool("dp3", server="ss3", volumes=["/b/pool/x"])   # another host: not known
    with db.tx() as t:   # as an older version let it be made
        t.execute("INSERT INTO disk_pools(name, server_id, created) VALUES ('dp2', "
                  "(SELECT id FROM storage_servers WHERE name='ss2'), '2026-01-01T00:00:00Z')")
        t.execute("INSERT INTO pool_volumes(pool_id, path, position) VALUES ((SELECT id FROM "
                  "disk_pools WHERE name='dp2'), '/b/pool/inner', 0)")
    assert [(a["pool"], rel, b["pool"]) for a, rel, b in shared_volumes.overlaps(db)] == [
        ("dp1", "holds", "dp2")]
    db.close()
    doc = check_catalog(home)
    assert doc["ok"], doc["problems"]
    [note] = [n for n in doc["notes"] if "each pool sees" in n["note"]]
    assert note["note"].startswith("on host me, volume /b/pool of disk pool 'dp1' holds volume "
                                   "/b/pool/inner of disk pool 'dp2': each pool sees")
    assert "directory of its own" in note["fix"]


def test_a_backup_leaves_out_every_pools_images_below_its_selections(cfg):
    cfg.add_disk_pool("dp2", server="ss2", volumes=["/gpfs/fs1/cairn/ss2"])
    cfg.add_storage_server("dd", type="dedup", host="media-2", path="/gpfs/fs1/cairn/dd")
    cfg.add_disk_pool("dp3", server="ss1b", volumes=["/srv/pool"])
    assert shared_volumes.pool_excludes(cfg.db, ["/gpfs/fs1"]) == {
        "/gpfs/fs1/cairn/ss1/cairn-images": "the images of disk pool 'dp1' (host me)",
        "/gpfs/fs1/cairn/ss2/cairn-images": "the images of disk pool 'dp2' (host media-2)",
        "/gpfs/fs1/cairn/dd": "the images of storage server 'dd' (host media-2)"}
    assert shared_volumes.pool_excludes(cfg.db, ["/gpfs/fs1/cairn/ss2", "/home"]) == {
        "/gpfs/fs1/cairn/ss2/cairn-images": "the images of disk pool 'dp2' (host media-2)"}
    assert shared_volumes.pool_excludes(cfg.db, ["/gpfs/fs1/projects", "/srv/other"]) == {}
    assert list(shared_volumes.pool_excludes(cfg.db, ["/"])) == [
        "/gpfs/fs1/cairn/ss1/cairn-images", "/gpfs/fs1/cairn/ss2/cairn-images",
        "/srv/pool/cairn-images", "/gpfs/fs1/cairn/dd"]


def test_no_restore_into_a_pools_images(cfg):
    cfg.add_storage_server("dd", type="dedup", host="media-2", path="/gpfs/fs1/cairn/dd")
    for target, whose in (("/gpfs/fs1/cairn/ss1/cairn-images", "disk pool 'dp1' (host me)"),
                          ("/gpfs/fs1/cairn/ss1/cairn-images/x/y", "disk pool 'dp1' (host me)"),
                          ("/gpfs/fs1/cairn/dd/containers",
                           "storage server 'dd' (host media-2)")):
        with pytest.raises(ValidationError, match="restore target") as e:
            shared_volumes.check_restore_target(cfg.db, target)
        assert e.value.message.startswith(f"restore target {target} is inside the images of "
                                          f"{whose}: the pool would take")
    for fine in ("/gpfs/fs1/cairn/ss1", "/gpfs/fs1/cairn/ss1/restored", "/gpfs", "/tmp/x"):
        shared_volumes.check_restore_target(cfg.db, fine)
