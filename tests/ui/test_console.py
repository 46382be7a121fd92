"""The main window against a real catalog: navigation, the lists, the activity monitor's
live refresh, the job details dialog, the status bar and the remembered layout."""

import time

import pytest
from PySide6.QtCore import QSettings, Qt

from app import timeutil
from ui.job_dialog import JobDetailsDialog
from ui.main_window import VIEW_NAMES

pytestmark = pytest.mark.gui


def show(console, qtbot, name):
    w = console.window
    w.select_view(name)
    view = w.views[name]
    qtbot.waitUntil(lambda: view.loaded, timeout=5000)
    return view


def cell(view, key, column):
    """Text of the cell in `column` (a column key) of the row whose key is `key`."""
    m = view.model
    row = m.row_of(key)
    assert row is not None, f"{key!r} is not listed in {view.name}"
    col = [c.key for c in m.columns].index(column)
    return m.index(row, col).data()


def nav_tree(item):
    return [(item.child(i).text(0), nav_tree(item.child(i))) for i in range(item.childCount())]


def test_navigation_follows_the_storage_model(console):
    assert nav_tree(console.window.nav.invisibleRootItem()) == [
        ("Master", [
            ("Dashboard", []),
            ("Getting started", []),
            ("Hosts", []),
            ("Storage", [("Storage servers", []), ("Disk pools", []), ("Storage units", []),
                         ("Lifecycles", []), ("Storage unit groups", []),
                         ("Storage Scale", [])]),
            ("Policies", []),
            ("Activity monitor", []),
            ("Backup & restore", []),
            ("Reports", []),
            ("Audit log", []),
        ]),
    ]
    for name in ("hosts", "storage-servers", "disk-pools", "storage-units", "policies",
                 "activity", "restore"):
        assert name in VIEW_NAMES


