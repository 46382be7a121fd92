"""Import, for every storage type: a master that lost its CAIRN_HOME (no catalog backup) gets
its images back from the pool alone. A new home with the host, storage server and pool made
again under their old names, `cairn disk-pool import` records a full, a differential and a
cumulative with their chain, each restores its point in time byte for byte, a second import
records nothing, and an incremental whose base left the pool is listed, not recorded."""

import os
import shutil
import subprocess

from app import status as st
from app.formats import imagemeta
from app.master import Master
from clihelp import cairn, cairn_json
from storage_sites import cli_pool, make_pool
from treegen import assert_trees_equal, make_tree

FIELDS = ("client", "policy", "schedule", "schedule_type", "created", "expires", "bytes",
          "files", "checksum", "base_image", "sources", "selections", "path", "image_bytes",
          "storage_host", "pool", "storage_unit", "warnings")


def chain(home, base, storage_type):
    """Backups of one tree: full, differential, cumulative, differential. Returns (the
    tree's path, [(image row, the tree as it was)])."""
    src = str(base / "src")
    make_tree(src)
    m = Master(str(home))
    try:
        m.config.add_host("me", local=True)
        make_pool(m, storage_type, base / "vol")
        m.create_storage_unit("stu1", pool="dp1")
        m.config.add_policy("p1", storage_unit="stu1")
        for name, kind, keep in (("full", "full", "4w"), ("diff", "differential", "1w"),
                                 ("cum", "cumulative", "2w")):
            m.config.add_schedule("p1", name, type=kind, retention=keep)
        m.config.add_policy_client("p1", "me")
        m.config.add_policy_selection("p1", src)
        out = []
        for k, schedule in enumerate(("full", "diff", "cum", "diff")):
            with open(os.path.join(src, f"step-{k}.txt"), "w") as f:
                f.write(f"written before backup {k}\n" * (k + 1))
            if k == 2:
                os.unlink(os.path.join(src, "step-1.txt"))
            [job] = m.wait_for(m.start_backup("p1", schedule=schedule))
            assert job["status"] == st.OK, m.jobs.logs(job["id"])
            expected = str(base / f"expected-{k}")
            subprocess.run(["cp", "-a", src, expected], check=True)
            out.append((m.image(job["image_id"]), expected))
    finally:
        m.close()
    return src, out


def new_home(base, storage_type, name):
    """A new, empty home with the host, storage server and pool made again."""
    home = base / name
    cairn(home, "host", "add", "me", "--local")
    cli_pool(cairn, home, storage_type, str(base / "vol"))
    return home


def test_import_a_lost_catalogs_chain_restores_every_point_in_time(tmp_path, storage_type):
    home = tmp_path / "home"
    src, steps = chain(home, tmp_path, storage_type)
    shutil.rmtree(home)  # the master's disk is lost, and no catalog backup was taken

    home = new_home(tmp_path, storage_type, "home2")
    doc, _ = cairn_json(home, "disk-pool", "import", "dp1", "--wait")
    [job] = doc["jobs"]
    assert doc["status"] == st.OK and job["type"] == "import", job
    r = job["result"]
    ids = [img["id"] for img, _ in steps]
    assert sorted(r["imported"]) == sorted(ids)
    assert r["incomplete"] == [] and r["errors"] == [] and r["already_known"] == 0
    # the policy and storage unit are not configured again yet: recorded with their names
    assert r["missing"]["policies"] == ["p1"] and r["missing"]["hosts"] == []

    for img, expected in steps:
        got, _ = cairn_json(home, "images", "show", img["id"])
        assert {k: got[k] for k in FIELDS} == {k: img[k] for k in FIELDS}, img["id"]
        assert got["imported"]["job"] == job["id"] and got["imported"]["format_version"] == \
            imagemeta.FORMAT_VERSION
        dst = tmp_path / f"restored-{img['id']}"
        doc, _ = cairn_json(home, "restore", img["id"], "--path", src, "--to", dst, "--wait")
        assert doc["status"] == st.OK, doc
        assert_trees_equal(expected, str(dst) + src, check_owner=False)

    # again: nothing new, nothing changed
    doc, _ = cairn_json(home, "disk-pool", "import", "dp1", "--wait")
    r = doc["jobs"][0]["result"]
    assert doc["status"] == st.OK and r["imported"] == [] and r["already_known"] == len(ids)
    listed, _ = cairn_json(home, "images", "list")
    assert sorted(i["id"] for i in listed["images"]) == sorted(ids)

    # a new backup of the recreated policy chains onto the imported images
    cairn(home, "storage-unit", "create", "stu1", "--pool", "dp1")
    cairn(home, "policy", "create", "p1", "--storage-unit", "stu1")
    cairn(home, "policy", "add-schedule", "p1", "diff", "--type", "differential")
    cairn(home, "policy", "add-client", "p1", "me")
    cairn(home, "policy", "add-selection", "p1", src)
    doc, _ = cairn_json(home, "backup", "p1", "--schedule", "diff", "--wait")
    img, _ = cairn_json(home, "images", "show", doc["jobs"][0]["image_id"])
    assert img["base_image"] == ids[-1] and img["files"] == 0


def test_an_incremental_whose_base_left_the_pool_is_listed_not_recorded(tmp_path,
                                                                        storage_type):
    home = tmp_path / "home"
    _src, steps = chain(home, tmp_path, storage_type)
    full, diff1, cum, diff2 = (img for img, _ in steps)
    os.unlink(full["path"])  # behind Cairn's back
    shutil.rmtree(home)

    home = new_home(tmp_path, storage_type, "home2")
    doc, p = cairn_json(home, "disk-pool", "import", "dp1", "--wait", check=False)
    assert doc["status"] == st.PARTIAL and p.returncode == st.PARTIAL, doc
    r = doc["jobs"][0]["result"]
    assert r["imported"] == [] and r["errors"] == []
    incomplete = {i["image"]: i for i in r["incomplete"]}
    assert set(incomplete) == {diff1["id"], cum["id"], diff2["id"]}
    assert incomplete[diff1["id"]]["base"] == full["id"]
    assert "neither in the catalog nor on the pool" in incomplete[diff1["id"]]["why"]
    assert f"base image {diff1['id']}" in incomplete[diff2["id"]]["why"] \
        or f"base image {cum['id']}" in incomplete[diff2["id"]]["why"]
    listed, _ = cairn_json(home, "images", "list")
    assert listed["images"] == []
    assert not [n for n in os.listdir(home / "indexes") if n.endswith(".cidx")]
    # the pool is left as it was
    assert len(image_files_of(tmp_path, storage_type)) == 3


def image_files_of(base, storage_type):
    out = []
    for d, _, files in os.walk(base / "vol" / storage_type.image_dir):
        out += [os.path.join(d, f) for f in files]
    return out

