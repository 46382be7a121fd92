"""The activity monitor: every job (queued, running, ended) in a live table, the summed
throughput of all jobs above it, filters, and the actions an administrator takes on jobs
(cancel, restart, details). The table itself is ui/job_table.py; which jobs can be canceled
or restarted, app/jobs/rules.py.

The table follows the catalog by reading only the jobs written since the last read
(JobStore.changes and its change counter), so a catalog of 10,000 jobs costs each second what
the few jobs that moved cost, and rows are updated in place: no flicker, no lost selection.
On a master over SSH it asks nothing on the clock: the master pushes the jobs that changed
(the job_changes stream, with the throughput plot's points), as they change."""

import html

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QInputDialog, QLabel, QLineEdit, \
    QMenu, QMessageBox, QSplitter, QStyle, QToolBar, QToolButton, QVBoxLayout, QWidget

from app.errors import CairnError
from app.jobs.rules import cancellable, restartable, retried
from ui import fmt, roles
from ui.job_table import COLUMN_KEYS, HIDDEN_COLUMNS, PERCENT_COLUMN, PLACED_COLUMNS, \
    STATES, JobFilter, JobTableModel, ProgressDelegate
from ui.job_text import what
from ui.models import ROW_ROLE
from ui.plots import ThroughputPlot
from ui.polled import PolledPage
from ui.qtcompat import emit
from ui.resources import icon
from ui.settings import settings
from ui.tables import HandWidths, data_table, select_keys, selected_rows, tab_to_buttons
from ui.views import Placeholder, add_column_chooser

REFRESH_S = 1.0
#: how far back the throughput plot of all jobs reaches
PLOT_WINDOW_S = 300.0
#: a remote master pushes the plot's points at least this often with no job running
PLOT_HEARTBEAT_S = 5.0
STATE_HELP = {
    "queued": "waiting to start (the Waiting for column says why)",
    "active": "running now",
    "done": "ended with status 0, or 1 (some files skipped)",
    "failed": "ended with any other status, missed jobs included",
    "canceled": "canceled by an administrator or at their request (status 150)",
}
SETTINGS_FILTERS = "views/activity/saved-filters"


EMPTY_TEXT = ("No jobs yet: select a policy on the Policies page and click <b>Back up now</b> "
              "(Ctrl+B); its jobs show up here while they run.<br><br><small>In a shell: "
              "<code>cairn backup POLICY</code></small>")


# ---- master calls (on the bridge's threads) ------------------------------------------------

def poll(m, cursor, plot_window):
    """The jobs changed since `cursor`, and the summed throughput of the last minutes: one
    round trip to a master over SSH (Master.batch)."""
    changes, tries, rates = m.batch([("job_changes", (cursor,)), ("setting", ("backup_tries",)),
                                     ("throughput", (plot_window,))])
    return with_attempts(changes, tries), rates


def with_attempts(changes, tries):
    """The changes, each job that is tried again carrying the most attempts it gets."""
    for job in changes["jobs"]:
        if retried(job):
            job["max_attempts"] = tries
    return changes


def cancel_jobs(m, job_ids):
    return [m.cancel_job(j) for j in job_ids]


def restart_jobs(m, job_ids):
    """Restarts each job; one refused does not stop the others. ([new jobs], [errors])"""
    new, errors = [], []
    for j in job_ids:
        try:
            new.extend(m.restart_job(j))
        except CairnError as e:
            errors.append(f"job {j}: {e.message}")
    return new, errors


# ---- the page ------------------------------------------------------------------------------

