"""The reports page: the client backups report or the restores report (app/reports.py) for a
range of days and a client or policy, as a stacked bar chart of bytes per client per day, a summary line and a
sortable table of the jobs, exportable as CSV."""

import html
import os
import time
from datetime import datetime, timedelta

import pyqtgraph as pg
from PySide6.QtCore import QDate, QEvent, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QComboBox, QDateEdit, QFileDialog, \
    QHBoxLayout, QLabel, QPushButton, QSizePolicy, QSplitter, QToolTip, \
    QVBoxLayout

from app import reports
from app import status as st
from ui import fmt
from ui.models import Column, ObjectTableModel, number_column, text_column, \
    time_column
from ui.polled import PolledPage
from ui.qtcompat import emit
from ui.tables import HandWidths, data_table
from ui.resources import icon
from ui.views import Placeholder

DEFAULT_DAYS = 7
REFRESH_S = 30.0
ALL = ""   # the combo boxes' "all clients" / "all policies" entry

# Qualitative colours that read on light and dark backgrounds alike; a client keeps its
# colour while filters change, since it is chosen by the client's place among all clients.
CLIENT_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")


def client_colour(n):
    if n < len(CLIENT_COLOURS):
        return QColor(CLIENT_COLOURS[n])
    return QColor.fromHsv((n * 137) % 360, 150, 210)


def _end_text(row):
    """The time of day alone when the job ended on the day it started."""
    start, end = fmt.local_time(row.get("started")), fmt.local_time(row.get("ended"))
    return end[11:] if start[:10] == end[:10] and len(end) > 11 else end


def _status_icon(row):
    s = row.get("status")
    if s == st.OK:
        return icon("state-ok")
    if s == st.PARTIAL:
        return icon("state-partial")
    if s == st.CANCELED:
        return icon("state-canceled")
    return icon("state-failed")


COLUMNS = [
    number_column("job_id", "Job ID"),
    text_column("client", "Client"),
    text_column("policy", "Policy"),
    text_column("schedule", "Schedule"),
    time_column("started", "Start"),
    Column("ended", "End", lambda r: _end_text(r), sort=lambda r: r.get("ended") or "",
           tooltip=lambda r: fmt.utc_tooltip(r.get("ended"))),
    number_column("elapsed_s", "Elapsed", format=fmt.duration),
    number_column("files", "Files", format=lambda v: f"{v:,}"),
    number_column("bytes", "Bytes", format=fmt.size, tooltip=lambda r: f"{r['bytes']:,} bytes"),
    number_column("rate_bytes_per_s", "Rate", format=fmt.rate),
    Column("status", "Status", lambda r: "" if r["status"] is None else str(r["status"]),
           sort=lambda r: -1 if r["status"] is None else r["status"], icon=_status_icon,
           tooltip=lambda r: r.get("status_text"), help="0 is success; see `cairn status-codes`"),
    number_column("group", "Group",
                  help="jobs whose run times overlap share a group: they ran together"),
    number_column("group_total_average_rate_bytes_per_s", "Group sum of rates",
                  format=fmt.rate,
                  help="total average data rate of the jobs that ran together: the sum of "
                       "their own rates (mean rate per client × clients)"),
    number_column("group_rate_bytes_per_s", "Group wall-clock rate", format=fmt.rate,
                  help="what the jobs that ran together moved per second of wall-clock time: "
                       "their bytes over the time from the first start to the last end"),
]

#: the reports the page shows: (job type, title)
KINDS = (("backup", "client backups"), ("restore", "restores"))
#: groups of jobs that ran together spelled out under the summary, the largest first
GROUPS_SHOWN = 4


def fetch_report(m, since, until, client, policy, kind="backup"):
    """The report and the filter choices, in one call off the UI thread."""
    report = m.job_report(kind, since=since, until=until, client=client or None,
                          policy=policy or None, local_days=True)
    return report, m.report_choices(kind)


