"""The reports page against a real catalog: filters, table, summary, the stacked chart and
CSV export, driven as a user would."""

import csv
import sys
from datetime import date, datetime, timezone

import pytest
from PySide6.QtCore import QDate, QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QImage

from app import status as st
from ui import reports as ui_reports

pytestmark = pytest.mark.gui

GiB = 1 << 30


def add_job(m, client, started, ended, bytes, *, policy="p1", status=st.OK):
    """A backup job row as the dispatcher leaves it when it ends, with chosen times."""
    with m.db.tx() as c:
        return c.execute(
            "INSERT INTO jobs(type, state, status, client, policy, schedule, storage_unit, "
            "created, started, ended, bytes, files, params) "
            "VALUES ('backup', 'done', ?, ?, ?, 'daily', 'stu1', ?, ?, ?, ?, 10, '{}')",
            (status, client, policy, started, started, ended, bytes)).lastrowid


def local_iso(d, hour, minute=0):
    """The catalog's UTC text of a local time on day d."""
    ts = datetime(d.year, d.month, d.day, hour, minute).timestamp()
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def history(master):
    """Backups of three clients on 2026-09-21..23 (local days), besides the catalog's own."""
    d1, d2, d3 = date(2026, 9, 21), date(2026, 9, 22), date(2026, 9, 23)
    ids = {
        "a1": add_job(master, "alpha", local_iso(d1, 20), local_iso(d1, 20, 10), 6 * GiB),
        "b1": add_job(master, "beta", local_iso(d1, 20, 5), local_iso(d1, 20, 20), 3 * GiB),
        "a2": add_job(master, "alpha", local_iso(d2, 21), local_iso(d2, 21, 20), 2 * GiB,
                      policy="p2"),
        "c1": add_job(master, "gamma", local_iso(d3, 1), local_iso(d3, 1, 10), GiB,
                      status=st.VOLUME_UNAVAILABLE),
    }
    return ids


@pytest.fixture
def page(console, history, qtbot):
    w = console.window
    w.select_view("reports")
    v = w.views["reports"]
    qtbot.waitUntil(lambda: v.loaded and not v._busy, timeout=5000)
    with qtbot.waitSignal(v.refreshed, timeout=5000):
        v.set_range(date(2026, 9, 21), date(2026, 9, 23))
    return v


def shown_ids(v):
    return sorted(v.model.row_dict(r)["job_id"] for r in range(v.model.rowCount()))


def test_the_page_is_in_the_navigation(console):
    w = console.window
    item = w.nav_item("reports")
    assert item is not None and item.text(0) == "Reports"
    assert item.parent() is w.nav_item("overview")
    assert w.views["reports"].name == "reports"


def test_range_table_and_summary(page, history):
    v = page
    assert shown_ids(v) == sorted(history.values())
    a1 = v.model.row_dict(v.model.row_of(history["a1"]))
    cols = [c.key for c in ui_reports.COLUMNS]
    row = v.model.row_of(history["a1"])
    assert v.model.index(row, cols.index("bytes")).data() == "6.0 GiB"
    assert v.model.index(row, cols.index("elapsed_s")).data() == "0:10:00"
    # a1 and b1 overlap: one group, 9 GiB over 20 minutes
    assert a1["group"] == v.model.row_dict(v.model.row_of(history["b1"]))["group"]
    assert v.model.index(row, cols.index("group_rate_bytes_per_s")).data() == \
        "7.7 MiB/s"  # 9 GiB / 1200 s
    text = v.summary.text()
    assert text.startswith("4 backup jobs (3 succeeded, 1 failed) of 3 clients — 12.0 GiB")
    assert "wall-clock while backups ran" in text


def test_the_table_sorts_by_a_clicked_column(page, qtbot):
    v = page
    cols = [c.key for c in ui_reports.COLUMNS]
    hh = v.table.horizontalHeader()
    x = hh.sectionViewportPosition(cols.index("bytes")) + 5
    qtbot.mouseClick(hh.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, 5))
    first = [v.proxy.index(r, cols.index("bytes")).data() for r in range(v.proxy.rowCount())]
    qtbot.mouseClick(hh.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, 5))
    second = [v.proxy.index(r, cols.index("bytes")).data() for r in range(v.proxy.rowCount())]
    assert {first[0], second[0]} == {"1.0 GiB", "6.0 GiB"}
    assert first == list(reversed(second))


