"""New, properties, delete and back up now on the console's lists, the getting-started page
and the status bar's host reachability, against a real catalog."""

import pytest
from PySide6.QtWidgets import QMessageBox

pytestmark = pytest.mark.gui


def show(console, qtbot, name):
    w = console.window
    w.select_view(name)
    view = w.views[name]
    qtbot.waitUntil(lambda: view.loaded, timeout=5000)
    return view


def select(view, key, qtbot):
    qtbot.waitUntil(lambda: view.model.row_of(key) is not None, timeout=5000)
    assert view.select_key(key)


def test_list_pages_have_their_actions(console, qtbot):
    for name, extra in (("hosts", []), ("storage-servers", []), ("disk-pools", []),
                        ("storage-units", []), ("policies", ["Back up now…"])):
        view = show(console, qtbot, name)
        texts = [a.text() for a in view.object_actions.toolbar.actions() if a.text()]
        assert texts[0].startswith("New ")
        for t in ["Properties…", "Delete…", "Refresh"] + extra:
            assert t in texts, (name, texts)
        # nothing selected: nothing to edit or delete
        view.table.clearSelection()
        assert not view.object_actions.properties.isEnabled()
        assert not view.object_actions.delete.isEnabled()
    assert getattr(show(console, qtbot, "activity"), "object_actions", None) is None


def test_properties_change_a_disk_pool(console, master, qtbot):
    view = show(console, qtbot, "disk-pools")
    select(view, "dp1", qtbot)
    dlg = view.object_actions._properties()
    assert not dlg.save_button.isEnabled()
    dlg.editors["high_water"].setValue(90)
    dlg.editors["low_water"].setValue(95)  # above the high-water mark: the catalog refuses
    dlg.save_button.click()
    qtbot.waitUntil(lambda: dlg.error.isVisible(), timeout=5000)
    assert "must be below the high-water mark" in dlg.error.text()
    assert master.config.disk_pool("dp1")["high_water"] == 98
    dlg.editors["low_water"].setValue(70)
    dlg.editors["max_io_streams"].setValue(3)
    dlg.save_button.click()
    qtbot.waitUntil(lambda: dlg.saved is not None, timeout=5000)
    p = master.config.disk_pool("dp1")
    assert (p["high_water"], p["low_water"], p["max_io_streams"]) == (90, 70, 3)
    qtbot.waitUntil(lambda: view.model.row_dict(view.model.row_of("dp1"))["high_water"] == 90,
                    timeout=5000)


def test_delete_names_the_dependents_and_refuses(console, master, qtbot):
    view = show(console, qtbot, "storage-units")
    select(view, "stu1", qtbot)
    view.object_actions.delete.trigger()
    qtbot.waitUntil(lambda: view.object_actions.last_box is not None
                    and view.object_actions.last_box.isVisible(), timeout=5000)
    box = view.object_actions.last_box
    assert "cannot be deleted" in box.text() and "p1" in box.text()
    assert box.button(QMessageBox.StandardButton.Yes) is None  # no way to delete
    box.button(QMessageBox.StandardButton.Ok).click()
    assert master.config.storage_unit("stu1")


def test_delete_after_confirmation(console, master, qtbot):
    master.config.add_storage_unit("spare", pool="dp1")
    view = show(console, qtbot, "storage-units")
    view.refresh()
    select(view, "spare", qtbot)
    view.object_actions.delete.trigger()
    qtbot.waitUntil(lambda: view.object_actions.last_box is not None
                    and view.object_actions.last_box.isVisible(), timeout=5000)
    box = view.object_actions.last_box
    assert "Delete <b>storage unit spare</b>?" in box.text()
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert [u["name"] for u in master.config.storage_units()] == ["spare", "stu1"]
    view.object_actions.delete.trigger()
    qtbot.waitUntil(lambda: view.object_actions.last_box is not box
                    and view.object_actions.last_box.isVisible(), timeout=5000)
    view.object_actions.last_box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: view.model.row_of("spare") is None, timeout=5000)
    assert [u["name"] for u in master.config.storage_units()] == ["stu1"]


