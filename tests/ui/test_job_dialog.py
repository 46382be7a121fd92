"""The job details window's throughput tab: a live plot of the job's rate and, once the job
has ended, its average, sustained peak and ramp-up figures."""

import time

import pytest

from app import status as st
from app import timeutil
from ui.bridge import Bridge
from ui.job_dialog import JobDetailsDialog
from ui.plots import MiB

pytestmark = pytest.mark.gui


@pytest.fixture
def bridge(master):
    b = Bridge(master)
    yield b
    b.shutdown()


def started_at(m, job_id, t):
    with m.db.tx() as c:
        c.execute("UPDATE jobs SET started=?, started_t=? WHERE id=?",
                  (timeutil.iso(t), t, job_id))


def test_plot_follows_a_running_job(master, bridge, qtbot):
    jid = master.test_jobs["active"]
    now = float(int(time.time()))
    started_at(master, jid, now - 3)
    for s in (1, 2, 3):
        master.jobs.progress(jid, bytes=s * 10 * (1 << 20), files=s, rate=10 << 20,
                             sample_t=now - 3 + s)
    dlg = JobDetailsDialog(bridge, master.jobs.get(jid))
    qtbot.addWidget(dlg)
    # each sampled second's rate held across it: two points per interval
    qtbot.waitUntil(lambda: len(dlg.plot.points) == 6, timeout=4000)
    assert [round(r, 3) for _, r in dlg.plot.points] == [10.0] * 6   # MiB/s
    assert "when the job ends" in dlg.rate_note.text()
    assert dlg.figure("average") == "—"
    for s in (4, 5):
        master.jobs.progress(jid, bytes=(30 + (s - 3) * 20) * (1 << 20), files=s,
                             rate=20 << 20, sample_t=now - 3 + s)
    qtbot.waitUntil(lambda: len(dlg.plot.points) == 10, timeout=4000)
    assert dlg.plot.points[-2:] == [pytest.approx((4.0, 20.0)), pytest.approx((5.0, 20.0))]
    master.jobs.finish(jid, st.OK)
    qtbot.waitUntil(lambda: dlg.figures is not None, timeout=4000)
    assert dlg.figures["bytes"] == 70 * (1 << 20)
    assert dlg.figure("average") == "14.0 MiB/s (70.0 MiB in 0:00:05)"
    assert dlg.figure("first_60").startswith("— (the job ran 0:00:05)")


def test_figures_of_a_finished_job_show_ramp_up_and_down(master, bridge, qtbot):
    jid = master.test_jobs["active"]
    t0 = float(int(time.time()) - 400)    # the catalog keeps whole seconds
    started_at(master, jid, t0)
    total = 0
    for s in range(1, 361):
        # 60 s ramping up to 100 MiB/s, 240 s at 100 MiB/s, 60 s at 10 MiB/s
        rate = (100 * s / 60 if s <= 60 else 100 if s <= 300 else 10) * MiB
        total += rate
        master.jobs.progress(jid, bytes=int(total), files=s, rate=rate, sample_t=t0 + s)
    master.jobs.finish(jid, st.OK)
    dlg = JobDetailsDialog(bridge, master.jobs.get(jid))
    qtbot.addWidget(dlg)
    qtbot.waitUntil(lambda: dlg.figures is not None, timeout=4000)
    assert len(dlg.plot.points) == 2 * 360
    assert dlg.figure("peak").startswith("100.0 MiB/s (best 10 s")
    assert dlg.figure("tail") == "10.0 MiB/s"
    first = dlg.figures["first"]
    assert first[60] == pytest.approx(sum(100 * s / 60 for s in range(1, 61)) * MiB, rel=1e-6)
    assert first[120] - first[60] == pytest.approx(6000 * MiB, rel=1e-6)
    assert dlg.figure("first_300").endswith("on average)")
    assert not dlg.rate_note.isVisible()
    assert dlg.tabs.tabText(1) == "Throughput"


