"""Lifecycles in the console: the lifecycle wizard, a policy under a lifecycle (its wizard and
its properties), the lifecycles list, an image's copies and the copy a restore reads, and the
status bar's warning about copies that keep failing."""

import pytest
from PySide6.QtCore import Qt

from app import status as st
from app.jobs import copies
from catalog import add_lifecycle
from test_wizards import bridge, finish, go_next, next_enabled, open_wizard, storage  # noqa: F401
from ui.image_copies import CopiesDialog
from ui.properties import PropertiesDialog
from ui.restore_dialog import RestoreDialog

pytestmark = pytest.mark.gui

WAIT_MS = 10000


def second_unit(m, tmp_path):
    vol = tmp_path / "vol2"
    vol.mkdir()
    m.create_storage_server("ss2", type="advanced-disk", host=m.config.local_host()["name"])
    m.create_disk_pool("dp2", server="ss2", volumes=[str(vol)], check=False)
    m.create_storage_unit("stu2", pool="dp2")


def test_the_lifecycle_wizard_makes_a_backup_step_and_its_copies(open_wizard, empty_master,
                                                                  qtbot, tmp_path):
    storage(empty_master, tmp_path)
    second_unit(empty_master, tmp_path)
    w = open_wizard("lifecycle")
    p = w.steps_page
    assert [(r[1].currentText(), r[2].text()) for r in p.rows] == [("stu1", "2w"),
                                                                   ("stu2", "8w")]
    qtbot.keyClicks(p.name, "gold")
    assert next_enabled(w)
    p.rows[1][1].setCurrentIndex(p.rows[1][1].findText("stu1"))
    assert not next_enabled(w)
    assert "both be in disk pool dp1" in p.status.plain_text()
    p.rows[1][1].setCurrentIndex(p.rows[1][1].findText("stu2"))
    p.rows[1][2].setText("soon")
    assert "Copy 2: retention 'soon' is not a duration" in p.status.plain_text()
    p.rows[1][2].setText("90d")
    go_next(qtbot, w)
    assert ("Copy 2:", "stu2 (disk pool dp2 on " + empty_master.config.local_host()["name"]
            + "), kept 90 days") in w.summary_page.rows()
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    finish(qtbot, w)
    assert [s["text"] for s in empty_master.lifecycle("gold")["steps"]] == \
        ["backup:stu1:2w", "duplicate:stu2:90d"]


def test_the_policy_wizard_offers_lifecycles_beside_storage_units(open_wizard, empty_master,
                                                                  qtbot, tmp_path):
    host = storage(empty_master, tmp_path)
    second_unit(empty_master, tmp_path)
    empty_master.create_lifecycle("gold", ["backup:stu2:2w", "duplicate:stu1:8w"])
    w = open_wizard("policy", clients=[host])
    ap = w.attributes_page
    assert [ap.unit.itemText(i) for i in range(ap.unit.count())] == \
        ["stu1", "stu2", "", "gold (lifecycle)"]
    ap.unit.setCurrentIndex(ap.unit.findText("gold (lifecycle)"))
    assert "Backs up to stu2" in ap.unit_detail.text() and "copies to stu1" in \
        ap.unit_detail.text()
    qtbot.keyClicks(ap.name, "pol")
    for _ in range(3):
        go_next(qtbot, w)
    qtbot.keyClicks(w.selections_page.path, "/data")
    qtbot.mouseClick(w.selections_page.add_button, Qt.MouseButton.LeftButton)
    go_next(qtbot, w)
    assert ("Lifecycle:", "gold (backs up to stu2, then copies)") in w.summary_page.rows()
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    pol = empty_master.policy("pol")
    assert (pol["lifecycle"], pol["storage_unit"]) == ("gold", "stu2")


