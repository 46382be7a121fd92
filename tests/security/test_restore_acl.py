"""A restore gives back exactly the ACLs the image holds, including none: a file or
directory restored into a directory whose default ACL grants an ordinary user access must
not inherit that access, and one that had an ACL gets exactly it back."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from localuser import LocalUser, shared_dir  # noqa: E402
from test_archive import Recorder, backup, plan_of  # noqa: E402

from app.agent.extents import ExtentReader  # noqa: E402
from app.agent.restore_streams import restore_in_streams  # noqa: E402
from app.formats import entry  # noqa: E402


def never():
    return False


def acl(path):
    return subprocess.run(["getfacl", "-cp", str(path)], capture_output=True, text=True,
                          check=True).stdout


def setfacl(*args):
    subprocess.run(["setfacl", *map(str, args)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def reader():
    if not shutil.which("setfacl"):
        pytest.fail("setfacl is missing: scripts/setup.sh --test installs the acl package",
                    pytrace=False)
    u = LocalUser("cairnacl").create()
    yield u
    u.remove()


@pytest.fixture
def place():
    d = Path(shared_dir("cairn-acl-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("streams", [1, 2])
def test_no_acl_is_inherited_and_an_acl_comes_back_exactly(reader, place, streams):
    src = place / "src"
    (src / "private").mkdir(parents=True)
    for i in range(8):  # enough files for two streams
        f = src / "private" / f"secret{i}"
        f.write_bytes(b"root's alone %d\n" % i)
        f.chmod(0o640)
    (src / "private").chmod(0o750)
    shared = src / "shared.txt"
    shared.write_bytes(b"shared with the reader\n")
    shared.chmod(0o600)
    setfacl("-m", f"u:{reader.name}:r", shared)
    assert not reader.can_read(src / "private" / "secret0")
    image = place / "image.tar"
    _, rec = backup(image, [src])
    rows = rec.rows
    extents = [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]

    # a project directory whose default ACL gives the reader everything made in it
    target = place / "project"
    target.mkdir()
    setfacl("-m", f"u:{reader.name}:rwx", target)
    setfacl("-d", "-m", f"u:{reader.name}:rwx", target)
    result = restore_in_streams(
        lambda idx: ExtentReader(str(image), [extents[i] for i in idx]), str(target),
        plan_of(rows), overwrite="skip", emit=Recorder(), is_cancelled=never,
        streams=streams, min_bytes=0)
    assert result["errors"] == 0
    out = target / str(src).lstrip("/")
    for name in ["private", "private/secret0", "private/secret7", "shared.txt"]:
        assert acl(out / name) == acl(src / name), name
    assert not reader.can_read(out / "private" / "secret0")
    assert not reader.can_read(out / "private")
    assert reader.can_read(out / "shared.txt")
    assert oct(os.stat(out / "private" / "secret3").st_mode & 0o7777) == "0o640"
