"""The restore page: a client's images by date, the chosen image's files one directory at a
time with restore check boxes, search in an image and in every image of the client."""

import os

import pytest
from PySide6.QtCore import QDate, Qt

from ui.file_tree import CHECKED, PARTIAL, UNCHECKED, ImageFilesModel

pytestmark = pytest.mark.gui


def names(model, parent):
    return [model.index(r, 0, parent).data() for r in range(model.rowCount(parent))]


def state(model, path):
    return model.node(model.index_of_path(path)).check


@pytest.fixture
def browse_calls(master, monkeypatch):
    calls = []
    real = master.list_entries

    def spy(image_id, path="/"):
        calls.append(path)
        return real(image_id, path)

    monkeypatch.setattr(master, "list_entries", spy)
    return calls


@pytest.fixture
def page(console, qtbot):
    console.window.select_view("restore")
    v = console.window.views["restore"]
    qtbot.waitUntil(lambda: v.loaded and v.files.image_id is not None, timeout=5000)
    return v


def alpha_listed(v):
    alpha = v.files.index_of_path("/data/projects/alpha")
    return alpha.isValid() and v.files.rowCount(alpha) == 5


def test_a_client_and_its_images_of_the_last_backups(page, master):
    v = page
    assert v.images.client.currentText() == master.test_host
    ids = [i["id"] for i in master.images()]
    assert v.model.rowCount() == 2
    # the test images are two months old: the range ends at the newest one, not today
    assert v.images.until.date() == QDate.currentDate()
    assert v.images.since.date() <= QDate(2026, 9, 21)
    assert v.image["id"] == ids[0]         # newest first, chosen at once


def test_the_date_range_filters_images(page, master, qtbot):
    v = page
    v.images.since.setDate(QDate(2026, 9, 22))
    qtbot.waitUntil(lambda: v.model.rowCount() == 1, timeout=5000)
    assert v.model.row_dict(0)["created"].startswith("2026-09-22")
    v.images.until.setDate(QDate(2026, 9, 22))
    v.images.since.setDate(QDate(2026, 9, 1))
    v.images.until.setDate(QDate(2026, 9, 10))
    qtbot.waitUntil(lambda: v.model.rowCount() == 0, timeout=5000)
    assert v.placeholder.isVisible() and "All dates" in v.placeholder.text()
    v.images.all_dates.setChecked(True)
    qtbot.waitUntil(lambda: v.model.rowCount() == 2, timeout=5000)
    assert not v.images.since.isEnabled()


def test_selecting_an_image_lists_its_files_lazily(page, master, qtbot, browse_calls):
    v = page
    files = v.files
    qtbot.waitUntil(lambda: alpha_listed(v), timeout=5000)
    alpha = files.index_of_path("/data/projects/alpha")
    assert names(files, alpha) == ["empty", "raw", "latest", "README.md", "results.csv"]
    assert v.tree.isExpanded(alpha)

    readme = files.index_of_path("/data/projects/alpha/README.md")
    assert readme.siblingAtColumn(1).data() == "1.2 KiB"
    assert readme.siblingAtColumn(3).data() == "-rw-r--r--"
    assert readme.siblingAtColumn(4).data() == "1000:1000"
    latest = files.index_of_path("/data/projects/alpha/latest")
    assert latest.siblingAtColumn(5).data() == "raw/run-002.dat"
    assert not files.hasChildren(readme)

    raw = files.index_of_path("/data/projects/alpha/raw")
    assert files.hasChildren(raw) and files.rowCount(raw) == 0
    v.tree.expand(raw)
    qtbot.waitUntil(lambda: files.rowCount(raw) == 2, timeout=5000)
    assert names(files, raw) == ["run-001.dat", "run-002.dat"]
    assert browse_calls[-1] == "/data/projects/alpha/raw"

    empty = files.index_of_path("/data/projects/alpha/empty")
    v.tree.expand(empty)
    qtbot.waitUntil(lambda: not files.hasChildren(empty), timeout=5000)


def test_switching_images_drops_the_old_tree_and_checks(page, master, qtbot):
    v = page
    new, old = [i["id"] for i in master.images()]
    qtbot.waitUntil(lambda: alpha_listed(v), timeout=5000)
    v.files.set_checked(v.files.index_of_path("/data"), CHECKED)
    assert v.chosen_paths() == ["/data"]
    v.select_key(old)
    assert v.files.image_id == old
    assert v.chosen_paths() == []
    assert not v.restore_button.isEnabled()
    qtbot.waitUntil(lambda: alpha_listed(v), timeout=5000)