def test_back_up_now_queues_and_shows_the_activity_monitor(console, master, qtbot):
    before = {j["id"] for j in master.jobs.list()}
    view = show(console, qtbot, "policies")
    select(view, "p1", qtbot)
    view.object_actions.backup.trigger()
    dlg = view.object_actions.last_dialog
    assert dlg.schedule() == "daily" and dlg.clients() is None
    dlg.ok.click()
    qtbot.waitUntil(lambda: console.window.current_view.name == "activity", timeout=5000)
    new = [j for j in master.jobs.list() if j["id"] not in before]
    assert len(new) == 1 and new[0]["policy"] == "p1" and new[0]["state"] == "queued"
    assert str(new[0]["id"]) in console.window.statusBar().currentMessage()


def test_back_up_now_reading_every_file_is_in_the_context_menu(console, master, qtbot):
    view = show(console, qtbot, "policies")
    select(view, "p1", qtbot)
    acts = view.object_actions
    toolbar = [a.text() for a in acts.toolbar.actions()]
    assert "Back up now, reading every file…" not in toolbar
    acts._menu(view.table.visualRect(view.table.currentIndex()).center())
    texts = [a.text() for a in acts.last_menu.actions() if a.text()]
    i = texts.index("Back up now…")
    assert texts[i + 1] == "Back up now, reading every file…"
    acts.last_menu.close()
    before = {j["id"] for j in master.jobs.list()}
    acts.backup_reading_all.trigger()
    assert acts.last_dialog.read_all.isChecked()
    acts.last_dialog.ok.click()
    qtbot.waitUntil(lambda: console.window.current_view.name == "activity", timeout=5000)
    new = [j for j in master.jobs.list() if j["id"] not in before]
    assert len(new) == 1 and new[0]["policy"] == "p1"
    assert master.jobs.get(new[0]["id"])["params"].get("no_files_cache") is True


def test_getting_started_shows_what_is_done(make_console, empty_master, qtbot):
    c = make_console(empty_master)
    view = show(c, qtbot, "getting-started")
    states = [card.state.text() for card in view.cards]
    assert states[0] == "<b>Next step</b>"
    assert states[1:] == ["Not done yet"] * 3
    empty_master.create_storage_server("ss1", type="advanced-disk",
                                       host=empty_master.config.local_host()["name"])
    view.refresh()
    qtbot.waitUntil(lambda: "Done" in view.cards[0].state.text(), timeout=5000)
    assert "1 storage server" in view.cards[0].state.text()
    assert view.cards[1].state.text() == "<b>Next step</b>"
    assert view.cards[1].button.isDefault()


def test_status_bar_says_which_hosts_answer(console, master, qtbot):
    w = console.window
    master.config.add_host("gone", address="127.0.0.1", port=1, user="nobody")
    w.reachability = None
    w.refresh_status()
    qtbot.waitUntil(lambda: w.reachability is not None, timeout=30000)
    assert w.hosts_label.text() == "Hosts: 1 of 2 reachable"
    tip = w.hosts_label.toolTip()
    assert f"{master.test_host}: answers" in tip
    assert "gone: " in tip


def test_getting_started_step_runs_its_wizard_and_the_lists_follow(make_console, empty_master,
                                                                    qtbot):
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QWizard
    c = make_console(empty_master)
    w = c.window
    view = show(c, qtbot, "getting-started")
    qtbot.mouseClick(view.cards[0].button, Qt.MouseButton.LeftButton)
    wiz = w.wizard
    assert wiz is not None and wiz.isVisible()
    qtbot.waitUntil(lambda: not wiz.busy, timeout=20000)
    for _ in range(3):  # type, host, name (the proposed name)
        qtbot.mouseClick(wiz.button(QWizard.WizardButton.NextButton), Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not wiz.busy, timeout=20000)
    qtbot.mouseClick(wiz.button(QWizard.WizardButton.NextButton), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: wiz.result_page.result is not None, timeout=20000)
    qtbot.mouseClick(wiz.button(QWizard.WizardButton.FinishButton), Qt.MouseButton.LeftButton)
    [srv] = empty_master.config.storage_servers()
    qtbot.waitUntil(lambda: "Done" in view.cards[0].state.text(), timeout=5000)
    servers = show(c, qtbot, "storage-servers")
    qtbot.waitUntil(lambda: servers.model.row_of(srv["name"]) is not None, timeout=5000)


