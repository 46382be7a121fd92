"""A restore in several processes (restore_streams): the plan's cut into parts, the tree
that comes back (every kind of entry, hard links across parts, directory metadata), the
same outcome as one process in every overwrite mode, and what a part's trouble does to the
whole: a checksum mismatch, a damaged image, a cancel, a part killed."""

import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_archive import Recorder, backup, plan_of  # noqa: E402
from treegen import assert_trees_equal, make_tree  # noqa: E402

from app import status  # noqa: E402
from app.agent import restore_streams  # noqa: E402
from app.agent.extents import ExtentReader  # noqa: E402
from app.agent.extract import restore_from  # noqa: E402
from app.agent.restore_streams import restore_in_streams, split_plan  # noqa: E402
from app.errors import CairnError, Canceled  # noqa: E402
from app.formats import entry  # noqa: E402

KiB = 1 << 10


def never():
    return False


@pytest.fixture(scope="module")
def imaged(tmp_path_factory):
    """Every kind of entry (make_tree) and 24 files more in three directories, so that each
    of two parts gets many."""
    base = tmp_path_factory.mktemp("streams")
    src = base / "src"
    make_tree(str(src))
    for i in range(24):
        d = src / "many" / f"d{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:02d}").write_bytes(os.urandom(40 * KiB + i * 999))
    os.utime(src / "many" / "d1", ns=(1_500_000_000 * 10 ** 9, 1_500_000_000 * 10 ** 9))
    image = base / "image.tar"
    _, rec = backup(image, [src])
    return {"src": src, "image": image, "rows": rec.rows}


class Slow:
    """An image stream that waits before each read, so that a restore lasts long enough to
    be cancelled or broken in the middle."""

    def __init__(self, reader, wait):
        self.reader = reader
        self.wait = wait

    def readinto(self, b):
        time.sleep(self.wait)
        return self.reader.readinto(b)

    def close(self):
        self.reader.close()


def streamed(image, rows, target, *, streams=2, overwrite="skip", plan=None,
             is_cancelled=never, wait=0, **kw):
    rec = Recorder()
    extents = [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]

    def source_for(indexes):
        reader = ExtentReader(str(image), [extents[i] for i in indexes])
        return Slow(reader, wait) if wait else reader

    result = restore_in_streams(source_for, str(target), plan or plan_of(rows),
                                overwrite=overwrite, emit=rec, is_cancelled=is_cancelled,
                                streams=streams, min_bytes=0, **kw)
    return result, rec


def single(image, rows, target, overwrite="skip", plan=None):
    rec = Recorder()
    with ExtentReader(str(image), [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]) as rd:
        result = restore_from(rd, str(target), plan or plan_of(rows), overwrite=overwrite,
                              emit=rec, is_cancelled=never)
    return result, rec


@pytest.fixture
def parts(monkeypatch):
    """The pids of the parts' processes as they are forked."""
    pids = []
    fork = restore_streams._Streams.fork

    def recording(self, *args):
        p = fork(self, *args)
        pids.append(p.pid)
        return p

    monkeypatch.setattr(restore_streams._Streams, "fork", recording)
    return pids


