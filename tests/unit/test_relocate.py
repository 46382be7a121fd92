"""The mapping of restored paths (app/relocate.py): each rule, their order, and the hostile
results it must refuse."""

import pytest

from app.relocate import Relocation, RelocationError, check_target_path, join_target, \
    plan_targets


def R(**kw):
    return Relocation(**kw)


def test_no_relocation_keeps_the_full_path():
    r = R()
    assert not r and r.to_dict() is None
    assert r.map("/data/x") == "/data/x"
    assert join_target("/new", r.map("/data/x")) == "/new/data/x"
    assert join_target("/new", "/") == "/new"
    assert join_target("/new/", "/x") == "/new/x"


def test_strip_and_add_prefixes():
    assert R(strip="/data").map("/data/x/y") == "/x/y"
    assert R(strip="/data/").map("/data") == "/"
    assert R(strip="//data//x/").strip == "/data/x"
    assert R(add="/restored").map("/data/x") == "/restored/data/x"
    assert R(strip="/data", add="/r").map("/data") == "/r"
    assert R(strip="/data", add="/r").map("/data/x") == "/r/x"
    # a prefix is whole components: /database is not under /data
    with pytest.raises(RelocationError, match="not under /data"):
        R(strip="/data").map("/database/x")


@pytest.mark.parametrize("pattern,replacement,path,expected", [
    ("*.log", "*.log.old", "/var/log/a.log", "/var/log/a.log.old"),
    ("*.log", "*.log.old", "/x.log/y.log", "/x.log.old/y.log.old"),  # every component
    ("alpha", "alpha-2024", "/data/alpha/alpha.txt", "/data/alpha-2024/alpha.txt"),
    ("run-???.dat", "r?-?-?.bin", "/raw/run-001.dat", "/raw/r0-0-1.bin"),
    ("/data/*/raw", "/archive/*/raw-old", "/data/p1/raw/f", "/archive/p1/raw-old/f"),
    ("/data/*/raw", "/archive/*/raw-old", "/data/p1/rawx/f", "/data/p1/rawx/f"),
    ("/data/*", "/d2/*", "/data/a/b", "/d2/a/b"),           # * stops at /
    ("[ab]*.txt", "x*.txt", "/d/alpha.txt", "/d/xa.txt"),   # [ab] is the first wildcard
    ("*.TXT", "*", "/d/a.txt", "/d/a.txt"),                  # case sensitive
])
def test_glob_renames(pattern, replacement, path, expected):
    assert R(rename=(pattern, replacement, "glob")).map(path) == expected


def test_regex_renames_first_match_with_groups():
    r = R(rename=(r"/(\w+)\.csv$", r"/\1-restored.csv", "regex"))
    assert r.map("/a/b.csv") == "/a/b-restored.csv"
    r = R(rename=(r"o", "0", "regex"))
    assert r.map("/foo/boo") == "/f0o/boo"
    r = R(rename=(r"^/data/(?P<p>[^/]+)", r"/x/\g<p>", "regex"))
    assert r.map("/data/q/z") == "/x/q/z"


def test_rules_apply_in_order_strip_rename_add():
    r = Relocation.from_dict({"strip": "/data", "add": "/new",
                              "rename": {"pattern": "/proj*", "replacement": "/p*"}})
    assert r.map("/data/proj1/f") == "/new/p1/f"
    assert Relocation.from_dict(r.to_dict()).map("/data/proj1/f") == "/new/p1/f"


@pytest.mark.parametrize("rename,path,message", [
    ((r"^/", "", "regex"), "/a/b", "not absolute"),
    ((r"^/a", "..", "regex"), "/a/b", "not absolute"),
    ((r"b", "..", "regex"), "/a/b/c", "contains '..'"),
    (("b", "..", "glob"), "/a/b/c", "contains '..'"),
    (("b", ".", "glob"), "/a/b/c", "empty or '.'"),
    (("b", "", "glob"), "/a/b/c", "empty or '.'"),
    ((r"b", "x//y", "regex"), "/a/b", "empty or '.'"),
    ((r"b", "x\0y", "regex"), "/a/b", "NUL"),
    (("b", "../../etc", "glob"), "/a/b", "contains '..'"),
])
def test_hostile_results_are_refused(rename, path, message):
    with pytest.raises(RelocationError, match=message.replace(".", r"\.")
                       .replace("(", r"\(")):
        R(rename=rename).map(path)


@pytest.mark.parametrize("kw,message", [
    (dict(strip="data"), "absolute"),
    (dict(add="/a/../b"), "'.' or '..'"),
    (dict(add="/a\0"), "NUL"),
    (dict(rename=("(", "x", "regex")), "not a valid regular expression"),
    (dict(rename=("(a)", r"\2", "regex")), "does not fit"),
    (dict(rename=("a", r"\g<nope>", "regex")), "does not fit"),
    (dict(rename=("*", "**", "glob")), "2 wildcards"),
    (dict(rename=("*", "[x]", "glob")), "only \\* and \\?"),
    (dict(rename=("a/b", "c", "glob")), "begin with /"),
    (dict(rename=("/", "/x", "glob")), "every path"),
    (dict(rename=("", "x", "glob")), "empty"),
    (dict(rename=("a", "b", "sed")), "unknown"),
])
def test_bad_rules_are_refused_when_made(kw, message):
    with pytest.raises(RelocationError, match=message):
        R(**kw)


def test_from_dict_refuses_unknown_fields():
    with pytest.raises(RelocationError, match="unknown relocation field"):
        Relocation.from_dict({"strip": "/a", "chroot": "/"})
    with pytest.raises(RelocationError):
        Relocation.from_dict(["/a"])


def test_check_target_path():
    assert check_target_path("/") == "/"
    assert check_target_path("/a b/c") == "/a b/c"
    for bad in ("a", "", "/a/../b", "/a/./b", "/a//b", "/a/", None, b"/a"):
        with pytest.raises(RelocationError):
            check_target_path(bad)


def test_plan_targets_refuses_collisions():
    r = R(rename=(r"\.(bak|old)$", "", "regex"))
    with pytest.raises(RelocationError, match="would both be restored to /d/f"):
        plan_targets(r, [("/d", "d"), ("/d/f.bak", "f"), ("/d/f.old", "f")])
    # a file where another path needs a directory
    r = R(rename=("f.txt", "sub", "glob"))
    with pytest.raises(RelocationError, match="must be a directory"):
        plan_targets(r, [("/d/f.txt", "f"), ("/d/sub/x", "f")])
    # a file stripped to the target itself
    with pytest.raises(RelocationError, match="target directory itself"):
        plan_targets(R(strip="/d/f"), [("/d/f", "f")])
    # a directory stripped to the target merges into it
    assert plan_targets(R(strip="/d"), [("/d", "d"), ("/d/f", "f")]) == {"/d": "/", "/d/f": "/f"}
    # the same path twice is not a collision
    assert plan_targets(R(), [("/a", "f"), ("/a", "f")]) == {"/a": "/a"}
