"""Restored files get the image's owner and mode wherever they land: the restore leaves out
fchown and fchmod only where the file comes out right without them, and a target directory
with a set-group-ID bit or a default ACL (inherited by the directories made in it) does not
fool it."""

import os
import stat
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_archive import backup, restore  # noqa: E402

MODES = {"plain": 0o644, "group-writable": 0o664, "world-writable": 0o666, "exec": 0o755,
         "private": 0o600, "none": 0o000, "setuid": 0o4755, "sticky-ish": 0o1644}


def source(base):
    src = base / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    for d in (src, src / "sub", src / "sub" / "deeper"):
        for name, mode in MODES.items():
            p = d / name
            p.write_bytes(name.encode() * 1000)
            os.chmod(p, mode)
    if os.geteuid() == 0:
        os.chown(src / "sub" / "plain", 4321, 8765)
    return src


def modes_and_owners(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            st = os.lstat(os.path.join(dirpath, f))
            out[os.path.relpath(os.path.join(dirpath, f), root)] = (
                stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    return out


def check(src, target):
    want = modes_and_owners(src)
    got = modes_and_owners(str(target) + str(src))
    assert got == want


@pytest.fixture
def imaged(tmp_path):
    src = source(tmp_path)
    image = tmp_path / "image.tar"
    _, rec = backup(image, [src])
    return src, image, rec.rows


def test_modes_and_owners_in_an_ordinary_target(imaged, tmp_path):
    src, image, rows = imaged
    result, _ = restore(image, rows, tmp_path / "t")
    assert result["errors"] == 0
    check(src, tmp_path / "t")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory another group needs root")
def test_a_set_group_id_target_does_not_change_the_files_group(imaged, tmp_path):
    src, image, rows = imaged
    target = tmp_path / "t"
    target.mkdir()
    os.chown(target, 0, 4242)
    os.chmod(target, 0o2775)
    result, _ = restore(image, rows, target)
    assert result["errors"] == 0
    check(src, target)


def _acl(entries):
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, 0xFFFFFFFF)
                                           for tag, perm in entries)


def test_a_default_acl_on_the_target_does_not_change_the_files_modes(imaged, tmp_path):
    src, image, rows = imaged
    target = tmp_path / "t"
    target.mkdir()
    # new files get rw for the owner only, whatever mode they are created with
    try:
        os.setxattr(target, "system.posix_acl_default", _acl([(0x01, 6), (0x04, 0), (0x20, 0)]))
    except OSError as e:
        pytest.skip(f"no POSIX ACLs here: {e.strerror}")
    probe = target / "probe"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    assert stat.S_IMODE(os.stat(probe).st_mode) == 0o600  # the ACL is in force
    probe.unlink()
    result, _ = restore(image, rows, target)
    assert result["errors"] == 0
    check(src, target)


@pytest.mark.skipif(os.geteuid() != 0, reason="files of another owner need root")
def test_a_file_system_that_gives_new_files_another_owner_is_noticed(imaged, tmp_path,
                                                                     monkeypatch):
    """As on an NFS export that squashes root: the agent believes it is user 4321, so the
    image's files of 4321 would need no fchown, but new files come out owned by root."""
    src, image, rows = imaged
    os.chown(src / "plain", 4321, os.getegid())
    _, rec = backup(tmp_path / "image2.tar", [src])
    monkeypatch.setattr(os, "geteuid", lambda: 4321)
    result, _ = restore(tmp_path / "image2.tar", rec.rows, tmp_path / "t")
    assert result["errors"] == 0
    check(src, tmp_path / "t")