def test_new_host_from_the_file_menu_opens_the_add_host_dialog(console, qtbot):
    w = console.window
    [new_menu] = [a.menu() for a in w.menuBar().actions()[0].menu().actions() if a.menu()]
    [host_action] = [a for a in new_menu.actions() if a.text() == "&Host…"]
    host_action.trigger()
    dlg = w.wizard
    assert dlg.windowTitle() == "Add a host" and dlg.isVisible()
    dlg.reject()


def test_hidden_columns_are_remembered(make_console, master, qtbot):
    from ui.settings import settings
    from ui.qtcompat import emit
    c = make_console(master)
    view = show(c, qtbot, "disk-pools")
    hh = view.table.horizontalHeader()
    emit(hh.customContextMenuRequested, hh.rect().center())
    menu = hh._column_menu
    [volumes] = [a for a in menu.actions() if a.text() == "Volumes"]
    volumes.setChecked(False)
    col = [x.key for x in view.model.columns].index("volumes")
    assert hh.isSectionHidden(col)
    menu.close()
    c.window.save_layout()
    c.window.close()
    again = make_console(master)
    assert again.window.views["disk-pools"].table.horizontalHeader().isSectionHidden(col)
    assert settings().value("views/disk-pools/header") is not None


# ---- deduplicating pools -----------------------------------------------------------------------

@pytest.fixture
def dedup_master(master, tmp_path):
    """The test catalog plus a dedup storage server (encrypted), its pool and an image on
    it."""
    from catalog import add_image
    master.create_storage_server("dd1", type="dedup", host=master.test_host,
                                 path=str(tmp_path / "dedup-store"),
                                 options={"encrypted": True})
    master.create_disk_pool("ddp", server="dd1", volumes=[])
    master.config.add_storage_unit("dd-stu", pool="ddp")
    add_image(master, "dd_image", client=master.test_host, policy="p1",
              storage_unit="dd-stu", created="2026-09-23T20:00:00Z")
    with master.db.tx() as c:
        c.execute("UPDATE images SET pool='ddp' WHERE id='dd_image'")
    return master


def new_jobs(master, before):
    return [j for j in master.jobs.list() if j["id"] not in before]


