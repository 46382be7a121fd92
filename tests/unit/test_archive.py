"""The advanced-disk image: backup_to writes a pax tar that GNU tar, Python's tarfile and
restore_from all read back to the exact tree; rows, events, warnings, cancel and damage."""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from treegen import assert_trees_equal, make_tree, xattrs_supported  # noqa: E402

from app import status  # noqa: E402
from app.agent.archiver import backup_to  # noqa: E402
from app.agent.extents import ExtentReader, copy_extents  # noqa: E402
from app.agent.extract import restore_from  # noqa: E402
from app.errors import CairnError, Canceled, NothingToBackup, StorageError  # noqa: E402
from app.formats import entry, tarfmt  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GNU_TAR = shutil.which("tar")
META = {"image_id": "test-image-1", "client": "unit", "policy": "p"}


class Recorder:
    def __init__(self):
        self.events = []

    def __call__(self, event, payload):
        self.events.append((event, payload))

    def of(self, kind):
        return [p for e, p in self.events if e == kind]

    @property
    def rows(self):
        return [r for p in self.of("rows") for r in p["rows"]]


def never():
    return False


def backup(image_path, selections, **kw):
    rec = Recorder()
    with open(image_path, "wb") as f:
        result = backup_to(f, [str(s) for s in selections], emit=rec,
                           is_cancelled=kw.pop("is_cancelled", never),
                           image_meta=kw.pop("image_meta", META))
    return result, rec


def plan_of(rows):
    return [{"path": r[entry.PATH], "kind": r[entry.KIND], "checksum": r[entry.CHECKSUM],
             "link": r[entry.LINK], "member": entry.member_name(r[entry.PATH])} for r in rows]


def restore(image_path, rows, target, overwrite="skip", plan=None, is_cancelled=never):
    rec = Recorder()
    with ExtentReader(str(image_path), [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]) as rd:
        result = restore_from(rd, str(target), plan if plan is not None else plan_of(rows),
                              overwrite=overwrite, emit=rec, is_cancelled=is_cancelled)
    return result, rec


def tar_members(image_path):
    """(name, Member, offset) of every member, parsed with tarfmt from the raw file."""
    out = []
    with open(image_path, "rb") as f:
        data = f.read()
    pos = 0

    def read_exact(n):
        nonlocal pos
        chunk = data[pos:pos + n]
        pos += n
        return chunk

    while True:
        start = pos
        m = tarfmt.read_member_header(read_exact)
        if m is None:
            break
        out.append((m.name, m, start, data[pos:pos + m.size]))
        pos += tarfmt.padded(m.size)
    return out


@pytest.fixture(scope="module")
def imaged(tmp_path_factory):
    base = tmp_path_factory.mktemp("archive")
    src = base / "src"
    info = make_tree(str(src))
    image = base / "image.tar"
    result, rec = backup(image, [src])
    return {"base": base, "src": src, "info": info, "image": image, "result": result,
            "rec": rec, "rows": rec.rows}


# ---------------------------------------------------------------------------------------------
# the image itself


def test_rows_describe_every_entry_once(imaged):
    rows = imaged["rows"]
    src = os.fsencode(str(imaged["src"]))
    paths = [os.fsencode(r[entry.PATH]) for r in rows]
    assert len(paths) == len(set(paths)), "duplicate rows"
    on_disk = {src}
    for dirpath, dirnames, filenames in os.walk(src):
        for n in dirnames + filenames:
            on_disk.add(os.path.join(dirpath, n))
    parents = set()
    p = os.path.dirname(src)
    while p != b"/":
        parents.add(p)
        p = os.path.dirname(p)
    assert set(paths) == on_disk | parents
    by_path = {os.fsencode(r[entry.PATH]): r for r in rows}
    for path in on_disk:
        st = os.lstat(path)
        r = by_path[path]
        assert r[entry.MODE] == st.st_mode & 0o7777, path
        assert (r[entry.UID], r[entry.GID]) == (st.st_uid, st.st_gid), path
        assert r[entry.MTIME_NS] == st.st_mtime_ns, path
        if r[entry.KIND] == entry.KIND_FILE:
            assert r[entry.SIZE] == st.st_size
            if st.st_blocks * 512 >= st.st_size:
                with open(path, "rb") as f:
                    assert r[entry.CHECKSUM] == tarfmt.tree_digest(f.read()), path
        else:
            assert r[entry.CHECKSUM] == ""
        if r[entry.KIND] == entry.KIND_SYMLINK:
            assert os.fsencode(r[entry.LINK]) == os.readlink(path)
    res = imaged["result"]
    assert res["dirs"] == sum(1 for r in rows if r[entry.KIND] == entry.KIND_DIR)
    assert res["files"] == sum(1 for r in rows if r[entry.KIND] != entry.KIND_DIR)
    assert res["image_bytes"] == os.path.getsize(imaged["image"])
    assert res["warnings"] == 0


