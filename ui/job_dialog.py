"""A job's details: its fields on one tab, its detailed log on another. Read-only; while the
job has not ended both follow it once a second, the log by fetching only new lines."""

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QPlainTextEdit, \
    QTabWidget, QVBoxLayout, QWidget

from app import status as st
from ui import fmt
from ui.resources import icon

FIELDS = (
    ("id", "Job ID", str),
    ("type", "Type", str),
    ("state", "State", str),
    ("status", "Status", None),
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
    ("percent", "Complete", fmt.percent),
    ("eta_s", "Time left", fmt.duration),
    ("wait_reason", "Waiting for", str),
    ("image_id", "Image", str),
)


def _job_and_log(m, job_id, after):
    return m.jobs.get(job_id), m.jobs.logs(job_id, after=after)


class JobDetailsDialog(QDialog):
    def __init__(self, bridge, job, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.job_id = job["id"]
        self.job = None
        self._last_log_id = 0
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
            v = QLabel()
            v.setTextFormat(Qt.TextFormat.PlainText)
            v.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            v.setWordWrap(True)
            form.addRow(f"{label}:", v)
            self._values[key] = v

        self.log_view = QPlainTextEdit()
        self.log_view.setObjectName("job-log")
        self.log_view.setReadOnly(True)
        self.log_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.log_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))

        self.tabs = QTabWidget()
        self.tabs.addTab(status_page, "Status")
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
        self.bridge.call(_job_and_log, self.job_id, self._last_log_id, done=self._loaded,
                         failed=self._failed, context=self)

    def _loaded(self, result):
        self._busy = False
        job, lines = result
        self.error.hide()
        self._show_job(job)
        if lines:
            self._last_log_id = lines[-1]["id"]
            at_end = self.log_view.verticalScrollBar().value() == \
                self.log_view.verticalScrollBar().maximum()
            self.log_view.appendPlainText("\n".join(
                f"{fmt.local_time(x['ts'])}  {x['level']:<7}  {x['message']}" for x in lines))
            if at_end:
                self.log_view.moveCursor(QTextCursor.MoveOperation.End)
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
            else:
                text = "—" if v is None or v == "" else f(v)
            self._values[key].setText(text)
            tip = fmt.utc_tooltip(v) if key in ("created", "started", "ended") else None
            self._values[key].setToolTip(tip or "")

    def value(self, key):
        return self._values[key].text()

    def done(self, r):
        self._timer.stop()
        super().done(r)
