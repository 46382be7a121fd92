"""A damaged catalog, with real files: a catalog.db overwritten in the middle with garbage,
truncated, replaced by something that is no database, emptied to 0 bytes; an image's file
index missing, damaged or unreadable. Every `cairn` command then either works (it did not
need the damaged part) or says which file is wrong, what is wrong and what to do, with a
nonzero exit and no traceback; `cairn catalog check` names each problem with its fix."""

import os
import shutil
import sqlite3

import pytest

from app import status as st
from app.master import Master
from clihelp import cairn, cairn_json


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A home with hosts, a policy, a real backup (image, index) and a restore job."""
    tmp = tmp_path_factory.mktemp("catalog")
    src, vol, dst = tmp / "src", tmp / "vol", tmp / "dst"
    vol.mkdir()
    for d in range(5):
        os.makedirs(src / f"dir{d}")
        for f in range(20):
            (src / f"dir{d}" / f"file{f}").write_bytes(os.urandom(1000 + 37 * f))
    m = Master(str(tmp / "home"))
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    [job] = m.wait_for(m.start_backup("p1"))
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    image = m.images()[0]["id"]
    m.close()
    return tmp / "home", image, str(src), str(dst)


@pytest.fixture
def home(pristine, tmp_path):
    src_home, image, src, dst = pristine
    h = tmp_path / "home"
    shutil.copytree(src_home, h)
    return h, image, src, dst


def pages_of(db_path, table):
    conn = sqlite3.connect(db_path)
    try:
        return [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name=?", (table,))]
    finally:
        conn.close()


def overwrite_pages(db_path, pages, fill):
    size = sqlite3.connect(db_path).execute("PRAGMA page_size").fetchone()[0]
    with open(db_path, "r+b") as f:
        for p in pages:
            f.seek((p - 1) * size)
            f.write(fill(size))


# Every form a script uses day to day, reading and writing the catalog.
COMMANDS = [
    ["jobs", "list"], ["jobs", "show", "1"], ["jobs", "log", "1"], ["images", "list"],
    ["host", "list"], ["policy", "list"], ["storage-unit", "list"], ["disk-pool", "list"],
    ["report", "backups"], ["schedule", "runs"], ["backup", "p1", "--wait"],
]


def assert_clear_failure(p, catalog):
    """A message on stderr that names the catalog file and what to do; no traceback."""
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    assert p.returncode != 0
    assert p.stderr.startswith("cairn: ") and str(catalog) in p.stderr, p.stderr
    assert "cairn catalog check" in p.stderr or "copy of catalog.db" in p.stderr, p.stderr


def assert_every_command_clear(h, image, catalog, must_fail=()):
    for cmd in COMMANDS + [["browse", image], ["restore", image, "--path", "/", "--to",
                                                "/nonexistent-target", "--preview"]]:
        p = cairn(h, *cmd, check=False)
        assert "Traceback" not in p.stderr, (cmd, p.stderr)
        if p.returncode != 0 or cmd in must_fail:
            assert_clear_failure(p, catalog)
            assert p.returncode == st.CATALOG_FAILED, (cmd, p.returncode, p.stderr)
        # --json gets the same as a document
        if cmd in must_fail:
            doc, pj = cairn_json(h, *cmd, check=False)
            assert doc["status"] == st.CATALOG_FAILED and str(catalog) in doc["error"]
            assert doc["hint"] and "Traceback" not in pj.stderr


def check(h):
    doc, p = cairn_json(h, "catalog", "check", check=False)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == doc["status"]
    human = cairn(h, "catalog", "check", check=False)
    assert human.returncode == p.returncode and "Traceback" not in human.stderr
    return doc, human.stdout


def test_clean_catalog_checks_clean(home):
    h, image, _, _ = home
    doc, text = check(h)
    assert doc["ok"] and doc["status"] == 0 and doc["problems"] == [], doc
    assert doc["checked"]["sqlite_integrity"] and doc["checked"]["images"] == 1
    assert doc["checked"]["indexes"] == 1 and doc["checked"]["index_entries"] > 10
    assert doc["checked"]["image_files"] == 1
    assert "no problems" in text


def test_garbage_in_the_middle(home):
    """The jobs table's pages overwritten: the file opens, queries of jobs fail."""
    h, image, _, _ = home
    catalog = h / "catalog.db"
    pages = pages_of(catalog, "jobs")
    assert pages and 1 not in pages
    overwrite_pages(catalog, pages, lambda n: bytes((i * 151 + 7) % 256 for i in range(n)))
    assert_every_command_clear(h, image, catalog, must_fail=[["jobs", "list"]])
    p = cairn(h, "jobs", "list", check=False)
    assert "damaged" in p.stderr and "malformed" in p.stderr
    doc, text = check(h)
    assert not doc["ok"] and doc["status"] == st.CATALOG_FAILED
    assert any(str(catalog) in x["problem"] and x["fix"] for x in doc["problems"])
    assert "problem:" in text and "fix:" in text


