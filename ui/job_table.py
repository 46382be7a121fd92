"""The activity monitor's table: its columns, the jobs keyed by id (JobTableModel), the
sorted and filtered view of them (JobFilter) and the progress bar of % complete."""

import bisect
from collections import Counter

from PySide6.QtCore import QAbstractItemModel, QAbstractTableModel, QModelIndex, Qt
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, \
    QStyleOptionProgressBar

from app import status as st
from app.jobs.rules import CATEGORIES, category
from ui import fmt
from ui.job_text import attempt_text, attempt_tooltip, dedup_tooltip, max_attempts, \
    state_text, status_tooltip, type_text, type_tooltip
from ui.models import ROW_ROLE, Column, ObjectTableModel, number_column, text_column, \
    time_column
from ui.qtcompat import emit
from ui.resources import icon


def state_icon(job):
    if job["state"] == "queued":
        return icon("state-queued")
    if job["state"] == "active":
        return icon("state-active")
    s = job.get("status")
    if s == st.OK:
        return icon("state-ok")
    if s == st.WINDOW_CLOSED:
        return icon("state-canceled")
    if s == st.PARTIAL:
        return icon("state-partial")
    if s == st.CANCELED:
        return icon("state-canceled")
    return icon("state-failed")


#: the filter's choices of state
STATES = ("all",) + CATEGORIES

COLUMNS = [
    number_column("id", "Job ID"),
    Column("type", "Type", type_text, sort=lambda j: type_text(j).lower(),
           tooltip=type_tooltip),
    Column("state", "State", state_text, sort=state_text, icon=state_icon,
           help="queued, active (canceling once a cancel was asked for) or done"),
    number_column("status", "Status", tooltip=status_tooltip,
                  help="0 is success; see `cairn status-codes`"),
    text_column("policy", "Policy"),
    text_column("schedule", "Schedule"),
    text_column("client", "Client"),
    text_column("storage_unit", "Storage unit"),
    time_column("started", "Start", short=True),
    number_column("elapsed_s", "Elapsed", format=fmt.duration),
    time_column("ended", "End", short=True),
    number_column("files", "Files", format=lambda v: f"{v:,}"),
    number_column("bytes", "Bytes", format=fmt.size, tooltip=lambda r: f"{r['bytes']:,} bytes"),
    number_column("rate_bytes_per_s", "Rate", format=fmt.rate),
    number_column("percent", "% complete", format=fmt.percent),
    number_column("eta_s", "Time left", format=fmt.duration),
    number_column("dedup_ratio", "Dedup rate", format=fmt.dedup_rate, tooltip=dedup_tooltip,
                  help="share of the job's data the deduplicating pool already held: not "
                       "stored again (nor sent, with client-side deduplication)"),
    text_column("wait_reason", "Waiting for", help="why a queued job has not started yet"),
    # Later columns go at the end, so that a table layout saved before they existed still
    # finds its columns where it left them.
    Column("attempt", "Attempt", attempt_text,
           sort=lambda j: (j.get("attempt") or 1, max_attempts(j) or 0),
           tooltip=attempt_tooltip, numeric=True,
           help="which try of the job this is: a failed scheduled backup is tried again"),
    number_column("parent_id", "Parent",
                  help="the job this one is part of, such as the backup whose data streams "
                       "run as separate jobs"),
]
COLUMN_KEYS = [c.key for c in COLUMNS]
PERCENT_COLUMN = COLUMN_KEYS.index("percent")
#: hidden until chosen in the header's menu
HIDDEN_COLUMNS = ("parent_id",)
#: shown right after another column rather than at the end: (column, after). The dedup rate
#: says how much of the job's data its storage unit's pool held already: read next to the
#: unit, and in view without scrolling.
PLACED_COLUMNS = (("attempt", "status"), ("dedup_ratio", "storage_unit"))


class JobTableModel(ObjectTableModel):
    """The jobs, keyed by id, with running counts per category over all of them."""

    def __init__(self, parent=None):
        super().__init__(COLUMNS, key="id", parent=parent)
        self.counts = Counter()
        self.types, self.clients = set(), set()

    def _remove(self, keys):
        for k in keys:
            n = self._pos.get(k)
            if n is not None:
                self.counts[category(self._rows[n])] -= 1
        super()._remove(keys)

    def _upsert(self, rows):
        rows = list(rows)
        for r in rows:
            n = self._pos.get(r["id"])
            if n is not None:
                self.counts[category(self._rows[n])] -= 1
            self.counts[category(r)] += 1
            self.types.add(r.get("type") or "")
            if r.get("client"):
                self.clients.add(r["client"])
        super()._upsert(rows)