def test_client_and_policy_filters(page, history, qtbot):
    v = page
    clients = [v.client_box.itemText(i) for i in range(v.client_box.count())]
    assert clients[0] == "All clients" and {"alpha", "beta", "gamma"} <= set(clients)
    with qtbot.waitSignal(v.refreshed, timeout=5000):
        v.client_box.setCurrentIndex(v.client_box.findText("alpha"))
    assert shown_ids(v) == sorted([history["a1"], history["a2"]])
    assert v.chart.daily["clients"] == ["alpha"]
    with qtbot.waitSignal(v.refreshed, timeout=5000):
        v.policy_box.setCurrentIndex(v.policy_box.findText("p2"))
    assert shown_ids(v) == [history["a2"]]
    with qtbot.waitSignal(v.refreshed, timeout=5000):
        v.set_client(None)
    with qtbot.waitSignal(v.refreshed, timeout=5000):
        v.set_policy(None)
    assert shown_ids(v) == sorted(history.values())


def test_typing_a_date_narrows_the_range(page, history, qtbot):
    v = page
    v.since_edit.setFocus()
    with qtbot.waitSignal(v.refreshed, timeout=5000):
        v.since_edit.setDate(QDate(2026, 9, 22))
    assert shown_ids(v) == sorted([history["a2"], history["c1"]])
    assert v.chart.daily["days"] == ["2026-09-22", "2026-09-23"]


def test_the_chart_stacks_bytes_per_client_per_day(page):
    chart = page.chart
    d = chart.daily
    assert d["days"] == ["2026-09-21", "2026-09-22", "2026-09-23"]
    assert d["clients"] == ["alpha", "beta", "gamma"]
    assert set(chart.bars) == {"alpha", "beta", "gamma"}
    # beta sits on alpha on the first day: 6 GiB up to 9 GiB
    beta = chart.bars["beta"].opts
    assert (list(beta["x"]), list(beta["y0"]), list(beta["height"])) == ([0], [6.0], [3.0])
    gamma = chart.bars["gamma"].opts
    assert (list(gamma["x"]), list(gamma["y0"]), list(gamma["height"])) == ([2], [0.0], [1.0])
    assert chart.segment_at(0, 7.5) == {"client": "beta", "day": "2026-09-21",
                                        "bytes": 3 * GiB, "jobs": 1}
    assert chart.segment_at(0.5, 7.5) is None   # between the bars
    assert chart.segment_at(2, 0.5)["client"] == "gamma"
    # one colour per client, the same in the legend
    colours = {c: chart.bars[c].opts["brush"].color().name() for c in d["clients"]}
    assert len(set(colours.values())) == 3
    legend = [label.text for _, label in chart.legend.items]
    assert legend == ["alpha", "beta", "gamma"]


def test_the_chart_draws_bars_in_the_clients_colours(page, qtbot):
    chart = page.chart
    qtbot.waitUntil(lambda: chart.isVisible() and chart.width() > 300, timeout=5000)
    img = chart.grab().toImage()
    vb = chart.getPlotItem().getViewBox()
    # the middle of alpha's segment of the first day, in widget pixels
    p = chart.mapFromScene(vb.mapViewToScene(QPointF(0, 3.0)))
    colour = QColor(img.pixel(p.x(), p.y()))
    assert colour.name() == chart.bars["alpha"].opts["brush"].color().name()


def test_an_empty_range_says_so(page, qtbot):
    v = page
    with qtbot.waitSignal(v.refreshed, timeout=5000):
        v.set_range(date(2001, 1, 1), date(2001, 1, 3))
    assert v.model.rowCount() == 0
    assert v.summary.text() == "No backup jobs ended in this range."
    assert v.placeholder.isVisible() and "Back up now" in v.placeholder.text()
    assert v.chart.bars == {}


