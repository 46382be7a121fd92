"""What Cairn keeps for itself is private whatever the umask (app/formats/private.py): folders
0700 and files 0600 when made, folders and files found open to others made private and
reported, never through a symbolic link; a deduplicating pool and CAIRN_HOME made by an
older Cairn (0755 folders, 0644 files) are tightened when opened, and verify finds the rest."""

import contextlib
import json
import os
import stat
import tempfile

import pytest

from plugins.storage.dedup import pool as dedup_pool
from plugins.storage.dedup.ingest import open_store
from plugins.storage.dedup.recipe import RecipeWriter
from plugins.storage.dedup.store import ChunkStore
from app.formats import private
from app.paths import Home


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_made_private_whatever_the_umask(tmp_path):
    with umask(0):
        fd = private.makedirs(str(tmp_path / "vol" / "images" / "client"), own=2)
        os.close(fd)
        fd = private.create(str(tmp_path / "vol" / "images" / "client" / "x"), os.O_WRONLY)
        os.close(fd)
    for p in ("vol", "vol/images", "vol/images/client"):
        assert mode(tmp_path / p) == 0o700, p
    assert mode(tmp_path / "vol/images/client/x") == 0o600


def test_only_own_folders_are_tightened_and_changes_are_reported(tmp_path):
    (tmp_path / "vol" / "images" / "c1").mkdir(parents=True)
    for p in ("vol", "vol/images", "vol/images/c1"):
        os.chmod(tmp_path / p, 0o755)
    changed = []
    os.close(private.makedirs(str(tmp_path / "vol/images/c1"), own=2, changed=changed))
    assert mode(tmp_path / "vol") == 0o755  # the administrator's volume
    assert mode(tmp_path / "vol/images") == mode(tmp_path / "vol/images/c1") == 0o700
    assert changed == [{"path": str(tmp_path / "vol/images"), "mode": "0755", "error": None},
                       {"path": str(tmp_path / "vol/images/c1"), "mode": "0755",
                        "error": None}]