def test_hard_links_and_kinds(imaged):
    src = str(imaged["src"])
    by_path = {r[entry.PATH]: r for r in imaged["rows"]}
    for group in imaged["info"]["hardlinks"]:
        kinds = sorted(by_path[os.path.join(src, g)][entry.KIND] for g in group)
        assert kinds == [entry.KIND_FILE, entry.KIND_HARDLINK]
        first, second = sorted((os.path.join(src, g) for g in group),
                               key=lambda p: [r[entry.PATH] for r in imaged["rows"]].index(p))
        assert by_path[second][entry.LINK] == first
    assert by_path[os.path.join(src, imaged["info"]["fifo"])][entry.KIND] == entry.KIND_FIFO
    sparse = by_path[os.path.join(src, imaged["info"]["sparse"])]
    assert sparse[entry.SIZE] == os.path.getsize(os.path.join(src, imaged["info"]["sparse"]))
    assert sparse[entry.LENGTH] < sparse[entry.SIZE] // 10, "sparse file stored with its holes"


def test_children_of_a_directory_are_contiguous_and_sorted(imaged):
    rows = imaged["rows"]
    runs = {}
    last_parent = None
    for i, r in enumerate(rows):
        parent = os.path.dirname(os.fsencode(r[entry.PATH]))
        if parent != last_parent:
            assert parent not in runs, "children of %r are split" % parent
            runs[parent] = []
            last_parent = parent
        runs[parent].append(os.path.basename(os.fsencode(r[entry.PATH])))
    for parent, names in runs.items():
        assert names == sorted(names), parent


def test_members_rows_and_trailing_index_agree(imaged):
    members = tar_members(imaged["image"])
    names = [m[0] for m in members]
    assert names[0] == b".cairn/image.json"
    assert names[-2:] == [b".cairn/summary.json", b".cairn/index.jsonl"]
    assert json.loads(members[0][3]) == META
    # the summary member: what the backup found, as its result says
    summary = json.loads(members[-2][3])
    result = imaged["result"]
    assert {k: summary[k] for k in ("files", "dirs", "bytes", "warnings")} == \
        {k: result[k] for k in ("files", "dirs", "bytes", "warnings")}
    assert members[-2][2] + 512 + tarfmt.padded(len(members[-2][3])) == members[-1][2]
    index = [json.loads(line) for line in members[-1][3].decode("ascii").splitlines()]
    rows = imaged["rows"]
    assert index == rows
    assert imaged["result"]["index_offset"] == members[-1][2]
    with open(imaged["image"], "rb") as f:
        data = f.read()
    assert data.endswith(tarfmt.EOF_MARKER)
    assert len(members) == len(rows) + 3
    for r, (name, m, start, _) in zip(rows, members[1:-2]):
        assert start == r[entry.OFFSET]
        assert name.rstrip(b"/") == os.fsencode(entry.member_name(r[entry.PATH]))
        chunk = data[r[entry.OFFSET]:r[entry.OFFSET] + r[entry.LENGTH]]
        pos = 0

        def read_exact(n):
            nonlocal pos
            pos += n
            return chunk[pos - n:pos]

        again = tarfmt.read_member_header(read_exact)
        assert again.name == m.name
        assert pos + tarfmt.padded(again.size) == len(chunk)


