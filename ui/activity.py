"""The activity monitor: every job (queued, running, ended) in a live table, the summed
throughput of all jobs above it, filters, and the actions an administrator takes on jobs
(cancel, restart, details).

The table follows the catalog by reading only the jobs written since the last read
(JobStore.changes and its change counter), so a catalog of 10,000 jobs costs each second what
the few jobs that moved cost, and rows are updated in place: no flicker, no lost selection."""

import bisect
import html
import time
from collections import Counter

from PySide6.QtCore import QAbstractItemModel, QAbstractTableModel, \
    QModelIndex, QSize, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication, QComboBox, QHBoxLayout, \
    QInputDialog, QLabel, QLineEdit, QMenu, QMessageBox, QSplitter, QStyle, \
    QStyledItemDelegate, QStyleOptionProgressBar, QToolBar, QToolButton, \
    QVBoxLayout, QWidget

from app import status as st
from ui import fmt
from ui.models import ROW_ROLE, Column, ObjectTableModel, number_column, \
    text_column, time_column
from ui.plots import ThroughputPlot
from ui.qtcompat import emit
from ui.tables import data_table, select_keys, selected_rows
from ui.resources import icon

REFRESH_S = 1.0
#: how far back the throughput plot of all jobs reaches
PLOT_WINDOW_S = 300.0
STATES = ("all", "queued", "active", "done", "failed")
STATE_HELP = {
    "queued": "waiting to start (the Waiting for column says why)",
    "active": "running now",
    "done": "ended with status 0, or 1 (some files skipped)",
    "failed": "ended with any other status, canceled and missed jobs included",
}
SETTINGS_FILTERS = "views/activity/saved-filters"


def category(job):
    """queued, active, done (status 0 or 1) or failed (any other status)."""
    if job["state"] != "done":
        return job["state"]
    return "done" if job.get("status") in (st.OK, st.PARTIAL) else "failed"


def cancellable(job):
    return job["state"] in ("queued", "active")


def restartable(job):
    return job["state"] == "done" and category(job) == "failed" \
        and job.get("type") in ("backup", "restore")


# ---- the columns ---------------------------------------------------------------------------

def missed(job):
    """A scheduled job that could not start before its start window closed."""
    return job["state"] == "done" and job.get("status") == st.WINDOW_CLOSED


def _state_text(job):
    if job["state"] == "active" and job.get("cancel_requested"):
        return "canceling"
    if missed(job):
        return "missed"
    return job["state"]


def type_text(job):
    """The job's type, with the pool or image it works on for the jobs of a deduplicating
    pool (they have no storage unit, and a pool's jobs no client, to tell them apart)."""
    t = job.get("type") or ""
    p = job.get("params") or {}
    if t in ("verify", "reclaim"):
        if p.get("image"):
            return f"{t} image {p['image']}"
        if p.get("pool"):
            return f"{t} pool {p['pool']}"
    if t == "rebuild-index" and p.get("image"):
        return f"{t} image {p['image']}"
    return t


TYPE_TIPS = {
    "verify": "Reads the image (or every image of the pool) back: on a deduplicating pool "
              "it checks each chunk against its fingerprint, on an AdvancedDisk pool every "
              "tar header and file checksum; the job's details name the damaged files, and "
              "any of the pool's files that were open to other users.",
    "reclaim": "Space reclaim: removes the chunks of a deduplicating pool that no image uses "
               "any more and compacts its container files.",
    "rebuild-index": "Rebuilds the image's catalog index (what browsing and restoring read) "
                     "from the image itself; the job's log names any damage found in the "
                     "image.",
}


def _type_tooltip(job):
    text = type_text(job)
    tip = TYPE_TIPS.get(job.get("type"))
    return f"{text}: {tip}" if tip else text or None


def what(job):
    """`backup of client1`, or only the type for a job without a client (expire, the jobs of
    a pool)."""
    return f"{type_text(job)} of {job['client']}" if job.get("client") else type_text(job)


def _state_icon(job):
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


def _status_tooltip(job):
    if job.get("status") is None:
        return None
    return f"{job['status']}: {job.get('status_text') or st.text(job['status'])}"


def max_attempts(job):
    """How many attempts the job may take in all, for a job that is tried again by itself
    (see poll)."""
    n = job.get("max_attempts")
    return n if isinstance(n, int) and n > 0 else None


def _attempt_text(job):
    n = job.get("attempt") or 1
    most = max_attempts(job)
    return f"{n} of {most}" if most else str(n)


def _attempt_tooltip(job):
    text = f"Attempt {_attempt_text(job)}"
    if job.get("retry_of"):
        text += f": retries job {job['retry_of']}"
    return text