def test_export_csv(page, history, tmp_path, qtbot):
    v = page
    out = tmp_path / "backups.csv"
    with qtbot.waitSignal(v.exported, timeout=5000) as sig:
        assert v.export_csv(str(out))
    assert sig.args[0] == {"path": str(out), "rows": 4}
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["job_id"]) for r in rows) == sorted(history.values())
    assert all(r["started"].endswith("Z") for r in rows)
    assert "Saved 4 jobs to" in v.message.text() and v.message.isVisible()
    assert v.default_export_name() == "cairn-backups-20260921-20260923.csv"


def test_export_to_a_missing_directory_is_a_clear_message(page, tmp_path, qtbot):
    v = page
    with qtbot.waitSignal(v.export_failed, timeout=5000) as sig:
        v.export_csv(str(tmp_path / "missing" / "x.csv"))
    assert "does not exist" in sig.args[0]
    assert v.message.text().startswith("The report was not saved:")
    assert v.export_button.isEnabled()


def test_layout_is_remembered(page, qtbot):
    from PySide6.QtCore import QSettings
    v = page
    v.splitter.setSizes([100, 400])
    s = QSettings("Cairn", "test-reports")
    v.save_state(s)
    sizes = v.splitter.sizes()
    v.splitter.setSizes([400, 100])
    v.restore_state(s)
    assert v.splitter.sizes() == sizes


def test_redrawing_and_hovering_the_chart_cannot_wear_out_none_or_true(page, qtbot):
    """pyqtgraph calls Qt's void methods and emits on every redraw and mouse move; under
    PySide6 6.12.0 each costs a reference to None or True (see ui.reports.pin_singletons)."""
    chart = page.chart
    for i in range(50):
        chart.set_daily(chart.daily, chart.colours)
        chart.resize(700 + i, 300)
        qtbot.mouseMove(chart.viewport(), QPoint(100 + i * 5, 100))
    for singleton in (None, True, False):
        assert sys.getrefcount(singleton) > 1 << 39


def test_the_tooltip_of_a_bar_names_client_day_and_size(page, qtbot):
    chart = page.chart
    qtbot.waitUntil(lambda: chart.isVisible() and chart.width() > 300, timeout=5000)
    vb = chart.getPlotItem().getViewBox()
    pos = chart.mapFromScene(vb.mapViewToScene(QPointF(0, 7.5)))
    assert chart.segment_under(pos)["client"] == "beta"
    off = chart.mapFromScene(vb.mapViewToScene(QPointF(0.5, 7.5)))
    assert chart.segment_under(off) is None


def test_screenshot_of_the_page(master, history, tmp_path):
    """`cairn console --screenshot --view reports` renders the page with its data."""
    from ui.app import main
    out = tmp_path / "reports.png"
    assert main(home=master.home.root, screenshot=str(out), view="reports") == 0
    img = QImage(str(out))
    assert (img.width(), img.height()) == (1280, 800)


def test_the_restores_report_and_the_labelled_group_rates(page, history, master, qtbot):
    v = page
    # the backups a1 and b1 ran together: both rates, labelled
    text = v.groups.text()
    assert v.groups.isVisible()
    assert "sum of per-client rates" in text and "wall-clock" in text
    assert "mean per client" in text
    d = date(2026, 9, 22)
    with master.db.tx() as c:
        r1 = c.execute(
            "INSERT INTO jobs(type, state, status, client, policy, schedule, storage_unit, "
            "created, started, ended, bytes, files, params) VALUES ('restore', 'done', 0, "
            "'alpha', 'p1', 'daily', 'stu1', ?, ?, ?, ?, 3, '{}')",
            (local_iso(d, 9), local_iso(d, 9), local_iso(d, 9, 10), GiB)).lastrowid
    with qtbot.waitSignal(v.refreshed, timeout=5000):
        v.set_kind("restore")
    assert shown_ids(v) == [r1]
    assert v.title.text() == "Reports — restores"
    assert v.chart.getPlotItem().getAxis("left").labelText.startswith("Restored per day")
    assert v.summary.text().startswith("1 restore job (1 succeeded) of 1 client")
    assert not v.groups.isVisible()      # one job alone: no group to spell out
    assert v.default_export_name().startswith("cairn-restores-")
    with qtbot.waitSignal(v.refreshed, timeout=5000):
        v.set_kind("backup")
    assert shown_ids(v) == sorted(history.values())
