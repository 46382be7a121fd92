"""The console's read-only tables of rows: one look and behaviour for every list (whole rows
selected, alternating colours, no editing, movable left-aligned columns) and the sorting proxy
over an ObjectTableModel."""

from PySide6.QtCore import QSortFilterProxyModel, Qt
from PySide6.QtWidgets import QAbstractItemView, QTableView

from ui.models import SORT_ROLE

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