def test_truncated(home):
    h, image, _, _ = home
    catalog = h / "catalog.db"
    os.truncate(catalog, os.path.getsize(catalog) // 2)
    assert_every_command_clear(h, image, catalog, must_fail=[["jobs", "list"]])
    doc, _ = check(h)
    assert not doc["ok"] and doc["problems"]


def test_not_a_database(home):
    h, image, _, _ = home
    catalog = h / "catalog.db"
    catalog.write_bytes(b"these are somebody's notes, not a catalog\n" * 200)
    assert_every_command_clear(h, image, catalog, must_fail=[c for c in COMMANDS])
    p = cairn(h, "images", "list", check=False)
    assert "not a Cairn catalog" in p.stderr
    doc, _ = check(h)
    assert not doc["ok"] and "not a database" in doc["problems"][0]["problem"]
    # nothing was written over the admin's file
    assert catalog.read_bytes().startswith(b"these are somebody's notes")


def test_emptied_to_zero_bytes_is_not_taken_for_a_new_catalog(home):
    h, image, _, _ = home
    catalog = h / "catalog.db"
    os.truncate(catalog, 0)
    for cmd in (["images", "list"], ["jobs", "list"]):
        p = cairn(h, *cmd, check=False)
        assert_clear_failure(p, catalog)
        assert "truncated" in p.stderr
    assert os.path.getsize(catalog) == 0, "the empty file became a new, empty catalog"
    doc, _ = check(h)
    assert not doc["ok"] and "truncated" in doc["problems"][0]["problem"]


@pytest.mark.parametrize("damage", ["missing", "damaged", "unreadable"])
def test_image_index(home, damage):
    h, image, src, dst = home
    index = h / "indexes" / f"{image}.cidx"
    if damage == "missing":
        index.unlink()
    elif damage == "damaged":
        size = index.stat().st_size
        with open(index, "r+b") as f:
            f.seek(size // 2)
            f.write(b"\xff" * 64)
    else:
        index.unlink()
        index.mkdir()          # root reads any file: a directory in its place cannot be read
    # a damaged spot spoils the listings it lies in: one of these at least
    failed = []
    for path in [src] + [f"{src}/dir{d}" for d in range(5)]:
        p = cairn(h, "browse", image, path, check=False)
        assert "Traceback" not in p.stderr
        if p.returncode:
            assert p.returncode == st.IMAGE_DAMAGED, p.stderr
            assert image in p.stderr and str(index) in p.stderr, p.stderr
            assert f"cairn images rebuild-index {image}" in p.stderr, p.stderr
            failed.append(path)
    assert failed
    doc, r = cairn_json(h, "restore", image, "--path", src, "--to", dst, "--wait", check=False)
    assert "Traceback" not in r.stderr
    assert r.returncode == st.IMAGE_DAMAGED, (doc, r.stderr)
    if "jobs" in doc:          # refused when the job ran
        said = cairn(h, "jobs", "log", doc["jobs"][0]["id"]).stdout.splitlines()[-1]
    else:                      # refused before a job was queued
        said = doc["error"]
    assert f"file index of image {image}" in said, said
    # what does not need the index still works
    cairn(h, "jobs", "list")
    cairn(h, "images", "list")
    doc, text = check(h)
    assert doc["status"] == st.CATALOG_FAILED
    [problem] = doc["problems"]
    assert problem["image"] == image and str(index) in problem["problem"]
    assert f"cairn images rebuild-index {image}" in problem["fix"]
