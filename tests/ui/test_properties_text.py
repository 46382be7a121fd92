"""The properties window reads as the wizards word things: sentences for stored words, spoken
durations, the master's limit for an empty maximum; and Save still stores the stored word,
read back through the master."""

import pytest
from catalog import add_lifecycle

from ui.properties import MASTER_JOB_LIMIT
from ui.wizards.policy import CHECKSUM_TEXT
from ui.wizards.stugroup import SELECTION_TEXT

pytestmark = pytest.mark.gui

WAIT_MS = 5000


def properties(console, qtbot, view_name, key):
    w = console.window
    w.select_view(view_name)
    view = w.views[view_name]
    qtbot.waitUntil(lambda: view.loaded and view.model.row_of(key) is not None,
                    timeout=WAIT_MS)
    assert view.select_key(key)
    return view.object_actions._properties()


def save(dlg, qtbot):
    assert dlg.save_button.isEnabled()
    dlg.save_button.click()
    qtbot.waitUntil(lambda: dlg.saved is not None or dlg.error.isVisible(), timeout=WAIT_MS)
    assert dlg.saved is not None, dlg.error.text()


def test_a_policy_s_checksum_reads_as_the_wizard_and_saves_its_word(make_console, master,
                                                                      qtbot):
    c = make_console(master)
    dlg = properties(c, qtbot, "policies", "p1")
    combo = dlg.editors["checksum"]
    assert [combo.itemText(i) for i in range(combo.count())] == \
        [CHECKSUM_TEXT["crc32"], CHECKSUM_TEXT["sha256"]]
    assert combo.currentText() == "crc32 — fast; catches corruption"
    assert not dlg.save_button.isEnabled()
    combo.setCurrentIndex(combo.findData("sha256"))
    assert dlg.changes() == {"checksum": "sha256"}
    save(dlg, qtbot)
    assert master.config.policy("p1")["checksum"] == "sha256"

    view = c.window.views["policies"]
    qtbot.waitUntil(lambda: view.model.row_dict(view.model.row_of("p1"))["checksum"] ==
                    "sha256", timeout=WAIT_MS)
    dlg = properties(c, qtbot, "policies", "p1")
    assert dlg.editors["checksum"].currentText() == CHECKSUM_TEXT["sha256"]
    assert not dlg.save_button.isEnabled()
    # switches the wizard shows disabled say why, not a bare "no"
    assert "compression" not in dlg.read_only
    # an advanced-disk policy: plain tar files unless compression is chosen
    assert dlg.editors["compression"].currentData() == "off"
    assert dlg.editors["compression_level"].value() == 1
    dlg.editors["compression"].setCurrentIndex(dlg.editors["compression"].findData("server"))
    dlg.editors["compression_level"].setValue(4)
    assert dlg.changes() == {"compression": "server", "compression_level": 4}
    assert dlg.read_only["encryption"].text().startswith("no (a property of the pool")
    dlg.reject()


def test_a_host_s_maximum_jobs_reads_the_master_s_limit_when_empty(make_console, master,
                                                                   qtbot):
    master.config.add_host("rh", address="10.0.0.5")
    master.update_object("host", "rh", max_jobs=3)
    c = make_console(master)
    # a host with its own maximum opens (its number once broke the text field)
    dlg = properties(c, qtbot, "hosts", "rh")
    box = dlg.editors["max_jobs"]
    assert (box.value(), box.text()) == (3, "3")
    assert dlg.editors["user"].placeholderText() == "the user running the console"
    assert dlg.editors["key_file"].placeholderText() == "default keys and the SSH agent"
    assert dlg.editors["data_address"].placeholderText() == "the address above"
    assert not dlg.save_button.isEnabled()
    box.setValue(0)
    assert box.text() == MASTER_JOB_LIMIT
    assert dlg.changes() == {"max_jobs": None}
    save(dlg, qtbot)
    assert master.config.host("rh")["max_jobs"] is None

    dlg = properties(c, qtbot, "hosts", master.test_host)
    box = dlg.editors["max_jobs"]
    assert box.text() == MASTER_JOB_LIMIT and not dlg.save_button.isEnabled()
    box.setValue(5)
    save(dlg, qtbot)
    assert master.config.host(master.test_host)["max_jobs"] == 5


def test_a_group_s_selection_and_a_lifecycle_s_retentions_read_as_words(make_console, master,
                                                                         qtbot, tmp_path):
    add_lifecycle(master, tmp_path)
    master.create_lifecycle("long", ["backup:stu1:90d", "duplicate:stu2:infinite"])
    master.create_storage_unit_group("spread", "stu1,stu2", "least-loaded")
    c = make_console(master)
    dlg = properties(c, qtbot, "storage-unit-groups", "spread")
    assert dlg.read_only["selection"].text() == SELECTION_TEXT["least-loaded"] == \
        "Least-loaded: the storage server running the fewest jobs"
    dlg.editors["comment"].setText("spread over both pools")
    save(dlg, qtbot)
    group = master.storage_unit_groups()[0]
    assert (group["selection"], group["comment"]) == ("least-loaded", "spread over both pools")

    dlg = properties(c, qtbot, "lifecycles", "gold")
    assert [line.rsplit(", ", 1)[1] for line in
            dlg.read_only["steps"].text().splitlines()] == ["kept 2 weeks", "kept 8 weeks"]
    dlg.reject()
    dlg = properties(c, qtbot, "lifecycles", "long")
    assert [line.rsplit(", ", 1)[1] for line in
            dlg.read_only["steps"].text().splitlines()] == ["kept 90 days", "kept forever"]
    dlg.reject()


def test_a_storage_type_explains_itself_as_in_the_wizard(make_console, master, qtbot):
    from plugins.storage import registry
    c = make_console(master)
    dlg = properties(c, qtbot, "storage-servers", "ss1")
    assert dlg.read_only["type"].text() == "advanced-disk"
    assert dlg.read_only["type"].toolTip() == registry.get("advanced-disk").description
    dlg.reject()
    dlg = properties(c, qtbot, "disk-pools", "dp1")
    assert dlg.read_only["server_type"].toolTip() == registry.get("advanced-disk").description
    dlg.reject()