def test_a_shared_folder_or_a_folder_of_the_root_is_never_taken_for_cairns_own(tmp_path):
    """An image written two folders below a shared folder (sticky and open to all, like
    /tmp) or below / itself leaves those folders as they are: only the folders that Cairn
    makes for its images are its own."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    os.close(private.makedirs(str(shared / "x"), own=2))
    assert mode(shared) == 0o1777
    assert mode(shared / "x") == 0o700
    if os.geteuid() != 0:
        return  # a folder of / needs root to make
    top = tempfile.mkdtemp(prefix="cairn-top-", dir="/")
    try:
        os.chmod(top, 0o755)
        os.close(private.makedirs(top, own=2))
        assert mode(top) == 0o755
    finally:
        os.rmdir(top)


def test_a_link_in_place_of_an_own_folder_is_refused_untouched(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    os.chmod(elsewhere, 0o755)
    (tmp_path / "vol").mkdir()
    os.symlink(elsewhere, tmp_path / "vol" / "images")
    with pytest.raises(private.NotAFolder, match="symbolic link"):
        private.makedirs(str(tmp_path / "vol/images/c1"), own=2)
    assert mode(elsewhere) == 0o755 and not (elsewhere / "c1").exists()
    with pytest.raises(OSError):
        private.create(str(tmp_path / "vol" / "images"), os.O_WRONLY)


def test_walk_tightens_a_tree_and_follows_no_link(tmp_path):
    top = tmp_path / "top"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_bytes(b"x")
    (top / "g").write_bytes(b"y")
    outside = tmp_path / "outside"
    outside.write_bytes(b"z")
    os.chmod(outside, 0o644)
    os.symlink(outside, top / "link")
    for p in (top, top / "a", top / "a" / "b"):
        os.chmod(p, 0o755)
    for p in (top / "a" / "b" / "f", top / "g"):
        os.chmod(p, 0o640)
    changed = []
    private.walk(str(top), changed)
    assert sorted(c["path"] for c in changed) == sorted(
        str(p) for p in (top, top / "a", top / "a" / "b", top / "a" / "b" / "f", top / "g"))
    assert mode(top / "a" / "b") == 0o700 and mode(top / "a" / "b" / "f") == 0o600
    assert mode(outside) == 0o644
    changed = []
    private.walk(str(top), changed)
    assert changed == []


def old_pool(root):
    """A pool as an older Cairn left it: folders 0755, files 0644."""
    store = ChunkStore(str(root))
    with store.writer() as w:
        w.add(b"\x01" * 32, b"data" * 100)
        w.commit()
    with RecipeWriter(str(root / "images" / "c1" / "i1.recipe")) as r:
        r.add(b"\x01" * 32, 400)
        r.finish({"image": "i1"})
    for d, dirs, files in os.walk(root):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    with open(root / "index" / "loosened.log", "w"):
        pass  # an empty note file: nothing to report
    return store


def test_a_pool_made_private_on_open_and_the_rest_by_verify(tmp_path):
    root = tmp_path / "pool"
    old_pool(root)
    container = next((root / "containers").iterdir())
    store = open_store(str(root))
    for d in ("", "containers", "index", "images", "images/c1"):
        assert mode(root / d) == 0o700, d
    for f in ("pool.json", "index/chunks.log", "index/lock"):
        assert mode(root / f) == 0o600, f
    # many files: left to verify, unreachable meanwhile behind their private folder
    assert mode(container) == 0o644
    found = dedup_pool.check_modes(store, str(root))
    paths = {f["path"] for f in found}
    assert {str(root), str(root / "containers"), str(root / "images" / "c1"),
            str(root / "pool.json"), str(container),
            str(root / "images" / "c1" / "i1.recipe")} <= paths
    assert all(f["mode"] in ("0755", "0644") and f["error"] is None for f in found)
    assert mode(container) == 0o600
    # reported once: a second verify finds nothing
    assert dedup_pool.check_modes(store, str(root)) == []


def test_what_an_open_tightens_is_kept_for_verify(tmp_path):
    root = tmp_path / "pool"
    store = open_store(str(root))
    os.chmod(root / "containers", 0o755)
    open_store(str(root))  # another job's open: tightens, and notes it
    assert mode(root / "containers") == 0o700
    notes = [json.loads(x) for x in (root / "index" / "loosened.log").read_text().splitlines()]
    assert [(n["path"], n["mode"]) for n in notes] == [(str(root / "containers"), "0755")]
    found = dedup_pool.check_modes(store, str(root))
    assert [(f["path"], f["mode"]) for f in found] == [(str(root / "containers"), "0755")]
    assert not (root / "index" / "loosened.log").exists()


def test_cairn_home_made_private_on_every_start(tmp_path):
    home = tmp_path / "home"
    (home / "indexes").mkdir(parents=True)
    (home / "keys").mkdir()
    (home / "catalog.db").write_bytes(b"")
    (home / "indexes" / "x.cidx").write_bytes(b"x")
    (home / "keys" / "dd.key").write_bytes(b"k")
    for p in (home, home / "indexes", home / "keys"):
        os.chmod(p, 0o755)
    for p in (home / "catalog.db", home / "indexes" / "x.cidx", home / "keys" / "dd.key"):
        os.chmod(p, 0o644)
    with umask(0):
        h = Home(str(home)).ensure()
    assert {c["path"] for c in h.loosened} == {str(p) for p in (
        home, home / "indexes", home / "keys", home / "catalog.db",
        home / "indexes" / "x.cidx", home / "keys" / "dd.key")}
    for d, dirs, files in os.walk(home):
        assert mode(d) == 0o700, d
        for f in files:
            assert mode(os.path.join(d, f)) == 0o600, f
    assert Home(str(home)).ensure().loosened == []


def test_a_new_cairn_home_is_private_under_umask_0(tmp_path):
    from app.master import Master
    with umask(0):
        m = Master(str(tmp_path / "home"))
        m.config.add_host("me", local=True)
        m.close()
    for d, dirs, files in os.walk(tmp_path / "home"):
        assert mode(d) == 0o700, d
        for f in files:
            assert mode(os.path.join(d, f)) == 0o600, (f, oct(mode(os.path.join(d, f))))


def test_a_pool_root_and_a_home_named_through_a_link_are_used_and_made_private(tmp_path):
    """The administrator names them, maybe through a link (/backup -> /gpfs/...): followed
    at the top, and what it leads to is Cairn's and private; links below are not."""
    real_pool, real_home = tmp_path / "gpfs-pool", tmp_path / "gpfs-home"
    for d in (real_pool, real_home):
        d.mkdir()
        os.chmod(d, 0o755)
    os.symlink(real_pool, tmp_path / "pool")
    os.symlink(real_home, tmp_path / "home")
    store = open_store(str(tmp_path / "pool"))
    Home(str(tmp_path / "home")).ensure()
    assert mode(real_pool) == mode(real_pool / "containers") == mode(real_home) == 0o700
    assert dedup_pool.check_modes(store, str(tmp_path / "pool")) == [
        {"path": str(tmp_path / "pool"), "mode": "0755", "error": None}]