def test_events(imaged):
    rec = imaged["rec"]
    assert len(rec.of("totals")) == 1
    totals = rec.of("totals")[0]
    assert totals["files"] == imaged["result"]["files"]
    assert totals["bytes"] == imaged["result"]["bytes"]
    assert rec.of("progress"), "no progress event"
    assert all(set(p) == {"files", "bytes", "path"} for p in rec.of("progress"))
    assert all(0 < len(p["rows"]) <= 5000 for p in rec.of("rows"))
    assert not rec.of("warning")


@pytest.mark.skipif(GNU_TAR is None, reason="GNU tar is not installed")
def test_gnu_tar_lists_the_image(imaged):
    out = subprocess.run([GNU_TAR, "--pax-option=delete=hdrcharset", "-tvf",
                          str(imaged["image"])], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert out.stderr == b""
    lines = out.stdout.splitlines()
    # names with a newline are listed escaped, one line per member
    assert len(lines) == len(imaged["rows"]) + 3
    assert b".cairn/summary.json" in lines[-2]
    assert b".cairn/index.jsonl" in lines[-1]


@pytest.mark.skipif(GNU_TAR is None, reason="GNU tar is not installed")
def test_gnu_tar_extracts_the_same_tree(imaged, tmp_path):
    out = subprocess.run([GNU_TAR, "--xattrs", "--xattrs-include=*", "--numeric-owner",
                          "--delay-directory-restore", "--pax-option=delete=hdrcharset",
                          "-xpf", str(imaged["image"]), "-C", str(tmp_path)],
                         capture_output=True)
    assert out.returncode == 0, out.stderr
    src = str(imaged["src"])
    assert_trees_equal(src, str(tmp_path) + src, check_owner=imaged["info"]["owners"])


def test_python_tarfile_reads_the_image(imaged, tmp_path):
    with tarfile.open(str(imaged["image"])) as t:
        members = t.getmembers()
        names = [m.name for m in members]
        expected = [".cairn/image.json"] + [entry.member_name(r[entry.PATH])
                                            for r in imaged["rows"]] \
            + [".cairn/summary.json", ".cairn/index.jsonl"]
        assert names == expected
        sparse = [m for m in members if m.name.endswith("/" + imaged["info"]["sparse"])][0]
        assert sparse.sparse and sparse.size == 64 << 20
        big = [m for m in members if m.name.endswith("/" + imaged["info"]["big"])][0]
        with open(os.path.join(str(imaged["src"]), imaged["info"]["big"]), "rb") as f:
            assert t.extractfile(big).read() == f.read()


# ---------------------------------------------------------------------------------------------
# restore


def test_restore_reproduces_the_tree(imaged, tmp_path):
    target = tmp_path / "restored"
    result, rec = restore(imaged["image"], imaged["rows"], target)
    assert not rec.of("warning"), rec.of("warning")
    assert result["errors"] == 0 and result["skipped"] == 0
    assert result["bytes"] == imaged["result"]["bytes"]
    src = str(imaged["src"])
    assert_trees_equal(src, str(target) + src, check_owner=imaged["info"]["owners"])
    leftovers = [n for d, _, fs in os.walk(str(target)) for n in fs if ".cairn-restore-" in n]
    assert not leftovers


def test_restore_a_subdirectory(imaged, tmp_path):
    src = str(imaged["src"])
    sub = os.path.join(src, "dir")
    rows = [r for r in imaged["rows"] if r[entry.PATH] == sub or
            r[entry.PATH].startswith(sub + "/")]
    # the cross-directory hard link's first path is inside dir/, so the subset is complete
    result, rec = restore(imaged["image"], rows, tmp_path)
    assert result["errors"] == 0, rec.of("warning")
    assert_trees_equal(sub, str(tmp_path) + sub, check_owner=imaged["info"]["owners"])
    # parents outside the selection were created, nothing else
    assert os.listdir(str(tmp_path) + src) == ["dir"]


def test_restore_a_hard_link_without_its_target(imaged, tmp_path):
    src = str(imaged["src"])
    by_path = {r[entry.PATH]: r for r in imaged["rows"]}
    link = [r for r in imaged["rows"] if r[entry.KIND] == entry.KIND_HARDLINK][0]
    target = by_path[link[entry.LINK]]
    plan = [{"path": link[entry.PATH], "kind": entry.KIND_FILE,
             "checksum": target[entry.CHECKSUM], "link": "",
             "member": entry.member_name(target[entry.PATH])}]
    result, rec = restore(imaged["image"], [target], tmp_path, plan=plan)
    assert result["files"] == 1 and result["errors"] == 0, rec.of("warning")
    restored = str(tmp_path) + link[entry.PATH]
    with open(restored, "rb") as a, open(target[entry.PATH], "rb") as b:
        assert a.read() == b.read()
    assert not os.path.exists(str(tmp_path) + target[entry.PATH])
    assert os.stat(restored).st_mtime_ns == target[entry.MTIME_NS]
    assert os.listdir(str(tmp_path) + src) == ["hard"]


def test_overwrite_modes(imaged, tmp_path):
    src = str(imaged["src"])
    rows = [r for r in imaged["rows"] if r[entry.PATH] in
            (os.path.join(src, "small.txt"), os.path.join(src, "links"),
             os.path.join(src, "links", "relative"))]
    small = str(tmp_path) + os.path.join(src, "small.txt")
    restore(imaged["image"], rows, tmp_path)
    with open(small, "wb") as f:
        f.write(b"changed since the backup\n")

    result, rec = restore(imaged["image"], rows, tmp_path, overwrite="skip")
    assert result["skipped"] == 2  # the file and the symlink; the directory is merged into
    assert len(rec.of("log")) == 2
    with open(small, "rb") as f:
        assert f.read() == b"changed since the backup\n"

    result, rec = restore(imaged["image"], rows, tmp_path, overwrite="rename")
    assert result["skipped"] == 0 and result["errors"] == 0
    with open(small, "rb") as f:
        assert f.read() == b"changed since the backup\n"
    with open(small + ".restored", "rb") as f:
        assert f.read() == b"hello, cairn\n"
    assert os.readlink(str(tmp_path) + os.path.join(src, "links", "relative.restored")) == \
        "../small.txt"
    result, rec = restore(imaged["image"], rows, tmp_path, overwrite="rename")
    assert os.path.exists(small + ".restored.1")

    result, rec = restore(imaged["image"], rows, tmp_path, overwrite="overwrite")
    assert result["skipped"] == 0 and result["errors"] == 0
    with open(small, "rb") as f:
        assert f.read() == b"hello, cairn\n"
    assert os.stat(small).st_mtime_ns == [r for r in rows if r[0].endswith("small.txt")][0][6]


def test_restore_detects_a_checksum_mismatch(imaged, tmp_path):
    src = str(imaged["src"])
    big = [r for r in imaged["rows"] if r[entry.PATH] == os.path.join(src, "big.bin")][0]
    small = [r for r in imaged["rows"] if r[entry.PATH] == os.path.join(src, "small.txt")][0]
    damaged = tmp_path / "damaged.tar"
    shutil.copyfile(str(imaged["image"]), str(damaged))
    data_start = big[entry.OFFSET] + big[entry.LENGTH] - tarfmt.padded(big[entry.SIZE])
    with open(str(damaged), "r+b") as f:
        f.seek(data_start + 12345)
        b = f.read(1)
        f.seek(data_start + 12345)
        f.write(bytes([b[0] ^ 0x40]))
    target = tmp_path / "t"
    result, rec = restore(damaged, [big, small], target)
    warnings = rec.of("warning")
    assert result["errors"] == 1
    assert len(warnings) == 1 and "checksum mismatch" in warnings[0]["message"]
    assert warnings[0]["path"] == big[entry.PATH]
    assert not os.path.exists(str(target) + big[entry.PATH])
    assert os.path.exists(str(target) + small[entry.PATH])
    assert not [n for n in os.listdir(str(target) + src) if n.startswith(".cairn-restore-")]


def test_cancel_during_restore_leaves_no_partial_file(imaged, tmp_path):
    src = str(imaged["src"])
    big = [r for r in imaged["rows"] if r[entry.PATH] == os.path.join(src, "big.bin")][0]
    calls = [0]

    def cancel_in_the_middle():
        calls[0] += 1
        return calls[0] > 2  # between two chunks of the 3 MiB file

    with pytest.raises(Canceled):
        restore(imaged["image"], [big], tmp_path, is_cancelled=cancel_in_the_middle)
    d = str(tmp_path) + src
    assert os.listdir(d) == []


# ---------------------------------------------------------------------------------------------
# backup problems


def test_cancel_during_backup(imaged, tmp_path):
    calls = [0]

    def cancel_later():
        calls[0] += 1
        return calls[0] > 20

    before = threading.active_count()
    with pytest.raises(Canceled):
        backup(tmp_path / "img.tar", [imaged["src"]], is_cancelled=cancel_later)
    assert threading.active_count() <= before + 1  # the totals scan may still be finishing


def test_missing_selections(imaged, tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(NothingToBackup) as e:
        backup(tmp_path / "a.tar", [missing, missing + "2"])
    assert missing in e.value.message
    assert e.value.code == status.NOTHING_TO_BACKUP
    src = str(imaged["src"])
    result, rec = backup(tmp_path / "b.tar", [os.path.join(src, "dir"), missing])
    warnings = rec.of("warning")
    assert [w["path"] for w in warnings] == [missing]
    assert "does not exist" in warnings[0]["message"]
    assert result["warnings"] == 1


def test_overlapping_selections_give_no_duplicates(imaged, tmp_path):
    src = str(imaged["src"])
    sels = [os.path.join(src, "dir", "sub"), os.path.join(src, "dir"),
            os.path.join(src, "hard"), os.path.join(src, "dir", "sub", "deeper") + "/",
            os.path.join(src, "small.txt")]
    result, rec = backup(tmp_path / "o.tar", sels)
    paths = [r[entry.PATH] for r in rec.rows]
    assert len(paths) == len(set(paths))
    expected = [r[entry.PATH] for r in imaged["rows"]
                if r[entry.PATH] in (src, os.path.join(src, "small.txt"))
                or r[entry.PATH].startswith(os.path.join(src, "dir"))
                or r[entry.PATH].startswith(os.path.join(src, "hard"))
                or not r[entry.PATH].startswith(src)]
    assert sorted(paths) == sorted(expected)
    # the selected siblings are one run under their shared parent
    test_children_of_a_directory_are_contiguous_and_sorted({"rows": rec.rows})


def test_sockets_are_skipped_with_a_log(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "f").write_bytes(b"x")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(d / "sock"))
        result, rec = backup(tmp_path / "s.tar", [d])
    finally:
        s.close()
    assert [r[entry.PATH] for r in rec.rows if r[entry.PATH].startswith(str(d))] == \
        [str(d), str(d / "f")]
    assert any("sock" in p["message"] for p in rec.of("log"))
    assert not rec.of("warning")


def _patch_open(monkeypatch, name, exc):
    real = os.open

    def fake(path, flags, mode=0o777, *, dir_fd=None):
        if path == name:
            raise exc
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", fake)


def test_vanished_file_is_a_warning(tmp_path, monkeypatch):
    d = tmp_path / "v"
    d.mkdir()
    for n in ("a", "b", "c"):
        (d / n).write_bytes(n.encode() * 100)
    _patch_open(monkeypatch, b"b", FileNotFoundError(errno.ENOENT, "No such file or directory"))
    result, rec = backup(tmp_path / "v.tar", [d])
    warnings = rec.of("warning")
    assert [(w["path"], w["message"]) for w in warnings] == \
        [(str(d / "b"), "vanished during backup")]
    assert [r[entry.PATH] for r in rec.rows][-2:] == [str(d / "a"), str(d / "c")]
    assert result["warnings"] == 1
    _check_image_restores(tmp_path, rec.rows, {"a": b"a" * 100, "c": b"c" * 100}, d)


def test_unreadable_file_and_directory_are_warnings(tmp_path, monkeypatch):
    d = tmp_path / "u"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "x").write_bytes(b"x")
    (d / "locked").write_bytes(b"secret")
    (d / "ok").write_bytes(b"fine")
    _patch_open(monkeypatch, b"locked", PermissionError(errno.EACCES, "Permission denied"))
    real_listdir = os.listdir
    sub_fds = []

    def fake_listdir(p="."):
        if isinstance(p, int) and os.path.samestat(os.fstat(p), os.stat(str(d / "sub"))):
            sub_fds.append(p)
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_listdir(p)

    monkeypatch.setattr(os, "listdir", fake_listdir)
    result, rec = backup(tmp_path / "u.tar", [d])
    warnings = {w["path"]: w["message"] for w in rec.of("warning")}
    assert set(warnings) == {str(d / "locked"), str(d / "sub")}
    assert "permission denied" in warnings[str(d / "locked")]
    assert "permission denied" in warnings[str(d / "sub")]
    paths = [r[entry.PATH] for r in rec.rows]
    assert str(d / "ok") in paths and str(d / "sub") in paths
    assert str(d / "locked") not in paths and str(d / "sub" / "x") not in paths


