"""A policy's properties: its schedules in words and its next scheduled backups, from the
scheduler over the real catalog."""

import pytest

from ui.bridge import Bridge
from ui.properties import PropertiesDialog
from ui.wizards.week_grid import daily_windows

pytestmark = pytest.mark.gui


@pytest.fixture
def bridge(master):
    b = Bridge(master)
    yield b
    b.shutdown()


def open_properties(qtbot, bridge, master, policy):
    dlg = PropertiesDialog(bridge, "policy", master.config.policy(policy))
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitUntil(lambda: dlg.next_label.text() != "Looking…", timeout=5000)
    return dlg


def test_schedules_and_next_backups_of_a_policy(qtbot, bridge, master):
    m = master
    m.config.add_schedule("p1", "diff", type="differential", retention="1w",
                          calendar={"weekdays": [0, 1, 2, 3, 4, 5, 6], "exclude": []},
                          windows=daily_windows([{"day": 0, "start": "00:00", "hours": 168}]))
    dlg = open_properties(qtbot, bridge, m, "p1")
    texts = [w.text() for w in dlg.findChildren(type(dlg.next_label))]
    schedules = next(t for t in texts if t.startswith("daily: full"))
    assert "daily: full, kept 2 weeks; no start windows" in schedules
    assert ("diff: differential incremental, every day, kept 1 week; starts within: Mon–Sun "
            "00:00 for 24 hours.") in schedules
    # open the whole week: a backup of the calendar schedule is due today
    lines = dlg.next_label.text().splitlines()
    assert lines and all(f"diff (differential) of {m.test_host}" in line for line in lines)


def test_a_policy_without_start_windows_has_no_next_backups(qtbot, bridge, master):
    dlg = open_properties(qtbot, bridge, master, "p1")
    assert dlg.next_label.text().startswith("None in the next 7 days")


def test_wrapped_values_stay_whole_when_a_late_value_arrives(qtbot, bridge, master):
    from PySide6.QtWidgets import QLabel
    m = master
    m.config.add_policy_selection("p1", "/home/projects/" + "/".join(
        f"level-{i}-of-a-deep-tree" for i in range(6)))
    m.config.add_policy_selection("p1", "/srv/data")
    dlg = open_properties(qtbot, bridge, m, "p1")
    # "Next backups" took two lines only after the window was sized for "Looking…"
    assert dlg.next_label.text().count("\n") == 0 and len(dlg.next_label.text()) > 60
    qtbot.wait(50)
    for label in dlg.findChildren(QLabel):
        if label.wordWrap() and label.isVisible() and label.text():
            assert label.height() >= label.heightForWidth(label.width()), label.text()


def test_a_pools_verify_interval_is_set_and_cleared_in_its_properties(qtbot, bridge, master):
    m = master
    pool = m.disk_pools()[0]["name"]
    dlg = PropertiesDialog(bridge, "disk-pool", m.config.disk_pool(pool))
    qtbot.addWidget(dlg)
    dlg.show()
    field = dlg.editors["verify_every"]
    assert field.text() == "" and field.placeholderText() == "never"
    field.setText("10m")
    dlg.save()
    qtbot.waitUntil(lambda: dlg.error.isVisible(), timeout=5000)
    assert "too often" in dlg.error.text()
    field.setText("3d")
    dlg.save()
    qtbot.waitUntil(lambda: m.config.disk_pool(pool)["verify_every"] == 3 * 86400,
                    timeout=5000)
    dlg = PropertiesDialog(bridge, "disk-pool", m.config.disk_pool(pool))
    qtbot.addWidget(dlg)
    assert dlg.editors["verify_every"].text() == "3d"
    dlg.editors["verify_every"].setText("")
    assert dlg.changes() == {"verify_every": ""}
    dlg.save()
    qtbot.waitUntil(lambda: m.config.disk_pool(pool)["verify_every"] is None, timeout=5000)


def test_a_pools_verify_pace_is_set_and_cleared_in_its_properties(qtbot, bridge, master):
    m = master
    pool = m.disk_pools()[0]["name"]
    dlg = PropertiesDialog(bridge, "disk-pool", m.config.disk_pool(pool))
    qtbot.addWidget(dlg)
    field = dlg.editors["verify_max_mb_s"]
    assert field.value() == 0 and field.specialValueText() == "no limit"
    field.setValue(250)
    assert dlg.changes() == {"verify_max_mb_s": 250}
    dlg.save()
    qtbot.waitUntil(lambda: m.config.disk_pool(pool)["verify_max_mb_s"] == 250, timeout=5000)
    dlg = PropertiesDialog(bridge, "disk-pool", m.config.disk_pool(pool))
    qtbot.addWidget(dlg)
    assert dlg.editors["verify_max_mb_s"].value() == 250
    dlg.editors["verify_max_mb_s"].setValue(0)
    assert dlg.changes() == {"verify_max_mb_s": None}
    dlg.save()
    qtbot.waitUntil(lambda: m.config.disk_pool(pool)["verify_max_mb_s"] is None, timeout=5000)


def test_a_policys_choices_read_as_the_wizard_writes_them(qtbot, bridge, master):
    m = master
    dlg = PropertiesDialog(bridge, "policy", m.config.policy("p1"))
    qtbot.addWidget(dlg)
    snap, listing = dlg.editors["snapshot"], dlg.editors["file_list"]
    assert snap.currentText() == "none — read the live files"
    assert listing.currentText() == "policy engine on Storage Scale, tree walk elsewhere"
    assert dlg.value("snapshot") == "none" and dlg.changes() == {}
    listing.setCurrentIndex(listing.findData("walk"))
    assert dlg.changes() == {"file_list": "walk"}
    dlg.save()
    qtbot.waitUntil(lambda: m.config.policy("p1")["file_list"] == "walk", timeout=5000)
    # numbers are grouped as the lists group them
    assert dlg.editors["priority"].isGroupSeparatorShown()
