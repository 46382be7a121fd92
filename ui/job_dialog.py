"""A job's details: its fields on one tab, its throughput on another (a plot of MiB/s over
time and, once the job has ended, its average, sustained peak and ramp-up figures), its
detailed log on a third. Read-only; while the job has not ended all three follow it once a
second, the log and the samples by fetching only what is new."""

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel, \
    QPlainTextEdit, QSpinBox, QTabWidget, QVBoxLayout, QWidget

from app import status as st
from app import timeutil
from app.jobs import stats as job_stats
from ui import fmt
from ui.job_text import result_text
from ui.plots import ThroughputPlot
from ui.properties import value_label
from ui.resources import icon

FIELDS = (
    ("id", "Job ID", str),
    ("type", "Type", str),
    ("state", "State", str),
    ("status", "Status", None),
    ("attempt", "Attempt", str),
    ("retry_of", "Retries job", str),
    ("parent_id", "Part of job", str),
    ("client", "Client", str),
    ("policy", "Policy", str),
    ("schedule", "Schedule", str),
    ("storage_unit", "Storage unit", str),
    ("created", "Queued", fmt.local_time),
    ("started", "Started", fmt.local_time),
    ("ended", "Ended", fmt.local_time),
    ("elapsed_s", "Elapsed", fmt.duration),
    ("files", "Files", lambda v: f"{v:,}"),
    ("bytes", "Bytes", lambda v: f"{fmt.size(v)} ({v:,} bytes)"),
    ("rate_bytes_per_s", "Rate", fmt.rate),
    ("dedup_ratio", "Dedup rate", None),
    ("percent", "Complete", fmt.percent),
    ("eta_s", "Time left", fmt.duration),
    ("wait_reason", "Waiting for", str),
    ("not_after", "Start window closes", lambda v: fmt.local_time(timeutil.iso(v))),
    ("image_id", "Image", str),
)


FIGURES = (
    ("average", "Average"),
    ("peak", "Sustained peak"),
    ("first_60", "First minute"),
    ("first_120", "First 2 minutes"),
    ("first_300", "First 5 minutes"),
    ("first_n", "First N minutes"),
    ("tail", "Last minute"),
)


def _job_and_log(m, job_id, after_log, after_t, peak_window_s, first_s):
    """The job, its new log lines, its new samples and (once ended) its figures: one round
    trip to a master over SSH (Master.batch)."""
    s, log = m.batch([("job_stats", (job_id,), {"after": after_t, "peak_window_s": peak_window_s,
                                                "first_s": first_s}),
                      ("job_logs", (job_id,), {"after": after_log})])
    return s["job"], log, s["samples"], s["stats"]


def _figures(m, job_id, peak_window_s, first_s):
    """The figures of an ended job over another peak window or "first N" span."""
    return m.job_stats(job_id, after=float("inf"), peak_window_s=peak_window_s,
                       first_s=first_s)["stats"]


def figure_texts(figures):
    """The throughput figures of an ended job as the Throughput tab shows them."""
    if not figures or figures["average_bytes_per_s"] is None:
        return {k: "—" for k, _ in FIGURES}

    def moved(mark):
        b = figures["first"].get(mark)
        if b is None:
            return f"— (the job ran {fmt.duration(figures['duration_s'])})"
        return f"{fmt.size(b)} ({fmt.rate(b / mark) or '0 B/s'} on average)"

    peak = figures["peak_bytes_per_s"]
    first_n = figures.get("first_bytes")
    ran = f" (the job ran {fmt.duration(figures['duration_s'])})"
    return {
        "average": f"{fmt.rate(figures['average_bytes_per_s']) or '0 B/s'} "
                   f"({fmt.size(figures['bytes'])} in {fmt.duration(figures['duration_s'])})",
        "peak": "—" if peak is None else
                f"{fmt.rate(peak) or '0 B/s'} (best {figures['peak_window_s']:.0f} s, from "
                f"{fmt.duration(figures['peak_at_s'])} on)",
        "first_60": moved(60),
        "first_120": moved(120),
        "first_300": moved(300),
        "first_n": "—" if first_n is None else
                   fmt.size(first_n) + (ran if figures["duration_s"] < figures["first_s"]
                                        else ""),
        "tail": fmt.rate(figures["tail_bytes_per_s"]) or "0 B/s",
    }


