"""Item models over the master's plain dicts.

ObjectTableModel is one model class for every list of catalog objects, driven by column
specs. It is refreshed by handing it the whole new list (set_rows) or only what changed
(apply_changes): rows are matched by key, changed rows are updated in place (dataChanged), new
ones inserted and vanished ones removed, so a view refreshed every second neither flickers nor
loses its selection or scroll position."""

from dataclasses import dataclass
from typing import Any, Callable, Optional

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt

from ui import fmt
from ui.qtcompat import emit

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
ROW_ROLE = Qt.ItemDataRole.UserRole + 2

_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_LEFT = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    text: Callable[[dict], str]
    sort: Optional[Callable[[dict], Any]] = None
    tooltip: Optional[Callable[[dict], Optional[str]]] = None
    icon: Optional[Callable[[dict], Any]] = None
    numeric: bool = False
    help: str = ""


def text_column(key, title, *, field=None, help="", icon=None, tooltip=None):
    f = field or key

    def text(row):
        v = row.get(f)
        return "" if v is None else fmt.shown(v)

    return Column(key, title, text, sort=lambda r: text(r).lower(), help=help,
                  icon=icon, tooltip=tooltip or (lambda r: text(r) or None))


def number_column(key, title, *, field=None, format=None, help="", tooltip=None):
    f = field or key

    def text(row):
        v = row.get(f)
        if v is None:
            return ""
        return format(v) if format else str(v)

    def sort(row):
        v = row.get(f)
        return -1 if v is None else v

    return Column(key, title, text, sort=sort, numeric=True, help=help,
                  tooltip=tooltip)


def list_column(key, title, *, field=None, help=""):
    f = field or key

    def text(row):
        return fmt.joined(map(fmt.shown, row.get(f) or []))

    return Column(key, title, text, sort=lambda r: text(r).lower(), help=help,
                  tooltip=lambda r: "\n".join(fmt.shown(v) for v in (r.get(f) or [])) or None)


def time_column(key, title, *, field=None, help="", short=False):
    f = field or key
    show = fmt.short_time if short else fmt.local_time
    return Column(key, title, lambda r: show(r.get(f)),
                  sort=lambda r: r.get(f) or "", help=help,
                  tooltip=lambda r: fmt.utc_tooltip(r.get(f)))


class ObjectTableModel(QAbstractTableModel):
    def __init__(self, columns, key="name", parent=None):
        super().__init__(parent)
        self.columns = list(columns)
        self.key = key
        self._rows = []
        self._pos = {}
        self.loaded = False
        self._sorted = None     # (column, order) once the view sorts the model itself

    # ---- refreshing -----------------------------------------------------------------------
    def set_rows(self, rows):
        """The whole list: rows missing from it are removed."""
        new = {r[self.key]: r for r in rows}
        self._remove([k for k in self._pos if k not in new])
        self._upsert(new.values())
        self.loaded = True
        self._resort()

    def apply_changes(self, rows, removed=()):
        """Only what changed: `rows` new or updated, `removed` the keys of rows that went
        away. Rows named in neither stay as they are."""
        self._remove([k for k in removed if k in self._pos])
        self._upsert(rows)
        self.loaded = True
        self._resort()

    def _remove(self, keys):
        gone = sorted((self._pos[k] for k in set(keys)), reverse=True)
        # Remove from the bottom up, one contiguous run at a time.
        i = 0
        while i < len(gone):
            last = first = gone[i]
            while i + 1 < len(gone) and gone[i + 1] == first - 1:
                i += 1
                first = gone[i]
            self.beginRemoveRows(QModelIndex(), first, last)
            del self._rows[first:last + 1]
            self.endRemoveRows()
            i += 1
        if gone:
            self._pos = {r[self.key]: n for n, r in enumerate(self._rows)}

    def _upsert(self, rows):
        added, changed = {}, []
        for fresh in rows:
            k = fresh[self.key]
            n = self._pos.get(k)
            if n is None:
                added[k] = fresh
                continue
            old = self._rows[n]
            if fresh == old:
                continue
            self._rows[n] = fresh
            cols = [c for c, col in enumerate(self.columns)
                    if col.text(fresh) != col.text(old)
                    or (col.icon and col.icon(fresh) is not col.icon(old))]
            if cols:
                changed.append((n, cols[0], cols[-1]))
        # One dataChanged per run of neighbouring rows, over the columns that changed in it:
        # a sorted or filtered view then looks again only at what may have moved.
        changed.sort()
        i = 0
        while i < len(changed):
            first, lo, hi = changed[i]
            last = first
            while i + 1 < len(changed) and changed[i + 1][0] == last + 1:
                i += 1
                last, a, b = changed[i]
                lo, hi = min(lo, a), max(hi, b)
            emit(self.dataChanged, self.index(first, lo), self.index(last, hi))
            i += 1
        if added:
            first = len(self._rows)
            self.beginInsertRows(QModelIndex(), first, first + len(added) - 1)
            for k, r in added.items():
                self._pos[k] = len(self._rows)
                self._rows.append(r)
            self.endInsertRows()

    # ---- sorting without a proxy ----------------------------------------------------------
    def sort(self, column, order=Qt.SortOrder.AscendingOrder):
        """Sorts the rows themselves, for a view set on this model with sorting enabled: one
        Python sort by the column's sort key, where a sorting proxy compares rows through
        data() (a second on the UI thread for a report of 20,000 jobs)."""
        if not 0 <= column < len(self.columns):
            return
        self._sorted = (column, order)
        self._resort()

    def _resort(self):
        if self._sorted is None or len(self._rows) < 2:
            return
        column, order = self._sorted
        col = self.columns[column]

        def key(row):
            v = col.sort(row) if col.sort else col.text(row)
            if isinstance(v, str):
                v = v.lower()
            # None first, then values; numbers and texts apart so that they never compare
            return (v is not None, isinstance(v, str), v if v is not None else 0)
        emit(self.layoutAboutToBeChanged)
        before = self.persistentIndexList()
        keys = [(self._rows[i.row()][self.key], i.column()) for i in before]
        self._rows.sort(key=key, reverse=order == Qt.SortOrder.DescendingOrder)
        self._pos = {r[self.key]: n for n, r in enumerate(self._rows)}
        self.changePersistentIndexList(before, [self.index(self._pos[k], c) for k, c in keys])
        emit(self.layoutChanged)

    def row_dict(self, row):
        return self._rows[row]

    def row_of(self, key):
        return self._pos.get(key)

    # ---- the model interface ---------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.columns)

    def flags(self, index):
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return (Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
                | Qt.ItemFlag.ItemNeverHasChildren)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not (0 <= index.row() < len(self._rows)):
            return None
        return self.cell(self._rows[index.row()], index.column(), role)

    def cell(self, row, column, role=Qt.ItemDataRole.DisplayRole):
        """What data() gives for `row` (a row's dict) in `column`: for models that show
        these rows in an order of their own without a QModelIndex round trip per cell."""
        col = self.columns[column]
        if role == Qt.ItemDataRole.DisplayRole:
            return col.text(row)
        if role == SORT_ROLE:
            return col.sort(row) if col.sort else col.text(row)
        if role == Qt.ItemDataRole.ToolTipRole:
            return col.tooltip(row) if col.tooltip else None
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return _RIGHT if col.numeric else _LEFT
        if role == Qt.ItemDataRole.DecorationRole:
            return col.icon(row) if col.icon else None
        if role == ROW_ROLE:
            return row
        return None

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(self.columns):
            return None
        col = self.columns[section]
        if role == Qt.ItemDataRole.DisplayRole:
            return col.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return col.help or None
        return None