def test_verify_is_offered_for_every_pool_and_reclaim_for_deduplicating_ones(
        make_console, dedup_master, qtbot):
    m = dedup_master
    c = make_console(m)
    view = show(c, qtbot, "disk-pools")
    actions = view.object_actions
    texts = [a.text() for a in actions.toolbar.actions() if a.text()]
    assert texts.index("Verify pool") < texts.index("Reclaim space") < texts.index("Properties…")
    select(view, "dp1", qtbot)
    assert actions.properties.isEnabled()
    assert actions.verify.isEnabled(), "an AdvancedDisk pool's images are read back too"
    assert not actions.reclaim.isEnabled(), "an AdvancedDisk pool has no chunks to reclaim"
    before = {j["id"] for j in m.jobs.list()}
    actions.verify.trigger()
    qtbot.waitUntil(lambda: actions.last_queued is not None, timeout=5000)
    [job] = new_jobs(m, before)
    assert (job["type"], job["params"]) == ("verify", {"pool": "dp1"})
    actions.last_queued = None
    view = show(c, qtbot, "disk-pools")

    select(view, "ddp", qtbot)
    assert actions.verify.isEnabled() and actions.reclaim.isEnabled()
    before = {j["id"] for j in m.jobs.list()}
    actions.verify.trigger()
    qtbot.waitUntil(lambda: actions.last_queued is not None, timeout=5000)
    [job] = new_jobs(m, before)
    assert (job["id"], job["type"], job["params"]) == (actions.last_queued, "verify",
                                                       {"pool": "ddp"})
    assert c.window.current_view.name == "activity"
    assert c.window.statusBar().currentMessage() == \
        f"Verify job {job['id']} queued for disk pool ddp"

    view = show(c, qtbot, "disk-pools")
    actions.reclaim.trigger()
    qtbot.waitUntil(lambda: actions.last_queued != job["id"], timeout=5000)
    [reclaim] = [j for j in new_jobs(m, before) if j["type"] == "reclaim"]
    assert reclaim["params"] == {"pool": "ddp"} and reclaim["id"] == actions.last_queued
    assert str(reclaim["id"]) in c.window.statusBar().currentMessage()

    # A second reclaim while the first is queued is refused, and said so.
    view = show(c, qtbot, "disk-pools")
    actions.reclaim.trigger()
    qtbot.waitUntil(lambda: actions.last_box is not None and actions.last_box.isVisible(),
                    timeout=5000)
    assert "queued or running already" in actions.last_box.text()
    actions.last_box.button(QMessageBox.StandardButton.Ok).click()
    assert len([j for j in m.jobs.list() if j["type"] == "reclaim"]) == 1


def test_a_refused_verify_shows_the_error_with_its_hint(make_console, dedup_master, qtbot):
    m = dedup_master
    c = make_console(m)
    view = show(c, qtbot, "disk-pools")
    select(view, "ddp", qtbot)
    # The pool goes away behind the console's back: the master says so, with a hint.
    with m.db.tx() as cx:
        cx.execute("DELETE FROM images WHERE pool='ddp'")
    m.delete_object("storage-unit", "dd-stu")
    m.delete_object("disk-pool", "ddp")
    view.object_actions.verify.trigger()
    box_ready = lambda: (view.object_actions.last_box is not None      # noqa: E731
                         and view.object_actions.last_box.isVisible())
    qtbot.waitUntil(box_ready, timeout=5000)
    box = view.object_actions.last_box
    assert "there is no disk pool named 'ddp'" in box.text()
    assert "known disk pools: dp1" in box.informativeText()
    box.button(QMessageBox.StandardButton.Ok).click()


def test_verify_image_on_either_kind_of_pool(make_console, dedup_master, qtbot):
    from ui.object_actions import ImageActions
    m = dedup_master
    c = make_console(m)
    c.window.select_view("restore")
    page = c.window.views["restore"]
    qtbot.waitUntil(lambda: page.loaded and page.model.row_of("dd_image") is not None,
                    timeout=5000)
    actions = ImageActions(page)
    assert page.select_key(f"{m.test_host}_1790000000")
    assert actions.verify.isEnabled(), "an image on an AdvancedDisk pool is read back too"
    assert page.select_key("dd_image")
    assert actions.verify.isEnabled()
    queued = []
    actions.job_queued.connect(lambda job_id, text: queued.append((job_id, text)))
    before = {j["id"] for j in m.jobs.list()}
    actions.verify.trigger()
    qtbot.waitUntil(lambda: bool(queued), timeout=5000)
    [job] = new_jobs(m, before)
    assert job["type"] == "verify" and job["params"] == {"image": "dd_image"}
    assert job["client"] == m.test_host
    assert queued == [(job["id"], f"Verify job {job['id']} queued for image dd_image")]


