"""Multiple data streams (child jobs under a parent, one set image that restores as one point
in time, incrementals per stream) and expiry as a job, for every storage type: manual expiry
takes the images that depend on the expired one, retention ends an image only together with
its dependents, and the pool files and catalog indexes go with the catalog rows."""

import json
import os
import subprocess

import pytest

from app import status as st
from app.errors import ValidationError
from app.master import Master
from clihelp import cairn_json
from storage_sites import image_files, make_pool
from treegen import assert_trees_equal


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture
def setup(tmp_path, storage_type):
    src = str(tmp_path / "src")
    for part in ("a", "b", "c"):
        for i in range(5):
            write(f"{src}/{part}/f{i}.bin", os.urandom(2000 + i))
    vol = tmp_path / "vol"
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    make_pool(m, storage_type, vol)
    m.config.add_storage_unit("stu1", pool="dp1", max_concurrent_jobs=4)
    m.config.add_policy("p1", storage_unit="stu1", multiple_streams=True)
    m.config.add_policy_client("p1", "me")
    m.config.add_schedule("p1", "full", type="full", retention="1w")
    m.config.add_schedule("p1", "incr", type="differential", retention="1w")
    yield m, src, tmp_path, str(vol)
    m.close()


def test_streams_run_as_children_and_restore_as_one_point_in_time(setup):
    m, src, tmp, _ = setup
    # a, then b and c together: two streams by marker
    for s in (f"{src}/a", "NEW_STREAM", f"{src}/b", f"{src}/c"):
        m.config.add_policy_selection("p1", s)
    assert m.config.policy("p1")["selections"] == [f"{src}/a", "NEW_STREAM", f"{src}/b",
                                                    f"{src}/c"]
    [parent] = m.start_backup("p1", schedule="full")
    [pj] = m.wait_for([parent])
    assert pj["status"] == st.OK, [m.jobs.logs(r[0]) for r in m.db.all(
        "SELECT id FROM jobs WHERE parent_id=?", (parent,))]
    children = m.db.all("SELECT * FROM jobs WHERE parent_id=? ORDER BY id", (parent,))
    assert [json.loads(c["params"])["selections"] for c in children] == [
        [f"{src}/a"], [f"{src}/b", f"{src}/c"]]
    assert all(c["status"] == st.OK for c in children)
    imgs = m.images("me")
    assert [i["id"] for i in imgs] == [pj["image_id"]]          # the set, not its parts
    parts = [i for i in m.images("me", include_parts=True) if i["part_of"] == pj["image_id"]]
    assert len(parts) == 2
    snap1 = str(tmp / "expected1")
    subprocess.run(["cp", "-a", src, snap1], check=True)

    # change one file in each stream, then an incremental per stream
    write(f"{src}/a/new.txt", b"new in a\n")
    os.unlink(f"{src}/c/f0.bin")
    [p2] = m.wait_for(m.start_backup("p1", schedule="incr"))
    assert p2["status"] == st.OK, [m.jobs.logs(r[0]) for r in m.db.all(
        "SELECT id FROM jobs WHERE parent_id=?", (p2["id"],))]
    kids2 = m.db.all("SELECT image_id FROM jobs WHERE parent_id=?", (p2["id"],))
    levels = {m.image(k[0])["schedule_type"] for k in kids2}
    assert levels == {"differential"}
    assert sum(m.image(k[0])["files"] for k in kids2) == 1      # only a/new.txt was sent

    for img_id, expected in ((pj["image_id"], snap1), (p2["image_id"], src)):
        dst = str(tmp / f"restore-{img_id}")
        [r] = m.wait_for([m.start_restore(img_id, [src], dst)])
        assert r["status"] == st.OK, m.jobs.logs(r["id"])
        assert_trees_equal(expected, dst + src, check_owner=False)

    # expiring the first set takes the second along (its streams read the first's data)
    preview = m.expire_preview(pj["image_id"])
    assert set(preview["with"]) >= {p2["image_id"]} | {p[0] for p in kids2}
    with pytest.raises(ValidationError, match="needed by"):
        m.start_expire(pj["image_id"], with_dependents=False)
    [ej] = m.wait_for([m.start_expire(pj["image_id"])])
    assert ej["type"] == "expire" and ej["status"] == st.OK, m.jobs.logs(ej["id"])
    assert m.images("me", include_parts=True) == []
    assert m.db.one("SELECT count(*) FROM image_deps")[0] == 0
    assert os.listdir(m.home.root + "/indexes") == [] if os.path.isdir(
        m.home.root + "/indexes") else True


def test_retention_expires_a_chain_only_when_all_of_it_has_ended(setup):
    m, src, tmp, vol = setup
    m.config.add_policy_selection("p1", f"{src}/a")
    [full] = m.wait_for(m.start_backup("p1", schedule="full"))
    write(f"{src}/a/more.txt", b"more\n")
    [incr] = m.wait_for(m.start_backup("p1", schedule="incr"))
    f_img, i_img = m.image(full["image_id"]), m.image(incr["image_id"])
    assert i_img["base_image"] == f_img["id"]
    # the full's retention ends first: it is kept, since the incremental still needs it
    with m.db.tx() as c:
        c.execute("UPDATE images SET expires='2000-01-01T00:00:00Z' WHERE id=?", (f_img["id"],))
    assert m.expire_due() == []
    from app.jobs.expire import due
    removable, kept = due(m.db, __import__("time").time())
    assert removable == [] and "still needs its data" in kept[f_img["id"]]
    # when the incremental's ends too, both go in one expire job
    with m.db.tx() as c:
        c.execute("UPDATE images SET expires='2000-01-02T00:00:00Z' WHERE id=?", (i_img["id"],))
    [jid] = m.expire_due()
    assert m.expire_due() == []                # not queued twice
    [job] = m.wait_for([jid])
    assert job["status"] == st.OK and sorted(job["params"]["images"]) == sorted(
        [f_img["id"], i_img["id"]])
    assert m.images() == []
    assert image_files(m) == []


def test_cli_expire_names_what_else_it_takes(setup):
    m, src, tmp, _ = setup
    m.config.add_policy_selection("p1", f"{src}/a")
    [full] = m.wait_for(m.start_backup("p1", schedule="full"))
    [incr] = m.wait_for(m.start_backup("p1", schedule="incr"))
    home = m.home.root
    doc, p = cairn_json(home, "images", "expire", full["image_id"], check=False)
    assert p.returncode != 0 and incr["image_id"] in json.dumps(doc), doc
    doc, _ = cairn_json(home, "images", "dependents", full["image_id"])
    assert doc["with"] == [incr["image_id"]]
    doc, p = cairn_json(home, "images", "expire", full["image_id"], "--with-dependents")
    assert p.returncode == 0 and sorted(doc["images"]) == sorted([full["image_id"], incr["image_id"]])
    assert m.images() == []