def test_clicking_a_node_shows_its_view(console, qtbot):
    w = console.window
    item = w.nav_item("disk-pools")
    rect = w.nav.visualItemRect(item)
    qtbot.mouseClick(w.nav.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert w.current_view is w.views["disk-pools"]
    qtbot.waitUntil(lambda: w.views["disk-pools"].loaded, timeout=5000)


def test_hosts(console, master, qtbot):
    v = show(console, qtbot, "hosts")
    host = master.test_host
    assert v.model.rowCount() == len(master.config.hosts()) == 1
    assert cell(v, host, "name") == host
    assert cell(v, host, "kind") == "local"
    assert cell(v, host, "address") == "(this machine)"


def test_storage_servers(console, master, qtbot):
    v = show(console, qtbot, "storage-servers")
    assert v.model.rowCount() == 1
    assert cell(v, "ss1", "type") == "advanced-disk"
    assert cell(v, "ss1", "host") == master.test_host


def test_disk_pools(console, master, qtbot, tmp_path):
    v = show(console, qtbot, "disk-pools")
    assert v.model.rowCount() == 1
    assert cell(v, "dp1", "server") == "ss1"
    assert cell(v, "dp1", "volumes") == str(tmp_path / "vol1")
    assert cell(v, "dp1", "high_water") == "98%"
    assert cell(v, "dp1", "low_water") == "80%"
    assert cell(v, "dp1", "compact_below") == "—"  # an AdvancedDisk pool compacts nothing


def test_storage_units(console, master, qtbot):
    v = show(console, qtbot, "storage-units")
    assert v.model.rowCount() == 1
    assert cell(v, "stu1", "pool") == "dp1"
    assert cell(v, "stu1", "host") == master.test_host
    assert cell(v, "stu1", "max_concurrent_jobs") == "2"
    assert cell(v, "stu1", "active_jobs") == "1"


def test_policies(console, master, qtbot):
    v = show(console, qtbot, "policies")
    assert v.model.rowCount() == 1
    assert cell(v, "p1", "storage_unit") == "stu1"
    assert cell(v, "p1", "clients") == master.test_host
    assert cell(v, "p1", "selections") == "/data/projects/alpha"
    assert cell(v, "p1", "schedules") == "daily (full, 2w)"


def test_activity_monitor_lists_jobs(console, master, qtbot):
    v = show(console, qtbot, "activity")
    jobs = master.test_jobs
    assert v.model.rowCount() == len(master.jobs.list()) == 4
    assert cell(v, jobs["done"], "state") == "done"
    assert cell(v, jobs["done"], "status") == "0"
    assert cell(v, jobs["done"], "bytes") == "1.4 GiB"
    assert cell(v, jobs["failed"], "status") == "42"
    assert cell(v, jobs["active"], "state") == "active"
    assert cell(v, jobs["active"], "percent") == "40.7%"
    assert cell(v, jobs["queued"], "type") == "restore"
    assert "at its limit" in cell(v, jobs["queued"], "wait_reason")
    # newest first
    assert v.proxy.index(0, 0).data() == str(max(jobs.values()))


@pytest.mark.parametrize("name, command", [
    ("storage-servers", "cairn storage-server create"),
    ("disk-pools", "cairn disk-pool create"),
    ("storage-units", "cairn storage-unit create"),
    ("policies", "cairn policy create"),
    ("activity", "cairn backup"),
    ("restore", "cairn backup"),
])
def test_empty_lists_say_how_to_create_the_first_object(make_console, empty_master, qtbot,
                                                        name, command):
    c = make_console(empty_master)
    v = show(c, qtbot, name)
    assert v.model.rowCount() == 0
    assert v.placeholder.isVisible()
    assert command in v.placeholder.text()


def test_placeholder_hides_once_there_are_rows(make_console, empty_master, qtbot):
    c = make_console(empty_master)
    v = show(c, qtbot, "storage-servers")
    assert v.placeholder.isVisible()
    empty_master.create_storage_server("ss9", type="advanced-disk",
                                       host=empty_master.config.local_host()["name"])
    c.window.refresh_current()
    qtbot.waitUntil(lambda: v.model.rowCount() == 1, timeout=5000)
    assert not v.placeholder.isVisible()


def test_activity_monitor_follows_jobs_without_losing_the_selection(console, master, qtbot):
    v = show(console, qtbot, "activity")
    jobs = master.test_jobs
    resets, removed = [], []
    v.model.modelReset.connect(lambda: resets.append(1))
    v.model.rowsRemoved.connect(lambda *a: removed.append(a))

    assert v.select_key(jobs["queued"])
    assert [r["id"] for r in v.selected_rows()] == [jobs["queued"]]

    new = master.jobs.create("backup", client=master.test_host, policy="p1",
                             schedule="daily", storage_unit="stu1")
    qtbot.waitUntil(lambda: v.model.row_of(new) is not None, timeout=4000)
    assert cell(v, new, "state") == "queued"
    assert [r["id"] for r in v.selected_rows()] == [jobs["queued"]]

    master.jobs.claim(jobs["queued"], "test")
    qtbot.waitUntil(lambda: cell(v, jobs["queued"], "state") == "active", timeout=4000)
    assert [r["id"] for r in v.selected_rows()] == [jobs["queued"]]
    master.jobs.finish(jobs["queued"], 0)
    qtbot.waitUntil(lambda: cell(v, jobs["queued"], "state") == "done", timeout=4000)
    assert [r["id"] for r in v.selected_rows()] == [jobs["queued"]]
    assert not resets and not removed


def test_double_click_opens_job_details_with_its_log(console, master, qtbot):
    v = show(console, qtbot, "activity")
    failed = master.test_jobs["failed"]
    idx = v.proxy.mapFromSource(v.model.index(v.model.row_of(failed), 1))
    rect = v.table.visualRect(idx)
    qtbot.mouseClick(v.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.mouseDClick(v.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    dialogs = console.window.findChildren(JobDetailsDialog)
    assert len(dialogs) == 1
    dlg = dialogs[0]
    qtbot.waitUntil(lambda: "not writable" in dlg.log_text, timeout=4000)
    assert dlg.value("id") == str(failed)
    assert dlg.value("status").startswith("42 — ")
    assert dlg.value("storage_unit") == "stu1"
    assert "backup job queued" in dlg.log_text
    assert dlg.log_view.isReadOnly()


def test_job_details_follow_a_running_job(console, master, qtbot):
    active = master.test_jobs["active"]
    dlg = console.window.open_job(master.jobs.get(active))
    qtbot.waitUntil(lambda: dlg.value("state") == "active", timeout=4000)
    master.jobs.log(active, "wrote 3 of 5 files")
    qtbot.waitUntil(lambda: "wrote 3 of 5 files" in dlg.log_text, timeout=4000)
    master.jobs.finish(active, 0)
    qtbot.waitUntil(lambda: dlg.value("state") == "done", timeout=4000)
    assert dlg.log_text.count("wrote 3 of 5 files") == 1


def test_status_bar(console, master, qtbot):
    w = console.window
    qtbot.waitUntil(lambda: w.summary is not None, timeout=4000)
    assert master.home.catalog in w.master_label.text()
    # the count at once, and which answer once the reachability probe is back (which may
    # come first)
    assert w.hosts_label.text() in ("Hosts: 1", "Hosts: 1 of 1 reachable")
    qtbot.waitUntil(lambda: w.hosts_label.text() == "Hosts: 1 of 1 reachable", timeout=10000)
    assert w.jobs_label.text() == "Jobs: 1 running, 1 queued"
    master.jobs.create("backup", client=master.test_host, policy="p1", schedule="daily",
                       storage_unit="stu1")
    qtbot.waitUntil(lambda: w.jobs_label.text() == "Jobs: 1 running, 2 queued", timeout=4000)


def test_status_bar_warns_when_no_catalog_backup_protects_the_images(console, master, qtbot):
    w = console.window
    assert master.catalog_backup_state()["images"] > 0
    qtbot.waitUntil(lambda: w.catalog_backup_label.text() == "Catalog backup: none",
                    timeout=4000)
    assert w.catalog_backup_label.isVisible()
    assert "c0392b" in w.catalog_backup_label.styleSheet()
    assert "cairn catalog backup" in w.catalog_backup_label.toolTip()
    # one that ended well two hours ago: shown, no longer a warning
    job = master.jobs.create("catalog-backup", params={"storage_unit": "stu1"})
    master.jobs.finish(job, 0)
    with master.db.tx() as c:
        c.execute("UPDATE jobs SET ended=? WHERE id=?",
                  (timeutil.iso(time.time() - 2 * 3600 - 30), job))
    qtbot.waitUntil(lambda: w.catalog_backup_label.text() == "Catalog backup: 2 h ago",
                    timeout=4000)
    assert w.catalog_backup_label.styleSheet() == ""
    # older than a day: a warning again
    with master.db.tx() as c:
        c.execute("UPDATE jobs SET ended=? WHERE id=?",
                  (timeutil.iso(time.time() - 3 * 86400), job))
    qtbot.waitUntil(lambda: w.catalog_backup_label.text() == "Catalog backup: 3 days ago",
                    timeout=4000)
    assert "c0392b" in w.catalog_backup_label.styleSheet()


def test_status_bar_names_a_pool_key_no_catalog_backup_holds():
    from ui.main_window import catalog_backup_text
    state = {"last": None, "age_s": None, "images": 0, "overdue": False,
             "keys_not_escrowed": ["dd"]}
    assert catalog_backup_text(state) == ("Catalog backup: none · key of dd in none", True)
    state.update(last="2026-11-26T10:00:00Z", age_s=7200, images=3)
    assert catalog_backup_text(state) == ("Catalog backup: 2 h ago · key of dd in none", True)
    state["keys_not_escrowed"] = []
    assert catalog_backup_text(state) == ("Catalog backup: 2 h ago", False)


def test_no_catalog_backup_word_on_a_new_master(make_console, empty_master, qtbot):
    c = make_console(empty_master)
    qtbot.waitUntil(lambda: c.window.summary is not None, timeout=4000)
    assert not c.window.catalog_backup_label.isVisible()


def test_overview_counts_and_next_step(make_console, empty_master, qtbot):
    c = make_console(empty_master)
    v = show(c, qtbot, "overview")
    assert v._counts["hosts"].text() == "1"
    assert v._counts["storage_servers"].text() == "0"
    assert "Next step" in v._hints["storage_servers"].text()
    assert "cairn storage-server create" in v._hints["storage_servers"].text()


def test_layout_is_remembered_in_the_test_settings(make_console, master, qtbot, settings_dir):
    c = make_console(master)
    v = show(c, qtbot, "policies")
    c.window.resize(1000, 700)
    v.table.horizontalHeader().resizeSection(1, 222)
    c.window.splitter.setSizes([250, 750])
    c.window.close()
    files = [p for p in settings_dir.rglob("*") if p.is_file()]
    assert files, "the layout was not written to the test settings directory"
    assert QSettings("Cairn", "console").value("window/geometry") is not None

    from app.master import Master
    m2 = Master(master.home.root)
    c2 = make_console(m2)
    v2 = c2.window.views["policies"]
    assert v2.table.horizontalHeader().sectionSize(1) == 222
    assert c2.window.splitter.sizes()[0] == 250


def test_columns_saved_while_a_list_was_empty_still_fit_its_rows_later(
        make_console, empty_master, qtbot, tmp_path):
    """A layout saved while the list was empty holds title-wide columns; the next start fits
    them to the rows all the same, as long as the admin never resized one by hand."""
    c = make_console(empty_master)
    show(c, qtbot, "policies")
    c.window.close()
    m = empty_master
    vol = tmp_path / "vol"
    vol.mkdir()
    m.config.add_storage_server("ss", type="advanced-disk", host=m.config.hosts()[0]["name"])
    m.create_disk_pool("dp", server="ss", volumes=[str(vol)])
    m.config.add_storage_unit("stu", pool="dp")
    long_name = "home-directories-of-the-physics-department"
    m.config.add_policy(long_name, storage_unit="stu")
    c2 = make_console(m)
    v = show(c2, qtbot, "policies")
    qtbot.waitUntil(lambda: v.model.rowCount() == 1, timeout=5000)
    hh = v.table.horizontalHeader()
    fm = v.table.fontMetrics()
    qtbot.waitUntil(lambda: hh.sectionSize(0) >= fm.horizontalAdvance(long_name), timeout=5000)
    # a width chosen by hand is the admin's: kept by the next start, not fitted again
    hh.resizeSection(0, 90)
    assert v.widths.by_hand
    c2.window.close()
    c3 = make_console(m)
    v3 = show(c3, qtbot, "policies")
    qtbot.waitUntil(lambda: v3.model.rowCount() == 1, timeout=5000)
    qtbot.wait(200)
    assert v3.table.horizontalHeader().sectionSize(0) == 90


def test_opening_a_job_twice_brings_the_same_window_forward(console, master):
    job = master.jobs.get(master.test_jobs["done"])
    assert console.window.open_job(job) is console.window.open_job(job)
    assert len(console.window.findChildren(JobDetailsDialog)) == 1


def test_the_catalog_backup_dialog_sets_the_passphrase_once_and_queues_the_job(
        console, master, qtbot):
    w = console.window
    dlg = w.open_catalog_backup()
    qtbot.waitUntil(lambda: dlg.ok.isEnabled(), timeout=5000)
    assert dlg.unit.currentText() == "stu1"
    assert dlg.form.isRowVisible(dlg.again)  # the first one sets the passphrase: twice
    dlg.passphrase.setText("short")
    dlg.start()
    assert dlg.error.isVisible() and "at least 8" in dlg.error.text()
    dlg.passphrase.setText("a good passphrase")
    dlg.again.setText("a good passphrasf")
    dlg.start()
    assert "differ" in dlg.error.text()
    dlg.again.setText("a good passphrase")
    queued = []
    dlg.queued.connect(queued.append)
    dlg.start()
    qtbot.waitUntil(lambda: bool(queued), timeout=5000)
    job = master.job(queued[0])
    assert job["type"] == "catalog-backup" and job["params"]["storage_unit"] == "stu1"
    assert w.current_view is w.views["activity"]
    assert master.catalog_backup_state()["has_passphrase"]
    # the next time: asked once, and it must be the same passphrase
    dlg = w.open_catalog_backup()
    qtbot.waitUntil(lambda: dlg.ok.isEnabled(), timeout=5000)
    assert not dlg.form.isRowVisible(dlg.again)
    dlg.passphrase.setText("another passphrase")
    dlg.start()
    qtbot.waitUntil(lambda: dlg.error.isVisible(), timeout=5000)
    assert "passphrase does not open" in dlg.error.text()
    assert dlg.isVisible() and dlg.ok.isEnabled()


def test_an_empty_list_says_what_to_click_before_the_shell_command(make_console, empty_master,
                                                                    qtbot):
    c = make_console(empty_master)
    v = show(c, qtbot, "storage-servers")
    text = v.placeholder.text()
    assert "New storage server…" in text and "cairn storage-server create" in text
    assert text.index("New storage server…") < text.index("cairn storage-server create")
    o = show(c, qtbot, "overview")
    hint = o._hints["storage_servers"].text()
    assert hint.index("New storage server…") < hint.index("cairn storage-server create")


def test_the_console_fits_a_1024_by_700_screen(make_console, master, qtbot):
    from PySide6.QtWidgets import QLabel
    c = make_console(master)
    c.window.resize(1024, 700)
    qtbot.wait(50)
    assert c.window.minimumSizeHint().width() <= 1024
    assert c.window.width() == 1024
    v = show(c, qtbot, "activity")
    qtbot.wait(50)
    for a in v.toolbar.actions():
        w = v.toolbar.widgetForAction(a)
        assert w is not None and w.isVisible(), f"{a.text()} is hidden behind the toolbar's »"
    show(c, qtbot, "getting-started")
    qtbot.wait(50)
    page = c.window.views["getting-started"]
    for card in page.cards:
        for label in card.findChildren(QLabel):
            if label.wordWrap() and label.text():
                assert label.height() >= label.heightForWidth(label.width()), \
                    f"{label.text()[:30]}… is cut off"
