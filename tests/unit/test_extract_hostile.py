"""Hostile images: a compromised client controls both the members and the index rows. The
restore must refuse every escape with a warning, write nothing outside the target directory,
and stay in step with the stream so that later members still restore."""

import io
import os
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app import status  # noqa: E402
from app.agent.extract import restore_from  # noqa: E402
from app.errors import CairnError  # noqa: E402
from app.formats import entry, tarfmt  # noqa: E402

KIND_TYPE = {entry.KIND_FILE: tarfmt.REGTYPE, entry.KIND_DIR: tarfmt.DIRTYPE,
             entry.KIND_SYMLINK: tarfmt.SYMTYPE, entry.KIND_HARDLINK: tarfmt.LNKTYPE,
             entry.KIND_FIFO: tarfmt.FIFOTYPE}


class Stream:
    """A plan and the matching member stream, built item by item."""

    def __init__(self):
        self.parts = []
        self.plan = []

    def add(self, path, kind=entry.KIND_FILE, data=b"", link="", member=None,
            header_name=None, header_link=None, checksum=None, mode=0o644):
        member = entry.member_name(path) if member is None else member
        name = os.fsencode(member if header_name is None else header_name)
        linkname = os.fsencode(header_link if header_link is not None else (
            entry.member_name(link) if kind == entry.KIND_HARDLINK else link))
        hdr = tarfmt.member_header(name, KIND_TYPE[kind], mode, os.getuid(), os.getgid(),
                                   len(data), 1700000000123456789, linkname)
        self.parts.append(hdr + data + bytes(tarfmt.padding(len(data))))
        if checksum is None:
            checksum = tarfmt.tree_digest(data) if kind == entry.KIND_FILE else ""
        self.plan.append({"path": path, "kind": kind, "checksum": checksum, "link": link,
                          "member": member})

    def add_raw(self, raw, plan_item):
        self.parts.append(raw)
        self.plan.append(plan_item)

    def restore(self, target, overwrite="skip"):
        events = []
        src = io.BytesIO(b"".join(self.parts))
        result = restore_from(src, str(target), self.plan, overwrite=overwrite,
                              emit=lambda e, p: events.append((e, p)),
                              is_cancelled=lambda: False)
        warnings = [p for e, p in events if e == "warning"]
        return result, warnings


@pytest.fixture
def box(tmp_path):
    """A target directory inside a sandbox whose other contents must stay as they are."""
    sandbox = tmp_path / "sandbox"
    target = sandbox / "target"
    outside = sandbox / "outside"
    target.mkdir(parents=True)
    outside.mkdir()
    (sandbox / "passwd").write_bytes(b"root:x:0:0\n")
    return sandbox, target, outside


