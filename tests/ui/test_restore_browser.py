"""A restore driven from the console as an admin does it: pick the client and the image,
check a directory and a file, open the restore dialog, send them to a new directory (with and
without changing their paths), watch the preview, start; the console's dispatcher runs the
real job, and the restored files are compared byte for byte with the originals. The first
restore goes to another host, reached over a real sshd, agent to agent."""

import os

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app import status as st
from app.master import Master
from treegen import assert_trees_equal, make_tree

pytestmark = pytest.mark.gui


@pytest.fixture
def backed_up(tmp_path):
    src, vol = tmp_path / "src", tmp_path / "vol"
    vol.mkdir()
    make_tree(str(src))
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
    yield m, str(src)
    m.close()


def open_page(make_console, m, qtbot):
    c = make_console(m, run_dispatcher=True)
    c.window.confirm_close_with_running_jobs = False
    c.window.select_view("restore")
    v = c.window.views["restore"]
    qtbot.waitUntil(lambda: v.loaded and v.files.image_id is not None, timeout=5000)
    return c, v


def tick(v, qtbot, path):
    """Select a row of the tree and press space, as a user checking it."""
    qtbot.waitUntil(lambda: v.files.index_of_path(path).isValid(), timeout=5000)
    idx = v.files.index_of_path(path)
    v.tree.scrollTo(idx)
    v.tree.setCurrentIndex(idx)
    qtbot.keyClick(v.tree, Qt.Key.Key_Space)
    assert idx.data(Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked


def expand_to(v, qtbot, path):
    v.files.reveal(path)
    qtbot.waitUntil(lambda: v.files.index_of_path(path).isValid(), timeout=5000)


def wait_job(m, qtbot, job_id):
    qtbot.waitUntil(lambda: m.jobs.get(job_id)["state"] == "done", timeout=60000)
    return m.jobs.get(job_id)


def test_restore_a_directory_and_a_file_to_a_new_directory(make_console, backed_up, qtbot,
                                                           tmp_path, sshd):
    m, src = backed_up
    m.add_host("other", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    c, v = open_page(make_console, m, qtbot)
    assert v.images.client.currentText() == "me"
    image = m.images()[0]
    assert v.image["id"] == image["id"]

    expand_to(v, qtbot, src + "/dir")
    tick(v, qtbot, src + "/dir")
    tick(v, qtbot, src + "/small.txt")
    assert v.chosen_paths() == [src + "/dir", src + "/small.txt"]
    assert v.restore_button.isEnabled()

    opened = []
    v.job_opened.connect(opened.append)
    qtbot.mouseClick(v.restore_button, Qt.MouseButton.LeftButton)
    dlg = v.dialog
    assert dlg is not None and dlg.isVisible()
    # it opens on a preview or on what the preview still needs, never on a waiting message
    qtbot.waitUntil(lambda: "Preparing" not in dlg.status.text(), timeout=5000)
    dst = str(tmp_path / "restored")
    dlg.elsewhere.click()
    qtbot.waitUntil(lambda: dlg.host.findText("other") >= 0, timeout=5000)
    dlg.host.setCurrentIndex(dlg.host.findText("other"))
    qtbot.keyClicks(dlg.directory, dst)
    qtbot.waitUntil(lambda: dlg.start_button.isEnabled(), timeout=5000)
    preview = [(dlg.preview_tree.topLevelItem(i).text(0), dlg.preview_tree.topLevelItem(i)
                .text(1)) for i in range(dlg.preview_tree.topLevelItemCount())]
    assert preview[0] == (src + "/dir/", "other:" + dst + src + "/dir")
    assert (src + "/small.txt", "other:" + dst + src + "/small.txt") in preview
    assert "entries will be restored to other:" + dst in dlg.status.text()
    assert not os.path.exists(dst), "the preview wrote something"
    assert dlg.direct.isChecked()  # direct I/O where the target suits it, by default
    assert dlg.streams.currentData() is None  # the host decides
    # the image is on me, the target is other: the dialog says the restore is one stream
    assert "One stream" in dlg.streams_hint.text() and "other" in dlg.streams_hint.text()

    qtbot.mouseClick(dlg.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(opened), timeout=5000)
    job = opened[0]
    assert job["type"] == "restore" and job["params"]["to_host"] == "other"
    assert "direct_io" not in job["params"] and "parallel_streams" not in job["params"]
    # the main window shows the job's details window
    from ui.job_dialog import JobDetailsDialog
    qtbot.waitUntil(lambda: any(d.job_id == job["id"] and d.isVisible()
                                for d in c.window.findChildren(JobDetailsDialog)),
                    timeout=5000)
    done = wait_job(m, qtbot, job["id"])
    assert done["status"] == st.OK, m.jobs.logs(job["id"])
    assert_trees_equal(src + "/dir", dst + src + "/dir", check_owner=False)
    with open(src + "/small.txt", "rb") as a, open(dst + src + "/small.txt", "rb") as b:
        assert a.read() == b.read()
    assert sorted(os.listdir(dst + src)) == ["dir", "small.txt"]
    for d in QApplication.topLevelWidgets():
        if isinstance(d, JobDetailsDialog):
            d.close()


def test_restore_with_a_stripped_prefix_and_a_rename(make_console, backed_up, qtbot,
                                                     tmp_path):
    m, src = backed_up
    c, v = open_page(make_console, m, qtbot)
    expand_to(v, qtbot, src + "/dir")
    tick(v, qtbot, src + "/dir")
    dlg = v.open_restore_dialog()
    dst = str(tmp_path / "new")
    qtbot.keyClicks(dlg.directory, dst)
    qtbot.keyClicks(dlg.strip, src)
    qtbot.keyClicks(dlg.pattern, "*.txt")
    qtbot.keyClicks(dlg.replacement, "*.txt.bak")
    qtbot.waitUntil(lambda: dlg.start_button.isEnabled(), timeout=5000)
    targets = {dlg.preview_tree.topLevelItem(i).text(0): dlg.preview_tree.topLevelItem(i)
               .text(1) for i in range(dlg.preview_tree.topLevelItemCount())}
    assert targets[src + "/dir/top.txt"] == "me:" + dst + "/dir/top.txt.bak"

    # a rename that makes two files one is refused before anything runs
    dlg.replacement.setText("emptydir")     # dir/top.txt becomes dir/emptydir
    qtbot.waitUntil(lambda: "Cannot restore like this" in dlg.status.text(), timeout=5000)
    assert "would both be restored to" in dlg.status.text()
    assert not dlg.start_button.isEnabled()
    assert dlg.preview_tree.topLevelItemCount() == 0
    # and so is a result that climbs out of the target
    dlg.mode.setCurrentIndex(1)
    dlg.pattern.setText("^/dir")
    dlg.replacement.setText("/../escape")
    qtbot.waitUntil(lambda: "contains '..'" in dlg.status.text(), timeout=5000)
    assert not dlg.start_button.isEnabled()

    dlg.mode.setCurrentIndex(0)
    dlg.pattern.setText("*.txt")
    dlg.replacement.setText("*.txt.bak")
    qtbot.waitUntil(lambda: dlg.start_button.isEnabled(), timeout=5000)
    qtbot.mouseClick(dlg.direct, Qt.MouseButton.LeftButton, pos=dlg.direct.rect().center())
    assert not dlg.direct.isChecked()  # every file through the page cache
    assert dlg.streams_hint.text() == ""  # image and target both on me
    dlg.streams.setCurrentIndex(dlg.streams.findData(2))
    opened = []
    v.job_opened.connect(opened.append)
    dlg.start_button.click()
    qtbot.waitUntil(lambda: bool(opened), timeout=5000)
    assert opened[0]["params"]["relocate"] == {
        "strip": src, "rename": {"pattern": "*.txt", "replacement": "*.txt.bak",
                                 "mode": "glob"}}
    assert opened[0]["params"]["direct_io"] == "off"
    assert opened[0]["params"]["parallel_streams"] == 2
    done = wait_job(m, qtbot, opened[0]["id"])
    assert done["status"] == st.OK, m.jobs.logs(done["id"])
    assert any("direct I/O off" in x["message"] for x in m.jobs.logs(done["id"]))
    assert any("parallel streams asked for: 2" == x["message"]
               for x in m.jobs.logs(done["id"]))
    for rel in ("top.txt", "sub/deeper/file.txt"):
        with open(f"{src}/dir/{rel}", "rb") as a, open(f"{dst}/dir/{rel}.bak", "rb") as b:
            assert a.read() == b.read()
    assert not os.path.exists(dst + "/dir/top.txt")
    assert os.path.isdir(dst + "/dir/emptydir")


def test_the_target_directory_is_browsed_and_long_targets_keep_their_end_in_sight(
        make_console, backed_up, qtbot, tmp_path):
    m, src = backed_up
    c, v = open_page(make_console, m, qtbot)
    expand_to(v, qtbot, src + "/dir")
    tick(v, qtbot, src + "/dir")
    dlg = v.open_restore_dialog()
    target = tmp_path / ("a-rather-long-directory-name-" * 3) / "restore-here"
    target.mkdir(parents=True)
    (target / "a-file").write_text("not a directory to choose")
    qtbot.keyClicks(dlg.directory, str(target.parent))
    browser = dlg.browse()
    # the browser opens down to the typed directory, reading each level from the agent
    qtbot.waitUntil(lambda: browser.item_for(str(target.parent)) is not None
                    and browser.tree.currentItem() is browser.item_for(str(target.parent)),
                    timeout=10000)
    item = browser.item_for(str(target.parent))
    item.setExpanded(True)
    qtbot.waitUntil(lambda: browser.item_for(str(target)) is not None, timeout=5000)
    browser.item_for(str(target)).setExpanded(True)
    qtbot.waitUntil(lambda: browser.item_for(str(target / "a-file")) is not None,
                    timeout=5000)
    browser.tree.clearSelection()
    browser.item_for(str(target / "a-file")).setSelected(True)
    assert browser.paths() == []          # a file is no target
    browser.tree.clearSelection()
    browser.item_for(str(target)).setSelected(True)
    assert browser.add_button.text() == "&Choose" and browser.add_button.isEnabled()
    qtbot.mouseClick(browser.add_button, Qt.MouseButton.LeftButton)
    assert dlg.directory.text() == str(target)
    qtbot.waitUntil(lambda: dlg.start_button.isEnabled(), timeout=5000)
    assert dlg.preview_tree.textElideMode() == Qt.TextElideMode.ElideLeft
