"""The schedule dialog as an administrator fills it in: the three levels, every N hours/days or
calendar days with excluded dates, start windows; what it refuses and why; and the schedules
that land in the catalog through the policy wizard."""

import pytest
from PySide6.QtCore import QDate, Qt
from PySide6.QtWidgets import QDialogButtonBox

from test_wizards import bridge, drag, finish, go_next, open_wizard, storage  # noqa: F401
from ui.wizards.schedule_dialog import ScheduleDialog
from ui.wizards.schedule_text import describe_calendar, summary

pytestmark = pytest.mark.gui


def ok_button(dlg):
    return dlg.buttons.button(QDialogButtonBox.StandardButton.Ok)


def click(qtbot, widget):
    qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)


def exclude(qtbot, dlg, y, m, d):
    cal = dlg.calendar_box
    cal.exclude_date.setDate(QDate(y, m, d))
    click(qtbot, cal.add_exclude)


@pytest.fixture
def dialog(qtbot):
    def make(schedule=None, taken=()):
        dlg = ScheduleDialog(schedule, taken)
        qtbot.addWidget(dlg)
        dlg.show()
        return dlg
    return make


def test_a_retention_of_more_than_100_years_is_refused_and_an_old_one_shown(dialog):
    dlg = dialog()
    dlg.retention_unit.setCurrentIndex(dlg.retention_unit.findData("y"))
    dlg.retention.setValue(100)
    assert ok_button(dlg).isEnabled(), dlg.status.plain_text()
    dlg.retention.setValue(101)
    assert not ok_button(dlg).isEnabled()
    assert "retention '101y' is longer than 100y" in dlg.status.plain_text()
    dlg.keep_forever.setChecked(True)
    assert ok_button(dlg).isEnabled(), dlg.status.plain_text()
    # a schedule saved before the limit opens as it is, and asks for a shorter retention
    old = dialog({"name": "old", "type": "full", "retention": "5000y", "frequency": "1d",
                  "windows": []})
    assert old.retention.value() == 5000 and not ok_button(old).isEnabled()


def test_invalid_input_keeps_ok_disabled_and_says_why(dialog, qtbot):
    dlg = dialog(taken=["nightly"])
    assert ok_button(dlg).isEnabled(), dlg.status.plain_text()
    assert dlg.every.isChecked() and not dlg.calendar_box.isVisible()
    assert "manual backups only" in dlg.windows_text.text()

    dlg.name.clear()
    assert not ok_button(dlg).isEnabled()
    assert "Give the schedule a name" in dlg.status.plain_text()
    qtbot.keyClicks(dlg.name, "nightly")
    assert "already has a schedule named 'nightly'" in dlg.status.plain_text()
    dlg.name.setText("bad name!")
    assert not ok_button(dlg).isEnabled()
    dlg.name.setText("weekdays")
    assert ok_button(dlg).isEnabled()

    # calendar days: at least one day, a window, and a window on every weekday named
    click(qtbot, dlg.on_calendar)
    assert dlg.calendar_box.isVisible() and not dlg.frequency.isEnabled()
    assert not ok_button(dlg).isEnabled()
    assert "at least one weekday or day of the month" in dlg.status.plain_text()
    click(qtbot, dlg.calendar_box.weekdays[0])        # Mon
    click(qtbot, dlg.calendar_box.weekdays[2])        # Wed
    assert not ok_button(dlg).isEnabled()
    assert "needs a start window" in dlg.status.plain_text()
    drag(qtbot, dlg.grid, (0, 22), (0, 23))
    assert not ok_button(dlg).isEnabled()
    assert "No start window opens on Wed" in dlg.status.plain_text()
    drag(qtbot, dlg.grid, (2, 22), (2, 23))
    assert ok_button(dlg).isEnabled(), dlg.status.plain_text()
    assert dlg.status.plain_text() == ""

    # back to a frequency: the calendar does not count any more
    click(qtbot, dlg.every)
    assert ok_button(dlg).isEnabled() and not dlg.calendar_box.isVisible()
    assert "calendar" not in dlg.schedule()


