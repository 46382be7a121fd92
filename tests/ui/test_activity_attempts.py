"""The activity monitor and the jobs that schedules make: retries (their attempt), the data
streams of one backup (their parent job), starts missed because the window closed (status
196) and expire jobs, which belong to no client."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QTableView

from app import status as st
from ui.job_table import COLUMNS

pytestmark = pytest.mark.gui


def col(key):
    return [c.key for c in COLUMNS].index(key)


def show(console, qtbot):
    console.window.select_view("activity")
    v = console.window.views["activity"]
    qtbot.waitUntil(lambda: v.loaded, timeout=5000)
    return v


def family(m):
    """A backup with two stream jobs, a retry of a failed backup, a missed start and an
    expire job, made the way the scheduler and the dispatcher record them."""
    host = m.test_host
    common = dict(client=host, policy="p1", schedule="daily", storage_unit="stu1")
    ids = {"parent": m.jobs.create("backup", **common)}
    ids["streams"] = [m.jobs.create("backup", parent_id=ids["parent"], **common)
                      for _ in range(2)]
    ids["retry"] = m.jobs.create("backup", attempt=2, retry_of=m.test_jobs["failed"], **common)
    ids["missed"] = m.jobs.create("backup", not_after=0, **common)
    m.jobs.claim(ids["missed"], "test")
    m.jobs.finish(ids["missed"], st.WINDOW_CLOSED, "the start window closed")
    ids["expire"] = m.jobs.create("expire", params={"image": "img-1"})
    return ids


def test_attempt_parent_missed_and_expire_jobs_in_the_table(console, master, qtbot):
    ids = family(master)
    v = show(console, qtbot)
    qtbot.waitUntil(lambda: v.model.row_of(ids["expire"]) is not None, timeout=5000)

    def cell(job_id, key, role=Qt.ItemDataRole.DisplayRole):
        return v.model.index(v.model.row_of(job_id), col(key)).data(role)

    assert cell(ids["retry"], "attempt") == "2"
    assert cell(ids["retry"], "attempt", Qt.ItemDataRole.ToolTipRole) == \
        f"Attempt 2: retries job {master.test_jobs['failed']}"
    assert cell(ids["parent"], "attempt") == "1"
    for s in ids["streams"]:
        assert cell(s, "parent_id") == str(ids["parent"])
    assert cell(ids["parent"], "parent_id") == ""

    assert cell(ids["missed"], "state") == "missed"
    assert cell(ids["missed"], "status") == "196"
    assert "missed" in cell(ids["missed"], "status", Qt.ItemDataRole.ToolTipRole)
    assert v.model.counts["failed"] == 2           # the failed backup and the missed one

    assert cell(ids["expire"], "type") == "expire"
    assert cell(ids["expire"], "client") == ""
    assert cell(ids["expire"], "state") == "queued"

    # the text filter finds the missed job by its state
    v.set_filter(text="missed")
    assert [v.proxy.index(r, 0).data() for r in range(v.proxy.rowCount())] == \
        [str(ids["missed"])]
    v.set_filter()
    v.set_filter(type="expire")
    assert v.proxy.rowCount() == 1

    # Parent is hidden until chosen in the header's menu; Attempt follows Status
    hh = v.table.horizontalHeader()
    assert hh.isSectionHidden(col("parent_id")) and not hh.isSectionHidden(col("attempt"))
    assert hh.visualIndex(col("attempt")) == hh.visualIndex(col("status")) + 1
    hh.customContextMenuRequested.emit(hh.rect().center())
    menu = hh._column_menu
    parent = next(a for a in menu.actions() if a.text() == "Parent")
    assert not parent.isChecked()
    parent.trigger()
    assert not hh.isSectionHidden(col("parent_id"))
    menu.close()


def test_scheduled_backups_count_their_attempts_of_the_tries_allowed(console, master, qtbot):
    m, host = master, master.test_host
    common = dict(client=host, policy="p1", schedule="daily", storage_unit="stu1",
                  not_after=4102444800)       # a start window: the scheduler's jobs have one
    first = m.jobs.create("backup", **common)
    second = m.jobs.create("backup", attempt=2, retry_of=first, **common)
    streams = m.jobs.create("backup", params={"streams": 2}, **common)
    v = show(console, qtbot)
    qtbot.waitUntil(lambda: v.model.row_of(streams) is not None, timeout=5000)

    def attempt(job_id):
        return v.model.index(v.model.row_of(job_id), col("attempt")).data()

    assert (attempt(first), attempt(second)) == ("1 of 2", "2 of 2")
    assert attempt(streams) == "1"                  # its streams are tried, not the set
    assert attempt(m.test_jobs["failed"]) == "1"    # started by hand: restarted by hand
    m.set_setting("backup_tries", 3)
    third = m.jobs.create("backup", attempt=3, retry_of=first, **common)
    qtbot.waitUntil(lambda: v.model.row_of(third) is not None, timeout=5000)
    assert attempt(third) == "3 of 3"


def test_a_layout_saved_before_the_new_columns_shows_them_as_a_new_table(make_console, master,
                                                                          qtbot):
    from ui.settings import settings
    old_keys = COLUMNS[:col("attempt")]
    table = QTableView()
    qtbot.addWidget(table)
    table.setModel(QStandardItemModel(1, len(old_keys)))
    table.horizontalHeader().resizeSection(1, 150)
    s = settings()
    s.setValue("views/activity/header", table.horizontalHeader().saveState())
    s.setValue("views/activity/widths-by-hand", True)   # the admin's own width: kept
    s.sync()

    v = show(make_console(master), qtbot)
    hh = v.table.horizontalHeader()
    assert hh.sectionSize(1) == 150                       # the saved layout is kept
    assert hh.isSectionHidden(col("parent_id"))
    assert hh.visualIndex(col("attempt")) == hh.visualIndex(col("status")) + 1