def reaped(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def leftovers(target):
    return [os.path.join(d, n) for d, dirs, files in os.walk(target)
            for n in dirs + files if n.startswith(".cairn-restore")]


# -- the cut


def test_the_plan_is_cut_into_contiguous_parts_of_about_equal_cost():
    plan = [{"path": "/d", "kind": entry.KIND_DIR}]
    sizes = [(i * 7919) % 300_000 for i in range(200)]
    plan += [{"path": f"/d/f{i}", "kind": entry.KIND_FILE, "size": s}
             for i, s in enumerate(sizes)]
    plan.insert(50, {"path": "/d/sub", "kind": entry.KIND_DIR})
    plan.append({"path": "/d/link", "kind": entry.KIND_HARDLINK, "link": "/d/f3"})
    dirs, cut, links = split_plan(plan, 3)
    assert dirs == [0, 50] and links == [len(plan) - 1]
    flat = [i for p in cut for i in p]
    assert flat == [i for i, it in enumerate(plan) if it["kind"] == entry.KIND_FILE]
    assert len(cut) == 3
    costs = [sum(plan[i]["size"] + restore_streams.PER_FILE for i in p) for p in cut]
    biggest = max(sizes) + restore_streams.PER_FILE
    assert max(costs) - min(costs) <= 2 * biggest, costs


def test_plans_that_one_process_restores():
    files = [{"path": f"/f{i}", "kind": entry.KIND_FILE, "size": 1 << 20} for i in range(8)]
    assert split_plan(files, 2) is not None
    assert split_plan(files, 1) is None
    assert split_plan(files, 2, min_bytes=64 << 20) is None  # too little data to pay off
    assert split_plan(files[:3], 2) is None  # too few files
    # two items relocated to one place: in one process the second meets the first
    same = files + [dict(files[0], path="/other", to="/f0")]
    assert split_plan(same, 2) is None
    # a sparse file of a TiB that reads a few KiB from the image is cheap
    sparse = [dict(f, size=1 << 40) for f in files]
    assert split_plan(sparse, 2, min_bytes=64 << 20) is not None
    assert split_plan(sparse, 2, min_bytes=64 << 20, sizes=[4096] * len(sparse)) is None


# -- the tree


def test_a_tree_restored_in_two_streams_is_the_tree(imaged, tmp_path, parts):
    result, rec = streamed(imaged["image"], imaged["rows"], tmp_path / "t")
    one, _ = single(imaged["image"], imaged["rows"], tmp_path / "one")
    assert result.pop("streams") == 2 and len(parts) == 2
    assert result == one, (result, one)
    assert result["errors"] == 0 and not rec.of("warning"), rec.of("warning")
    assert_trees_equal(str(imaged["src"]), str(tmp_path / "t") + str(imaged["src"]))
    # progress adds up the parts, and ends at the whole
    last = rec.of("progress")[-1]
    assert last == {"files": one["files"], "bytes": one["bytes"]}
    assert all(reaped(pid) for pid in parts)


def test_hard_links_whose_targets_another_part_restored(imaged, tmp_path):
    rows = imaged["rows"]
    links = [r for r in rows if r[entry.KIND] == entry.KIND_HARDLINK]
    assert links, "the test tree has hard links"
    # the link targets go last, the rest first: the targets land in the second part
    targets = {r[entry.LINK] for r in links}
    order = ([r for r in rows if r[entry.PATH] not in targets]
             + [r for r in rows if r[entry.PATH] in targets])
    result, _ = streamed(imaged["image"], order, tmp_path / "t")
    assert result["errors"] == 0 and result["streams"] == 2
    restored = str(tmp_path / "t")
    for r in links:
        a, b = os.stat(restored + r[entry.PATH]), os.stat(restored + r[entry.LINK])
        assert (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev)


@pytest.mark.parametrize("mode", ["skip", "rename", "overwrite"])
def test_every_overwrite_mode_ends_as_in_one_process(imaged, tmp_path, mode):
    """Two targets restored once and then changed alike (a file changed, a directory in a
    file's place, a file in a directory's place); the second restore in one process and in
    two streams leaves them equal, with the same counts and logs."""
    src = str(imaged["src"])
    ends = {}
    for way in ("one", "streams"):
        target = tmp_path / way
        single(imaged["image"], imaged["rows"], target)
        root = str(target) + src
        with open(os.path.join(root, "small.txt"), "wb") as f:
            f.write(b"changed since the backup\n")
        os.unlink(os.path.join(root, "many", "d2", "f05"))
        os.mkdir(os.path.join(root, "many", "d2", "f05"))  # a directory in a file's place
        os.utime(os.path.join(root, "many", "d2", "f05"), ns=(0, 0))
        shutil.rmtree(os.path.join(root, "many", "d1"))
        with open(os.path.join(root, "many", "d1"), "wb") as f:  # a file in a directory's
            f.write(b"in the way\n")
        for d in (os.path.join(root, "many"), os.path.join(root, "many", "d1")):
            os.utime(d, ns=(0, 0))
        for d in (root, os.path.join(root, "many", "d2"), os.path.join(root, "small.txt")):
            os.utime(d, ns=(0, 0))
        before = time.time_ns()
        if way == "one":
            result, rec = single(imaged["image"], imaged["rows"], target, overwrite=mode)
        else:
            result, rec = streamed(imaged["image"], imaged["rows"], target, overwrite=mode)
            assert result.pop("streams") == 2
        ends[way] = (result, sorted(str(x) for x in rec.of("log")))
        assert not leftovers(target)
        if mode == "rename":
            # an existing directory keeps its own metadata and gets new names: its mtime is
            # the time of the restore
            for d, _, _ in os.walk(root):
                if os.stat(d).st_mtime_ns >= before:
                    os.utime(d, ns=(0, 0))
    assert ends["one"] == ends["streams"]
    assert_trees_equal(str(tmp_path / "one"), str(tmp_path / "streams"))


# -- trouble in a part


def test_a_checksum_mismatch_in_a_part_is_that_file_alone(imaged, tmp_path):
    rows = imaged["rows"]
    plan = plan_of(rows)
    bad = max(i for i, it in enumerate(plan) if it["kind"] == entry.KIND_FILE
              and it["checksum"])
    plan[bad]["checksum"] = "0" * len(plan[bad]["checksum"])
    result, rec = streamed(imaged["image"], rows, tmp_path / "t", plan=plan)
    assert result["errors"] == 1 and result["streams"] == 2
    [w] = rec.of("warning")
    assert w["path"] == plan[bad]["path"] and "checksum mismatch" in w["message"]
    assert not os.path.exists(str(tmp_path / "t") + plan[bad]["path"])
    assert not leftovers(tmp_path / "t")
    assert result["files"] == sum(1 for it in plan if it["kind"] != entry.KIND_DIR) - 1


def test_a_damaged_image_ends_the_restore_as_damage(imaged, tmp_path, parts):
    """Bytes missing from the image are found before anything is written; a member that is
    not where the index says is found by the part that reads it, and ends the restore."""
    rows = [list(r) for r in imaged["rows"]]
    files = [i for i, r in enumerate(rows) if r[entry.KIND] == entry.KIND_FILE]
    short = [list(r) for r in rows]
    short[files[-1]][entry.OFFSET] = os.path.getsize(imaged["image"]) + 512  # past the end
    with pytest.raises(CairnError) as e:
        streamed(imaged["image"], short, tmp_path / "short")
    assert e.value.code == status.IMAGE_DAMAGED, e.value.message
    assert not parts and not os.path.exists(tmp_path / "short")

    rows[files[-2]][entry.OFFSET] += 512  # inside the member's data, not at its header
    with pytest.raises(CairnError) as e:
        streamed(imaged["image"], rows, tmp_path / "t")
    assert e.value.code == status.IMAGE_DAMAGED, e.value.message
    assert "damaged" in e.value.message
    assert len(parts) == 2 and all(reaped(pid) for pid in parts)
    assert not leftovers(tmp_path / "t")


def test_a_cancel_stops_every_part_and_leaves_no_partial_file(imaged, tmp_path, parts):
    started = time.monotonic()

    def cancelled():
        return len(parts) == 2 and time.monotonic() - started > 0.3

    with pytest.raises(Canceled):
        streamed(imaged["image"], imaged["rows"], tmp_path / "t", is_cancelled=cancelled,
                 wait=0.2)
    assert all(reaped(pid) for pid in parts)
    assert not leftovers(tmp_path / "t")
    # the parts stopped where they were, before the end of their files (hard links, made
    # after the parts, are left out of the count)
    files = sum(len(f) for _, _, f in os.walk(tmp_path / "t"))
    single(imaged["image"], imaged["rows"], tmp_path / "whole")
    whole = sum(len(f) for _, _, f in os.walk(tmp_path / "whole"))
    assert files < whole - sum(1 for r in imaged["rows"] if r[entry.KIND] == entry.KIND_HARDLINK)


def test_a_part_killed_ends_the_restore_with_a_clear_error(imaged, tmp_path, parts):
    killed = []

    def kill_the_first_part():
        if len(parts) == 2 and not killed:
            os.kill(parts[0], signal.SIGKILL)
            killed.append(parts[0])
        return False

    with pytest.raises(CairnError) as e:
        streamed(imaged["image"], imaged["rows"], tmp_path / "t",
                 is_cancelled=kill_the_first_part, wait=0.1)
    assert "killed by signal %d" % signal.SIGKILL in e.value.message
    assert e.value.code == status.INTERNAL
    assert all(reaped(pid) for pid in parts)


def test_a_full_target_stops_the_restore(imaged, small_tmpfs):
    """A tmpfs too small for the files: the part that meets the full disk ends the restore
    as an unusable target, the other part is stopped, nothing half written stays."""
    target = small_tmpfs("1m")
    with pytest.raises(CairnError) as e:
        streamed(imaged["image"], imaged["rows"], target)
    assert e.value.code == status.RESTORE_TARGET_INVALID, e.value.message
    assert not leftovers(target)


# -- the fork


def test_a_fork_that_fails_leaves_the_files_to_one_process(imaged, tmp_path, monkeypatch,
                                                           parts):
    """The second of three forks fails (as with too many processes): the first part, still
    at its gate, leaves without writing, and the restore ends in one process as if it had
    begun there: the same counts (a part that had written files would have made the parent
    skip them), the same tree, a log line that says why."""
    import errno
    real_fork = os.fork
    forks = []

    def fork_once():
        forks.append(1)
        if len(forks) > 1:
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        return real_fork()

    monkeypatch.setattr(os, "fork", fork_once)
    result, rec = streamed(imaged["image"], imaged["rows"], tmp_path / "t", streams=3)
    monkeypatch.setattr(os, "fork", real_fork)
    one, _ = single(imaged["image"], imaged["rows"], tmp_path / "one")
    assert result.pop("streams") == 1 and len(parts) == 1
    assert result == one, (result, one)
    assert_trees_equal(str(imaged["src"]), str(tmp_path / "t") + str(imaged["src"]))
    logs = [x["message"] for x in rec.of("log")]
    assert any("restored in one process" in m and os.strerror(errno.EAGAIN) in m
               for m in logs), logs
    assert all(reaped(pid) for pid in parts)


def test_the_parts_hold_no_socket_or_pipe_of_the_agent(imaged, tmp_path):
    """A part gets a copy of every descriptor of the agent. Another job's connection or a
    command's pipe, closed by the agent while the part runs, must reach its end of file
    then, not when the part ends."""
    import socket
    import threading
    a, b = socket.socketpair()
    pr, pw = os.pipe()
    ready, go = tmp_path / "ready", tmp_path / "go"
    ready.mkdir()

    def at_the_gate(parts):  # in each part, after it took its place
        (ready / str(os.getpid())).touch()
        end = time.monotonic() + 60
        while not go.exists() and time.monotonic() < end:
            time.sleep(0.01)

    out = {}

    def restore():
        out["result"], _ = streamed(imaged["image"], imaged["rows"], tmp_path / "t",
                                    after_fork=at_the_gate)

    t = threading.Thread(target=restore)
    t.start()
    try:
        end = time.monotonic() + 60
        while len(os.listdir(ready)) < 2 and time.monotonic() < end:
            time.sleep(0.01)
        assert len(os.listdir(ready)) == 2
        a.close()
        os.close(pw)
        b.settimeout(5)
        assert b.recv(1) == b""  # times out while a part holds the other end
        assert select_readable(pr, 5) and os.read(pr, 1) == b""
    finally:
        go.touch()
        t.join()
        b.close()
        os.close(pr)
    assert out["result"]["streams"] == 2 and out["result"]["errors"] == 0
    assert_trees_equal(str(imaged["src"]), str(tmp_path / "t") + str(imaged["src"]))


def select_readable(fd, timeout):
    import select
    return bool(select.select([fd], [], [], timeout)[0])


class Stalling:
    """An image stream that gives its first `after` bytes in small reads, then waits until
    the file `release` exists: a part reading it stops in the middle of a file, with its
    temporary file open."""

    def __init__(self, reader, after, release):
        self.reader = reader
        self.left = after if after > 0 else 1 << 62  # the directories' stream: no stall
        self.release = release

    def readinto(self, b):
        if self.left <= 0:
            end = time.monotonic() + 60
            while not self.release.exists() and time.monotonic() < end:
                time.sleep(0.01)
            self.left = 1 << 62
        n = self.reader.readinto(memoryview(b)[:max(1, min(len(b), 64 * KiB, self.left))])
        self.left -= n
        return n

    def close(self):
        self.reader.close()


def test_the_half_written_files_of_a_killed_part_are_removed(tmp_path, parts):
    """A part killed in the middle of a file cannot remove its temporary file itself: the
    parent removes it, and says so; the other part's own cleanup leaves nothing either."""
    src = tmp_path / "src"
    for d in ("a", "b"):
        (src / d).mkdir(parents=True)
        for i in range(3):
            (src / d / f"small{i}").write_bytes(os.urandom(KiB))
        (src / d / "big").write_bytes(os.urandom(6 << 20))
    image = tmp_path / "image.tar"
    _, rec0 = backup(image, [src])
    rows = rec0.rows
    extents = [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]
    target = tmp_path / "t"

    def source_for(indexes):
        return Stalling(ExtentReader(str(image), [extents[i] for i in indexes]),
                        after=sum(extents[i][1] for i in indexes) - (1 << 20),
                        release=tmp_path / "release")

    def kill_when_both_write():
        if len(parts) == 2 and not (tmp_path / "release").exists() and all(
                any(n.startswith(".cairn-restore-%d-" % pid) for _, _, f in os.walk(target)
                    for n in f) for pid in parts):
            os.kill(parts[0], signal.SIGKILL)
            (tmp_path / "release").touch()
        return False

    rec = Recorder()
    with pytest.raises(CairnError) as e:
        restore_in_streams(source_for, str(target), plan_of(rows), overwrite="skip", emit=rec,
                           is_cancelled=kill_when_both_write, streams=2, min_bytes=0)
    assert "killed by signal %d" % signal.SIGKILL in e.value.message
    assert not leftovers(target)
    assert any(re.match(r"removed [1-9]\d* half-written file\(s\) of the restore stream "
                        r"that ended \(killed by signal %d\)" % signal.SIGKILL, x["message"])
               for x in rec.of("log")), rec.of("log")
    assert all(reaped(pid) for pid in parts)


# -- names taken while a restore runs


@pytest.mark.parametrize("way", ["one", "streams"])
def test_a_name_taken_while_restoring_is_not_replaced_in_rename_mode(tmp_path, way):
    """A directory that exists with F but not F.restored, and an image with both: F is
    restored as F.restored (F is taken), and so is the image's own F.restored (free when it
    was looked at). Whichever is put in place second must not replace the first."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(12):
        (src / f"f{i:02d}").write_bytes(b"file %d\n" % i * 3000)
        (src / f"f{i:02d}.restored").write_bytes(b"its own copy %d\n" % i * 3000)
    image = tmp_path / "image.tar"
    _, rec = backup(image, [src])
    target = tmp_path / "t"
    single(image, rec.rows, target)
    root = Path(str(target) + str(src))
    for i in range(12):
        (root / f"f{i:02d}.restored").unlink()
    if way == "one":
        result, r = single(image, rec.rows, target, overwrite="rename")
    else:
        result, r = streamed(image, rec.rows, target, overwrite="rename")
    have = sorted((root / n).read_bytes() for n in os.listdir(root))
    want = sorted([(src / n).read_bytes() for n in os.listdir(src)]
                  + [(src / f"f{i:02d}").read_bytes() for i in range(12)])
    assert have == want  # 12 kept, 24 restored: none lost
    assert result["errors"] == 0 and not leftovers(target)
    logs = [x["message"] for x in r.of("log")]
    assert any("was taken while it was restored" in m for m in logs), logs


@pytest.mark.parametrize("way", ["renameat2", "link and unlink"])
def test_rename_noreplace_refuses_a_taken_name(tmp_path, monkeypatch, way):
    from app.agent import restore_target
    from app.agent.restore_target import rename_noreplace
    if way == "renameat2":
        assert restore_target._RENAMEAT2 is not None, "this host's C library has renameat2"
    else:  # a C library without renameat2
        monkeypatch.setattr(restore_target, "_RENAMEAT2", None)
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):
            rename_noreplace(b"a", b"b", fd)
        assert (tmp_path / "a").read_bytes() == b"a" and (tmp_path / "b").read_bytes() == b"b"
        rename_noreplace(b"a", b"c", fd)
        assert not (tmp_path / "a").exists() and (tmp_path / "c").read_bytes() == b"a"
    finally:
        os.close(fd)


class Meddling:
    """An image stream that calls `meddle()` once `after` bytes were read: someone else
    acting on the target while a file is being restored."""

    def __init__(self, reader, after, meddle):
        self.reader = reader
        self.left = after
        self.meddle = meddle

    def readinto(self, b):
        if self.left is not None and self.left <= 0:
            self.meddle()
            self.left = None
        n = self.reader.readinto(memoryview(b)[:min(len(b), 64 * KiB)])
        if self.left is not None:
            self.left -= n
        return n

    def close(self):
        self.reader.close()


def test_a_file_made_by_someone_else_meanwhile_is_kept_in_skip_mode(tmp_path):
    """skip: a name free when the file was begun and taken before it was put in place is
    left to the file there now; the restore counts the file as skipped and says why."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(os.urandom(6 << 20))
    (src / "small").write_bytes(b"small\n")
    image = tmp_path / "image.tar"
    _, rec0 = backup(image, [src])
    rows = rec0.rows
    target = tmp_path / "t"
    theirs = Path(str(target) + str(src)) / "big"

    def someone_else():
        theirs.write_bytes(b"made by someone else\n")

    big = next(r for r in rows if r[entry.PATH].endswith("/big"))
    rec = Recorder()
    with ExtentReader(str(image), [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]) as rd:
        result = restore_from(Meddling(rd, big[entry.OFFSET] + (5 << 20), someone_else),
                              str(target), plan_of(rows), overwrite="skip", emit=rec,
                              is_cancelled=never)
    assert theirs.read_bytes() == b"made by someone else\n"
    assert (theirs.parent / "small").read_bytes() == b"small\n"
    assert result["skipped"] == 1 and result["errors"] == 0, result
    assert not leftovers(target)
    assert any("was made while it was restored" in x["message"] for x in rec.of("log"))


def test_a_part_keeps_the_numbers_of_the_channels_it_lets_go(tmp_path):
    """The sockets a part lets go of stay taken as /dev/null: a socket object collected in
    the part later closes its number, which must not be a file the part opened since."""
    import socket
    from app.agent.restore_streams import _close_foreign_channels
    data = tmp_path / "data"
    data.write_bytes(b"hello")
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the part
        code = 1
        try:
            _close_foreign_channels(keep=set())
            fd = os.open(data, os.O_RDONLY)
            if fd not in (a.fileno(), b.fileno()):
                a.close()  # what a collected socket object does with its number
                b.close()
                code = 0 if os.pread(fd, 5, 0) == b"hello" else 3
            else:
                code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    # the part let go of its end: the other end sees the end of the stream only once the
    # agent closes its own
    a.close()
    assert b.recv(1) == b""
    b.close()
    assert os.WEXITSTATUS(status) == 0, {2: "a file took a channel's number",
                                         3: "closing a channel closed the file"}.get(
        os.WEXITSTATUS(status), os.WEXITSTATUS(status))
