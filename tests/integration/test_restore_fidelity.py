"""What a restore keeps beyond the bytes: a hard link group stays one file when only part of
it is restored, inode flags (chattr: append-only, immutable, nodump) come back, and a policy
can leave out what is marked nodump, as dump does."""

import os
import subprocess

import pytest

from app import status
from app.formats import fflags
from app.master import Master


def lsattr_flags(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return fflags.get(fd)
    finally:
        os.close(fd)


def chattr(spec, *paths):
    subprocess.run(["chattr", spec, *map(str, paths)], check=True, capture_output=True)


def logs(m, jid):
    return "\n".join(x["message"] for x in m.jobs.logs(jid))


@pytest.fixture
def master(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    vol = tmp_path / "vol"
    vol.mkdir()
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)], high_water=100, low_water=99)
    m.config.add_storage_unit("stu1", pool="dp1")
    yield m
    m.close()


def back_up(m, src, **policy):
    m.config.add_policy("p1", storage_unit="stu1", **policy)
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    [jid] = m.start_backup("p1")
    [job] = m.wait_for([jid])
    assert job["status"] == status.OK, logs(m, jid)
    return m.image(job["image_id"]), logs(m, jid)


def restore(m, image, paths, out, **kw):
    jid = m.start_restore(image["id"], [str(p) for p in paths], str(out), **kw)
    [job] = m.wait_for([jid])
    return job, logs(m, jid)


@pytest.mark.parametrize("streams", [1, 2])
def test_a_hard_link_group_stays_one_file_when_its_first_link_is_not_restored(
        master, tmp_path, streams):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    (src / "a" / "h1").write_bytes(b"one file, three names\n")
    os.link(src / "a" / "h1", src / "b" / "h2")
    os.link(src / "a" / "h1", src / "b" / "h3")
    for i in range(8):  # enough files for two streams
        (src / "b" / f"other{i}").write_bytes(os.urandom(4096))
    image, _ = back_up(master, src)
    job, log = restore(master, image, [src / "b"], tmp_path / "out", streams=streams)
    assert job["status"] == status.OK, log
    b = tmp_path / "out" / str(src / "b").lstrip("/")
    h2, h3 = os.stat(b / "h2"), os.stat(b / "h3")
    assert (h2.st_ino, h2.st_nlink) == (h3.st_ino, 2), "the group was split"
    assert (b / "h3").read_bytes() == b"one file, three names\n"


@pytest.fixture
def flagged(tmp_path):
    """A tree whose files and directories carry inode flags; the flags are taken off again
    afterwards (an immutable file cannot be removed)."""
    src = tmp_path / "src"
    (src / "locked").mkdir(parents=True)
    (src / "locked" / "inside").write_bytes(b"in an immutable directory\n")
    (src / "log").write_bytes(b"append only\n")
    (src / "frozen").write_bytes(b"immutable\n")
    (src / "scratch").write_bytes(b"nodump\n")
    (src / "plain").write_bytes(b"no flags\n")
    os.link(src / "frozen", src / "frozen-link")
    chattr("+a", src / "log")
    chattr("+i", src / "frozen")
    chattr("+d", src / "scratch")
    chattr("+iA", src / "locked")
    yield src
    subprocess.run(["chattr", "-R", "-ia", str(tmp_path)], capture_output=True)


@pytest.mark.parametrize("streams", [1, 2])
def test_inode_flags_come_back(master, tmp_path, flagged, streams):
    src = flagged
    image, _ = back_up(master, src)
    job, log = restore(master, image, [src], tmp_path / "out", streams=streams)
    assert job["status"] == status.OK, log
    out = tmp_path / "out" / str(src).lstrip("/")
    for name in ["log", "frozen", "frozen-link", "scratch", "plain", "locked",
                 "locked/inside"]:
        assert lsattr_flags(out / name) == lsattr_flags(src / name), name
    assert lsattr_flags(out / "frozen") & fflags.IMMUTABLE
    assert lsattr_flags(out / "locked") == fflags.IMMUTABLE | fflags.NOATIME
    assert os.stat(out / "frozen").st_ino == os.stat(out / "frozen-link").st_ino
    assert (out / "locked" / "inside").read_bytes() == b"in an immutable directory\n"


def test_a_policy_can_leave_out_what_is_marked_nodump(master, tmp_path):
    src = tmp_path / "src"
    (src / "cache" / "deep").mkdir(parents=True)
    (src / "cache" / "deep" / "f").write_bytes(b"x")
    (src / "keep").write_bytes(b"kept\n")
    (src / "scratch").write_bytes(b"left out\n")
    chattr("+d", src / "scratch")
    chattr("+d", src / "cache")
    image, log = back_up(master, src, skip_nodump=True)
    names = {e["name"] for e in master.browse(image["id"], str(src))["entries"]}
    assert names == {"keep"}, names
    assert "2 file(s) and director(ies) marked nodump were left out" in log, log
