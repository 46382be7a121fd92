"""The storage server's view of a pool's image files (app/formats/poolfiles.py): which names are
Cairn's, and that a removal asked for by the master touches only old pool files, never a path
outside the pool's image folders, a link, or a file written to since it was listed."""

import os
import time

from app.formats.poolfiles import list_files, parse_name, remove_files


def test_names():
    assert parse_name("me_1_2.tar") == ("me_1_2", False)
    assert parse_name(".me_1_2.tar.partial") == ("me_1_2", True)
    assert parse_name("me_1_2.3.recipe") == ("me_1_2.3", False)
    assert parse_name(".me_1_2.recipe.partial") == ("me_1_2", True)
    for other in ("notes.txt", ".tar", ".me.tar", "..tar.partial", "me.tar.partial",
                  ".cairn-write-test-1", "x.recipe.tmp"):
        assert parse_name(other) is None, other


def make(path, data=b"x", age=0):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    t = time.time() - age
    os.utime(path, (t, t))
    return path


def test_list_and_remove(tmp_path):
    vol = str(tmp_path / "vol")
    old = make(f"{vol}/cairn-images/me/me_1_1.tar", b"12345", age=3600)
    partial = make(f"{vol}/cairn-images/me/.me_1_2.tar.partial", age=3600)
    young = make(f"{vol}/cairn-images/me/me_1_3.tar")
    foreign = make(f"{vol}/cairn-images/me/notes.txt", age=3600)
    outside = make(str(tmp_path / "elsewhere" / "me_1_4.tar"), age=3600)
    link = f"{vol}/cairn-images/me/me_1_5.tar"
    os.symlink(outside, link)
    listing = list_files([vol], "cairn-images")
    assert listing["errors"] == []
    by_path = {f["path"]: f for f in listing["files"]}
    assert set(by_path) == {old, partial, young, foreign}         # the link is no file
    assert by_path[old]["image"] == "me_1_1" and by_path[old]["size"] == 5
    assert by_path[partial]["partial"] and by_path[foreign]["image"] is None
    assert by_path[old]["age_s"] > 3000 and by_path[young]["age_s"] < 60

    os.symlink(str(tmp_path / "elsewhere"), f"{vol}/cairn-images/linked")
    assert "linked" not in {os.path.basename(os.path.dirname(f["path"]))
                            for f in list_files([vol], "cairn-images")["files"]}
    through = f"{vol}/cairn-images/linked/me_1_4.tar"
    r = remove_files([old, partial, young, foreign, outside, link, through,
                      f"{vol}/cairn-images/me/../../../elsewhere/me_1_4.tar"],
                     [vol], "cairn-images", min_age_s=600)
    assert r["removed"] == [old, partial]
    why = {s["path"]: s["why"] for s in r["skipped"]}
    assert why[young] == "written to since it was listed"
    assert why[foreign] == "not a file name Cairn makes"
    assert why[outside] == "not in the pool's image folders"
    assert why[link] == "not a regular file"
    assert why[through] == "its folder is a link"
    assert os.path.exists(outside) and os.path.exists(young) and os.path.exists(foreign)
    assert len(why) == 6


def test_the_agent_refuses_malformed_requests(tmp_path):
    import pytest
    from app.agent import ops
    from app.errors import ValidationError
    vol = str(tmp_path / "vol")
    for args in ({"volumes": "x", "image_dir": "images"},
                 {"volumes": ["relative"], "image_dir": "images"},
                 {"volumes": [vol], "image_dir": "../etc"},
                 {"volumes": [vol], "image_dir": ".."}):
        with pytest.raises(ValidationError):
            ops.pool_files(None, **args)
    for bad in (-1, "1", True):
        with pytest.raises(ValidationError):
            ops.remove_pool_files(None, [], [vol], "images", bad)
    with pytest.raises(ValidationError):
        ops.remove_pool_files(None, "x", [vol], "images", 1)
    spec = {"type": "dedup", "root": str(tmp_path / "pool")}
    with pytest.raises(ValidationError):
        ops.pool_reclaim(None, spec, known=["a"])
    with pytest.raises(ValidationError):
        ops.pool_reclaim(None, spec, known="a", min_age_s=1)
    assert ops.pool_files(None, [vol], "images") == {"files": [], "errors": []}