def test_a_calendar_may_start_any_time_of_the_week(dialog, qtbot):
    dlg = dialog()
    click(qtbot, dlg.on_calendar)
    for box in dlg.calendar_box.weekdays:
        click(qtbot, box)
    drag(qtbot, dlg.grid, (0, 0), (6, 23))
    # one window of the whole week would open on Monday only: one opens on each day
    assert ok_button(dlg).isEnabled(), dlg.status.plain_text()
    assert dlg.schedule()["windows"] == [{"day": d, "start": "00:00", "hours": 24}
                                         for d in range(7)]
    assert "Mon–Sun 00:00 for 24 hours" in dlg.windows_text.text()
    assert "every day" in dlg.calendar_box.summary.text()


def test_excluded_dates_are_added_from_the_date_picker_and_removed(dialog, qtbot):
    dlg = dialog()
    click(qtbot, dlg.on_calendar)
    cal = dlg.calendar_box
    exclude(qtbot, dlg, 2026, 12, 25)
    exclude(qtbot, dlg, 2026, 1, 1)
    assert cal.excluded() == ["2026-01-01", "2026-12-25"]     # in date order
    # the date shown is listed already: nothing to add twice
    assert not cal.add_exclude.isEnabled()
    assert not cal.add_excluded()
    assert not cal.remove_exclude.isEnabled()
    cal.exclude.item(0).setSelected(True)
    assert cal.remove_exclude.isEnabled()
    click(qtbot, cal.remove_exclude)
    assert cal.excluded() == ["2026-12-25"]
    click(qtbot, cal.monthdays["last"])
    assert "on the last day of the month, except 2026-12-25" in cal.summary.text()


def test_an_existing_schedule_opens_as_it_is(dialog):
    s = {"name": "month-end", "type": "cumulative", "retention": "infinite", "frequency": None,
         "calendar": {"weekdays": [4], "monthdays": [1, "last"], "exclude": ["2026-12-31"]},
         "windows": [{"day": 4, "start": "20:00", "hours": 4}]}
    dlg = dialog(s)
    assert dlg.type_buttons["cumulative"].isChecked() and dlg.keep_forever.isChecked()
    assert dlg.on_calendar.isChecked()
    assert dlg.schedule() == s
    # the catalog's form: frequency in seconds
    dlg = dialog({"name": "twice", "type": "differential", "retention": "2w",
                  "frequency_s": 12 * 3600, "frequency": "12h", "calendar": None,
                  "windows": []})
    assert dlg.every.isChecked() and dlg.frequency.value() == 12
    assert dlg.frequency_unit.currentData() == "h"
    assert dlg.schedule()["frequency"] == "12h"


def test_schedule_text_names_level_frequency_calendar_and_windows():
    assert describe_calendar({"weekdays": [0, 1, 2, 3, 4, 5, 6], "monthdays": [],
                              "exclude": []}) == "every day"
    assert describe_calendar({"weekdays": [5], "monthdays": [2, 3, 11, 22],
                              "exclude": []}) == ("on Sat, and on the 2nd, the 3rd, the 11th "
                                                  "and the 22nd of the month")
    s = {"name": "n", "type": "differential", "retention": "2w", "frequency": "12h",
         "windows": [{"day": d, "start": "22:00", "hours": 6} for d in range(5)]}
    assert summary(s) == ("n: differential incremental, every 12 hours, kept 2 weeks; starts "
                          "within: Mon–Fri 22:00 for 6 hours.")