def _dedup_tooltip(job):
    if job.get("dedup_ratio") is None:
        return None
    return (f"{fmt.dedup_text(job)} of this job's data was already in the deduplicating pool: "
            "it was not stored again and, with client-side deduplication, not sent over the "
            "network.")


#: damaged files of one image named in a verify result; the rest are counted
RESULT_FILES = 50


def result_text(job):
    """What a verify or reclaim job found, in words for its details window; "" for other
    jobs and for a job without a result yet."""
    r = job.get("result")
    if not r:
        return ""
    if job.get("type") == "verify":
        return verify_result_text(r)
    if job.get("type") == "reclaim":
        return (f"Freed {fmt.size(r.get('freed_bytes') or 0) or '0 B'}: "
                f"{r.get('removed_chunks', 0):,} chunks no image used removed, "
                f"{r.get('containers_deleted', 0):,} container files deleted, "
                f"{r.get('containers_compacted', 0):,} compacted; "
                f"{r.get('live_chunks', 0):,} chunks in use.")
    return ""


def _damaged_files(name, damage, count=None):
    """The files of an AdvancedDisk image that verify found damaged, each with why; `count`
    of them in all (the result lists the first ones of a very large image)."""
    n = count or len(damage)
    lines = [f"{name}: {n:,} damaged file{'s' if n != 1 else ''}:"]
    lines += [f"    {d['path']}: {d['reason']}" for d in damage[:RESULT_FILES]]
    if n > RESULT_FILES:
        lines.append(f"    … and {n - RESULT_FILES:,} more")
    return lines


def _modes_text(modes):
    n = len(modes)
    lines = [f"{n} file{'s' if n != 1 else ''} or folder{'s' if n != 1 else ''} of the pool "
             f"{'were' if n != 1 else 'was'} open to other users (Cairn keeps them private; "
             "find out who changed them):"]
    for m in modes[:RESULT_FILES]:
        lines.append(f"    {m['path']} (mode {m['mode']}): "
                     + (f"could not be made private: {m['error']}" if m.get("error")
                        else "private again"))
    if n > RESULT_FILES:
        lines.append(f"    … and {n - RESULT_FILES} more")
    return lines


def verify_result_text(result):
    """A verify job's result: each damaged image with the files the damage hits, and what
    was open to other users."""
    images = result.get("images") or []
    containers = result.get("container_damage") or []
    modes = result.get("modes") or []
    if not images and not containers:
        clean = ("No damage found: every chunk matched its fingerprint."
                 if "container_damage" in result else
                 "No damage found: every tar header and file checksum matched.")
        return "\n".join([clean] + (_modes_text(modes) if modes else []))
    lines = []
    for d in images:
        name = f"Image {d['image']}" if d.get("image") else f"Recipe {d.get('path')}"
        if d.get("error"):
            lines.append(f"{name}: {d['error']}")
            if "damage" not in d:
                continue
        if "damage" in d:  # an AdvancedDisk image: its damaged files, each with why
            if d["damage"]:
                lines += _damaged_files(name, d["damage"], d.get("damaged_files"))
            lines += [f"{name}: {x['image_file']} at byte {x['offset']}: {x['reason']}"
                      for x in d.get("structure") or []]
            continue
        files = d.get("files") or []
        ranges = len(d.get("ranges") or [])
        lines.append(f"{name}: {ranges} damaged chunk range{'s' if ranges != 1 else ''}, "
                     f"{len(files)} file{'s' if len(files) != 1 else ''} hit"
                     + (":" if files else ""))
        lines += [f"    {f}" for f in files[:RESULT_FILES]]
        if len(files) > RESULT_FILES:
            lines.append(f"    … and {len(files) - RESULT_FILES} more")
    for c in containers:
        where = str(c.get("container", "")).rsplit("/", 1)[-1]
        lines.append(f"Container {where} at byte {c.get('offset')}: {c.get('reason')}")
    if containers and not images:
        lines.append("No image uses these records: space reclaim removes them when it "
                     "compacts their containers.")
    aside = result.get("set_aside") or 0
    if aside:
        lines.append(f"{aside:,} damaged chunk{'s' if aside != 1 else ''} set aside: the next "
                     "backup of the same data stores "
                     f"{'them' if aside != 1 else 'it'} again, and the images above become "
                     "restorable in full once it has.")
    if modes:
        lines += _modes_text(modes)
    return "\n".join(lines)


def _cmd(text):
    return f"<code>{text}</code>"


