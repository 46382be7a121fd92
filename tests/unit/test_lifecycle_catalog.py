"""Lifecycles in the catalog (app/lifecycles.py): what a lifecycle's steps may be, a policy that
names a lifecycle instead of a storage unit, and what cannot be deleted while it is used."""

import sqlite3

import pytest

from app.errors import NotFound, ValidationError
from app.master import Master
from app.store.db import MIGRATIONS, Database


@pytest.fixture
def m(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    for n in (1, 2, 3):
        vol = tmp_path / f"vol{n}"
        vol.mkdir()
        m.create_storage_server(f"ss{n}", type="advanced-disk", host="me")
        m.create_disk_pool(f"dp{n}", server=f"ss{n}", volumes=[str(vol)], check=False)
        m.create_storage_unit(f"stu{n}", pool=f"dp{n}")
    yield m
    m.close()


def test_a_lifecycle_is_a_backup_then_duplicates_each_to_another_pool(m):
    lc = m.create_lifecycle("gold", ["backup:stu1:2w", "duplicate:stu2:8w",
                                     "duplicate:stu3:infinite"])
    assert [(s["copy"], s["kind"], s["storage_unit"], s["pool"], s["retention_s"])
            for s in lc["steps"]] == [(1, "backup", "stu1", "dp1", 14 * 86400),
                                      (2, "duplicate", "stu2", "dp2", 56 * 86400),
                                      (3, "duplicate", "stu3", "dp3", None)]
    assert [s["text"] for s in lc["steps"]] == ["backup:stu1:2w", "duplicate:stu2:8w",
                                                "duplicate:stu3:infinite"]
    assert [x["name"] for x in m.lifecycles()] == ["gold"]
    assert m.lifecycle("gold")["policies"] == []


@pytest.mark.parametrize("steps, words", [
    (["backup:stu1:2w"], "at least one duplicate step"),
    (["duplicate:stu2:2w", "backup:stu1:2w"], "first step, and only its first"),
    (["backup:stu1:2w", "backup:stu2:2w"], "first step, and only its first"),
    (["backup:stu1", "duplicate:stu2:2w"], "is not KIND:STORAGE_UNIT:RETENTION"),
    (["backup:stu1:2w", "copy:stu2:2w"], "'copy' is not a kind of step"),
    (["backup:stu1:2w", "duplicate:nope:2w"], "there is no storage unit named 'nope'"),
    (["backup:stu1:2w", "duplicate:stu1:4w"], "both keep their copy in disk pool dp1"),
    (["backup:stu1:2w", "duplicate:stu2:soon"], "'soon' is not a duration"),
    (["backup:stu1:2w", "duplicate::2w"], "names no storage unit"),
])
def test_a_wrong_step_is_refused_and_nothing_is_made(m, steps, words):
    with pytest.raises(ValidationError) as e:
        m.create_lifecycle("gold", steps)
    assert words in e.value.message
    assert e.value.hint
    assert m.lifecycles() == []


def test_a_name_is_taken_once(m):
    m.create_lifecycle("gold", ["backup:stu1:2w", "duplicate:stu2:8w"])
    with pytest.raises(ValidationError, match="already exists"):
        m.create_lifecycle("gold", ["backup:stu1:2w", "duplicate:stu3:8w"])
    with pytest.raises(ValidationError, match="is not valid"):
        m.create_lifecycle("no good", ["backup:stu1:2w", "duplicate:stu3:8w"])


def test_a_policy_writes_to_a_storage_unit_or_through_a_lifecycle(m):
    m.create_lifecycle("gold", ["backup:stu2:2w", "duplicate:stu3:8w"])
    p = m.create_policy("p", lifecycle="gold")
    # its backups go where the lifecycle's backup step says
    assert (p["storage_unit"], p["lifecycle"]) == ("stu2", "gold")
    assert m.create_policy("q", storage_unit="stu1")["lifecycle"] is None
    for kw in ({}, {"storage_unit": "stu1", "lifecycle": "gold"}):
        with pytest.raises(ValidationError, match="exactly one of them"):
            m.create_policy("r", **kw)
    with pytest.raises(NotFound, match="no lifecycle named 'tin'"):
        m.create_policy("r", lifecycle="tin")
    assert [x["name"] for x in m.policies()] == ["p", "q"]
    assert m.lifecycle("gold")["policies"] == ["p"]


def test_a_policy_moves_between_a_storage_unit_and_a_lifecycle(m):
    m.create_lifecycle("gold", ["backup:stu2:2w", "duplicate:stu3:8w"])
    m.create_policy("p", storage_unit="stu1")
    p = m.update_object("policy", "p", lifecycle="gold")
    assert (p["storage_unit"], p["lifecycle"]) == ("stu2", "gold")
    p = m.update_object("policy", "p", storage_unit="stu1")
    assert (p["storage_unit"], p["lifecycle"]) == ("stu1", None)
    m.update_object("policy", "p", lifecycle="gold")
    p = m.update_object("policy", "p", lifecycle="none")
    assert (p["storage_unit"], p["lifecycle"]) == ("stu2", None)
    with pytest.raises(ValidationError, match="one at a time"):
        m.update_object("policy", "p", lifecycle="gold", storage_unit="stu1")


def test_what_a_lifecycle_uses_or_is_used_by_is_not_deleted(m):
    m.create_lifecycle("gold", ["backup:stu1:2w", "duplicate:stu2:8w"])
    m.create_policy("p", lifecycle="gold")
    with pytest.raises(ValidationError) as e:
        m.delete_object("lifecycle", "gold")
    assert "still used by 1 policy (p)" in e.value.message
    assert "cairn policy set POLICY storage_unit STU" in e.value.hint
    m.delete_object("policy", "p")
    with pytest.raises(ValidationError, match=r"1 lifecycle \(gold\)"):
        m.delete_object("storage-unit", "stu2")
    assert m.dependents("lifecycle", "gold")["dependents"] == []
    m.delete_object("lifecycle", "gold")
    assert m.lifecycles() == []
    assert m.db.one("SELECT count(*) FROM lifecycle_steps")[0] == 0
    m.delete_object("storage-unit", "stu2")


def test_a_catalog_of_the_schema_before_lifecycles_is_upgraded(tmp_path, monkeypatch):
    path = str(tmp_path / "catalog.db")
    monkeypatch.setattr("app.store.db.MIGRATIONS", MIGRATIONS[:10])
    Database(path).close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO hosts(name, kind, created) VALUES ('me', 'local', 'x')")
    monkeypatch.undo()
    db = Database(path)
    assert db.one("PRAGMA user_version")[0] == len(MIGRATIONS)
    assert db.one("SELECT copy_number, lifecycle FROM images LIMIT 0") is None
    assert db.one("SELECT count(*) FROM image_copies")[0] == 0
    db.close()