def test_a_policy_s_properties_move_it_onto_a_lifecycle_and_off(bridge, empty_master, qtbot,
                                                                tmp_path):
    storage(empty_master, tmp_path)
    second_unit(empty_master, tmp_path)
    empty_master.create_lifecycle("gold", ["backup:stu2:2w", "duplicate:stu1:8w"])
    pol = empty_master.create_policy("pol", storage_unit="stu1")
    dlg = PropertiesDialog(bridge, "policy", pol)
    qtbot.addWidget(dlg)
    lc, unit = dlg.editors["lifecycle"], dlg.editors["storage_unit"]
    qtbot.waitUntil(lambda: lc.count() == 2, timeout=WAIT_MS)
    assert unit.isEnabled()
    lc.setCurrentIndex(lc.findData("gold"))
    assert not unit.isEnabled() and dlg.changes() == {"lifecycle": "gold"}
    dlg.save()
    qtbot.waitUntil(lambda: dlg.saved is not None, timeout=WAIT_MS)
    assert (dlg.saved["lifecycle"], dlg.saved["storage_unit"]) == ("gold", "stu2")
    dlg = PropertiesDialog(bridge, "policy", dlg.saved)
    qtbot.addWidget(dlg)
    unit = dlg.editors["storage_unit"]
    qtbot.waitUntil(lambda: unit.count() == 2, timeout=WAIT_MS)
    assert not unit.isEnabled()
    dlg.editors["lifecycle"].setCurrentIndex(0)
    assert unit.isEnabled()
    unit.setCurrentText("stu1")
    # a storage unit chosen leaves the lifecycle by itself
    assert dlg.changes() == {"storage_unit": "stu1"}
    dlg.save()
    qtbot.waitUntil(lambda: dlg.saved is not None, timeout=WAIT_MS)
    assert (dlg.saved["lifecycle"], dlg.saved["storage_unit"]) == (None, "stu1")


def test_the_lifecycles_list_and_its_actions(make_console, master, qtbot, tmp_path):
    add_lifecycle(master, tmp_path)
    c = make_console(master)
    w = c.window
    w.select_view("lifecycles")
    v = w.views["lifecycles"]
    qtbot.waitUntil(lambda: v.loaded and v.model.rowCount() == 1, timeout=WAIT_MS)
    row = v.model.row_dict(0)
    assert row["name"] == "gold"
    cell = v.model.index(0, [c.key for c in v.model.columns].index("steps"))
    assert cell.data() == "back up to stu1 (2w) → copy to stu2 (8w)"
    tip = cell.data(Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith("Copy 1: the backup to storage unit stu1 (disk pool ")
    assert "Copy 2: a copy to storage unit stu2" in tip and tip.endswith("kept 8 weeks")
    assert v.object_actions.new.text() == "New lifecycle…"


def copied_image(master):
    """The catalog's newest image with a second copy in dp2."""
    image = master.images()[0]
    with master.db.tx() as c:
        copies.insert(c, image["id"], 2, storage_unit="stu2", pool="dp2",
                      storage_host=image["storage_host"], path="/vol2/copy.tar",
                      image_bytes=image["image_bytes"], created=image["created"],
                      expires="2027-01-01T00:00:00Z", job_id=None, state="ok", dedup=None)
    return master.image(image["id"])


def test_an_image_s_copies_and_the_copy_a_restore_reads(bridge, master, qtbot, tmp_path):
    add_lifecycle(master, tmp_path)
    image = copied_image(master)
    assert image["copies"] == 2
    dlg = CopiesDialog(bridge, image)
    qtbot.addWidget(dlg)
    qtbot.waitUntil(lambda: dlg.result is not None, timeout=WAIT_MS)
    rows = [[dlg.tree.topLevelItem(i).text(c) for c in range(6)]
            for i in range(dlg.tree.topLevelItemCount())]
    assert [r[:3] for r in rows] == [["1 (primary)", "dp1", "stu1"], ["2", "dp2", "stu2"]]
    assert "2 copies" in dlg.status.text()
    rd = RestoreDialog(bridge, image, ["/data/projects/alpha/README.md"])
    qtbot.addWidget(rd)
    qtbot.waitUntil(lambda: rd.copy.count() == 3, timeout=WAIT_MS)
    assert rd.copy.isEnabled() and rd.copy.currentData() is None
    assert rd.copy.itemText(2).startswith("Copy 2 only: disk pool dp2")


def test_the_status_bar_warns_of_copies_that_keep_failing(make_console, master, qtbot,
                                                          tmp_path):
    add_lifecycle(master, tmp_path)
    image = master.images()[0]
    jid = master.jobs.create("duplicate", client=image["client"], storage_unit="stu2",
                             params={"image": image["id"], "copy": 2, "pool": "dp2"})
    master.jobs.claim(jid, "test")
    master.jobs.finish(jid, st.VOLUME_UNAVAILABLE, "no volume of disk pool dp2 can take the "
                                                   "copy")
    c = make_console(master)
    label = c.window.copies_label
    qtbot.waitUntil(lambda: label.isVisible() and "1 missing" in label.text(), timeout=WAIT_MS)
    assert f"Image {image['id']} has no copy 2 in disk pool dp2" in label.toolTip()
    assert "no volume of disk pool dp2" in label.toolTip()