COLUMNS = [
    number_column("id", "Job ID"),
    Column("type", "Type", type_text, sort=lambda j: type_text(j).lower(),
           tooltip=_type_tooltip),
    Column("state", "State", _state_text, sort=_state_text, icon=_state_icon,
           help="queued, active (canceling once a cancel was asked for) or done"),
    number_column("status", "Status", tooltip=_status_tooltip,
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
    number_column("dedup_ratio", "Dedup rate", format=fmt.dedup_rate, tooltip=_dedup_tooltip,
                  help="share of the job's data the deduplicating pool already held: not "
                       "stored again (nor sent, with client-side deduplication)"),
    text_column("wait_reason", "Waiting for", help="why a queued job has not started yet"),
    # Later columns go at the end, so that a table layout saved before they existed still
    # finds its columns where it left them.
    Column("attempt", "Attempt", _attempt_text,
           sort=lambda j: (j.get("attempt") or 1, max_attempts(j) or 0),
           tooltip=_attempt_tooltip, numeric=True,
           help="which try of the job this is: a failed scheduled backup is tried again"),
    number_column("parent_id", "Parent",
                  help="the job this one is part of, such as the backup whose data streams "
                       "run as separate jobs"),
]
_KEYS = [c.key for c in COLUMNS]
PERCENT_COLUMN = _KEYS.index("percent")
#: hidden until chosen in the header's menu
HIDDEN_COLUMNS = ("parent_id",)
#: shown right after another column rather than at the end: (column, after). The dedup rate
#: says how much of the job's data its storage unit's pool held already: read next to the
#: unit, and in view without scrolling.
PLACED_COLUMNS = (("attempt", "status"), ("dedup_ratio", "storage_unit"))
EMPTY_TEXT = ("No jobs yet: start a backup with " + _cmd("cairn backup POLICY")
              + "; its jobs show up here while they run.")


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
            hay += " " + _state_text(job)
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


# ---- master calls (on the bridge's threads) ------------------------------------------------

def poll(m, cursor, plot_window):
    """The jobs changed since `cursor`, and the summed throughput of the last minutes."""
    changes = m.jobs.changes(cursor)
    if changes["jobs"]:
        tries = m.setting("backup_tries")
        for job in changes["jobs"]:
            if retried(job):
                job["max_attempts"] = tries
    return changes, m.throughput(plot_window)


def retried(job):
    """Whether a failed attempt of the job is tried again by itself, up to the master's
    backup_tries: scheduled backups (they have a start window), not the parent of a backup's
    streams. A backup started by hand is the administrator's to restart."""
    return (job.get("type") == "backup" and job.get("not_after") is not None
            and not (job.get("params") or {}).get("streams"))


def cancel_jobs(m, job_ids):
    return [m.jobs.request_cancel(j) for j in job_ids]


def restart_jobs(m, job_ids):
    """Restarts each job; one refused does not stop the others. ([new jobs], [errors])"""
    from app.errors import CairnError
    new, errors = [], []
    for j in job_ids:
        try:
            new.extend(m.restart_job(j))
        except CairnError as e:
            errors.append(f"job {j}: {e.message}")
    return new, errors


# ---- the page ------------------------------------------------------------------------------

class ActivityView(QWidget):
    """The activity monitor page (see ui/pages.py for what a page provides)."""

    #: after each refresh that reached the catalog
    refreshed = Signal()
    #: a job to show in its details window (the job's dict)
    job_opened = Signal(dict)

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.name = "activity"
        self.bridge = bridge
        self.error = None
        self._busy = False
        self._last = 0.0
        self._cursor = 0
        self._sized = False
        self._select_when_listed = []

        self.model = JobTableModel(self)
        self.proxy = JobFilter(self)
        self.proxy.setSourceModel(self.model)

        # -- head: title, counters
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
                            "done": "state-ok", "failed": "state-failed"}[state]))
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

        # -- actions
        self.details_action = QAction(icon("action-details"), "&Details", self)
        self.details_action.setToolTip("Show the job's details, throughput and log (Enter)")
        self.details_action.triggered.connect(self.open_selected)
        self.cancel_action = QAction(icon("action-cancel"), "&Cancel job", self)
        self.cancel_action.setToolTip("Cancel the selected queued or running jobs (Delete)")
        self.cancel_action.setShortcut(QKeySequence.StandardKey.Delete)
        self.cancel_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.cancel_action.triggered.connect(self.cancel_selected)
        self.restart_action = QAction(icon("action-restart"), "&Restart job", self)
        self.restart_action.setToolTip("Run the selected failed or canceled jobs again, with "
                                       "the same parameters")
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

        # -- filters
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
        self.client_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
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
        bar = QHBoxLayout()
        bar.addWidget(self.toolbar)
        bar.addStretch(1)
        for w in (self.state_box, self.type_box, self.client_box, self.search):
            bar.addWidget(w)
        bar.addSpacing(6)
        bar.addWidget(self.saved_box)
        bar.addWidget(save)
        self._fill_saved_filters()

        # -- the message line: results of actions, errors
        self.message = QLabel()
        self.message.setObjectName("activity-message")
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.message.setWordWrap(True)
        self.message.hide()

        # -- the plot and the table
        self.plot = ThroughputPlot(clock=True)
        self.plot_title = QLabel()
        self.plot_title.setTextFormat(Qt.TextFormat.PlainText)
        plot_box = QWidget()
        pl = QVBoxLayout(plot_box)
        pl.setContentsMargins(0, 0, 0, 4)
        pl.addWidget(self.plot_title)
        pl.addWidget(self.plot, 1)

        self.table = data_table(self.proxy, "activity-table")
        self.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
        self.table.setItemDelegateForColumn(PERCENT_COLUMN, ProgressDelegate(self.table))
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.table.doubleClicked.connect(self._open_index)
        self.table.activated.connect(self._open_index)
        self._default_columns(_KEYS)
        from ui.views import Placeholder, add_column_chooser
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

    # ---- refreshing -----------------------------------------------------------------------
    @property
    def loaded(self):
        return self.model.loaded

    def due(self, now=None):
        now = time.monotonic() if now is None else now
        return not self._busy and now - self._last >= REFRESH_S

    def refresh(self):
        if self._busy:
            return False
        self._busy = True
        self.bridge.call(poll, self._cursor, PLOT_WINDOW_S, done=self._polled,
                         failed=self._failed, context=self)
        return True

    def _polled(self, result):
        changes, series = result
        self._busy = False
        self._last = time.monotonic()
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
        if not self._sized and self.model.rowCount():
            self._size_columns()
        if self._select_when_listed:
            keys = [k for k in self._select_when_listed if self.model.row_of(k) is not None]
            if keys:
                self._select_when_listed = []
                self.select_keys(keys)
        self._update_counts()

    def _failed(self, err):
        self._busy = False
        self._last = time.monotonic()
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
        now = series[-1][1] if series else 0.0
        active = self.model.counts["active"]
        self.plot_title.setText(
            f"Throughput of all jobs, last {int(PLOT_WINDOW_S // 60)} minutes — now "
            f"{fmt.rate(now) or '0 B/s'}, {active} job{'s' if active != 1 else ''} running")

    def _size_columns(self):
        """Columns as wide as their contents or their title; the last one takes the rest."""
        hh = self.table.horizontalHeader()
        fm = hh.fontMetrics()
        arrow = hh.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMarkSize) + 6
        for c, col in enumerate(self.model.columns):
            title = fm.horizontalAdvance(col.title) + 14 + (arrow if c == 0 else 0)
            width = max(self.table.sizeHintForColumn(c) + (6 if col.numeric else 0), title)
            if col.key == "percent":
                width = max(width, fm.horizontalAdvance("100.0%") + 40)
            hh.resizeSection(c, min(width, max(160, fm.averageCharWidth() * 40)))
        hh.setStretchLastSection(True)
        self._sized = True

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
        from ui.main_window import settings
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
        from ui.main_window import settings
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
        if not self.refresh():
            self._last = 0.0    # a refresh already under way: the next tick reads again

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
                hh.setSectionHidden(_KEYS.index(key), True)
        for key, after in PLACED_COLUMNS:
            if key in new_keys:
                hh.moveSection(hh.visualIndex(_KEYS.index(key)),
                               hh.visualIndex(_KEYS.index(after)) + 1)

    def save_state(self, settings):
        settings.setValue("views/activity/header", self.table.horizontalHeader().saveState())
        settings.setValue("views/activity/columns", list(_KEYS))
        settings.setValue("views/activity/splitter", self.splitter.saveState())
        settings.setValue("views/activity/filter", self.proxy.filter())

    def restore_state(self, settings):
        h = settings.value("views/activity/header")
        if h is not None and self.table.horizontalHeader().restoreState(h):
            self._sized = True
            known = settings.value("views/activity/columns")
            # a layout saved before some columns existed shows them as a new table would
            known = set(known) if isinstance(known, list) else set(_KEYS[:_KEYS.index("attempt")])
            self._default_columns([k for k in _KEYS if k not in known])
        s = settings.value("views/activity/splitter")
        if s is not None:
            self.splitter.restoreState(s)
        f = settings.value("views/activity/filter")
        if isinstance(f, dict):
            self.set_filter(**{k: f.get(k, "") or ("all" if k == "state" else "")
                               for k in ("state", "type", "client", "text")})
        self._fill_saved_filters()