def _check_image_restores(tmp_path, rows, expected, d):
    img = [p for p in tmp_path.iterdir() if p.suffix == ".tar"][0]
    target = tmp_path / "restored"
    result, rec = restore(img, rows, target)
    assert result["errors"] == 0, rec.of("warning")
    for name, content in expected.items():
        with open(str(target) + str(d / name), "rb") as f:
            assert f.read() == content


@pytest.mark.parametrize("change", ["grow", "shrink"])
def test_file_changing_while_read_is_a_warning(tmp_path, monkeypatch, change):
    d = tmp_path / "c"
    d.mkdir()
    victim = d / "victim"
    victim.write_bytes(b"v" * 300000)
    (d / "w").write_bytes(b"after")
    real_open = os.open
    real_readv = os.readv
    victim_fds = set()

    def fake_open(path, flags, mode=0o777, *, dir_fd=None):
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        if path == b"victim":
            victim_fds.add(fd)
        return fd

    real_preadv = os.preadv

    def change_once(fd):
        if fd in victim_fds:
            victim_fds.discard(fd)
            with open(str(victim), "r+b") as f:
                if change == "grow":
                    f.seek(0, 2)
                    f.write(b"more" * 1000)
                else:
                    f.truncate(1000)

    def fake_readv(fd, bufs):
        change_once(fd)
        return real_readv(fd, bufs)

    def fake_preadv(fd, bufs, offset, *flags):
        # a small file is read in one call from its start
        change_once(fd)
        return real_preadv(fd, bufs, offset, *flags)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "readv", fake_readv)
    monkeypatch.setattr(os, "preadv", fake_preadv)
    result, rec = backup(tmp_path / "c.tar", [d])
    warnings = rec.of("warning")
    assert [(w["path"], w["message"]) for w in warnings] == \
        [(str(victim), "changed during backup")]
    row = [r for r in rec.rows if r[entry.PATH] == str(victim)][0]
    assert row[entry.SIZE] == 300000
    monkeypatch.undo()
    expected = (b"v" * 300000) if change == "grow" else (b"v" * 1000 + bytes(299000))
    assert row[entry.CHECKSUM] == tarfmt.tree_digest(expected)
    _check_image_restores(tmp_path, rec.rows, {"victim": expected, "w": b"after"}, d)