#: a layout change that moves rows only (views then keep their columns as they are)
_ROWS_ONLY = QAbstractItemModel.LayoutChangeHint.VerticalSortHint
_LAYOUT_ARGS = ("QList<QPersistentModelIndex>", "QAbstractItemModel::LayoutChangeHint")


class JobFilter(QAbstractTableModel):
    """The jobs shown, in the order of one column: those matching a state, a type, a client
    and a text.

    Sorting and filtering happen here, over Python lists, rather than in a
    QSortFilterProxyModel, which asks the source for both sort keys at every comparison (one
    Python call each: seconds for a click on a header over 10,000 jobs, and a visible stall
    each second when sorted by a column that running jobs change). Each job's sort key is
    computed once, when the job changes; `_order` holds the source rows shown, ascending by
    key (a descending view reads it from the end), so a click on a header is one list.sort()
    and a tick moves only the jobs that changed (bisect). Every change of order or of the
    rows shown is one layoutChanged with the persistent indexes carried along, so the
    selection and the current row stay on their jobs. Equal keys are ordered by job ID
    (newest first in a descending order)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.state = "all"
        self.type = ""
        self.client = ""
        self.text = ""
        self._words = []
        self._source = None
        self._columns = 0
        self._column = -1
        self._descending = False
        self._keys = []         # per source row: its sort key
        self._shown = []        # per source row: whether it passes the filter
        self._order = []        # source rows shown, ascending by key
        self._moving = None     # persistent indexes as source rows, during a layout change

    # ---- the source -------------------------------------------------------------------------
    def setSourceModel(self, model):
        self.beginResetModel()
        if self._source is not None:
            for signal, slot in self._connections():
                signal.disconnect(slot)
        self._source = model
        self._columns = len(model.columns)
        for signal, slot in self._connections():
            signal.connect(slot)
        self._rebuild()
        self.endResetModel()

    def sourceModel(self):
        return self._source

    def _connections(self):
        s = self._source
        return ((s.dataChanged, self._source_data_changed),
                (s.rowsInserted, self._source_rows_inserted),
                (s.rowsAboutToBeRemoved, self._source_rows_about_to_be_removed),
                (s.rowsRemoved, self._source_rows_removed),
                (s.modelAboutToBeReset, self.beginResetModel),
                (s.modelReset, self._source_reset),
                (s.layoutAboutToBeChanged, self.beginResetModel),
                (s.layoutChanged, self._source_reset),
                (s.headerDataChanged, self.headerDataChanged))

    def _source_reset(self, *_):
        self._rebuild()
        self.endResetModel()

    def _rebuild(self):
        rows = [self._source.row_dict(r) for r in range(self._source.rowCount())] \
            if self._source is not None else []
        self._keys = [self._key(r) for r in rows]
        self._shown = [self.accepts(r) for r in rows]
        self._sort()

    def _sort(self):
        self._order = [r for r, shown in enumerate(self._shown) if shown]
        self._order.sort(key=self._keys.__getitem__)

    # ---- sort keys and the filter -----------------------------------------------------------
    def _key(self, row):
        ident = row[self._source.key]
        if self._column < 0:
            return (ident,)
        col = self._source.columns[self._column]
        return (col.sort(row) if col.sort else col.text(row), ident)

    def accepts(self, job):
        if self.state != "all" and category(job) != self.state:
            return False
        if self.type and job.get("type") != self.type:
            return False
        if self.client and job.get("client") != self.client:
            return False
        if self._words:
            hay = " ".join(str(job.get(k) or "") for k in (
                "id", "type", "state", "policy", "schedule", "client", "storage_unit",
                "wait_reason", "status_text", "image_id")).casefold()
            hay += " " + type_text(job).casefold()
            hay += " " + state_text(job)
            hay += f" status {job.get('status')}"
            return all(w in hay for w in self._words)
        return True

    def filter(self):
        return {"state": self.state, "type": self.type, "client": self.client,
                "text": self.text}

    def set_filter(self, state=None, type=None, client=None, text=None):
        new = self.filter()
        for k, v in (("state", state), ("type", type), ("client", client), ("text", text)):
            if v is not None:
                new[k] = v
        if new["state"] not in STATES:
            new["state"] = "all"
        if new == self.filter():
            return
        self._begin_layout()
        self.state, self.type, self.client = new["state"], new["type"], new["client"]
        self.text = new["text"]
        self._words = self.text.casefold().split()
        src = self._source
        self._shown = [self.accepts(src.row_dict(r)) for r in range(len(self._keys))]
        self._sort()
        self._end_layout()

    def sort(self, column, order=Qt.SortOrder.AscendingOrder):
        if self._source is None:
            return
        column = column if 0 <= column < len(self._source.columns) else -1
        descending = order == Qt.SortOrder.DescendingOrder
        if column == self._column and descending == self._descending:
            return
        self._begin_layout()
        if column != self._column:
            self._column = column
            self._keys = [self._key(self._source.row_dict(r)) for r in range(len(self._keys))]
            self._sort()
        self._descending = descending
        self._end_layout()

    def sortColumn(self):
        return self._column

    def sortOrder(self):
        return Qt.SortOrder.DescendingOrder if self._descending else Qt.SortOrder.AscendingOrder

    # ---- rows of the source and of this model -----------------------------------------------
    def _source_row(self, row):
        return self._order[-1 - row if self._descending else row]

    def _row(self, source_row):
        """This model's row of a source row, or -1 if the filter hides it."""
        if not (0 <= source_row < len(self._shown)) or not self._shown[source_row]:
            return -1
        at = bisect.bisect_left(self._order, self._keys[source_row],
                                key=self._keys.__getitem__)
        return len(self._order) - 1 - at if self._descending else at

    def mapToSource(self, index):
        if not index.isValid() or self._source is None:
            return QModelIndex()
        return self._source.index(self._source_row(index.row()), index.column())

    def mapFromSource(self, index):
        if not index.isValid():
            return QModelIndex()
        row = self._row(index.row())
        return self.index(row, index.column()) if row >= 0 else QModelIndex()

    def filterAcceptsRow(self, source_row, source_parent=QModelIndex()):
        return self.accepts(self._source.row_dict(source_row))

    # ---- following the source ---------------------------------------------------------------
    def _begin_layout(self):
        """Before the order or the rows shown change: the persistent indexes (selection,
        current row) are noted as source rows, to be put back where those rows land."""
        emit(self.layoutAboutToBeChanged[_LAYOUT_ARGS], [], _ROWS_ONLY)
        old = self.persistentIndexList()
        order, last = self._order, len(self._order) - 1
        if self._descending:
            places = [(order[last - i.row()], i.column()) for i in old]
        else:
            places = [(order[i.row()], i.column()) for i in old]
        self._moving = old, places

    def _end_layout(self, renumber=None):
        old, places = self._moving
        self._moving = None
        if renumber is not None:
            places = [(renumber(src), column) for src, column in places]
        if len(places) > 16:
            # many (a large selection): one pass over the order beats a bisect per index
            last, descending = len(self._order) - 1, self._descending
            rows = {src: last - n if descending else n for n, src in enumerate(self._order)}
            row = lambda src: rows.get(src, -1)     # noqa: E731
        else:
            row = lambda src: -1 if src is None else self._row(src)     # noqa: E731
        make, invalid = self.createIndex, QModelIndex()
        new = []
        for src, column in places:
            r = row(src)
            new.append(make(r, column) if r >= 0 else invalid)
        self.changePersistentIndexList(old, new)
        emit(self.layoutChanged[_LAYOUT_ARGS], [], _ROWS_ONLY)

    def _take(self, source_row):
        at = bisect.bisect_left(self._order, self._keys[source_row],
                                key=self._keys.__getitem__)
        del self._order[at]

    def _put(self, source_row):
        bisect.insort(self._order, source_row, key=self._keys.__getitem__)

    def _source_data_changed(self, top, bottom, roles=()):
        moved, stay = [], []
        for r in range(top.row(), bottom.row() + 1):
            job = self._source.row_dict(r)
            key, shown = self._key(job), self.accepts(job)
            if shown != self._shown[r] or (shown and key != self._keys[r]):
                moved.append((r, key, shown))
            else:
                self._keys[r] = key
                if shown:
                    stay.append(r)
        if moved:
            self._begin_layout()
            for r, key, shown in moved:
                if self._shown[r]:
                    self._take(r)
                self._keys[r], self._shown[r] = key, shown
                if shown:
                    self._put(r)
            self._end_layout()
        # The rows that kept their place: one dataChanged per run of neighbouring rows.
        rows = sorted(self._row(r) for r in stay)
        i = 0
        while i < len(rows):
            first = last = rows[i]
            while i + 1 < len(rows) and rows[i + 1] == last + 1:
                i += 1
                last = rows[i]
            emit(self.dataChanged, self.createIndex(first, top.column()),
                 self.createIndex(last, bottom.column()), roles)
            i += 1

    def _source_rows_inserted(self, parent, first, last):
        jobs = [self._source.row_dict(r) for r in range(first, last + 1)]
        keys, shown = [self._key(j) for j in jobs], [self.accepts(j) for j in jobs]
        added = [first + n for n, s in enumerate(shown) if s]
        if not self._order and added:
            # the first load: no order or selection to keep
            self.beginInsertRows(QModelIndex(), 0, len(added) - 1)
            self._keys[first:first] = keys
            self._shown[first:first] = shown
            self._sort()
            self.endInsertRows()
            return
        count = last - first + 1
        if not added:
            # nothing shown moves, only source rows below `first` are renumbered
            if first < len(self._keys):
                self._order = [r + count if r >= first else r for r in self._order]
            self._keys[first:first] = keys
            self._shown[first:first] = shown
            return
        self._begin_layout()
        if first < len(self._keys):
            self._order = [r + count if r >= first else r for r in self._order]
        self._keys[first:first] = keys
        self._shown[first:first] = shown
        if len(added) > 64:
            self._sort()
        else:
            for r in added:
                self._put(r)
        self._end_layout(renumber=lambda r: r + count if r >= first else r)

    def _source_rows_about_to_be_removed(self, parent, first, last):
        self._begin_layout()

    def _source_rows_removed(self, parent, first, last):
        count = last - first + 1
        del self._keys[first:last + 1]
        del self._shown[first:last + 1]
        self._order = [r - count if r > last else r for r in self._order
                       if not first <= r <= last]
        self._end_layout(renumber=lambda r: None if first <= r <= last
                         else r - count if r > last else r)

    # ---- the model interface ----------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self._order)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else self._columns

    def index(self, row, column, parent=QModelIndex()):
        # Called for every row of a selection whenever rows move: kept to the bare minimum.
        if 0 <= row < len(self._order) and 0 <= column < self._columns \
                and not parent.isValid():
            return self.createIndex(row, column)
        return QModelIndex()

    # flags(): QAbstractTableModel's own (enabled, selectable, no children) is the one wanted,
    # and a C++ call is much cheaper than a Python one where a large selection is redrawn.

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        row = index.row()           # -1 for an invalid index
        if not 0 <= row < len(self._order):
            return None
        return self._source.cell(self._source.row_dict(self._source_row(row)), index.column(),
                                 role)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if self._source is None:
            return None
        return self._source.headerData(section, orientation, role)


class ProgressDelegate(QStyledItemDelegate):
    """% complete as a progress bar; blank while unknown."""

    def paint(self, painter, option, index):
        row = index.data(ROW_ROLE)
        pct = row.get("percent") if row else None
        if pct is None:
            super().paint(painter, option, index)
            return
        self.initStyleOption(option, index)
        style = option.widget.style() if option.widget else QApplication.style()
        # Selection background first, so a selected row stays one band.
        style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewItem, option, painter,
                            option.widget)
        bar = QStyleOptionProgressBar()
        bar.rect = option.rect.adjusted(3, 3, -3, -3)
        bar.minimum, bar.maximum = 0, 1000
        bar.progress = int(round(pct * 10))
        bar.text = fmt.percent(pct)
        bar.textVisible = True
        bar.textAlignment = Qt.AlignmentFlag.AlignCenter
        bar.state = option.state | QStyle.StateFlag.State_Horizontal
        bar.palette = option.palette
        bar.fontMetrics = option.fontMetrics
        style.drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter, option.widget)

