"""Test storage performance: the disk benchmark of a storage server's volumes (a benchmark
job, app/jobs/benchmark.py), started from a disk pool's properties or the disk pool wizard's
volumes, or, for a server whose pool lives in a bucket (a cloud server), the object storage
benchmark of its bucket (app/jobs/object_benchmark.py). The job runs in the dispatcher like
any other (it shows in the activity monitor, where it can be canceled too); this window
follows it, then shows its steps in a table and a plot: write, read and combined throughput
against the number of writer/reader pairs, with the sizing levels (app/storage_sizing.py) as
horizontal lines, or the bucket's write and read throughput against the number of threads.
Earlier runs of the server are listed to compare with."""

import html

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QAbstractItemView, QCheckBox, QComboBox, QDialog, \
    QDialogButtonBox, QFormLayout, QHBoxLayout, QHeaderView, QLabel, QProgressBar, \
    QPushButton, QSpinBox, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from app import storage_sizing
from app.jobs.object_benchmark import WORKLOAD as OBJECT, best_line, bucket_label
from plugins.storage import registry
from ui import fmt, plots
from ui.resources import icon


POLL_MS = 500
WORKLOAD_TEXT = {
    "stgpool": "Storage pool: 256 KiB sequential writes and reads (a pool's containers)",
    "db": "Database: 8 KiB random writes and reads (a catalog's pages)",
}
OBJECT_TEXT = "Object storage: uploads (multipart), whole and ranged reads of the bucket"
MiB = 1 << 20
COLUMNS = (("Pairs", "threads", "{:d}"), ("Write MiB/s", "write_mb_s", "{:.1f}"),
           ("Read MiB/s", "read_mb_s", "{:.1f}"), ("Combined MiB/s", "combined_mb_s", "{:.1f}"),
           ("Peak MiB/s", "max_combined_mb_s", "{:.1f}"), ("Write IOPS", "write_iops", "{:.0f}"),
           ("Read IOPS", "read_iops", "{:.0f}"), ("Write ms p50/95/99", "write", None),
           ("Read ms p50/95/99", "read", None))
OBJECT_COLUMNS = (("Threads", "threads", "{:d}"), ("Object", "object_size", None),
                  ("Write MiB/s", "write_mb_s", "{:.1f}"), ("Read MiB/s", "read_mb_s", "{:.1f}"),
                  ("Ranged MiB/s", "ranged_read_mb_s", "{:.1f}"),
                  ("Ranged ops/s", "ranged_ops_s", "{:.0f}"), ("PUT ms p50/95", "put", None),
                  ("GET ms p50/95", "get", None), ("Ranged ms p50/95", "ranged", None))
CURVES = (("write_mb_s", "Write", "#2e86c1"), ("read_mb_s", "Read", "#28b463"),
          ("combined_mb_s", "Combined", "#d35400"))
OBJECT_CURVES = {"write_mb_s": "Write (PUT)", "read_mb_s": "Read (GET)"}


def latency_text(step, kind, quantiles=(50, 95, 99)):
    vals = [step.get(f"{kind}_p{q}_ms") for q in quantiles]
    return " / ".join("—" if v is None else f"{v:.2f}" for v in vals)


def cell_text(step, key, form, workload):
    if key == "object_size":
        return fmt.size(step.get(key))
    if form is None:
        return latency_text(step, key, (50, 95) if workload == OBJECT else (50, 95, 99))
    return "—" if step.get(key) is None else form.format(step[key])


def run_text(run):
    """One earlier run in the list of runs."""
    if run["workload"] == OBJECT:
        w, r = run.get("max_write_mb_s"), run.get("max_read_mb_s")
        best = (f"best write {w:.0f}, read {r:.0f} MiB/s" if w is not None else "no step")
        size = f" of {fmt.size(run['io_size'])}" if run.get("io_size") else ""
        what = f"object{size}, {len(run['steps'])} thread count(s)"
    else:
        b = run.get("max_combined_mb_s")
        best = f"best {b:.0f} MiB/s" if b is not None else "no step"
        what = f"{run['workload']}, {len(run['steps'])} step(s)"
    return (f"#{run['id']} {fmt.local_time(run['started'])} — {what}, {best}"
            + ("" if run.get("status") == 0 else f" (status {run.get('status')})"))