def test_write_failure_is_a_storage_failure(imaged):
    class Full:
        def __init__(self):
            self.n = 0

        def write(self, buf):
            self.n += len(buf)
            if self.n > 1 << 20:
                raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(StorageError) as e:
        backup_to(Full(), [str(imaged["src"])], emit=lambda *a: None, is_cancelled=never,
                  image_meta=META)
    assert "no space left" in e.value.message
    assert e.value.code == status.STORAGE_WRITE_FAILED


def test_many_entries_are_batched(tmp_path):
    d = tmp_path / "many"
    d.mkdir()
    for i in range(6000):
        (d / ("f%05d" % i)).write_bytes(b"")
    result, rec = backup(tmp_path / "m.tar", [d])
    batches = [len(p["rows"]) for p in rec.of("rows")]
    assert max(batches) <= 5000 and len(batches) >= 2
    assert sum(batches) == 6000 + len(d.parts) - 1
    assert result["files"] == 6000


# ---------------------------------------------------------------------------------------------
# extents


def test_extent_reader_and_copy(tmp_path):
    f = tmp_path / "blob"
    data = bytes(range(256)) * 8192
    f.write_bytes(data)
    ext = [[10, 100], [110, 5], [5000, 70000], [0, 3], [len(data) - 7, 7]]
    expected = b"".join(data[o:o + n] for o, n in ext)
    with ExtentReader(str(f), ext) as r:
        got = bytearray()
        buf = bytearray(4096)
        while True:
            n = r.readinto(buf)
            if not n:
                break
            got += buf[:n]
    assert bytes(got) == expected
    with ExtentReader(str(f), ext) as r:
        assert r.read(7) == expected[:7]
        assert r.read() == expected[7:]

    class Sink:
        def __init__(self):
            self.data = bytearray()

        def write(self, b):
            self.data += b

    sink = Sink()
    seen = []
    n = copy_extents(str(f), ext, sink, is_cancelled=never, on_bytes=seen.append)
    assert n == len(expected) == sum(seen) and bytes(sink.data) == expected
    with pytest.raises(Canceled):
        copy_extents(str(f), ext, Sink(), is_cancelled=lambda: True)


