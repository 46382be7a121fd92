"""The console's read-only tables of rows: one look and behaviour for every list (whole rows
selected, alternating colours, no editing, movable left-aligned columns) and the sorting proxy
over an ObjectTableModel."""

from contextlib import contextmanager

from PySide6.QtCore import QItemSelectionModel, QSortFilterProxyModel, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QAbstractItemView, QTableView

from ui.models import ROW_ROLE, SORT_ROLE
from ui.qtcompat import emit

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
    keyboard_friendly(t)
    return t


def keyboard_friendly(view):
    """Tab leaves the table for the next widget (the arrows move within it), and Shift+F10
    opens the context menu at the current row, as the Menu key does."""
    view.setTabKeyNavigation(False)
    menu = QShortcut(QKeySequence("Shift+F10"), view)
    menu.setContext(Qt.ShortcutContext.WidgetShortcut)

    def open_menu():
        if view.contextMenuPolicy() != Qt.ContextMenuPolicy.CustomContextMenu:
            return
        index = view.currentIndex()
        if not index.isValid() and view.model() is not None and view.model().rowCount():
            index = view.model().index(0, 0)
            view.setCurrentIndex(index)
        pos = (view.visualRect(index) if index.isValid() else view.viewport().rect()).center()
        emit(view.customContextMenuRequested, pos)
    menu.activated.connect(open_menu)
    view._menu_shortcut = menu  # kept with the view


def tab_to_buttons(toolbar):
    """A toolbar's buttons take the keyboard focus with Tab (Qt leaves them out)."""
    for a in toolbar.actions():
        w = toolbar.widgetForAction(a)
        if w is not None and not a.isSeparator():
            w.setFocusPolicy(Qt.FocusPolicy.TabFocus)


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


class HandWidths:
    """Whether the admin has resized a column of `header` by hand. Until then a table fits
    its columns to their contents whenever it is filled, even after a saved layout was put
    back (a layout saved while the list was empty holds only title-wide columns); once
    they have, their widths are kept. Sizing done by the program runs inside fitting()."""

    def __init__(self, header):
        self.header = header
        self.by_hand = False
        self._fitting = 0
        header.sectionResized.connect(self._resized)

    def _resized(self, column, old, new):
        h = self.header
        # Hiding or showing a column, or the stretched last column following the window,
        # is not a choice of width.
        if self._fitting or not old or not new or not h.isVisible():
            return
        if h.stretchLastSection() and h.visualIndex(column) == h.count() - 1:
            return
        self.by_hand = True

    @contextmanager
    def fitting(self):
        self._fitting += 1
        try:
            yield
        finally:
            self._fitting -= 1

    def restore(self, state, by_hand):
        """Puts back a saved header (column order, hidden columns, widths); True when it
        could. by_hand: what was saved beside it; the widths are then the admin's, kept."""
        with self.fitting():
            ok = bool(self.header.restoreState(state))
        self.by_hand = ok and by_hand in (True, "true", 1, "1")
        return ok
