"""The restore browser's Owner column shows the client's names for a file's owner and group,
as ls -l does, with both numbers in its tooltip; an id the client had no name for, and every
owner of an image made before names were recorded, shows as a number. The files are a real
backup of files owned by a real local user, root and an id without a name."""

import grp
import os
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app import status as st
from app.master import Master

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))

from localuser import LocalUser, unnamed_id  # noqa: E402

pytestmark = pytest.mark.gui

OWNER = 4   # the Owner column of ui/file_tree.py


@pytest.fixture
def user():
    u = LocalUser("cairnbrowse").create()
    u.group = grp.getgrgid(u.gid).gr_name
    yield u
    u.remove()


@pytest.fixture
def backed_up(tmp_path, user):
    src, vol = tmp_path / "src", tmp_path / "vol"
    src.mkdir()
    vol.mkdir()
    nobody = unnamed_id()
    for name, uid, gid in (("mine.txt", user.uid, user.gid), ("roots.txt", 0, 0),
                           ("orphan.txt", nobody, nobody)):
        (src / name).write_text(name)
        os.chown(src / name, uid, gid)
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    [job] = m.wait_for(m.start_backup("p1"))
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    yield m, str(src), nobody
    m.close()


def cell(files, path, role=Qt.ItemDataRole.DisplayRole):
    return files.index_of_path(path).siblingAtColumn(OWNER).data(role)


def test_owner_column_shows_the_clients_names(make_console, backed_up, user, qtbot):
    m, src, nobody = backed_up
    c = make_console(m)
    c.window.select_view("restore")
    v = c.window.views["restore"]
    qtbot.waitUntil(lambda: v.loaded and v.files.image_id is not None, timeout=5000)
    assert v.files.headerData(OWNER, Qt.Orientation.Horizontal) == "Owner"
    v.files.reveal(src + "/mine.txt")
    qtbot.waitUntil(lambda: v.files.index_of_path(src + "/orphan.txt").isValid(), timeout=5000)
    root_group = grp.getgrgid(0).gr_name

    qtbot.waitUntil(lambda: cell(v.files, src + "/mine.txt") == f"{user.name}:{user.group}",
                    timeout=5000)
    assert cell(v.files, src + "/roots.txt") == f"root:{root_group}"
    assert cell(v.files, src + "/orphan.txt") == f"{nobody}:{nobody}"
    assert cell(v.files, src + "/mine.txt", Qt.ItemDataRole.ToolTipRole) == (
        f"user {user.name} (uid {user.uid}), group {user.group} (gid {user.gid})")
    assert cell(v.files, src + "/orphan.txt", Qt.ItemDataRole.ToolTipRole) == (
        f"uid {nobody} (no name recorded), gid {nobody} (no name recorded)")
    # the directories above, listed before, got their names too
    assert cell(v.files, src) == f"root:{root_group}"

    # An image made before names were recorded shows the numbers, as before.
    image = v.files.image_id
    with m.db.tx() as conn:
        conn.execute("UPDATE images SET owners=NULL WHERE id=?", (image,))
    with qtbot.waitSignal(v.files.named, timeout=5000):
        v.files.set_image(image)
    v.files.reveal(src + "/mine.txt")
    qtbot.waitUntil(lambda: v.files.index_of_path(src + "/mine.txt").isValid(), timeout=5000)
    assert cell(v.files, src + "/mine.txt") == f"{user.uid}:{user.gid}"
    assert cell(v.files, src + "/roots.txt") == "0:0"