def _translucent(colour, alpha=200):
    """A label's background that keeps a curve under it visible."""
    c = QColor(colour)
    c.setAlpha(alpha)
    return c


def _job_and_last_line(m, job_id):
    logs = m.job_logs(job_id)
    return m.job(job_id), (logs[-1]["message"] if logs else None)


class BenchmarkPlot(pg.PlotWidget):
    """Throughput against pairs: write, read and combined, and the sizing levels."""

    def __init__(self, parent=None):
        super().__init__(parent=parent)
        self.setObjectName("benchmark-plot")
        pi = plots.throughput_axes(self.getPlotItem(), "Writer/reader pairs")
        pal = self.palette()
        self.setBackground(pal.color(QPalette.ColorRole.Base))
        text = pal.color(QPalette.ColorRole.Text)
        # one row at the top left, in the headroom show_steps leaves above the curves
        self.legend = pi.addLegend(offset=(10, 5), colCount=len(CURVES), labelTextColor=text)
        self.curves = {}
        for (key, name, colour), symbol in zip(CURVES, ("t", "o", "s")):
            pen = pg.mkPen(QColor(colour), width=2)
            self.curves[key] = pi.plot([], [], pen=pen, symbol=symbol, symbolSize=8,
                                       symbolBrush=QColor(colour), symbolPen=pen, name=name)
        self.object_mode = None
        self.marks = []
        for axis in ("left", "bottom"):
            pi.getAxis(axis).setPen(text)
            pi.getAxis(axis).setTextPen(text)
        for level in storage_sizing.LEVELS:
            line = pg.InfiniteLine(
                pos=level["low_mb_s"], angle=0,
                pen=pg.mkPen(QColor("#7f8c8d"), width=1, style=Qt.PenStyle.DashLine),
                label=f"{level['label']}: {level['ingest']} ({level['low_mb_s']}-"
                      f"{level['high_mb_s']} MiB/s)",
                labelOpts={"position": 0.98, "anchors": [(1, 1), (1, 1)], "color": text,
                           "fill": _translucent(pal.color(QPalette.ColorRole.Base))})
            pi.addItem(line)
            self.marks.append(line)
        self.setMinimumHeight(240)
        self.show_steps([])

    def _mode(self, workload):
        """Pairs, three curves and the sizing levels for a disk run; threads, write and read
        for an object run."""
        obj = workload == OBJECT
        if obj == self.object_mode:
            return
        self.object_mode = obj
        pi = self.getPlotItem()
        pi.setLabel("bottom", "Threads" if obj else "Writer/reader pairs")
        self.legend.clear()
        for key, name, _colour in CURVES:
            shown = key in OBJECT_CURVES or not obj
            self.curves[key].setVisible(shown)
            if shown:
                self.legend.addItem(self.curves[key], OBJECT_CURVES[key] if obj else name)
        for line in self.marks:
            line.setVisible(not obj)

    def show_steps(self, steps, workload=None):
        self._mode(workload)
        obj = workload == OBJECT
        xs = [s["threads"] for s in steps]
        for key, _name, _colour in CURVES:
            self.curves[key].setData(xs, [] if obj and key not in OBJECT_CURVES else
                                     [s[key] for s in steps])
        if obj:
            top = max([max(s["write_mb_s"], s["read_mb_s"]) for s in steps] + [10])
        else:
            top = max([s["combined_mb_s"] for s in steps]
                      + [storage_sizing.LEVELS[-1]["high_mb_s"]])
        vb = self.getPlotItem().getViewBox()
        vb.setYRange(0, top * 1.2, padding=0)
        most = max(xs + [4])
        vb.setXRange(0.5 if most < 20 else 0, most + (0.5 if most < 20 else most / 40),
                     padding=0)
        # whole numbers: a tick per pair or thread up to 20, then pyqtgraph's own
        axis = self.getPlotItem().getAxis("bottom")
        if most < 20:
            axis.setTickSpacing(1, 1)
        else:
            axis.setTickSpacing()

    def points(self, key):
        xs, ys = self.curves[key].getData()
        return list(zip([] if xs is None else list(xs), [] if ys is None else list(ys)))


