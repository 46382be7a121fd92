"""Restores to a new location with the paths relocated (strip a prefix, add one, rename by
pattern), through the real restore job on the embedded default, compared byte for byte; and
relocations that must be refused before anything is written."""

import os

import pytest

from app import status as st
from app.errors import ValidationError
from app.master import Master
from clihelp import cairn_json
from treegen import assert_trees_equal, make_tree


@pytest.fixture(scope="module")
def backed_up(tmp_path_factory):
    base = tmp_path_factory.mktemp("relocate")
    src, vol, home = base / "src", base / "vol", base / "home"
    vol.mkdir()
    make_tree(str(src))
    m = Master(str(home))
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
    yield m, image, str(src), base, str(home)
    m.close()


def restore(m, image, paths, to, **kw):
    [job] = m.wait_for([m.start_restore(image, paths, to, **kw)])
    return job


def test_strip_prefix_restores_the_selection_as_the_target(backed_up, tmp_path):
    m, image, src, _, _ = backed_up
    dst = str(tmp_path / "dst")
    job = restore(m, image, [src], dst, relocate={"strip": src})
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    assert_trees_equal(src, dst, check_owner=False)


def test_strip_prefix_through_the_cli(backed_up, tmp_path):
    m, image, src, _, home = backed_up
    dst = str(tmp_path / "dst")
    parent = os.path.dirname(src)
    preview, _ = cairn_json(home, "restore", image, "--path", src + "/dir", "--to", dst,
                            "--strip-prefix", parent, "--preview")
    assert preview["items"][0] == {"path": src + "/dir", "kind": "d",
                                   "target": dst + "/src/dir"}
    assert not os.path.exists(dst), "a preview wrote something"
    doc, _ = cairn_json(home, "restore", image, "--path", src + "/dir", "--to", dst,
                        "--strip-prefix", parent, "--wait")
    assert doc["status"] == 0
    assert_trees_equal(os.path.join(src, "dir"), os.path.join(dst, "src", "dir"),
                       check_owner=False)


def test_add_prefix_keeps_the_full_path_under_it(backed_up, tmp_path):
    m, image, src, _, _ = backed_up
    dst = str(tmp_path / "dst")
    job = restore(m, image, [src + "/dir", src + "/hard"], dst, relocate={"add": "/restored"})
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    for d in ("dir", "hard"):
        assert_trees_equal(os.path.join(src, d), dst + "/restored" + src + "/" + d,
                           check_owner=False)


def test_glob_rename_of_names_and_of_a_leading_directory(backed_up, tmp_path):
    m, image, src, _, _ = backed_up
    dst = str(tmp_path / "dst")
    job = restore(m, image, [src + "/dir"], dst, relocate={
        "strip": src, "rename": {"pattern": "*.txt", "replacement": "*.txt.old"}})
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    with open(src + "/dir/top.txt", "rb") as a, open(dst + "/dir/top.txt.old", "rb") as b:
        assert a.read() == b.read()
    with open(src + "/dir/sub/deeper/file.txt", "rb") as a, \
            open(dst + "/dir/sub/deeper/file.txt.old", "rb") as b:
        assert a.read() == b.read()
    assert not os.path.exists(dst + "/dir/top.txt")
    # the hard link's partner is outside the selection: it comes back as a file of its own
    assert os.path.isfile(dst + "/dir/sub/c_link")

    dst2 = str(tmp_path / "dst2")
    job = restore(m, image, [src + "/dir"], dst2, relocate={
        "rename": {"pattern": src + "/d*", "replacement": "/copy-d*"}})
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    assert_trees_equal(src + "/dir", dst2 + "/copy-dir", check_owner=False)


def test_regex_rename_keeps_hard_links_together(backed_up, tmp_path):
    m, image, src, _, _ = backed_up
    dst = str(tmp_path / "dst")
    job = restore(m, image, [src], dst, relocate={
        "rename": {"pattern": "^.*/src(/|$)", "replacement": r"/copy\1", "mode": "regex"}})
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    assert_trees_equal(src, dst + "/copy", check_owner=False)


def test_refused_relocations_write_nothing(backed_up, tmp_path):
    m, image, src, _, _ = backed_up
    dst = str(tmp_path / "dst")
    bad = [
        ({"strip": "/elsewhere"}, "is not under /elsewhere"),
        ({"rename": {"pattern": "^/", "replacement": "../", "mode": "regex"}},
         "is not absolute"),
        ({"rename": {"pattern": "src", "replacement": ".."}}, "contains '..'"),
        ({"rename": {"pattern": "(", "replacement": "x", "mode": "regex"}},
         "not a valid regular expression"),
        ({"rename": {"pattern": "*", "replacement": "**"}}, "has 2 wildcards"),
        ({"strip": src + "/small.txt"}, "restore target directory itself"),
    ]
    for relocate, message in bad:
        paths = [src + "/small.txt"] if "small" in str(relocate) else [src]
        with pytest.raises(ValidationError) as e:
            m.start_restore(image, paths, dst, relocate=relocate)
        assert message in e.value.message, (relocate, e.value.message)
    with pytest.raises(ValidationError, match="would both be restored to /same"):
        m.start_restore(image, [src + "/small.txt", src + "/empty"], dst,
                        relocate={"rename": {"pattern": r".*", "replacement": "/same",
                                             "mode": "regex"}})
    assert not os.path.exists(dst)


def test_a_collision_below_the_selection_fails_the_job_before_writing(backed_up, tmp_path):
    m, image, src, _, _ = backed_up
    dst = str(tmp_path / "dst")
    # the selection itself maps fine; its children all collapse to one name
    relocate = {"strip": src, "rename": {"pattern": "^/[^/]+", "replacement": "/all",
                                         "mode": "regex"}}
    with pytest.raises(ValidationError, match="would both be restored to /all"):
        m.preview_restore(image, [src], dst, relocate=relocate)
    jid = m.start_restore(image, [src + "/dir"], dst,
                          relocate={"rename": {"pattern": r"top\.txt$",
                                               "replacement": "emptydir", "mode": "regex"}})
    [job] = m.wait_for([jid])
    assert job["status"] != st.OK
    log = "\n".join(x["message"] for x in m.jobs.logs(jid))
    assert "would both be restored to" in log, log
    assert not os.path.exists(dst)