def groups_text(groups):
    """The labelled rates of the groups of jobs that ran together (two jobs or more)."""
    many = sorted((g for g in groups if len(g["jobs"]) > 1),
                  key=lambda g: (-len(g["jobs"]), g["group"]))
    lines = []
    for g in many[:GROUPS_SHOWN]:
        lines.append(
            f"Group {g['group']} ({len(g['jobs'])} jobs, {g['clients']} clients, "
            f"{fmt.size(g['bytes'])} in {fmt.duration(g['span_s'])}): "
            f"sum of per-client rates {fmt.rate(g['total_average_rate_bytes_per_s']) or '—'}, "
            f"mean per client {fmt.rate(g['mean_rate_bytes_per_s']) or '—'}, "
            f"wall-clock {fmt.rate(g['wall_clock_rate_bytes_per_s']) or '—'}")
    if len(many) > GROUPS_SHOWN:
        lines.append(f"… and {len(many) - GROUPS_SHOWN} more groups (see the Group columns)")
    return "\n".join(lines)


def summary_text(s, kind="backup"):
    if not s["jobs"]:
        return f"No {kind} jobs ended in this range."
    parts = [f"{s['succeeded']} succeeded"]
    if s["partial"]:
        parts.append(f"{s['partial']} partial")
    if s["failed"]:
        parts.append(f"{s['failed']} failed")
    jobs = f"{s['jobs']} {kind} job{'s' if s['jobs'] != 1 else ''}"
    clients = f"{s['clients']} client{'s' if s['clients'] != 1 else ''}"
    text = (f"{jobs} ({', '.join(parts)}) of {clients} — {fmt.size(s['bytes'])}, "
            f"{s['files']:,} files in {fmt.duration(s['elapsed_s'])} of job time")
    if s["average_rate_bytes_per_s"]:
        text += f" — average {fmt.rate(s['average_rate_bytes_per_s'])} per job"
    if s["combined_rate_bytes_per_s"]:
        runs = f"{s['groups']} run{'s' if s['groups'] != 1 else ''} of jobs"
        text += (f", {fmt.rate(s['combined_rate_bytes_per_s'])} wall-clock while {kind}s "
                 f"ran ({runs}, {fmt.duration(s['busy_s'])})")
    return text


def _unit(max_bytes):
    for name, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20),
                         ("KiB", 1 << 10)):
        if max_bytes >= factor:
            return name, factor
    return "bytes", 1


#: clients named in the chart's legend at most (the others in one line)
LEGEND_MAX = 12