def test_extent_reader_reports_missing_and_short_images(tmp_path):
    with pytest.raises(CairnError) as e:
        ExtentReader(str(tmp_path / "missing.tar"), [[0, 10]])
    assert e.value.code == status.IMAGE_DAMAGED and "missing.tar" in e.value.message
    f = tmp_path / "short.tar"
    f.write_bytes(b"x" * 1000)
    with pytest.raises(CairnError) as e:
        ExtentReader(str(f), [[512, 1024]])
    assert e.value.code == status.IMAGE_DAMAGED


def test_truncated_stream_is_image_damaged(imaged, tmp_path):
    rows = imaged["rows"][:20]
    short = tmp_path / "short.tar"
    with open(str(imaged["image"]), "rb") as f:
        short.write_bytes(f.read(rows[-1][entry.OFFSET] + 100))

    class Src:
        def __init__(self):
            self.f = open(str(short), "rb")
            self.f.seek(rows[0][entry.OFFSET])

        def readinto(self, b):
            return self.f.readinto(b)

    s = Src()
    try:
        with pytest.raises(CairnError) as e:
            restore_from(s, str(tmp_path / "t"), plan_of(rows), overwrite="skip",
                         emit=lambda *a: None, is_cancelled=never)
        assert e.value.code == status.IMAGE_DAMAGED
    finally:
        s.f.close()