def test_properties_set_where_a_policy_and_a_host_deduplicate(make_console, dedup_master,
                                                                qtbot):
    m = dedup_master
    c = make_console(m)
    view = show(c, qtbot, "policies")
    select(view, "p1", qtbot)
    dlg = view.object_actions._properties()
    combo = dlg.editors["dedup"]
    assert [combo.itemData(i) for i in range(combo.count())] == ["server", "client"]
    assert combo.currentText() == "On the storage server (client sends a plain stream)"
    assert not dlg.save_button.isEnabled()
    combo.setCurrentIndex(combo.findData("client"))
    assert dlg.changes() == {"dedup": "client"}
    dlg.save_button.click()
    qtbot.waitUntil(lambda: dlg.saved is not None, timeout=5000)
    assert m.config.policy("p1")["dedup"] == "client"

    view = show(c, qtbot, "hosts")
    select(view, m.test_host, qtbot)
    dlg = view.object_actions._properties()
    combo = dlg.editors["dedup"]
    assert [combo.itemData(i) for i in range(combo.count())] == ["policy", "server", "client"]
    assert combo.currentData() == "policy"
    assert "wins over its policies'" in combo.toolTip()
    combo.setCurrentIndex(combo.findData("server"))
    dlg.save_button.click()
    qtbot.waitUntil(lambda: dlg.saved is not None, timeout=5000)
    assert m.config.host(m.test_host)["dedup"] == "server"


def test_properties_of_a_dedup_server_and_its_pool(make_console, dedup_master, qtbot):
    from PySide6.QtWidgets import QLabel
    from ui.properties import pool_usage_text
    m = dedup_master
    c = make_console(m)
    view = show(c, qtbot, "storage-servers")
    select(view, "dd1", qtbot)
    dlg = view.object_actions._properties()
    texts = [lab.text() for lab in dlg.findChildren(QLabel)]
    assert ("chunks of 512 KiB on average (128 KiB to 2 MiB); encrypted at rest "
            "(AES-256-GCM, the key is kept on the master)") in texts
    dlg.reject()
    select(view, "ss1", qtbot)
    dlg = view.object_actions._properties()
    assert "Deduplication" not in [lab.text() for lab in dlg.findChildren(QLabel)]
    dlg.reject()

    view = show(c, qtbot, "disk-pools")
    select(view, "dp1", qtbot)
    assert view.object_actions._properties().usage_label is None
    select(view, "ddp", qtbot)
    dlg = view.object_actions._properties()
    qtbot.waitUntil(lambda: dlg.usage_label.text() != "Looking…", timeout=30000)
    assert dlg.usage_label.text() == pool_usage_text(m.pool_usage("ddp"))
    assert dlg.usage_label.text().endswith(", encrypted")
    assert pool_usage_text({"chunks": 12345, "stored_bytes": 5 << 30, "containers": 3,
                            "container_bytes": 6 << 30, "encrypted": True}) == (
        "5.0 GiB of chunks stored (12,345 chunks) in 3 container files of 6.0 GiB, encrypted")


def test_the_chunk_sizes_of_a_dedup_server_are_edited_in_its_properties(
        make_console, dedup_master, qtbot):
    m = dedup_master
    c = make_console(m)
    view = show(c, qtbot, "storage-servers")
    select(view, "ss1", qtbot)
    dlg = view.object_actions._properties()
    assert "avg_chunk" not in dlg.editors  # an AdvancedDisk server cuts no chunks
    dlg.reject()
    select(view, "dd1", qtbot)
    dlg = view.object_actions._properties()
    assert [dlg.editors[k].text() for k in ("min_chunk", "avg_chunk", "max_chunk")] == \
        ["128K", "512K", "2M"]
    assert "Images already stored keep their chunks" in dlg.editors["avg_chunk"].toolTip()
    assert dlg.changes() == {}
    dlg.editors["avg_chunk"].setText("64K")  # below the smallest chunk: refused, shown
    dlg.save_button.click()
    qtbot.waitUntil(lambda: dlg.error.isVisible(), timeout=5000)
    assert "avg_chunk 64 KiB must be larger than min_chunk" in dlg.error.text()
    assert m.storage_server("dd1")["options"]["avg_size"] == 512 << 10
    dlg.editors["min_chunk"].setText("16K")
    dlg.editors["max_chunk"].setText("256K")
    assert dlg.changes() == {"min_chunk": "16K", "avg_chunk": "64K", "max_chunk": "256K"}
    dlg.save_button.click()
    qtbot.waitUntil(lambda: dlg.saved is not None, timeout=5000)
    o = m.storage_server("dd1")["options"]
    assert (o["min_size"], o["avg_size"], o["max_size"], o["encrypted"]) == \
        (16 << 10, 64 << 10, 256 << 10, True)