def test_a_missing_index_is_reported_not_raised(page, master, qtbot):
    v = page
    old = master.images()[1]["id"]
    os.unlink(master.home.index_path(old))
    v.select_key(old)
    qtbot.waitUntil(lambda: v.file_pane.error.isVisible(), timeout=5000)
    assert "Could not list /" in v.file_pane.error.text()
    assert v.files.rowCount() == 0


def test_check_boxes_choose_subtrees_and_show_partial_parents(page, qtbot):
    v = page
    f = v.files
    qtbot.waitUntil(lambda: alpha_listed(v), timeout=5000)
    alpha = f.index_of_path("/data/projects/alpha")
    raw = f.index_of_path("/data/projects/alpha/raw")
    assert f.rowCount(raw) == 0          # not listed yet

    # a user checks alpha with the keyboard: the whole subtree, without listing it
    v.tree.setCurrentIndex(alpha)
    qtbot.keyClick(v.tree, Qt.Key.Key_Space)
    assert alpha.data(Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked
    assert f.rowCount(raw) == 0
    # alpha is the only child of projects, which is the only child of data
    assert state(f, "/data/projects") == CHECKED
    assert state(f, "/data") == CHECKED
    assert v.chosen_paths() == ["/data"]

    # listing raw later: its children come in checked
    v.tree.expand(raw)
    qtbot.waitUntil(lambda: f.rowCount(raw) == 2, timeout=5000)
    assert state(f, "/data/projects/alpha/raw/run-001.dat") == CHECKED

    # unchecking one file makes every parent partial and lists the rest
    one = f.index_of_path("/data/projects/alpha/raw/run-001.dat")
    v.tree.setCurrentIndex(one)
    qtbot.keyClick(v.tree, Qt.Key.Key_Space)
    assert state(f, "/data/projects/alpha/raw") == PARTIAL
    assert state(f, "/data") == PARTIAL
    assert f.index_of_path("/data").data(Qt.ItemDataRole.CheckStateRole) == \
        Qt.CheckState.PartiallyChecked
    assert v.chosen_paths() == [
        "/data/projects/alpha/empty", "/data/projects/alpha/raw/run-002.dat",
        "/data/projects/alpha/latest", "/data/projects/alpha/README.md",
        "/data/projects/alpha/results.csv"]

    # checking it again makes the parents whole again
    qtbot.keyClick(v.tree, Qt.Key.Key_Space)
    assert state(f, "/data") == CHECKED and v.chosen_paths() == ["/data"]
    assert "1 item chosen: /data" in v.selection_label.text()
    v.clear_button.click()
    assert state(f, "/data") == UNCHECKED and state(f, "/data/projects/alpha/raw") == UNCHECKED
    assert v.chosen_paths() == [] and not v.restore_button.isEnabled()


def test_big_directories_arrive_in_batches_and_keep_their_checks(master, qtbot):
    from catalog import add_image
    from ui.bridge import Bridge

    many = [("/big", "d", 0)] + [(f"/big/f{i:05d}", "f", i) for i in range(2500)]
    add_image(master, "big_1", client=master.test_host, policy="p1", files=many)
    bridge = Bridge(master)
    try:
        model = ImageFilesModel(bridge)
        model.set_image("big_1")
        qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=5000)
        big = model.index(0, 0)
        model.set_checked(big, CHECKED)
        assert model.canFetchMore(big)
        model.fetchMore(big)
        qtbot.waitUntil(lambda: model.rowCount(big) == ImageFilesModel.BATCH, timeout=5000)
        # unchecking one shown file: the 1,500 not shown yet stay chosen
        model.set_checked(model.index(0, 0, big), UNCHECKED)
        chosen = model.checked_paths()
        assert len(chosen) == 2499 and "/big/f00000" not in chosen and "/big/f02499" in chosen
        model.fetchMore(big)
        model.fetchMore(big)
        assert model.rowCount(big) == 2500 and not model.canFetchMore(big)
        assert len(model.checked_paths()) == 2499
        assert model.node(big).check == PARTIAL
    finally:
        bridge.shutdown()