class BytesPerDayChart(pg.GraphicsLayoutWidget):
    """Bytes backed up per day, one stacked bar segment per client, with the legend beside
    the plot (never over a bar); the tooltip of a segment tells its client, day, size and
    jobs."""

    BAR_WIDTH = 0.7

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("reports-chart")
        self.setMinimumHeight(180)
        self.setAntialiasing(True)
        self.plot = pi = self.addPlot(row=0, col=0)
        pi.setMenuEnabled(False)
        pi.hideButtons()
        pi.setMouseEnabled(False, False)
        pi.showGrid(x=False, y=True, alpha=0.25)
        # The grid is drawn by the axis: behind the bars, not across them.
        pi.getAxis("left").setZValue(-100)
        self.legend = pg.LegendItem(offset=None)
        # as high as its entries, at the top: not stretched along the plot
        self.legend.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.ci.addItem(self.legend, row=0, col=1)
        self.ci.layout.setAlignment(self.legend, Qt.AlignmentFlag.AlignTop)
        self.bars = {}          # client -> BarGraphItem
        self.verb = "backed up"  # what the bars count: "backed up" or "restored"
        self.daily = None
        self.colours = {}
        self._segments = []     # (day index, y0, y1, client, bytes, jobs)
        self._empty = pg.TextItem(anchor=(0.5, 0.5))
        self.apply_palette()

    def getPlotItem(self):
        return self.plot

    def sizeHint(self):
        return QSize(640, 260)

    # ---- events -------------------------------------------------------------------------------
    def viewportEvent(self, ev):
        if ev.type() == QEvent.Type.ToolTip:
            self._tooltip(ev)
            return True
        return super().viewportEvent(ev)

    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "legend"):
            self.apply_palette()

    def resizeEvent(self, event):
        super().resizeEvent(event)
        if getattr(self, "daily", None) and self.daily["days"]:
            self.getPlotItem().getAxis("bottom").setTicks([self._ticks(self.daily["days"])])

    # ---- drawing -----------------------------------------------------------------------------
    def apply_palette(self):
        pal = self.palette()
        base, text = pal.color(QPalette.ColorRole.Base), pal.color(QPalette.ColorRole.Text)
        self.setBackground(base)
        for name in ("left", "bottom"):
            axis = self.getPlotItem().getAxis(name)
            axis.setPen(pg.mkPen(pal.color(QPalette.ColorRole.Mid)))
            axis.setTextPen(pg.mkPen(text))
        self.legend.setBrush(pg.mkBrush(QColor(base.red(), base.green(), base.blue(), 220)))
        self.legend.setPen(pg.mkPen(pal.color(QPalette.ColorRole.Mid)))
        self.legend.setLabelTextColor(text)
        self._empty.setColor(pal.color(QPalette.ColorRole.PlaceholderText))
        if self.daily is not None:
            self.set_daily(self.daily, self.colours)

    def set_daily(self, daily, colours):
        """daily: app.reports.daily_totals(); colours: client -> QColor."""
        self.daily, self.colours = daily, colours
        pi = self.getPlotItem()
        for item in self.bars.values():
            pi.removeItem(item)
        self.legend.clear()
        self.bars = {}
        self._segments = []
        pi.removeItem(self._empty)
        days = daily["days"]
        n = len(days)
        totals = [sum(daily["bytes"][c][i] for c in daily["clients"]) for i in range(n)]
        unit, factor = _unit(max(totals, default=0))
        pi.setLabel("left", f"{self.verb.capitalize()} per day ({unit})")
        has_bars = any(totals)
        self.legend.setVisible(has_bars)
        pi.getAxis("left").setStyle(showValues=has_bars)
        if not has_bars:
            self._empty.setText(f"No data {self.verb} in these days")
            pi.addItem(self._empty)
            self._empty.setPos(0.5, 0.5)
            pi.getAxis("bottom").setTicks([[]])
            pi.setXRange(0, 1, padding=0)
            pi.setYRange(0, 1, padding=0)
            return
        base = [0.0] * n
        # The legend names the clients that wrote the most; with dozens it would take half
        # the chart, so the rest are summed up in one line (each bar's tooltip names it).
        by_size = sorted(daily["clients"], key=lambda c: -sum(daily["bytes"][c]))
        named = set(by_size[:LEGEND_MAX - 1] if len(by_size) > LEGEND_MAX else by_size)
        for c in daily["clients"]:
            heights = [b / factor for b in daily["bytes"][c]]
            colour = colours.get(c, client_colour(0))
            # Days without a backup of the client get no bar, not even a flat outline.
            on = [i for i in range(n) if heights[i] > 0]
            bar = pg.BarGraphItem(x=on, height=[heights[i] for i in on],
                                  y0=[base[i] for i in on], width=self.BAR_WIDTH,
                                  brush=pg.mkBrush(colour), pen=pg.mkPen(colour.darker(130)),
                                  name=c)
            pi.addItem(bar)
            if c in named:
                self.legend.addItem(bar, c)
            self.bars[c] = bar
            for i, h in enumerate(heights):
                if h > 0:
                    self._segments.append((i, base[i], base[i] + h, c, daily["bytes"][c][i],
                                           daily["jobs"][c][i]))
            base = [b + h for b, h in zip(base, heights)]
        rest = len(daily["clients"]) - len(named)
        if rest:
            self.legend.addItem(pg.PlotDataItem(pen=None), f"… and {rest} more clients "
                                                           "(point at a bar)")
        self.legend.setColumnCount(1 if len(named) + bool(rest) <= 8 else 2)
        pi.getAxis("bottom").setTicks([self._ticks(days)])
        pi.setXRange(-0.6, n - 0.4, padding=0)
        top = max(max(base), 1e-9) * 1.05
        # a little below 0, so that the axis labels its 0 (pyqtgraph drops a label on the edge)
        pi.setYRange(-top * 0.04, top, padding=0)

    def _ticks(self, days):
        """A label under every bar while they fit, else under every n-th."""
        years = {d[:4] for d in days}
        pattern = "%b %d" if len(years) == 1 else "%Y-%m-%d"
        width = self.getPlotItem().getViewBox().width() or self.width()
        label_px = self.fontMetrics().horizontalAdvance(
            datetime(2000, 12, 30).strftime(pattern)) + 16
        step = max(1, -(-len(days) * label_px // max(int(width), 1)))
        return [(i, datetime.strptime(d, "%Y-%m-%d").strftime(pattern))
                for i, d in enumerate(days) if i % step == 0]

    # ---- what is where ----------------------------------------------------------------------
    def segment_at(self, x, y):
        """The bar segment (client, day, bytes, jobs) at plot coordinates x, y, or None."""
        i = round(x)
        if abs(x - i) > self.BAR_WIDTH / 2:
            return None
        for day, y0, y1, client, b, jobs in self._segments:
            if day == i and y0 <= y <= y1:
                return {"client": client, "day": self.daily["days"][day], "bytes": b,
                        "jobs": jobs}
        return None

    def segment_under(self, viewport_pos):
        vb = self.getPlotItem().getViewBox()
        scene_pos = self.mapToScene(viewport_pos)
        if not vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = vb.mapSceneToView(scene_pos)
        return self.segment_at(p.x(), p.y())

    def _tooltip(self, ev):
        seg = self.segment_under(ev.pos())
        if seg is None:
            QToolTip.hideText()
            ev.ignore()
            return
        QToolTip.showText(ev.globalPos(),
                          f"{seg['client']} on {seg['day']}: {fmt.size(seg['bytes'])} in "
                          f"{seg['jobs']} job{'s' if seg['jobs'] != 1 else ''}", self)


class ReportsView(PolledPage):
    """Client backups: filters, chart, summary, jobs table and CSV export."""

    refresh_s = REFRESH_S
    # The filters changed while a report was on its way: fetch again after it.
    refresh_again = True
    #: a CSV file was written: {"path", "rows"}
    exported = Signal(dict)
    #: writing a CSV file failed: the message
    export_failed = Signal(str)

    def __init__(self, bridge, parent=None):
        super().__init__(bridge, parent)
        self.name = "reports"
        self.report = None
        self.choices = {"clients": [], "policies": []}
        self.error = None
        self._sized = False

        self.kind = "backup"
        self.title = title = QLabel("Reports — client backups")
        f = title.font()
        f.setPointSizeF(f.pointSizeF() * 1.25)
        f.setBold(True)
        title.setFont(f)
        pic = QLabel()
        pic.setPixmap(icon("report").pixmap(22, 22))
        head = QHBoxLayout()
        head.addWidget(pic)
        head.addWidget(title, 1)
        description = QLabel("Every job that ended, by the day it started. Jobs whose run "
                             "times overlap form a group, with two rates: the sum of the "
                             "jobs' own rates (each job's bytes over its elapsed time) and "
                             "the wall-clock rate (the group's bytes over its span).")
        description.setWordWrap(True)
        pal = description.palette()
        pal.setColor(description.foregroundRole(), pal.color(pal.ColorRole.PlaceholderText))
        description.setPalette(pal)

        filters = self._filters_row()

        self.summary = QLabel("Loading…")
        self.summary.setObjectName("reports-summary")
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.groups = QLabel()
        self.groups.setObjectName("reports-groups")
        self.groups.setTextFormat(Qt.TextFormat.PlainText)
        self.groups.setWordWrap(True)
        self.groups.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.groups.hide()
        self.message = QLabel()
        self.message.setObjectName("reports-message")
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.hide()

        self.chart = BytesPerDayChart()
        self.model = ObjectTableModel(COLUMNS, key="job_id", parent=self)
        # sorted by the model itself: thousands of rows, sorted in one Python sort
        self.table = data_table(self.model, "reports-table")
        self.widths = HandWidths(self.table.horizontalHeader())
        self.table.sortByColumn(4, Qt.SortOrder.DescendingOrder)
        hh = self.table.horizontalHeader()
        hh.setStretchLastSection(False)
        self.placeholder = Placeholder(self.table)
        self.placeholder.setText("Loading…")
        self._size_columns(contents=False)

        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("reports-splitter")
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.chart)
        self.splitter.addWidget(self.table)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)

        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 4)
        lay.addLayout(head)
        lay.addWidget(description)
        lay.addLayout(filters)
        lay.addWidget(self.summary)
        lay.addWidget(self.groups)
        lay.addWidget(self.message)
        lay.addWidget(self.splitter, 1)

        for w in (self.since_edit, self.until_edit):
            w.dateChanged.connect(self._filters_changed)
        for w in (self.client_box, self.policy_box):
            w.currentIndexChanged.connect(self._filters_changed)
        self.kind_box.currentIndexChanged.connect(self._kind_changed)

    def _filters_row(self):
        """The report, range, client and policy choices and the export button, in a row."""
        today = QDate.currentDate()
        self.since_edit = self._date_edit("reports-since", today.addDays(1 - DEFAULT_DAYS))
        self.until_edit = self._date_edit("reports-until", today)
        self.kind_box = QComboBox()
        self.kind_box.setObjectName("reports-kind")
        for kind, text in KINDS:
            self.kind_box.addItem(text[0].upper() + text[1:], kind)
        self.client_box = self._combo("reports-client", "All clients")
        self.policy_box = self._combo("reports-policy", "All policies")
        self.export_button = QPushButton("Export CSV…")
        self.export_button.setObjectName("reports-export")
        self.export_button.setToolTip("Save the jobs of this report as a CSV file")
        self.export_button.clicked.connect(self._choose_export_file)
        self.export_button.setEnabled(False)
        # two rows: in one, the choices alone made the console wider than a 1024-pixel screen
        first, second = QHBoxLayout(), QHBoxLayout()
        for row, label, widget in ((first, "Report", self.kind_box),
                                   (first, "From", self.since_edit),
                                   (first, "to", self.until_edit),
                                   (second, "Client", self.client_box),
                                   (second, "Policy", self.policy_box)):
            text = QLabel(label)
            text.setBuddy(widget)
            row.addWidget(text)
            row.addWidget(widget)
            row.addSpacing(8)
        first.addStretch(1)
        first.addWidget(self.export_button)
        second.addStretch(1)
        filters = QVBoxLayout()
        filters.setSpacing(4)
        filters.addLayout(first)
        filters.addLayout(second)
        return filters

    def _date_edit(self, name, day):
        w = QDateEdit(day)
        w.setObjectName(name)
        w.setCalendarPopup(True)
        w.setDisplayFormat("yyyy-MM-dd")
        return w

    def _combo(self, name, all_text):
        w = QComboBox()
        w.setObjectName(name)
        w.setMinimumContentsLength(14)
        w.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        w.addItem(all_text, ALL)
        return w

    # ---- the filters -----------------------------------------------------------------------
    def set_range(self, first, last):
        """Shows the days first..last (dates, both included)."""
        for w, d in ((self.since_edit, first), (self.until_edit, last)):
            w.blockSignals(True)
            w.setDate(QDate(d.year, d.month, d.day))
            w.blockSignals(False)
        self._filters_changed()

    def set_client(self, client):
        self._select(self.client_box, client or ALL)

    def set_policy(self, policy):
        self._select(self.policy_box, policy or ALL)

    def _select(self, box, value):
        i = box.findData(value)
        if i < 0:
            box.addItem(value, value)
            i = box.count() - 1
        box.setCurrentIndex(i)

    def time_range(self):
        """(since, until) in epoch seconds: local midnight of the first day to local
        midnight after the last."""
        first = self.since_edit.date().toPython()
        last = self.until_edit.date().toPython()
        if last < first:
            first, last = last, first
        return (time.mktime(first.timetuple()),
                time.mktime((last + timedelta(days=1)).timetuple()))

    def filters(self):
        since, until = self.time_range()
        return since, until, self.client_box.currentData(), self.policy_box.currentData()

    def _filters_changed(self, *_):
        self.refresh()

    def set_kind(self, kind):
        """Shows the report of `kind` jobs ("backup" or "restore")."""
        self.kind_box.setCurrentIndex(self.kind_box.findData(kind))

    def _kind_changed(self, *_):
        self.kind = self.kind_box.currentData()
        self.title.setText("Reports — " + dict(KINDS)[self.kind])
        # the other report's clients and policies are other names: start from all
        for box in (self.client_box, self.policy_box):
            box.blockSignals(True)
            box.setCurrentIndex(0)
            box.blockSignals(False)
        self.refresh()

    def _fill(self, box, names):
        current = box.currentData()
        wanted = [ALL] + list(names) + ([current] if current not in names and current else [])
        have = [box.itemData(i) for i in range(box.count())]
        if have == wanted:
            return
        box.blockSignals(True)
        while box.count() > 1:
            box.removeItem(1)
        for n in wanted[1:]:
            box.addItem(n, n)
        box.setCurrentIndex(max(0, box.findData(current)))
        box.blockSignals(False)

    # ---- refreshing (ui/polled.py) ---------------------------------------------------------
    @property
    def loaded(self):
        return self.report is not None or self.error is not None

    @property
    def settled(self):
        return self.loaded and not self.polling

    def poll_call(self):
        return (fetch_report, *self.filters(), self.kind)

    def polled(self, result):
        report, choices = result
        self.report, self.choices, self.error = report, choices, None
        self._fill(self.client_box, choices["clients"])
        self._fill(self.policy_box, choices["policies"])
        colours = {c: client_colour(i) for i, c in enumerate(choices["clients"])}
        self.model.set_rows(report["rows"])
        self.chart.verb = "restored" if report["report"] == "restores" else "backed up"
        self.chart.set_daily(report["daily"], colours)
        self.summary.setText(summary_text(report["summary"], report["report"][:-1]))
        self.groups.setText(groups_text(report["groups"]))
        self.groups.setVisible(bool(self.groups.text()))
        self.export_button.setEnabled(True)
        n = len(report["rows"])
        self.placeholder.setText(
            "No backup job ended in these days. Choose other days, or start a backup (Policies "
            "page, <b>Back up now</b>); its job shows up here once it ends."
            if report["report"] == "backups" else
            "No restore job ended in these days. Choose other days; a restore started from "
            "the Restore page shows up here once it ends.")
        self.placeholder.setVisible(n == 0)
        if n and not self._sized:
            self._size_columns()
        emit(self.refreshed)

    def poll_failed(self, err):
        self.error = str(err)
        self.summary.setText(f"Could not make the report: {err}")
        if self.report is None:
            self.placeholder.setText(f"Could not read the catalog: {html.escape(self.error)}")
        emit(self.refreshed)

    def _size_columns(self, contents=True):
        """Columns as wide as their contents (once there are rows) or their title."""
        hh = self.table.horizontalHeader()
        arrow = hh.style().pixelMetric(hh.style().PixelMetric.PM_HeaderMarkSize) + 6
        fm = hh.fontMetrics()
        for c, col in enumerate(COLUMNS):
            width = fm.horizontalAdvance(col.title) + 14
            if c == hh.sortIndicatorSection():
                width += arrow
            # Qt's own hint reserves room for a sort arrow on every column; only the sorted
            # one has it, and the report's last columns need that room.
            if contents:
                width = max(width, self.table.sizeHintForColumn(c) + (6 if col.numeric else 10))
            with self.widths.fitting():
                hh.resizeSection(c, width)
        self._sized = contents

    # ---- export --------------------------------------------------------------------------
    def default_export_name(self):
        first = self.since_edit.date().toString("yyyyMMdd")
        last = self.until_edit.date().toString("yyyyMMdd")
        return f"cairn-{self.kind}s-{first}-{last}.csv"

    def _choose_export_file(self):
        path, _ = QFileDialog.getSaveFileName(
            self, "Export the report as CSV",
            os.path.join(os.path.expanduser("~"), self.default_export_name()),
            "CSV files (*.csv);;All files (*)")
        if not path:
            return
        if not os.path.splitext(path)[1]:
            path += ".csv"
        self.export_csv(path)

    def export_csv(self, path):
        """Writes the jobs of the report shown to `path`, off the UI thread; `exported` or
        `export_failed` tells how it went."""
        if self.report is None:
            return False
        rows = list(self.report["rows"])
        self.export_button.setEnabled(False)
        self.bridge.call(lambda _m, r, p: reports.write_csv(r, p), rows, path,
                         done=self._exported, failed=self._export_failed, context=self)
        return True

    def _exported(self, result):
        self.export_button.setEnabled(True)
        self._say(f"Saved {result['rows']} job{'s' if result['rows'] != 1 else ''} to "
                  f"{result['path']}.")
        emit(self.exported, result)

    def _export_failed(self, err):
        self.export_button.setEnabled(True)
        self._say(f"The report was not saved: {err}", error=True)
        emit(self.export_failed, str(err))

    def _say(self, text, error=False):
        pal = self.palette()
        if error:
            pal.setColor(self.message.foregroundRole(), QColor("#d0453a"))
        self.message.setPalette(pal)
        self.message.setText(text)
        self.message.show()

    # ---- remembered layout ----------------------------------------------------------------
    def save_state(self, settings):
        settings.setValue("views/reports/header", self.table.horizontalHeader().saveState())
        settings.setValue("views/reports/widths-by-hand", self.widths.by_hand)
        settings.setValue("views/reports/splitter", self.splitter.saveState())

    def restore_state(self, settings):
        h = settings.value("views/reports/header")
        if h is not None and self.widths.restore(h, settings.value("views/reports/widths-by-hand")):
            self._sized = self.widths.by_hand
        s = settings.value("views/reports/splitter")
        if s is not None:
            self.splitter.restoreState(s)
