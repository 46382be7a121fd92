"""The console's read-only tables of rows: one look and behaviour for every list (whole rows
selected, alternating colours, no editing, movable left-aligned columns) and the sorting proxy
over an ObjectTableModel."""

from PySide6.QtCore import QItemSelectionModel, QSortFilterProxyModel, Qt
from PySide6.QtWidgets import QAbstractItemView, QTableView

from ui.models import ROW_ROLE, SORT_ROLE

Selection = QAbstractItemView.SelectionMode


def sorting_proxy(model, parent=None):
    """Sorts by each column's sort key (SORT_ROLE), case-insensitively, as rows change."""
    proxy = QSortFilterProxyModel(parent if parent is not None else model)
    proxy.setSourceModel(model)
    proxy.setSortRole(SORT_ROLE)
    proxy.setDynamicSortFilter(True)
    proxy.setSortCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
    return proxy


def data_table(model, name, selection=Selection.ExtendedSelection, sortable=True):
    t = QTableView()
    t.setObjectName(name)
    t.setModel(model)
    t.setSortingEnabled(sortable)
    t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    t.setSelectionMode(selection)
    t.setAlternatingRowColors(True)
    t.setWordWrap(False)
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.verticalHeader().hide()
    t.verticalHeader().setDefaultSectionSize(t.fontMetrics().height() + 10)
    hh = t.horizontalHeader()
    hh.setHighlightSections(False)
    hh.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    hh.setSectionsMovable(True)
    return t


def selected_rows(table):
    """The row dicts (ROW_ROLE) of a table's selected rows, top to bottom."""
    model = table.model()
    rows = sorted(table.selectionModel().selectedRows(), key=lambda i: i.row())
    return [model.data(i, ROW_ROLE) for i in rows]


def select_keys(table, source, keys):
    """Selects the rows of `source` (an ObjectTableModel under the table's proxy) with these
    keys, makes the first current and scrolls to it; False when none is shown."""
    proxy, sm = table.model(), table.selectionModel()
    first = True
    for key in keys:
        src = source.row_of(key) if key is not None else None
        if src is None:
            continue
        idx = proxy.mapFromSource(source.index(src, 0))
        if not idx.isValid():
            continue
        flags = QItemSelectionModel.SelectionFlag.Rows | (
            QItemSelectionModel.SelectionFlag.ClearAndSelect if first
            else QItemSelectionModel.SelectionFlag.Select)
        sm.setCurrentIndex(idx, flags)
        if first:
            table.scrollTo(idx)
        first = False
    return not first
