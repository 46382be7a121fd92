"""Storage unit groups in the console: the group wizard, a policy writing to a group (its
wizard and its properties), and the Storage unit groups list with its actions."""

import pytest
from PySide6.QtCore import Qt

from test_wizards import bridge, finish, go_next, next_enabled, open_wizard, storage  # noqa: F401
from ui.properties import PropertiesDialog

pytestmark = pytest.mark.gui

WAIT_MS = 10000


def second_unit(m, tmp_path):
    vol = tmp_path / "vol2"
    vol.mkdir()
    m.create_storage_server("ss2", type="advanced-disk", host=m.config.local_host()["name"])
    m.create_disk_pool("dp2", server="ss2", volumes=[str(vol)], check=False)
    m.create_storage_unit("stu2", pool="dp2")


def test_the_group_wizard_makes_an_ordered_group(open_wizard, empty_master, qtbot, tmp_path):
    storage(empty_master, tmp_path)
    second_unit(empty_master, tmp_path)
    w = open_wizard("storage-unit-group")
    p = w.units_page
    qtbot.waitUntil(lambda: p.units.count() == 2, timeout=WAIT_MS)
    assert p.chosen() == ["stu1", "stu2"]
    assert not next_enabled(w)  # no name yet
    qtbot.keyClicks(p.name, "spread")
    assert next_enabled(w)
    for i in range(2):
        p.units.item(i).setCheckState(Qt.CheckState.Unchecked)
    assert not next_enabled(w) and "Tick at least one storage unit" in p.status.plain_text()
    for i in range(2):
        p.units.item(i).setCheckState(Qt.CheckState.Checked)
    p.units.setCurrentRow(1)
    p._up()
    assert p.chosen() == ["stu2", "stu1"]
    p.selection.setCurrentIndex(p.selection.findData("round-robin"))
    go_next(qtbot, w)
    assert ("Selection:", "Round-robin: the units in turn, one job after the other") in \
        w.summary_page.rows()
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    finish(qtbot, w)
    g = empty_master.storage_unit_group("spread")
    assert (g["unit_names"], g["selection"]) == (["stu2", "stu1"], "round-robin")


def test_the_policy_wizard_offers_groups_as_a_third_choice(open_wizard, empty_master, qtbot,
                                                           tmp_path):
    host = storage(empty_master, tmp_path)
    second_unit(empty_master, tmp_path)
    empty_master.create_lifecycle("gold", ["backup:stu2:2w", "duplicate:stu1:8w"])
    empty_master.create_storage_unit_group("spread", "stu2,stu1", "least-loaded")
    w = open_wizard("policy", clients=[host])
    ap = w.attributes_page
    assert [ap.unit.itemText(i) for i in range(ap.unit.count())] == \
        ["stu1", "stu2", "", "gold (lifecycle)", "", "spread (storage unit group)"]
    ap.unit.setCurrentIndex(ap.unit.findText("spread (storage unit group)"))
    assert "Each backup goes to one of stu2, stu1, chosen when the job starts (least-loaded)" \
        in ap.unit_detail.text()
    qtbot.keyClicks(ap.name, "pol")
    for _ in range(3):
        go_next(qtbot, w)
    qtbot.keyClicks(w.selections_page.path, "/data")
    qtbot.mouseClick(w.selections_page.add_button, Qt.MouseButton.LeftButton)
    go_next(qtbot, w)
    assert ("Storage unit group:", "spread (each backup on one of its units)") in \
        w.summary_page.rows()
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    pol = empty_master.policy("pol")
    assert (pol["storage_unit_group"], pol["storage_unit"], pol["lifecycle"]) == \
        ("spread", "stu2", None)


def test_a_policy_s_properties_move_it_onto_a_group_and_off(bridge, empty_master, qtbot,
                                                            tmp_path):
    storage(empty_master, tmp_path)
    second_unit(empty_master, tmp_path)
    empty_master.create_lifecycle("gold", ["backup:stu1:2w", "duplicate:stu2:8w"])
    empty_master.create_storage_unit_group("spread", "stu2,stu1", "prioritized")
    pol = empty_master.create_policy("pol", lifecycle="gold")
    dlg = PropertiesDialog(bridge, "policy", pol)
    qtbot.addWidget(dlg)
    grp, lc, unit = (dlg.editors[k] for k in ("storage_unit_group", "lifecycle",
                                              "storage_unit"))
    qtbot.waitUntil(lambda: grp.count() == 2 and lc.count() == 2, timeout=WAIT_MS)
    assert not unit.isEnabled()
    grp.setCurrentIndex(grp.findData("spread"))
    # the group leaves the lifecycle by itself
    assert lc.currentData() == "none" and not unit.isEnabled()
    assert dlg.changes() == {"storage_unit_group": "spread"}
    dlg.save()
    qtbot.waitUntil(lambda: dlg.saved is not None, timeout=WAIT_MS)
    assert (dlg.saved["storage_unit_group"], dlg.saved["lifecycle"],
            dlg.saved["storage_unit"]) == ("spread", None, "stu2")
    dlg = PropertiesDialog(bridge, "policy", dlg.saved)
    qtbot.addWidget(dlg)
    grp, unit = dlg.editors["storage_unit_group"], dlg.editors["storage_unit"]
    qtbot.waitUntil(lambda: unit.count() == 2 and grp.count() == 2, timeout=WAIT_MS)
    grp.setCurrentIndex(0)
    assert unit.isEnabled()
    unit.setCurrentText("stu1")
    assert dlg.changes() == {"storage_unit": "stu1"}
    dlg.save()
    qtbot.waitUntil(lambda: dlg.saved is not None, timeout=WAIT_MS)
    assert (dlg.saved["storage_unit_group"], dlg.saved["storage_unit"]) == (None, "stu1")


def test_the_groups_list_and_its_actions(make_console, empty_master, qtbot, tmp_path):
    storage(empty_master, tmp_path)
    second_unit(empty_master, tmp_path)
    empty_master.create_storage_unit_group("spread", "stu1,stu2", "least-loaded")
    c = make_console(empty_master)
    w = c.window
    w.select_view("storage-unit-groups")
    v = w.views["storage-unit-groups"]
    qtbot.waitUntil(lambda: v.loaded and v.model.rowCount() == 1, timeout=WAIT_MS)
    assert v.model.row_dict(0)["selection"] == "least-loaded"
    units = v.model.index(0, [c.key for c in v.model.columns].index("units")).data()
    assert units == "stu1 → stu2"
    assert v.object_actions.new.text() == "New storage unit group…"
