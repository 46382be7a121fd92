"""A restore run by root into a place an ordinary user can touch: the user must not redirect
its writes (by swapping the target or a directory on the way for a symbolic link while the
restore runs) nor read what ends up private while the restore is still writing it. Symbolic
links on the way that only root could have made (a merged /usr: /bin -> usr/bin) are
followed; those an ordinary user could have planted, or that the restore itself made from
the image, are not."""

import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from localuser import LocalUser, shared_dir  # noqa: E402
from test_archive import Recorder, backup, plan_of  # noqa: E402
from treegen import assert_trees_equal  # noqa: E402

from app.agent.extents import ExtentReader  # noqa: E402
from app.agent.extract import restore_from  # noqa: E402
from app.agent.restore_streams import restore_in_streams  # noqa: E402
from app.formats import entry  # noqa: E402

KiB = 1 << 10


def never():
    return False


@pytest.fixture(scope="module")
def attacker():
    u = LocalUser("cairnrestore").create()
    yield u
    u.remove()


@pytest.fixture
def place():
    d = Path(shared_dir("cairn-restore-attack-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_image(base, files=48, mode=0o644, private=False):
    """A tree of `files` files of 32 KiB in three directories (and a 0700 directory
    "private" when asked), its image and the image's rows."""
    src = base / "src"
    for i in range(files):
        d = src / ("private" if private else f"d{i % 3}")
        d.mkdir(parents=True, exist_ok=True)
        f = d / f"f{i:04d}"
        f.write_bytes(os.urandom(32 * KiB))
        f.chmod(mode)
    if private:
        (src / "private").chmod(0o700)
    image = base / "image.tar"
    _, rec = backup(image, [src])
    return src, image, rec.rows


def extents_of(rows):
    return [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]


def stripped(rows, prefix):
    """The plan with `prefix` taken off every path (restore --strip-prefix): the entries land
    at the target's top level; the prefix's own directories are left out."""
    plan = []
    keep = []
    for item, row in zip(plan_of(rows), rows):
        p = item["path"]
        if not p.startswith(prefix + "/"):
            continue
        item["to"] = p[len(prefix):]
        plan.append(item)
        keep.append(row)
    return plan, keep


@pytest.mark.parametrize("strip", [False, True], ids=["full-paths", "strip-prefix"])
def test_a_target_swapped_for_a_symlink_mid_restore_is_not_followed(attacker, place, tmp_path,
                                                                    strip):
    src, image, rows = make_image(tmp_path)
    plan = plan_of(rows)
    if strip:
        plan, rows = stripped(rows, str(src))
    extents = extents_of(rows)
    users = place / "users"  # the ordinary user owns the parent of the target
    users.mkdir()
    os.chown(users, attacker.uid, attacker.gid)
    target = users / "restore"
    secret = place / "secret"  # root's alone
    secret.mkdir(mode=0o700)
    swapped = place / "swapped"

    def swap(parts):
        # In the first part's process, after the parent made the directories and before the
        # part writes anything: the user moves the target away and puts a link in its place.
        try:
            swapped.mkdir()
        except FileExistsError:
            return
        r = attacker.sh(f'mv "{target}" "{target}.moved" && ln -s "{secret}" "{target}"')
        assert r.returncode == 0, r.stderr

    rec = Recorder()
    result = restore_in_streams(
        lambda idx: ExtentReader(str(image), [extents[i] for i in idx]), str(target), plan,
        overwrite="skip", emit=rec, is_cancelled=never, streams=2, min_bytes=0,
        after_fork=swap)
    assert swapped.exists(), "the parts did not start: nothing was tried"
    assert target.is_symlink(), "the user's link is not in place: the swap did not happen"
    assert result["streams"] == 2
    assert os.listdir(secret) == [], "the restore wrote through the user's symbolic link"
    moved = Path(str(target) + ".moved")
    # every file lands in the moved target; one that did not is named with the reason
    told = [p for e, p in rec.events if e in ("warning", "log")]
    assert result["errors"] == result["skipped"] == 0, (result, told)
    assert result["files"] == sum(1 for r in rows if r[entry.KIND] == entry.KIND_FILE), (
        result, told)
    assert_trees_equal(src, moved if strip else moved / str(src).lstrip("/"))


def test_a_directory_that_ends_private_is_private_while_the_restore_runs(attacker, place,
                                                                          tmp_path):
    src, image, rows = make_image(tmp_path, files=200, private=True)
    target = place / "restore"
    target.mkdir(mode=0o755)  # an existing restore directory, reachable by everyone
    private = target / str(src / "private").lstrip("/")
    first = private / "f0000"
    seen = []

    class Watched:
        """The image stream; once most of it was read (the first files of "private" are in
        place by then), the user tries to read them."""

        def __init__(self, reader, at):
            self.reader = reader
            self.at = at
            self.read = 0

        def readinto(self, b):
            if self.read >= self.at and not seen:
                assert first.exists(), "the test looks too early: nothing is in place yet"
                seen.append((attacker.can_read(private), attacker.can_read(first),
                             stat.S_IMODE(os.stat(private).st_mode)))
            n = self.reader.readinto(b)
            self.read += n
            return n

        def close(self):
            self.reader.close()

    total = sum(r[entry.LENGTH] for r in rows)
    src_stream = Watched(ExtentReader(str(image), extents_of(rows)), total * 9 // 10)
    rec = Recorder()
    result = restore_from(src_stream, str(target), plan_of(rows), overwrite="skip", emit=rec,
                          is_cancelled=never)
    assert seen, "the restore ended before the user looked"
    listable, readable, mode = seen[0]
    assert not listable, f"the user listed the private directory mid-restore (mode {mode:o})"
    assert not readable, "the user read a file of the private directory mid-restore"
    assert result["errors"] == 0
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
    assert_trees_equal(src, target / str(src).lstrip("/"))


def test_the_target_itself_as_a_users_symlink_is_refused(attacker, place, tmp_path):
    src, image, rows = make_image(tmp_path, files=4)
    users = place / "users"
    users.mkdir()
    os.chown(users, attacker.uid, attacker.gid)
    secret = place / "secret"
    secret.mkdir(mode=0o700)
    target = users / "restore"
    assert attacker.sh(f'ln -s "{secret}" "{target}"').returncode == 0
    from app.errors import RestoreTargetInvalid
    with pytest.raises(RestoreTargetInvalid, match="symbolic link"):
        with ExtentReader(str(image), extents_of(rows)) as rd:
            restore_from(rd, str(target), plan_of(rows), overwrite="skip", emit=Recorder(),
                         is_cancelled=never)
    assert os.listdir(secret) == []


def _relocated(rows, src, where):
    """The plan restoring src/tool to `where` (an absolute path under the target)."""
    plan = []
    keep = []
    for item, row in zip(plan_of(rows), rows):
        if item["path"] == str(src / "tool"):
            item["to"] = where
            plan.append(item)
            keep.append(row)
    assert plan
    return plan, keep


def _tool_image(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "tool").write_bytes(b"#!/bin/sh\necho restored\n")
    image = tmp_path / "image.tar"
    _, rec = backup(image, [src])
    return src, image, rec.rows


def test_links_only_root_could_have_made_are_followed(place, tmp_path):
    """A restore to / on a merged-/usr system: /bin is a link to usr/bin, made by root in a
    directory only root writes. The file goes through it."""
    src, image, rows = _tool_image(tmp_path)
    target = place / "root"
    (target / "usr" / "bin").mkdir(parents=True)
    os.symlink("usr/bin", target / "bin")
    time.sleep(0.1)  # made before the restore, not by it
    plan, rows = _relocated(rows, src, "/bin/tool")
    with ExtentReader(str(image), extents_of(rows)) as rd:
        result = restore_from(rd, str(target), plan, overwrite="skip", emit=Recorder(),
                              is_cancelled=never)
    assert result["errors"] == 0 and result["files"] == 1
    assert (target / "usr" / "bin" / "tool").read_bytes() == (src / "tool").read_bytes()
    assert (target / "bin").is_symlink()


@pytest.mark.parametrize("case", ["users-link", "users-directory", "absolute", "escapes"])
def test_links_an_ordinary_user_could_have_planted_are_refused(attacker, place, tmp_path,
                                                               case):
    src, image, rows = _tool_image(tmp_path)
    target = place / "root"
    target.mkdir()
    secret = place / "secret"
    secret.mkdir(mode=0o700)
    if case == "users-link":  # the user's own link, in the user's own directory
        home = target / "home"
        home.mkdir()
        os.chown(home, attacker.uid, attacker.gid)
        assert attacker.sh(f'ln -s "{secret}" "{home}/bin"').returncode == 0
        where, why = "/home/bin/tool", f"owned by uid {attacker.uid}"
    elif case == "users-directory":  # root's link, but in a directory the user can write to
        home = target / "home"
        home.mkdir()
        os.symlink(str(secret), home / "bin")
        os.chown(home, attacker.uid, attacker.gid)
        where, why = "/home/bin/tool", "in a directory that others may write to"
    elif case == "absolute":  # root's, but pointing outside a target that is not /
        os.symlink(str(secret), target / "bin")
        where, why = "/bin/tool", "absolute path, outside the restore target"
    else:  # root's, relative, but climbing out of the target
        os.symlink("../secret", target / "bin")
        where, why = "/bin/tool", "points outside the restore target"
    time.sleep(0.1)  # made before the restore, not by it
    plan, rows = _relocated(rows, src, where)
    rec = Recorder()
    with ExtentReader(str(image), extents_of(rows)) as rd:
        result = restore_from(rd, str(target), plan, overwrite="skip", emit=rec,
                              is_cancelled=never)
    assert os.listdir(secret) == []
    assert result["files"] == 0 and result["errors"] == 1
    messages = [w["message"] for w in rec.of("warning")]
    assert any("not followed" in m and why in m for m in messages), messages


def test_a_link_the_restore_itself_made_is_not_followed(place, tmp_path):
    """A hostile image holds a link (d -> the target's parent) and then a file below it:
    the link is restored as a link, the file is refused."""
    src = tmp_path / "src"
    src.mkdir()
    os.symlink("..", src / "d")
    (src / "x").write_bytes(b"data")
    image = tmp_path / "image.tar"
    _, rec = backup(image, [src])
    rows = rec.rows
    plan = plan_of(rows)
    for item in plan:
        if item["path"] == str(src / "x"):
            item["to"] = str(src / "d" / "x")  # the relocation goes through the new link
    target = place / "restore"
    rec = Recorder()
    with ExtentReader(str(image), extents_of(rows)) as rd:
        result = restore_from(rd, str(target), plan, overwrite="skip", emit=rec,
                              is_cancelled=never)
    assert result["errors"] == 1
    assert any("made by this restore" in w["message"] for w in rec.of("warning"))
    assert not (target / str(src.parent).lstrip("/") / "x").exists()
    assert (target / str(src / "d").lstrip("/")).is_symlink()