def sandbox_state(sandbox, target):
    """Every path in the sandbox outside the target, with its content."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(str(sandbox)):
        if dirpath.startswith(str(target)):
            continue
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            if p.startswith(str(target)):
                continue
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    out[p] = f.read()
            else:
                out[p] = None
    return out


GOOD = b"good content\n" * 1000


def add_good(stream, i):
    stream.add("/good/file%d" % i, data=GOOD + b"%d" % i)


def check_good(target, n):
    for i in range(n):
        with open(str(target / "good" / ("file%d" % i)), "rb") as f:
            assert f.read() == GOOD + b"%d" % i


def test_dot_dot_paths_and_member_names_are_refused(box):
    sandbox, target, outside = box
    before = sandbox_state(sandbox, target)
    s = Stream()
    s.add("/good", kind=entry.KIND_DIR, mode=0o755)
    add_good(s, 0)
    s.add("/../escape", data=b"x" * 1000, member="../escape")
    add_good(s, 1)
    s.add("/ok/a", data=b"y" * 70000, member="ok/a", header_name="a/../../x")
    add_good(s, 2)
    s.add("/a/../../x", data=b"z" * 513)
    add_good(s, 3)
    s.add("/ok/./dot", data=b"d")
    add_good(s, 4)
    s.add("/ok//empty", data=b"e")
    add_good(s, 5)
    s.add("/ok/nul\0byte", data=b"n")
    add_good(s, 6)
    s.add("/ok/mismatch", data=b"m" * 600, header_name="ok/other")
    add_good(s, 7)
    s.add("/ok/kind", kind=entry.KIND_FILE, data=b"", member="ok/kind")
    s.plan[-1]["kind"] = entry.KIND_DIR  # the index says directory, the member is a file
    add_good(s, 8)
    result, warnings = s.restore(target)
    assert result["errors"] == 8
    assert len(warnings) == 8
    assert all(w["message"].startswith("not restored:") for w in warnings)
    check_good(target, 9)
    assert sandbox_state(sandbox, target) == before
    assert sorted(os.listdir(str(target))) == ["good"]


def test_absolute_member_names_stay_inside(box):
    sandbox, target, outside = box
    s = Stream()
    s.add(str(outside / "abs"), data=b"absolute", header_name=str(outside / "abs"))
    add_good(s, 0)
    result, warnings = s.restore(target)
    assert not warnings and result["errors"] == 0
    assert not os.path.exists(str(outside / "abs"))
    with open(str(target) + str(outside / "abs"), "rb") as f:
        assert f.read() == b"absolute"
    check_good(target, 1)


def test_symlink_member_is_not_followed_by_later_members(box):
    sandbox, target, outside = box
    before = sandbox_state(sandbox, target)
    s = Stream()
    s.add("/link", kind=entry.KIND_SYMLINK, link=str(outside))
    s.add("/link/file", data=b"through the link" * 100)
    add_good(s, 0)
    s.add("/link2", kind=entry.KIND_SYMLINK, link="../outside")
    s.add("/link2/deeper/file", data=b"x")
    add_good(s, 1)
    result, warnings = s.restore(target)
    assert result["errors"] == 2
    assert [w["path"] for w in warnings] == ["/link/file", "/link2/deeper/file"]
    assert all("symbolic link" in w["message"] for w in warnings)
    assert os.readlink(str(target / "link")) == str(outside)
    assert os.listdir(str(outside)) == []
    assert sandbox_state(sandbox, target) == before
    check_good(target, 2)


def test_pre_existing_symlinked_parent_is_refused(box):
    sandbox, target, outside = box
    os.symlink(str(outside), str(target / "pre"))
    before = sandbox_state(sandbox, target)
    s = Stream()
    s.add("/pre/file", data=b"must not land outside")
    s.add("/pre/sub/file", data=b"nor here")
    add_good(s, 0)
    result, warnings = s.restore(target)
    assert result["errors"] == 2 and len(warnings) == 2
    assert os.listdir(str(outside)) == []
    assert sandbox_state(sandbox, target) == before
    check_good(target, 1)


def test_directory_over_a_pre_existing_symlink(box):
    sandbox, target, outside = box
    os.symlink(str(outside), str(target / "pre"))
    s = Stream()
    s.add("/pre", kind=entry.KIND_DIR, mode=0o700)
    s.add("/pre/file", data=b"inside")
    # skip: the symlink stays, nothing is written through it
    result, warnings = s.restore(target, overwrite="skip")
    assert os.listdir(str(outside)) == []
    assert os.path.islink(str(target / "pre"))
    assert result["skipped"] == 2
    # overwrite: the symlink itself is replaced by a real directory
    result, warnings = s.restore(target, overwrite="overwrite")
    assert not warnings, warnings
    assert os.listdir(str(outside)) == []
    assert not os.path.islink(str(target / "pre"))
    with open(str(target / "pre" / "file"), "rb") as f:
        assert f.read() == b"inside"
    assert os.stat(str(target / "pre")).st_mode & 0o777 == 0o700


def test_file_over_a_pre_existing_symlink_replaces_the_link(box):
    sandbox, target, outside = box
    victim = sandbox / "passwd"
    os.symlink(str(victim), str(target / "f"))
    s = Stream()
    s.add("/f", data=b"new content")
    result, warnings = s.restore(target, overwrite="overwrite")
    assert not warnings
    with open(str(victim), "rb") as f:
        assert f.read() == b"root:x:0:0\n"
    assert not os.path.islink(str(target / "f"))


def test_hard_links_outside_are_refused(box):
    sandbox, target, outside = box
    before = sandbox_state(sandbox, target)
    s = Stream()
    s.add("/hl1", kind=entry.KIND_HARDLINK, link="/../../passwd",
          header_link="../../passwd")
    add_good(s, 0)
    # a well-formed link to a path that this restore did not write: never linked to
    # whatever happens to exist at that path on the restoring host
    s.add("/hl2", kind=entry.KIND_HARDLINK, link=str(sandbox / "passwd"))
    add_good(s, 1)
    # an index that says one thing and a member that says another
    s.add("/good/file0copy", kind=entry.KIND_HARDLINK, link="/good/file0",
          header_link="../passwd")
    # a link through a symlink restored just before
    s.add("/sl", kind=entry.KIND_SYMLINK, link=str(sandbox))
    s.add("/hl3", kind=entry.KIND_HARDLINK, link="/sl/passwd")
    add_good(s, 2)
    # and a proper one, which must work
    s.add("/good/ok_link", kind=entry.KIND_HARDLINK, link="/good/file0")
    result, warnings = s.restore(target)
    assert result["errors"] == 4, warnings
    assert [w["path"] for w in warnings] == ["/hl1", "/hl2", "/good/file0copy", "/hl3"]
    for n in ("hl1", "hl2", "hl3"):
        assert not os.path.lexists(str(target / n))
    assert os.stat(str(sandbox / "passwd")).st_nlink == 1
    assert sandbox_state(sandbox, target) == before
    check_good(target, 3)
    assert os.path.samefile(str(target / "good" / "ok_link"), str(target / "good" / "file0"))


def test_hostile_sparse_map_is_refused_and_skipped(box):
    sandbox, target, outside = box
    s = Stream()
    data = b"A" * 1000
    smap = tarfmt.sparse_map_bytes([(1 << 40, len(data))], 4096)  # beyond realsize
    raw = tarfmt.member_header(b"sp", tarfmt.REGTYPE, 0o644, 0, 0, len(smap) + len(data),
                               1700000000 * 10 ** 9, sparse_realsize=4096)
    s.add_raw(raw + smap + data + bytes(tarfmt.padding(len(smap) + len(data))),
              {"path": "/sp", "kind": "f", "checksum": "", "link": "", "member": "sp"})
    add_good(s, 0)
    result, warnings = s.restore(target)
    assert result["errors"] == 1 and "sparse" in warnings[0]["message"]
    assert not os.path.exists(str(target / "sp"))
    check_good(target, 1)


def test_members_written_by_python_tarfile(box):
    """Streams from another writer (ustar prefix, GNU long names) are parsed the same way."""
    sandbox, target, outside = box
    buf = io.BytesIO()
    plan = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data in (("../gnu_escape", b"e" * 700), ("d/" + "l" * 150, b"long" * 300),
                           ("fine", b"fine")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))
            plan.append({"path": "/" + name, "kind": "f",
                         "checksum": tarfmt.tree_digest(data), "link": "",
                         "member": name})
    events = []
    buf.seek(0)
    result = restore_from(buf, str(target), plan, overwrite="skip",
                          emit=lambda e, p: events.append((e, p)), is_cancelled=lambda: False)
    assert result["errors"] == 1 and result["files"] == 2
    assert os.path.getsize(str(target / "d" / ("l" * 150))) == 1200
    assert not os.path.exists(str(sandbox / "gnu_escape"))


def test_damaged_header_stops_the_restore(box):
    sandbox, target, outside = box
    s = Stream()
    add_good(s, 0)
    add_good(s, 1)
    raw = bytearray(b"".join(s.parts))
    second = len(s.parts[0])
    raw[second + 10] ^= 0xFF  # inside the second member's header block(s)
    with pytest.raises(CairnError) as e:
        restore_from(io.BytesIO(bytes(raw)), str(target), s.plan, overwrite="skip",
                     emit=lambda *a: None, is_cancelled=lambda: False)
    assert e.value.code == status.IMAGE_DAMAGED
    assert not [n for n in os.listdir(str(target / "good")) if ".cairn-restore-" in n]


def test_sparse_map_running_past_its_member_is_refused(box):
    sandbox, target, outside = box
    s = Stream()
    smap = b"1\n0\n10\n"  # fine in itself, but the member claims a data area of 100 bytes
    raw = tarfmt.member_header(b"sp", tarfmt.REGTYPE, 0o644, 0, 0, 100, 1700000000 * 10 ** 9,
                               sparse_realsize=10)
    s.add_raw(raw + (smap + bytes(100 - len(smap))) + bytes(tarfmt.padding(100)),
              {"path": "/sp", "kind": "f", "checksum": "", "link": "", "member": "sp"})
    add_good(s, 0)
    result, warnings = s.restore(target)
    assert result["errors"] == 1 and "sparse map" in warnings[0]["message"]
    check_good(target, 1)