@pytest.mark.qt_log_level_fail("WARNING")
def test_the_files_model_passes_the_model_tester(qtmodeltester, qtbot, master):
    from ui.bridge import Bridge
    bridge = Bridge(master)
    try:
        model = ImageFilesModel(bridge)
        qtmodeltester.check(model, force_py=True)
        model.set_image(master.images()[0]["id"])
        qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=5000)
        data = model.index(0, 0)
        model.fetchMore(data)
        qtbot.waitUntil(lambda: model.rowCount(data) == 1, timeout=5000)
        model.set_checked(data, CHECKED)
        assert model.parent(model.index(0, 0, data)) == data
        model.set_image(None)
        assert model.rowCount() == 0
    finally:
        bridge.shutdown()


def test_search_lists_matches_that_can_be_checked(page, qtbot):
    v = page
    v.tabs.setCurrentIndex(1)
    qtbot.keyClicks(v.search.pattern, "*.DAT")
    qtbot.keyClick(v.search.pattern, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not v.search.busy, timeout=5000)
    assert v.search.status.text().startswith("2 matches found")
    paths = sorted(r["path"] for r in v.search.results.rows)
    assert paths == ["/data/projects/alpha/raw/run-001.dat",
                     "/data/projects/alpha/raw/run-002.dat"]
    v.search.check_all.click()
    assert sorted(v.chosen_paths()) == paths
    assert v.restore_button.isEnabled()

    v.search.case.setChecked(True)
    v.search.find_button.click()
    qtbot.waitUntil(lambda: not v.search.busy, timeout=5000)
    assert v.search.status.text().startswith("0 matches")

    v.search.pattern.setText("/data/*/alpha/r*")
    v.search.case.setChecked(False)
    v.search.find_button.click()
    qtbot.waitUntil(lambda: not v.search.busy, timeout=5000)
    assert {r["path"] for r in v.search.results.rows} == {
        "/data/projects/alpha/raw", "/data/projects/alpha/results.csv",
        "/data/projects/alpha/README.md",      # case-insensitive by default
        "/data/projects/alpha/raw/run-001.dat", "/data/projects/alpha/raw/run-002.dat"}


def test_search_stops_at_the_limit_and_counts_the_rest(master):
    from catalog import add_image
    many = [("/big", "d", 0)] + [(f"/big/f{i:05d}.log", "f", i) for i in range(3000)]
    add_image(master, "big_2", client=master.test_host, policy="p1", files=many)
    r = master.search("big_2", "*.log", limit=1000)
    assert r["count"] == 3000 and len(r["matches"]) == 1000 and r["truncated"]
    assert r["matches"][0]["path"] == "/big/f00000.log"
    import threading
    stop = threading.Event()
    stop.set()
    assert master.search("big_2", "*.log", cancel=stop)["cancelled"]


def test_find_in_every_image_opens_the_chosen_version(page, master, qtbot):
    v = page
    old = master.images()[1]
    v.tabs.setCurrentIndex(2)
    v.versions.pattern.setText("/data/projects/alpha/results.csv")
    v.versions.find_button.click()
    qtbot.waitUntil(lambda: not v.versions.busy, timeout=5000)
    assert v.versions.status.text().startswith("2 versions found")
    rows = v.versions.results.rows
    assert [r["image"] for r in rows] == [i["id"] for i in master.images()]
    assert rows[0]["size"] == 5_400_000

    # choosing the older version selects its image and checks the file there
    r = next(i for i in range(2) if v.versions.proxy.index(i, 5).data() == old["id"])
    v.versions.table.clicked.emit(v.versions.proxy.index(r, 0))
    qtbot.waitUntil(lambda: v.image and v.image["id"] == old["id"]
                    and v.chosen_paths() == ["/data/projects/alpha/results.csv"],
                    timeout=5000)
    assert v.tabs.currentIndex() == 0
    cur = v.tree.currentIndex()
    assert cur.data(Qt.ItemDataRole.ToolTipRole) == "/data/projects/alpha/results.csv"


def test_find_versions_outside_the_dates_widens_them(page, master, qtbot):
    v = page
    old = master.images()[1]["id"]
    v.images.since.setDate(QDate(2026, 9, 22))
    qtbot.waitUntil(lambda: v.model.rowCount() == 1, timeout=5000)
    v.versions.pattern.setText("README")
    v.versions.find_button.click()
    qtbot.waitUntil(lambda: not v.versions.busy, timeout=5000)
    r = next(i for i in range(2) if v.versions.proxy.index(i, 5).data() == old)
    v.versions.table.clicked.emit(v.versions.proxy.index(r, 0))
    qtbot.waitUntil(lambda: v.image and v.image["id"] == old
                    and v.chosen_paths() == ["/data/projects/alpha/README.md"], timeout=5000)
    assert v.images.all_dates.isChecked()