class ActivityView(PolledPage):
    """The activity monitor page (see ui/pages.py for what a page provides)."""

    refresh_s = REFRESH_S
    #: a job to show in its details window (the job's dict)
    job_opened = Signal(dict)

    def __init__(self, bridge, parent=None):
        super().__init__(bridge, parent)
        self.name = "activity"
        self.error = None
        self._cursor = 0
        self._sized = False
        self._select_when_listed = []

        self.model = JobTableModel(self)
        self.proxy = JobFilter(self)
        self.proxy.setSourceModel(self.model)

        head = self._make_head()
        self._make_actions()
        bar = self._make_filters()

        # -- the message line: results of actions, errors
        self.message = QLabel()
        self.message.setObjectName("activity-message")
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.message.setWordWrap(True)
        self.message.hide()

        self._make_plot_and_table()

        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 4)
        lay.addLayout(head)
        lay.addWidget(self.description)
        lay.addLayout(bar)
        lay.addWidget(self.message)
        lay.addWidget(self.splitter, 1)
        self._update_counts()
        self._update_actions()
        self._update_plot_title(None)

    def _make_head(self):
        """The title, the counters of each category (click: show only those) and the
        description."""
        self.title = QLabel("Activity monitor")
        f = self.title.font()
        f.setPointSizeF(f.pointSizeF() * 1.25)
        f.setBold(True)
        self.title.setFont(f)
        pic = QLabel()
        pic.setPixmap(icon("activity").pixmap(22, 22))
        head = QHBoxLayout()
        head.addWidget(pic)
        head.addWidget(self.title)
        head.addSpacing(16)
        self.counters = {}
        for state in STATES[1:]:
            b = QToolButton()
            b.setObjectName(f"count-{state}")
            b.setIcon(icon({"queued": "state-queued", "active": "state-active",
                            "done": "state-ok", "failed": "state-failed",
                            "canceled": "state-canceled"}[state]))
            b.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            b.setAutoRaise(True)
            b.setToolTip(f"{state.capitalize()}: {STATE_HELP[state]}. Click to show only "
                         "these jobs.")
            b.clicked.connect(lambda _=False, s=state: self._counter_clicked(s))
            head.addWidget(b)
            self.counters[state] = b
        head.addStretch(1)
        self.description = QLabel("Every job: running, waiting and done. Double-click a job "
                                  "for its details, throughput and log.")
        self.description.setWordWrap(True)
        pal = self.description.palette()
        pal.setColor(self.description.foregroundRole(), pal.color(pal.ColorRole.PlaceholderText))
        self.description.setPalette(pal)
        return head

    def _make_actions(self):
        """Details, cancel, restart (in the toolbar and the context menu) and save filter."""
        self.details_action = QAction(icon("action-details"), "&Details", self)
        self.details_action.setToolTip("Show the job's details, throughput and log (Enter)")
        self.details_action.triggered.connect(self.open_selected)
        self.cancel_action = roles.needs(QAction(icon("action-cancel"), "&Cancel job", self),
                                         "cancel_job")
        self.cancel_action.setToolTip("Cancel the selected queued or running jobs (Delete)")
        self.cancel_action.setShortcut(QKeySequence.StandardKey.Delete)
        self.cancel_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.cancel_action.triggered.connect(self.cancel_selected)
        self.restart_action = roles.needs(QAction(icon("action-restart"), "&Restart job", self),
                                          "restart_job")
        self.restart_action.setToolTip("Run the selected failed or canceled jobs again, with "
                                       "the same parameters (Ctrl+Shift+R)")
        self.restart_action.setShortcut(QKeySequence("Ctrl+Shift+R"))
        self.restart_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.restart_action.triggered.connect(self.restart_selected)
        self.save_filter_action = QAction(icon("action-save-filter"), "&Save filter…", self)
        self.save_filter_action.setToolTip("Keep the current filter under a name")
        self.save_filter_action.triggered.connect(lambda: self.save_filter())
        for a in (self.details_action, self.cancel_action, self.restart_action):
            self.addAction(a)

        self.toolbar = QToolBar()
        self.toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toolbar.setIconSize(QSize(16, 16))
        self.toolbar.addAction(self.details_action)
        self.toolbar.addAction(self.cancel_action)
        self.toolbar.addAction(self.restart_action)
        tab_to_buttons(self.toolbar)
        # the filters beside it give way first: its actions never hide behind "»"
        self.toolbar.setMinimumWidth(self.toolbar.sizeHint().width())

    def _make_filters(self):
        """The bar under the head: the toolbar, then state, type, client, text and the saved
        filters."""
        self.state_box = QComboBox()
        self.state_box.setObjectName("filter-state")
        for s in STATES:
            self.state_box.addItem("All states" if s == "all" else s.capitalize(), s)
        self.type_box = QComboBox()
        self.type_box.setObjectName("filter-type")
        self.type_box.addItem("All types", "")
        self.client_box = QComboBox()
        self.client_box.setObjectName("filter-client")
        self.client_box.addItem("All clients", "")
        self.client_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.client_box.setMinimumContentsLength(14)
        self.search = QLineEdit()
        self.search.setObjectName("filter-text")
        self.search.setPlaceholderText("Filter by text…")
        self.search.setToolTip("Shows jobs whose ID, type, state, policy, schedule, client, "
                               "storage unit, status or reason for waiting hold every word")
        self.search.setClearButtonEnabled(True)
        self.search.setMinimumWidth(180)
        self.saved_box = QComboBox()
        self.saved_box.setObjectName("saved-filters")
        self.saved_box.setToolTip("Filters saved with Save filter…")
        self.saved_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        save = QToolButton()
        save.setDefaultAction(self.save_filter_action)
        save.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        save.setAutoRaise(True)
        self.state_box.currentIndexChanged.connect(self._filters_edited)
        self.type_box.currentIndexChanged.connect(self._filters_edited)
        self.client_box.currentIndexChanged.connect(self._filters_edited)
        self.search.textChanged.connect(self._filters_edited)
        self.saved_box.activated.connect(self._saved_filter_chosen)
        # the actions and the saved filters above, the filters themselves below: in one row
        # they made the console wider than a 1024-pixel screen, or hid the actions
        actions, filters = QHBoxLayout(), QHBoxLayout()
        actions.addWidget(self.toolbar)
        actions.addStretch(1)
        actions.addWidget(self.saved_box)
        actions.addWidget(save)
        for w in (self.state_box, self.type_box, self.client_box):
            filters.addWidget(w)
        filters.addWidget(self.search, 1)
        bar = QVBoxLayout()
        bar.setSpacing(4)
        bar.addLayout(actions)
        bar.addLayout(filters)
        self._fill_saved_filters()
        return bar

    def _make_plot_and_table(self):
        """The throughput plot above the table of jobs, in a splitter."""
        self.plot = ThroughputPlot(clock=True)
        self.plot_title = QLabel()
        self.plot_title.setTextFormat(Qt.TextFormat.PlainText)
        plot_box = QWidget()
        pl = QVBoxLayout(plot_box)
        pl.setContentsMargins(0, 0, 0, 4)
        pl.addWidget(self.plot_title)
        pl.addWidget(self.plot, 1)

        self.table = data_table(self.proxy, "activity-table")
        self.widths = HandWidths(self.table.horizontalHeader())
        self.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
        self.table.setItemDelegateForColumn(PERCENT_COLUMN, ProgressDelegate(self.table))
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.table.doubleClicked.connect(self._open_index)
        self.table.activated.connect(self._open_index)
        self._default_columns(COLUMN_KEYS)
        add_column_chooser(self.table.horizontalHeader(), self.proxy)
        self.table.selectionModel().selectionChanged.connect(self._update_actions)
        self.model.dataChanged.connect(self._update_actions)
        self.placeholder = Placeholder(self.table)
        self.placeholder.setText("Loading…")

        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("activity-splitter")
        self.splitter.setChildrenCollapsible(True)
        self.splitter.addWidget(plot_box)
        self.splitter.addWidget(self.table)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setSizes([200, 600])

    # ---- refreshing (ui/polled.py) ---------------------------------------------------------
    @property
    def loaded(self):
        return self.model.loaded

    def poll_call(self):
        return poll, self._cursor, PLOT_WINDOW_S

    def stream_call(self):
        return "job_changes", lambda: {"since": self._cursor, "throughput": PLOT_WINDOW_S,
                                       "heartbeat": PLOT_HEARTBEAT_S,
                                       "settings": ["backup_tries"]}

    def streamed(self, event):
        tries = (event.get("settings") or {}).get("backup_tries")
        self.polled((with_attempts(event, tries), event.get("throughput") or []))

    def polled(self, result):
        changes, series = result
        self.error = None
        self.apply(changes)
        self.plot.set_points(series, span=PLOT_WINDOW_S)
        self._update_plot_title(series)
        emit(self.refreshed)

    def apply(self, changes):
        """Applies one JobStore.changes() result to the table."""
        self.model.apply_changes(changes["jobs"], changes["removed"])
        self._cursor = changes["cursor"]
        self._add_choices(self.type_box, self.model.types)
        self._add_choices(self.client_box, self.model.clients)
        n = self.model.rowCount()
        ended = n - self.model.counts["queued"] - self.model.counts["active"]
        # sized to the first jobs, and once more to the first that ended (a queued job has
        # no start, end, bytes or rate to fit)
        if n and (not self._sized or (self._sized == "early" and ended)):
            self._size_columns(final=bool(ended))
        if self._select_when_listed:
            keys = [k for k in self._select_when_listed if self.model.row_of(k) is not None]
            if keys:
                self._select_when_listed = []
                self.select_keys(keys)
        self._update_counts()

    def poll_failed(self, err):
        self.error = str(err)
        self._update_counts()
        emit(self.refreshed)

    def _update_counts(self):
        n = self.model.rowCount()
        shown = self.proxy.rowCount()
        if not self.model.loaded:
            self.title.setText("Activity monitor")
        elif shown != n:
            self.title.setText(f"Activity monitor  ({shown} of {n})")
        else:
            self.title.setText(f"Activity monitor  ({n})")
        for state, b in self.counters.items():
            b.setText(f"{self.model.counts[state]} {state}")
        if self.error and not n:
            self.placeholder.setText(f"Could not read the catalog: {html.escape(self.error)}")
        elif not self.model.loaded:
            self.placeholder.setText("Loading…")
        elif n:
            self.placeholder.setText("No job matches the filter.")
        else:
            self.placeholder.setText(EMPTY_TEXT)
        self.placeholder.setVisible(shown == 0)

    def _update_plot_title(self, series):
        active = self.model.counts["active"]
        # the last sample is from when jobs ran; with none running the rate now is nothing
        now = series[-1][1] if series and active else 0.0
        self.plot_title.setText(
            f"Throughput of all jobs, last {int(PLOT_WINDOW_S // 60)} minutes — now "
            f"{fmt.rate(now) or '0 B/s'}, {active} job{'s' if active != 1 else ''} running")

    def _size_columns(self, final=True):
        """Columns as wide as their contents or their title; the last one takes the rest.
        Not final: sized again once a job ended."""
        hh = self.table.horizontalHeader()
        fm = hh.fontMetrics()
        arrow = hh.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMarkSize) + 6
        with self.widths.fitting():
            for c, col in enumerate(self.model.columns):
                title = fm.horizontalAdvance(col.title) + 14 + (arrow if c == 0 else 0)
                width = max(self.table.sizeHintForColumn(c) + (6 if col.numeric else 0), title)
                if col.key == "percent":
                    width = max(width, fm.horizontalAdvance("100.0%") + 40)
                hh.resizeSection(c, min(width, max(160, fm.averageCharWidth() * 40)))
            hh.setStretchLastSection(True)
        self._sized = True if final else "early"

    # ---- filters --------------------------------------------------------------------------
    @staticmethod
    def _add_choices(box, values):
        have = {box.itemData(i) for i in range(box.count())}
        for v in sorted(values - have):
            # keep the list sorted after the "All …" entry
            at = next((i for i in range(1, box.count()) if box.itemData(i) > v), box.count())
            box.insertItem(at, v, v)

    def _filters_edited(self, *_):
        self.proxy.set_filter(state=self.state_box.currentData(),
                              type=self.type_box.currentData() or "",
                              client=self.client_box.currentData() or "",
                              text=self.search.text().strip())
        self._update_counts()
        self._update_actions()

    def set_filter(self, state="all", type="", client="", text=""):
        """Shows the filter in the controls and applies it."""
        for box, value in ((self.type_box, type), (self.client_box, client)):
            if value and box.findData(value) < 0:
                box.addItem(value, value)
        self.state_box.setCurrentIndex(max(0, self.state_box.findData(state)))
        self.type_box.setCurrentIndex(max(0, self.type_box.findData(type or "")))
        self.client_box.setCurrentIndex(max(0, self.client_box.findData(client or "")))
        self.search.setText(text or "")
        self._filters_edited()

    def _counter_clicked(self, state):
        self.set_filter(**dict(self.proxy.filter(), state=state))

    def saved_filters(self):
        value = settings().value(SETTINGS_FILTERS)
        return dict(value) if isinstance(value, dict) else {}

    def save_filter(self, name=None):
        if name is None:
            name, ok = QInputDialog.getText(self, "Save filter",
                                            "Name of this filter (a saved filter of the same "
                                            "name is replaced):")
            if not ok:
                return None
        name = (name or "").strip()
        if not name:
            return None
        s = settings()
        filters = self.saved_filters()
        filters[name] = self.proxy.filter()
        s.setValue(SETTINGS_FILTERS, filters)
        s.sync()
        self._fill_saved_filters(select=name)
        return name

    def _fill_saved_filters(self, select=None):
        self.saved_box.clear()
        filters = self.saved_filters()
        self.saved_box.addItem("Saved filters" if filters else "No saved filters", None)
        for name in sorted(filters, key=str.casefold):
            self.saved_box.addItem(name, name)
        self.saved_box.setEnabled(bool(filters))
        if select is not None:
            self.saved_box.setCurrentIndex(max(0, self.saved_box.findData(select)))

    def _saved_filter_chosen(self, index):
        name = self.saved_box.itemData(index)
        f = self.saved_filters().get(name) if name else None
        if f:
            self.set_filter(**{k: f.get(k, "") for k in ("state", "type", "client", "text")})

    def apply_saved_filter(self, name):
        i = self.saved_box.findData(name)
        if i < 0:
            return False
        self.saved_box.setCurrentIndex(i)
        self._saved_filter_chosen(i)
        return True

    # ---- selection ------------------------------------------------------------------------
    def selected_rows(self):
        return selected_rows(self.table)

    def select_key(self, key):
        return self.select_keys([key])

    def select_keys(self, keys):
        return select_keys(self.table, self.model, keys)

    def _update_actions(self, *_):
        jobs = self.selected_rows()
        self.details_action.setEnabled(len(jobs) >= 1)
        self.cancel_action.setEnabled(any(cancellable(j) for j in jobs))
        self.restart_action.setEnabled(any(restartable(j) for j in jobs))

    def _context_menu(self, pos):
        if not self.table.indexAt(pos).isValid():
            return
        self._update_actions()
        menu = QMenu(self)
        menu.addAction(self.details_action)
        menu.addSeparator()
        menu.addAction(self.cancel_action)
        menu.addAction(self.restart_action)
        menu.popup(self.table.viewport().mapToGlobal(pos))
        self.context_menu = menu

    # ---- actions --------------------------------------------------------------------------
    def _open_index(self, index):
        row = self.proxy.data(index, ROW_ROLE)
        if row is not None:
            emit(self.job_opened, row)

    def open_selected(self):
        for job in self.selected_rows()[:10]:
            emit(self.job_opened, job)

    def cancel_selected(self):
        jobs = [j for j in self.selected_rows() if cancellable(j)]
        if not jobs:
            return False
        ids = [j["id"] for j in jobs]
        if len(ids) == 1:
            j = jobs[0]
            text = f"Cancel job {j['id']} ({what(j)}, {j['state']})?"
        else:
            shown = ", ".join(map(str, ids[:12])) + (", …" if len(ids) > 12 else "")
            text = f"Cancel these {len(ids)} jobs?\n\nJobs {shown}"
        text += ("\n\nA running backup stops and commits nothing; a queued job does not "
                 "start.")
        answer = QMessageBox.question(
            self, "Cancel jobs" if len(ids) > 1 else "Cancel job", text,
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return False
        self.bridge.call(cancel_jobs, ids, done=lambda _: self._acted(
            f"Cancel requested for job{'s' if len(ids) > 1 else ''} "
            f"{', '.join(map(str, ids))}."),
            failed=lambda e: self._show_message(f"Could not cancel: {e}", error=True),
            context=self)
        return True

    def restart_selected(self):
        ids = [j["id"] for j in self.selected_rows() if restartable(j)]
        if not ids:
            return False
        self.bridge.call(restart_jobs, ids, done=self._restarted,
                         failed=lambda e: self._show_message(f"Could not restart: {e}",
                                                             error=True),
                         context=self)
        return True

    def _restarted(self, result):
        new, errors = result
        parts = []
        if new:
            parts.append("Restarted as job" + ("s " if len(new) > 1 else " ")
                         + ", ".join(str(j["id"]) for j in new) + ".")
            self._select_when_listed = [j["id"] for j in new]
        if errors:
            parts.append("Not restarted: " + "; ".join(errors))
        self._acted(" ".join(parts), error=bool(errors))

    def _acted(self, text, error=False):
        self._show_message(text, error)
        self.refresh_soon()

    def _show_message(self, text, error=False):
        pal = self.message.palette()
        role = pal.ColorRole.WindowText
        base = self.palette()
        pal.setColor(role, base.color(pal.ColorRole.BrightText) if error
                     else base.color(role))
        self.message.setPalette(pal)
        self.message.setText(text)
        self.message.setVisible(bool(text))

    # ---- remembered layout ------------------------------------------------------------------
    def _default_columns(self, new_keys):
        """Hides and places the columns in `new_keys` as a fresh table has them."""
        hh = self.table.horizontalHeader()
        for key in HIDDEN_COLUMNS:
            if key in new_keys:
                hh.setSectionHidden(COLUMN_KEYS.index(key), True)
        for key, after in PLACED_COLUMNS:
            if key in new_keys:
                hh.moveSection(hh.visualIndex(COLUMN_KEYS.index(key)),
                               hh.visualIndex(COLUMN_KEYS.index(after)) + 1)

    def save_state(self, settings):
        settings.setValue("views/activity/header", self.table.horizontalHeader().saveState())
        settings.setValue("views/activity/widths-by-hand", self.widths.by_hand)
        settings.setValue("views/activity/columns", list(COLUMN_KEYS))
        settings.setValue("views/activity/splitter", self.splitter.saveState())
        settings.setValue("views/activity/filter", self.proxy.filter())

    def restore_state(self, settings):
        h = settings.value("views/activity/header")
        if h is not None and self.widths.restore(
                h, settings.value("views/activity/widths-by-hand")):
            self._sized = self.widths.by_hand
            known = settings.value("views/activity/columns")
            # a layout saved before some columns existed shows them as a new table would
            if not isinstance(known, list):
                known = COLUMN_KEYS[:COLUMN_KEYS.index("attempt")]
            known = set(known)
            self._default_columns([k for k in COLUMN_KEYS if k not in known])
        s = settings.value("views/activity/splitter")
        if s is not None:
            self.splitter.restoreState(s)
        f = settings.value("views/activity/filter")
        if isinstance(f, dict):
            self.set_filter(**{k: f.get(k, "") or ("all" if k == "state" else "")
                               for k in ("state", "type", "client", "text")})
        self._fill_saved_filters()