def test_the_compaction_threshold_of_a_dedup_pool_is_edited_in_its_properties(
        make_console, dedup_master, qtbot):
    m = dedup_master
    c = make_console(m)
    view = show(c, qtbot, "disk-pools")
    select(view, "dp1", qtbot)
    dlg = view.object_actions._properties()
    assert "compact_below" not in dlg.editors  # an AdvancedDisk pool has no containers
    dlg.reject()
    select(view, "ddp", qtbot)
    dlg = view.object_actions._properties()
    box = dlg.editors["compact_below"]
    assert box.value() == 50 and box.specialValueText().startswith("never")
    box.setValue(25)
    dlg.save_button.click()
    qtbot.waitUntil(lambda: dlg.saved is not None, timeout=5000)
    assert m.config.disk_pool("ddp")["compact_below"] == 25

    def shown():
        col = [c.key for c in view.model.columns].index("compact_below")
        return view.model.index(view.model.row_of("ddp"), col).data()
    qtbot.waitUntil(lambda: shown() == "25% live", timeout=5000)


def test_import_images_asks_then_queues_an_import_of_the_pool(make_console, dedup_master,
                                                               qtbot, tmp_path):
    m = dedup_master
    c = make_console(m)
    view = show(c, qtbot, "disk-pools")
    actions = view.object_actions
    texts = [a.text() for a in actions.toolbar.actions() if a.text()]
    assert texts.index("Verify pool") < texts.index("Import images…") < texts.index(
        "Properties…")

    # an AdvancedDisk pool: nothing to ask but whether to go on
    select(view, "dp1", qtbot)
    assert actions.import_images.isEnabled()
    dlg = actions._import_pool()
    assert dlg.isVisible() and dlg.key_edit is None and "dp1" in dlg.windowTitle()
    before = {j["id"] for j in m.jobs.list()}
    dlg.import_button.click()
    qtbot.waitUntil(lambda: actions.last_queued is not None, timeout=5000)
    [job] = new_jobs(m, before)
    assert (job["type"], job["params"]) == ("import", {"pool": "dp1", "key_file": None})
    assert c.window.statusBar().currentMessage() == \
        f"Import job {job['id']} queued for disk pool dp1"

    # an encrypted deduplicating pool: the key file of a pool whose key the master lacks
    actions.last_queued = None
    view = show(c, qtbot, "disk-pools")
    select(view, "ddp", qtbot)
    dlg = actions._import_pool()
    assert dlg.key_edit is not None
    key = tmp_path / "pool.key"
    key.write_text("ab" * 32 + "\n")
    dlg.key_edit.setText(str(key))
    before = {j["id"] for j in m.jobs.list()}
    dlg.import_button.click()
    qtbot.waitUntil(lambda: actions.last_queued is not None, timeout=5000)
    [job] = new_jobs(m, before)
    assert job["params"] == {"pool": "ddp", "key_file": str(key)}

    # a file that holds no key is refused when queued, and said so
    actions.last_queued = None
    view = show(c, qtbot, "disk-pools")
    select(view, "ddp", qtbot)
    dlg = actions._import_pool()
    dlg.key_edit.setText(str(tmp_path / "no-such.key"))
    dlg.import_button.click()
    qtbot.waitUntil(lambda: actions.last_box is not None and actions.last_box.isVisible(),
                    timeout=5000)
    assert "does not exist" in actions.last_box.text()