class BenchmarkDialog(QDialog):
    """server: the storage server's name; volumes: the directories to test (None: its
    pools' volumes); pool: the disk pool it was opened from, named in the title. tuning: the
    job's step_seconds and file_size, or an object run's objects_per_thread, ranged_size,
    ranged_per_thread, part_size (tests make runs short). Once the server is read, a server
    whose pool lives in a bucket offers the object benchmark first."""

    def __init__(self, bridge, server, volumes=None, pool=None, parent=None, tuning=None):
        super().__init__(parent)
        self.bridge, self.server = bridge, server
        self.volumes = list(volumes) if volumes else None
        self.tuning = dict(tuning or {})
        self.job_id = None
        self.job = None
        self.runs = []
        self.setObjectName("benchmark-dialog")
        self.setWindowTitle(f"Test storage performance — {pool or server}")
        self.setWindowIcon(icon("disk-pool"))
        self.resize(980, 800)

        self.form = form = QFormLayout()
        form.addRow("Storage server", QLabel(f"<b>{html.escape(server)}</b>"))
        self.vols_label = QLabel("\n".join(self.volumes) if self.volumes else
                                 "the volumes of its disk pools")
        self.vols_label.setTextFormat(Qt.TextFormat.PlainText)
        form.addRow("Volumes", self.vols_label)
        self.bucket_label = QLabel()
        self.bucket_label.setObjectName("benchmark-bucket")
        self.bucket_label.setTextFormat(Qt.TextFormat.PlainText)
        form.addRow("Bucket", self.bucket_label)
        self.workload = QComboBox()
        self.workload.setObjectName("benchmark-workload")
        for key, text in WORKLOAD_TEXT.items():
            self.workload.addItem(text, key)
        form.addRow("Workload", self.workload)
        self.max_pairs = QSpinBox()
        self.max_pairs.setRange(1, 100)
        self.max_pairs.setValue(8)
        self.max_pairs.setToolTip("A pair (a writer and a reader on a directory of its own) is "
                                  "added each step until the combined throughput stops "
                                  "growing or this many run")
        form.addRow("Most pairs", self.max_pairs)
        self._thread_rows(form)
        self.workload.currentIndexChanged.connect(self._workload_chosen)
        self.force = QCheckBox("Run even while backups or restores use the pool (they slow "
                               "down, and the figures come out low)")
        form.addRow("", self.force)

        self.start_button = QPushButton(icon("state-active"), "&Start")
        self.start_button.setObjectName("benchmark-start")
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton(icon("action-cancel"), "&Cancel the run")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel_run)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.hide()
        row = QHBoxLayout()
        row.addWidget(self.start_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.progress, 1)
        self.state = QLabel()
        self.state.setObjectName("benchmark-state")
        self.state.setWordWrap(True)
        self.state.setTextFormat(Qt.TextFormat.PlainText)
        self._workload_chosen()

        self.run_list = QComboBox()
        self.run_list.setObjectName("benchmark-runs")
        self.run_list.currentIndexChanged.connect(self._run_chosen)
        runs_row = QHBoxLayout()
        runs_row.addWidget(QLabel("Show run:"))
        runs_row.addWidget(self.run_list, 1)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("benchmark-steps")
        self.table.setHorizontalHeaderLabels([c[0] for c in COLUMNS])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.plot = BenchmarkPlot()
        self.verdict = QLabel("")
        self.verdict.setObjectName("benchmark-verdict")
        self.verdict.setWordWrap(True)
        self.verdict.setTextFormat(Qt.TextFormat.PlainText)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)

        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addLayout(row)
        lay.addWidget(self.state)
        lay.addLayout(runs_row)
        lay.addWidget(self.table, 2)
        lay.addWidget(self.plot, 3)
        lay.addWidget(self.verdict)
        lay.addWidget(buttons)
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self._poll)
        self.load_runs()
        self.bridge.call(lambda m: m.storage_server(server), done=self._server, context=self)

    def _thread_rows(self, form):
        """The object benchmark's settings: thread counts and object size."""
        self.min_threads, self.max_threads, self.step = QSpinBox(), QSpinBox(), QSpinBox()
        for spin, value in ((self.min_threads, 1), (self.max_threads, 8), (self.step, 1)):
            spin.setRange(1, 100)
            spin.setValue(value)
        self.threads_row = QWidget()
        row = QHBoxLayout(self.threads_row)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.min_threads, QLabel("to"), self.max_threads, QLabel("by"), self.step):
            row.addWidget(w)
        row.addStretch(1)
        self.threads_row.setToolTip("Each thread count runs its uploads, then its whole "
                                    "reads, then its ranged reads: from the first count to "
                                    "the last by the step (1 to 100 by 10: 1, 10, 20 … 100)")
        form.addRow("Threads", self.threads_row)
        self.object_size = QSpinBox()
        self.object_size.setRange(1, 1024)
        self.object_size.setValue(64)
        self.object_size.setSuffix(" MiB")
        self.object_size.setToolTip("The size of each object; 64 MiB is a pool's container, "
                                    "uploaded in parts")
        self.object_size.setMinimumWidth(self.object_size.sizeHint().width() + 20)
        self.size_row = QWidget()
        row = QHBoxLayout(self.size_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.object_size)
        row.addStretch(1)
        form.addRow("Object size", self.size_row)

    def _server(self, srv):
        if not registry.can(srv.get("type"), "bucket"):
            return
        self.bucket_label.setText(bucket_label(srv.get("options") or {}))
        self.workload.insertItem(0, OBJECT_TEXT, OBJECT)
        self.workload.setCurrentIndex(0)
        if self.volumes is None and srv.get("path"):
            self.vols_label.setText(f"{srv['path']} (the cache)")

    def _is_object(self):
        return self.workload.currentData() == OBJECT

    def _workload_chosen(self, *_):
        obj = self._is_object()
        for w, shown in ((self.vols_label, not obj), (self.max_pairs, not obj),
                         (self.bucket_label, obj), (self.threads_row, obj),
                         (self.size_row, obj)):
            self.form.setRowVisible(w, shown)
        self.state.setText(
            "Each thread count uploads, reads back and reads ranges of its objects; they are "
            "removed at the end. The run shows in the activity monitor." if obj else
            "Each step runs ten seconds or more; the files written are removed at the end. "
            "The run shows in the activity monitor.")

    # ---- starting and following a run --------------------------------------------------------
    def start(self):
        self.start_button.setEnabled(False)
        self.state.setText("Queueing the benchmark…")
        if self._is_object():
            args = dict(workload=OBJECT, min_threads=self.min_threads.value(),
                        max_threads=self.max_threads.value(), step=self.step.value(),
                        object_size=self.object_size.value() * MiB)
        else:
            args = dict(volumes=self.volumes, workload=self.workload.currentData(),
                        max_pairs=self.max_pairs.value())
        args.update(force=self.force.isChecked(), **self.tuning)
        self.bridge.call(lambda m: m.start_storage_benchmark(self.server, **args),
                         done=self._started, failed=self._refused, context=self)

    def _started(self, job_id):
        self.job_id = job_id
        self.cancel_button.setEnabled(True)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.state.setText(f"Benchmark job {job_id} queued; it starts when the dispatcher "
                           "takes it.")
        self.show_steps([], None, self.workload.currentData())
        self.timer.start()

    def _refused(self, error):
        self.start_button.setEnabled(True)
        self.state.setText(error.message + (f"\n{error.hint}" if error.hint else ""))

    def cancel_run(self):
        if self.job_id is not None:
            self.cancel_button.setEnabled(False)
            self.bridge.call(lambda m, j: m.cancel_job(j), self.job_id, context=self)

    def _poll(self):
        if self.job_id is not None:
            self.bridge.call(_job_and_last_line, self.job_id, done=self._job, context=self)

    def _job(self, found):
        job, last = found
        self.job = job
        r = job.get("result") or {}
        steps = r.get("steps") or []
        p = job["params"]
        counts = p.get("thread_counts")
        most = len(counts) if counts else (r.get("max_pairs") or p.get("max_pairs") or 1)
        if job["state"] == "done":
            self.timer.stop()
            self.cancel_button.setEnabled(False)
            self.start_button.setEnabled(True)
            self.progress.hide()
            self.state.setText(f"Benchmark job {job['id']} ended: "
                               + (job.get("status_text") or str(job["status"]))
                               + (f" — {last}" if last and job["status"] != 0 else ""))
            self.load_runs(select_job=job["id"])
            return
        if job["state"] == "active":
            self.progress.setRange(0, most)
            self.progress.setValue(len(steps))
            rate = job.get("rate_bytes_per_s")
            if counts:
                self.progress.setFormat(f"{len(steps)} of {most} thread count(s)")
                now = counts[min(len(steps), most - 1)]
                self.state.setText(f"Running {now} thread(s)"
                                   + (f", {rate / MiB:.0f} MiB/s now" if rate else ""))
            else:
                self.progress.setFormat(f"{len(steps)} of up to {most} step(s)")
                self.state.setText(f"Running step {len(steps) + 1}: {len(steps) + 1} pair(s)"
                                   + (f", {rate / MiB:.0f} MiB/s combined now"
                                      if rate else ""))
        self.show_steps(steps, None, p.get("workload"))

    # ---- earlier runs ------------------------------------------------------------------------
    def load_runs(self, select_job=None):
        self.bridge.call(lambda m: m.storage_benchmarks(self.server), context=self,
                         done=lambda runs: self._runs(runs, select_job))

    def _runs(self, runs, select_job):
        self.runs = runs
        self.run_list.blockSignals(True)
        self.run_list.clear()
        for r in runs:
            self.run_list.addItem(run_text(r), r["id"])
        if not runs:
            self.run_list.addItem("(no run yet)", None)
        self.run_list.blockSignals(False)
        at = next((i for i, r in enumerate(runs) if r["job_id"] == select_job), 0)
        self.run_list.setCurrentIndex(at)
        self._run_chosen(at)

    def _run_chosen(self, index):
        if 0 <= index < len(self.runs):
            run = self.runs[index]
            self.show_steps(run["steps"], run["max_combined_mb_s"], run["workload"])

    # ---- showing steps -----------------------------------------------------------------------
    def show_steps(self, steps, best, workload=None):
        obj = workload == OBJECT
        columns = OBJECT_COLUMNS if obj else COLUMNS
        if self.table.horizontalHeaderItem(0).text() != columns[0][0]:
            self.table.setColumnCount(len(columns))
            self.table.setHorizontalHeaderLabels([c[0] for c in columns])
        self.table.setRowCount(len(steps))
        for r, s in enumerate(steps):
            for c, (_label, key, form) in enumerate(columns):
                item = QTableWidgetItem(cell_text(s, key, form, workload))
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight
                                      | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(r, c, item)
        self.plot.show_steps(steps, workload)
        if not steps:
            self.verdict.setText("")
        elif obj:
            text = best_line(steps)
            self.verdict.setText(text[:1].upper() + text[1:])
        else:
            if best is None:
                best = max(s["combined_mb_s"] for s in steps)
            self.verdict.setText("Sizing: " + storage_sizing.summary(best))