def test_very_deep_tree_round_trips_without_exhausting_descriptors(tmp_path):
    # deeper than PATH_MAX and than the restore's descriptor cache
    top = tmp_path / "deep"
    top.mkdir()
    fd = os.open(str(top), os.O_RDONLY)
    try:
        for i in range(450):
            os.mkdir(b"d" * 9 + b"%03d" % i, dir_fd=fd)
            nfd = os.open(b"d" * 9 + b"%03d" % i, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        f = os.open(b"leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(f, b"at the bottom")
        os.close(f)
        os.symlink(b"leaf", b"/proc/self/fd/%d/link" % fd)
        try:
            os.setxattr(fd, "user.deep", b"deep value")
        except OSError:
            pass  # no user xattrs on this file system
    finally:
        os.close(fd)
    result, rec = backup(tmp_path / "deep.tar", [top])
    assert not rec.of("warning"), rec.of("warning")[:1]
    assert result["files"] == 2 and result["dirs"] >= 451
    before = len(os.listdir("/proc/self/fd"))
    res, rrec = restore(tmp_path / "deep.tar", rec.rows, tmp_path / "t")
    assert res["errors"] == 0 and res["files"] == 2, rrec.of("warning")[:1]
    assert len(os.listdir("/proc/self/fd")) == before
    leaf = [r for r in rec.rows if r[entry.PATH].endswith("/leaf")][0]
    rel = os.fsencode(str(tmp_path / "t")).lstrip(b"/") + os.fsencode(leaf[entry.PATH])
    fd = os.open("/", os.O_RDONLY)
    try:
        parts = rel.split(b"/")
        for part in parts[:-1]:
            nfd = os.open(part, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        f = os.open(parts[-1], os.O_RDONLY, dir_fd=fd)
        assert os.read(f, 100) == b"at the bottom"
        os.close(f)
        assert os.readlink(b"link", dir_fd=fd) == b"leaf"
        if xattrs_supported(str(tmp_path)):
            assert os.getxattr(fd, "user.deep") == b"deep value"
    finally:
        os.close(fd)


def test_restore_across_many_directories_puts_every_file_in_its_own_and_leaks_nothing(
        tmp_path):
    """Files are put in place in batches behind the hash threads, not one by one: when the
    restore moves on to the next directory, the files still pending keep a copy of their
    directory's descriptor. Each must land in its own directory, whole, and every copy must
    be closed at the end."""
    src = tmp_path / "src"
    want = {}
    for d in range(40):
        sub = src / f"d{d:02d}" / "inner"
        sub.mkdir(parents=True)
        for f in range(7):
            data = os.urandom(100 + 3000 * f + d)
            (sub / f"f{f}").write_bytes(data)
            want[f"d{d:02d}/inner/f{f}"] = data
    img = tmp_path / "img.tar"
    _, rec = backup(img, [src])
    rows = [r for r in rec.rows if r[entry.PATH].startswith(str(src))]
    fds_before = len(os.listdir("/proc/self/fd"))
    result, _ = restore(img, rows, tmp_path / "out")
    assert len(os.listdir("/proc/self/fd")) == fds_before
    assert result["files"] == len(want) and result["errors"] == 0
    base = tmp_path / "out" / str(src).lstrip("/")
    got = {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file()}
    assert got == want
    assert not list((tmp_path / "out").rglob(".cairn-restore-*"))


def test_two_items_relocated_to_one_name_in_a_new_directory_keep_the_first(tmp_path):
    """In a directory the restore made itself, names are checked against what it put there
    (no look-up on disk): a second item relocated onto a name already restored is skipped,
    even while the first is still being written, and the first stays whole."""
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    (src / "a" / "f").write_bytes(b"first" * 1000)
    (src / "b" / "f").write_bytes(b"second" * 1000)
    img = tmp_path / "img.tar"
    _, rec = backup(img, [src / "a" / "f", src / "b" / "f"])
    rows = [r for r in rec.rows if r[entry.KIND] == entry.KIND_FILE]
    assert len(rows) == 2
    plan = plan_of(rows)
    for item in plan:
        item["to"] = "/merged/f"
    result, rec2 = restore(img, rows, tmp_path / "out", plan=plan)
    assert (tmp_path / "out" / "merged" / "f").read_bytes() == b"first" * 1000
    assert result["skipped"] == 1 and result["files"] == 1
    assert any("already exists" in p["message"] for p in rec2.of("log"))


def test_large_owner_ids_and_devices_round_trip(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root for chown and mknod")
    d = tmp_path / "ids"
    d.mkdir()
    (d / "big_ids").write_bytes(b"owned by large ids\n")
    os.chown(str(d / "big_ids"), 3000000, 4000000)
    try:
        os.mknod(str(d / "null_dev"), 0o620 | 0o020000, os.makedev(1, 3))
        os.mknod(str(d / "blk_dev"), 0o660 | 0o060000, os.makedev(7, 200))
    except PermissionError:
        pytest.skip("device nodes cannot be created here")
    os.utime(str(d), ns=(1, 1700000000000000001))
    img = tmp_path / "ids.tar"
    result, rec = backup(img, [d])
    kinds = {r[entry.PATH]: r[entry.KIND] for r in rec.rows}
    assert kinds[str(d / "null_dev")] == entry.KIND_CHAR
    assert kinds[str(d / "blk_dev")] == entry.KIND_BLOCK
    target = tmp_path / "restored"
    res, rrec = restore(img, rec.rows, target)
    assert res["errors"] == 0, rrec.of("warning")
    assert_trees_equal(str(d), str(target) + str(d))
    if GNU_TAR:
        gx = tmp_path / "gnu"
        gx.mkdir()
        out = subprocess.run([GNU_TAR, "--numeric-owner", "--delay-directory-restore", "-xpf",
                              str(img), "-C", str(gx)], capture_output=True)
        assert out.returncode == 0, out.stderr
        assert_trees_equal(str(d), str(gx) + str(d))