class JobDetailsDialog(QDialog):
    def __init__(self, bridge, job, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.job_id = job["id"]
        self.job = None
        self._last_log_id = 0
        self._samples = []
        self.figures = None
        self._busy = False
        self.setWindowTitle(f"Job {self.job_id} — {job.get('type', '')} "
                            f"{job.get('client') or ''}".strip())
        self.setWindowIcon(icon("activity"))
        self.resize(760, 560)

        status_page = QWidget()
        form = QFormLayout(status_page)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self._values = {}
        for key, label, _ in FIELDS:
            v = value_label()
            form.addRow(f"{label}:", v)
            self._values[key] = v
        # What a verify or reclaim found (the damaged files of each image), when there is any.
        self.result_label = value_label(name="job-result")
        form.addRow("Result:", self.result_label)
        self._form = form

        self.log_view = QPlainTextEdit()
        self.log_view.setObjectName("job-log")
        self.log_view.setReadOnly(True)
        self.log_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.log_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))

        rate_page = QWidget()
        rate_page.setObjectName("job-throughput")
        self.plot = ThroughputPlot()
        self.rate_note = QLabel()
        self.rate_note.setTextFormat(Qt.TextFormat.PlainText)
        self.rate_note.setWordWrap(True)
        figures = QFormLayout()
        figures.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self._figures = {}
        self._figure_labels = {}
        for key, label in FIGURES:
            v = QLabel("—")
            v.setTextFormat(Qt.TextFormat.PlainText)
            v.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            figures.addRow(f"{label}:", v)
            self._figures[key] = v
            self._figure_labels[key] = figures.labelForField(v)
        figures.addRow("Figures:", self._window_spins())
        rl = QVBoxLayout(rate_page)
        rl.addWidget(self.plot, 1)
        rl.addWidget(self.rate_note)
        rl.addLayout(figures)

        self.tabs = QTabWidget()
        self.tabs.addTab(status_page, "Status")
        self.tabs.addTab(rate_page, "Throughput")
        self.tabs.addTab(self.log_view, "Detailed log")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        self.error = QLabel()
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setWordWrap(True)
        self.error.hide()

        lay = QVBoxLayout(self)
        lay.addWidget(self.tabs, 1)
        lay.addWidget(self.error)
        lay.addWidget(buttons)

        self._show_job(job)
        self._timer = QTimer(self)
        self._timer.setInterval(1000)
        self._timer.timeout.connect(self.refresh)
        self.refresh()

    @property
    def log_text(self):
        return self.log_view.toPlainText()

    def refresh(self):
        if self._busy:
            return
        self._busy = True
        after_t = self._samples[-1]["t"] if self._samples else None
        self.bridge.call(_job_and_log, self.job_id, self._last_log_id, after_t,
                         *self.windows(), done=self._loaded,
                         failed=self._failed, context=self)

    def _loaded(self, result):
        self._busy = False
        job, lines, samples, figures = result
        self.error.hide()
        self._show_job(job)
        self._show_throughput(job, samples, figures)
        if lines:
            self._last_log_id = lines[-1]["id"]
            at_end = self.log_view.verticalScrollBar().value() == \
                self.log_view.verticalScrollBar().maximum()
            self.log_view.appendPlainText("\n".join(
                f"{fmt.local_time(x['ts'])}  {x['level']:<7}  {fmt.shown(x['message'])}"
                for x in lines))
            if at_end:
                # to the last line's start: its end would scroll a long line's timestamp,
                # and every other line's, out of sight to the left
                self.log_view.moveCursor(QTextCursor.MoveOperation.End)
                self.log_view.moveCursor(QTextCursor.MoveOperation.StartOfLine)
                self.log_view.horizontalScrollBar().setValue(0)
        if job["state"] == "done":
            self._timer.stop()
        elif not self._timer.isActive():
            self._timer.start()

    def _failed(self, err):
        self._busy = False
        self.error.setText(f"Could not read job {self.job_id}: {err}")
        self.error.show()
        self._timer.stop()

    def _show_job(self, job):
        self.job = job
        for key, _, f in FIELDS:
            v = job.get(key)
            if key == "status":
                text = "—" if v is None else f"{v} — {job.get('status_text') or st.text(v)}"
                if v == st.WINDOW_CLOSED:
                    text = "missed: " + text
            elif key == "dedup_ratio":
                # the share of the data the deduplicating pool held already (None elsewhere)
                text = "—" if v is None else fmt.dedup_text(job)
            else:
                text = "—" if v is None or v == "" else f(v)
            self._values[key].setText(text)
            tip = fmt.utc_tooltip(v) if key in ("created", "started", "ended") else None
            self._values[key].setToolTip(tip or "")
        text = result_text(job) if job.get("result") else ""
        self.result_label.setText(text)
        self._form.setRowVisible(self.result_label, bool(text))

    def value(self, key):
        return self._values[key].text()

    def _window_spins(self):
        """The peak window and the "first N minutes" span, as spin boxes in a row."""
        def spin(name, high, value, suffix, tip):
            w = QSpinBox()
            w.setObjectName(name)
            w.setRange(1, high)
            w.setValue(value)
            w.setSuffix(suffix)
            w.setToolTip(tip)
            w.valueChanged.connect(self._windows_changed)
            return w
        self.peak_window = spin("job-peak-window", 24 * 3600, int(job_stats.PEAK_WINDOW_S),
                                " s", "The sustained peak is the best stretch this long "
                                "(3600 s: the best hour)")
        self.first_minutes = spin("job-first-minutes", 24 * 60, int(job_stats.FIRST_S // 60),
                                  " min", "The data the job moved in its first N minutes")
        row = QHBoxLayout()
        for text, w in (("Peak over", self.peak_window), ("first", self.first_minutes)):
            label = QLabel(text)
            label.setBuddy(w)
            row.addWidget(label)
            row.addWidget(w)
        row.addStretch(1)
        self._set_first_label()
        return row

    def windows(self):
        """(peak window, "first N" span), in seconds, as chosen."""
        return float(self.peak_window.value()), float(self.first_minutes.value() * 60)

    def _set_first_label(self):
        n = self.first_minutes.value()
        self._figure_labels["first_n"].setText(f"First {n} minute{'s' if n != 1 else ''}:")

    def _windows_changed(self, *_):
        self._set_first_label()
        if self.job is None or self.job.get("state") != "done":
            return      # the figures come with the job's end, over the windows chosen then
        self.bridge.call(_figures, self.job_id, *self.windows(), done=self._figures_loaded,
                         failed=self._failed, context=self)

    def _figures_loaded(self, figures):
        if figures is None:
            return
        self.figures = figures
        for key, text in figure_texts(figures).items():
            self._figures[key].setText(text)

    def figure(self, key):
        return self._figures[key].text()

    def _show_throughput(self, job, samples, figures):
        self._samples.extend(samples)
        pts = job_stats.points(self._samples, job_stats.job_start(job))
        origin = pts[0][0] if pts else 0.0
        # Each sampled interval's rate held across it: a ramp drawn between the points would
        # show speeds the job never ran at.
        steps = []
        for (t0, b0), (t1, b1) in zip(pts, pts[1:]):
            if t1 > t0:
                rate = max(0.0, (b1 - b0) / (t1 - t0))
                steps += [(t0 - origin, rate), (t1 - origin, rate)]
        self.plot.set_points(steps)
        if job["state"] == "queued":
            self.rate_note.setText("The job has not started yet.")
        elif job["state"] == "active":
            self.rate_note.setText("Average, peak and ramp-up figures follow when the job "
                                   "ends.")
        elif len(pts) < 2:
            self.rate_note.setText("The job moved no data that was sampled.")
        else:
            self.rate_note.setText("")
        self.rate_note.setVisible(bool(self.rate_note.text()))
        if figures is not None:
            self.figures = figures
        for key, text in figure_texts(self.figures).items():
            self._figures[key].setText(text)

    def done(self, r):
        self._timer.stop()
        super().done(r)