def test_dialog_schedules_land_in_the_catalog(open_wizard, empty_master, qtbot,  # noqa: F811
                                              tmp_path):
    host = storage(empty_master, tmp_path)
    w = open_wizard("policy", clients=[host])
    qtbot.keyClicks(w.attributes_page.name, "pol1")
    go_next(qtbot, w)
    sp = w.schedules_page

    # a weekly full, Saturdays 20:00-08:00, kept 8 weeks
    dlg = sp.add()
    dlg.name.setText("weekly-full")
    dlg.frequency.setValue(1)
    dlg.frequency_unit.setCurrentIndex(dlg.frequency_unit.findData("w"))
    dlg.retention.setValue(8)
    drag(qtbot, dlg.grid, (5, 20), (5, 23))
    drag(qtbot, dlg.grid, (6, 0), (6, 7))
    click(qtbot, ok_button(dlg))

    # differentials on weekdays Mon and Wed and on the 1st and the last day of the month,
    # but not at Christmas
    dlg = sp.add()
    dlg.name.setText("diff")
    click(qtbot, dlg.type_buttons["differential"])
    click(qtbot, dlg.on_calendar)
    cal = dlg.calendar_box
    click(qtbot, cal.weekdays[0])
    click(qtbot, cal.weekdays[2])
    click(qtbot, cal.monthdays[1])
    click(qtbot, cal.monthdays["last"])
    exclude(qtbot, dlg, 2026, 12, 25)
    drag(qtbot, dlg.grid, (0, 21), (6, 22))     # every day 21:00-23:00
    dlg.retention.setValue(2)
    assert ok_button(dlg).isEnabled(), dlg.status.plain_text()
    click(qtbot, ok_button(dlg))

    # cumulatives every 12 hours, any time, kept forever
    dlg = sp.add()
    dlg.name.setText("cumulative")
    click(qtbot, dlg.type_buttons["cumulative"])
    dlg.frequency.setValue(12)
    dlg.frequency_unit.setCurrentIndex(dlg.frequency_unit.findData("h"))
    dlg.keep_forever.setChecked(True)
    drag(qtbot, dlg.grid, (0, 0), (6, 23))
    click(qtbot, ok_button(dlg))

    texts = [sp.list.item(i).text() for i in range(sp.list.count())]
    assert texts[0].startswith("weekly-full: full, every week, kept 8 weeks\nStarts within: "
                               "Sat 20:00 for 12 hours")
    assert texts[1].startswith("diff: differential incremental, on Mon and Wed, and on the "
                               "1st and the last day of the month, except 2026-12-25, kept "
                               "2 weeks\nStarts within: Mon–Sun 21:00 for 2 hours")
    assert texts[2].startswith("cumulative: cumulative incremental, every 12 hours, kept "
                               "forever")

    go_next(qtbot, w)
    go_next(qtbot, w)
    qtbot.keyClicks(w.selections_page.path, "/data")
    w.selections_page.add_typed()
    go_next(qtbot, w)
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    finish(qtbot, w)

    weekly, diff, cum = empty_master.config.policy("pol1")["schedules"]
    assert (weekly["name"], weekly["type"], weekly["retention"]) == ("weekly-full", "full", "8w")
    assert weekly["frequency_s"] == 7 * 86400 and weekly["calendar"] is None
    assert weekly["windows"] == [{"day": 5, "start": "20:00", "hours": 12}]
    assert (diff["type"], diff["retention"], diff["frequency_s"]) == ("differential", "2w", None)
    assert diff["calendar"] == {"weekdays": [0, 2], "monthdays": [1, "last"],
                                "exclude": ["2026-12-25"]}
    assert diff["windows"] == [{"day": d, "start": "21:00", "hours": 2} for d in range(7)]
    assert (cum["type"], cum["retention"], cum["frequency_s"]) == ("cumulative", "infinite",
                                                                    12 * 3600)
    assert cum["windows"] == [{"day": 0, "start": "00:00", "hours": 168}]


def test_incrementals_without_a_full_schedule_are_explained(open_wizard, empty_master,  # noqa: F811
                                                            qtbot, tmp_path):
    storage(empty_master, tmp_path)
    w = open_wizard("policy")
    qtbot.keyClicks(w.attributes_page.name, "pol1")
    go_next(qtbot, w)
    sp = w.schedules_page
    assert "started by hand" in sp.hint.text()
    dlg = sp.add()
    dlg.name.setText("cum")
    click(qtbot, dlg.type_buttons["cumulative"])
    click(qtbot, ok_button(dlg))
    assert "no full schedule" in sp.hint.text()
    dlg = sp.add()
    click(qtbot, ok_button(dlg))                  # the default: a full
    assert sp.hint.text() == ""


def test_a_full_schedule_may_read_every_file(dialog, qtbot):
    dlg = dialog({"name": "monthly", "type": "full", "retention": "1y", "frequency": "4w",
                  "windows": []})
    assert dlg.read_all.isEnabled() and not dlg.read_all.isChecked()
    assert "read_all" not in dlg.schedule()
    dlg.read_all.click()
    s = dlg.schedule()
    assert s["read_all"] is True
    assert summary(s).startswith("monthly: full reading every file, every 4 weeks")
    dlg.type_buttons["differential"].click()  # an incremental reads what changed
    assert not dlg.read_all.isEnabled() and "read_all" not in dlg.schedule()
    dlg.type_buttons["full"].click()
    assert dlg.schedule()["read_all"] is True
    again = dialog(s)
    assert again.read_all.isChecked() and again.schedule() == s