def test_the_keyboard_reaches_everything(console, master, qtbot):
    """Tab leaves a list for the next widget, the toolbar's buttons are in the Tab chain,
    Shift+F10 opens the context menu of the current row, Ctrl+B backs the policy up."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication
    view = show(console, qtbot, "policies")
    select(view, "p1", qtbot)
    table = view.table
    console.window.activateWindow()
    table.setFocus()
    qtbot.waitUntil(table.hasFocus, timeout=3000)
    current = table.currentIndex()
    qtbot.keyClick(table, Qt.Key.Key_Tab)
    assert not table.hasFocus()
    assert table.currentIndex() == current  # Tab did not walk the cells
    buttons = [view.object_actions.toolbar.widgetForAction(a)
               for a in view.object_actions.toolbar.actions() if not a.isSeparator()]
    assert buttons and all(b.focusPolicy() & Qt.FocusPolicy.TabFocus for b in buttons)
    table.setFocus()
    qtbot.waitUntil(table.hasFocus, timeout=3000)
    qtbot.keyClick(table, Qt.Key.Key_F10, Qt.KeyboardModifier.ShiftModifier)
    menu = view.object_actions.last_menu
    assert menu is not None and "Back up now…" in [a.text() for a in menu.actions()]
    menu.close()
    QApplication.processEvents()
    before = {j["id"] for j in master.jobs.list()}
    console.window.activateWindow()
    table.setFocus()
    qtbot.waitUntil(table.hasFocus, timeout=3000)
    qtbot.keyClick(table, Qt.Key.Key_B, Qt.KeyboardModifier.ControlModifier)
    view.object_actions.last_dialog.ok.click()
    qtbot.waitUntil(lambda: any(j["id"] not in before for j in master.jobs.list()),
                    timeout=5000)


def test_back_up_now_asks_which_schedule_and_which_clients(console, master, qtbot):
    """The backup runs under the schedule chosen (its type) for the clients ticked, not the
    policy's first schedule for every client."""
    from PySide6.QtCore import Qt
    from ui.wizards.schedule_text import spoken
    master.config.add_schedule("p1", "weekly-full", type="full")
    master.config.add_schedule("p1", "nightly-diff", type="differential")
    master.config.add_host("second", address="127.0.0.1", port=1)
    master.config.add_policy_client("p1", "second")
    view = show(console, qtbot, "policies")
    view.refresh()
    qtbot.waitUntil(lambda: "second" in (view.model.row_dict(view.model.row_of("p1"))
                                         .get("clients") or []), timeout=5000)
    select(view, "p1", qtbot)
    before = {j["id"] for j in master.jobs.list()}
    dlg = view.object_actions._backup_now()
    box = dlg.schedule_box
    box.setCurrentIndex(box.findData("nightly-diff"))
    # the schedule reads as the wizard words it, not as its stored words
    assert box.currentText() == "nightly-diff — differential incremental, kept " + \
        spoken(master.config.policy("p1")["schedules"][-1]["retention"] or "infinite")
    first = next(dlg.client_list.item(i) for i in range(dlg.client_list.count())
                 if dlg.client_list.item(i).text() != "second")
    for i in range(dlg.client_list.count()):
        item = dlg.client_list.item(i)
        item.setCheckState(Qt.CheckState.Unchecked if item.text() == "second"
                           else Qt.CheckState.Checked)
    assert dlg.clients() == [first.text()] and dlg.ok.isEnabled()
    for i in range(dlg.client_list.count()):
        dlg.client_list.item(i).setCheckState(Qt.CheckState.Unchecked)
    assert not dlg.ok.isEnabled() and "at least one client" in dlg.note.text()
    first.setCheckState(Qt.CheckState.Checked)
    me = first.text()
    dlg.ok.click()
    qtbot.waitUntil(lambda: any(j["id"] not in before for j in master.jobs.list()),
                    timeout=5000)
    new = [j for j in master.jobs.list() if j["id"] not in before]
    assert [(j["client"], j["schedule"]) for j in new] == [(me, "nightly-diff")]
    assert master.jobs.get(new[0]["id"])["params"]["schedule_type"] == "differential"