def test_the_dedup_rate_shows_with_the_amount_it_stands_for(master, bridge, qtbot):
    jid = master.test_jobs["active"]
    master.jobs.progress(jid, bytes=4 << 30, files=1, rate=MiB, sample_t=time.time())
    master.jobs.set_dedup_ratio(jid, 75.0)
    master.jobs.finish(jid, st.OK)
    dlg = JobDetailsDialog(bridge, master.jobs.get(jid))
    qtbot.addWidget(dlg)
    label = dlg._values["dedup_ratio"]
    qtbot.waitUntil(lambda: label.text() not in ("", "—"), timeout=4000)
    assert label.text() == "75.0% (3.0 GiB of 4.0 GiB)"
    # a job that wrote to no deduplicating pool has none
    other = master.jobs.get(master.test_jobs["queued"])
    assert other.get("dedup_ratio") is None
    dlg2 = JobDetailsDialog(bridge, other)
    qtbot.addWidget(dlg2)
    qtbot.waitUntil(lambda: dlg2._values["id"].text() != "", timeout=4000)
    assert dlg2._values["dedup_ratio"].text() == "—"


def test_the_peak_window_and_first_minutes_are_chosen_in_the_window(master, bridge, qtbot):
    jid = master.test_jobs["active"]
    t0 = float(int(time.time()) - 400)
    started_at(master, jid, t0)
    # nothing sampled for 100 s, then 200 s at 50 MiB/s and 60 s at 5 MiB/s
    total = 0
    for s in range(100, 361):
        rate = 50 * MiB if s <= 300 else 5 * MiB
        total += rate if s > 100 else 0
        master.jobs.progress(jid, bytes=int(total), files=s, rate=rate, sample_t=t0 + s)
    master.jobs.finish(jid, st.OK)
    dlg = JobDetailsDialog(bridge, master.jobs.get(jid))
    qtbot.addWidget(dlg)
    qtbot.waitUntil(lambda: dlg.figures is not None, timeout=4000)
    assert dlg._figure_labels["first_n"].text() == "First 60 minutes:"
    assert dlg.figure("first_n").startswith("10.1 GiB")     # 200 x 50 + 60 x 5 MiB
    assert "the job ran" in dlg.figure("first_n")
    with qtbot.waitSignal(dlg.peak_window.valueChanged, timeout=1000):
        dlg.peak_window.setValue(3600)
    # an hour's window on a 260 s sampled run: its whole sampled run, not the silent start
    qtbot.waitUntil(lambda: dlg.figures["peak_window_s"] == 260, timeout=4000)
    assert dlg.figures["peak_bytes_per_s"] == pytest.approx((200 * 50 + 60 * 5) * MiB / 260)
    dlg.first_minutes.setValue(3)
    qtbot.waitUntil(lambda: dlg.figures["first_s"] == 180, timeout=4000)
    assert dlg._figure_labels["first_n"].text() == "First 3 minutes:"
    assert dlg.figures["first_bytes"] == pytest.approx(80 * 50 * MiB)
    assert dlg.figure("first_n") == "3.9 GiB"


def test_the_detailed_log_opens_at_its_last_lines_with_the_timestamps_in_sight(
        master, bridge, qtbot):
    jid = master.test_jobs["done"]
    for i in range(60):
        master.jobs.log(jid, f"line {i}: " + "a long path/" * 40)
    dlg = JobDetailsDialog(bridge, master.jobs.get(jid))
    qtbot.addWidget(dlg)
    dlg.resize(700, 500)
    dlg.show()
    dlg.tabs.setCurrentWidget(dlg.log_view)
    qtbot.waitUntil(lambda: "line 59" in dlg.log_view.toPlainText(), timeout=4000)
    qtbot.wait(50)
    h, v = dlg.log_view.horizontalScrollBar(), dlg.log_view.verticalScrollBar()
    assert h.maximum() > 0, "the lines are meant to be wider than the window"
    assert h.value() == 0
    # at the bottom (the horizontal bar may take the height of one line after the scroll)
    assert v.value() >= v.maximum() - 1


def test_the_throughput_axis_labels_its_zero(qtbot):
    from PySide6.QtGui import QImage, QPainter
    from ui.plots import ThroughputPlot
    plot = ThroughputPlot()
    qtbot.addWidget(plot)
    plot.resize(600, 220)
    plot.show()
    plot.set_points([(t, (50 + 30 * (t % 3)) * MiB) for t in range(30)])
    qtbot.wait(20)
    axis = plot.getPlotItem().getAxis("left")
    img = QImage(100, 300, QImage.Format.Format_ARGB32)
    painter = QPainter(img)
    try:
        texts = [spec[2] for spec in axis.generateDrawSpecs(painter)[2]]
    finally:
        painter.end()
    assert "0" in texts and "100" in texts
