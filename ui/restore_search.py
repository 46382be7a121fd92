"""The restore page's two searches: files by name in the chosen image, and the versions of
a file in every image of the client. Each is a SearchPane (pattern, Find / Stop, status line,
results) whose search runs on a worker thread and can be stopped: ImageSearch, whose files
found can be checked for restore or shown in the tree, and VersionSearch, whose versions
open their image at that file."""

import threading

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt, \
    Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, \
    QVBoxLayout, QWidget

from ui import fmt
from ui.models import ROW_ROLE, SORT_ROLE, Column, text_column, time_column
from ui.qtcompat import emit
from ui.resources import icon
from ui.tables import Selection, data_table

SEARCH_LIMIT = 10_000
VERSIONS_LIMIT = 2_000


class ResultsModel(QAbstractTableModel):
    """Rows of a search (files found), optionally with restore check boxes."""

    checks_changed = Signal()

    def __init__(self, columns, checkable, parent=None):
        super().__init__(parent)
        self.columns = columns
        self.checkable = checkable
        self.rows = []
        self.checked = set()

    def set_rows(self, rows):
        self.beginResetModel()
        self.rows = rows
        self.checked = set()
        self.endResetModel()
        emit(self.checks_changed)

    def set_all_checked(self, on):
        self.checked = set(range(len(self.rows))) if on else set()
        if self.rows:
            emit(self.dataChanged, self.index(0, 0), self.index(len(self.rows) - 1, 0),
                 [Qt.ItemDataRole.CheckStateRole])
        emit(self.checks_changed)

    def checked_paths(self):
        return [self.rows[i]["path"] for i in sorted(self.checked)]

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.columns)

    def flags(self, index):
        f = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable \
            | Qt.ItemFlag.ItemNeverHasChildren
        if self.checkable and index.column() == 0:
            f |= Qt.ItemFlag.ItemIsUserCheckable
        return f

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        col = self.columns[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return col.text(row)
        if role == SORT_ROLE:
            return col.sort(row) if col.sort else col.text(row)
        if role == Qt.ItemDataRole.CheckStateRole and self.checkable and index.column() == 0:
            return Qt.CheckState.Checked if index.row() in self.checked \
                else Qt.CheckState.Unchecked
        if role == Qt.ItemDataRole.ToolTipRole:
            return col.tooltip(row) if col.tooltip else None
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int((Qt.AlignmentFlag.AlignRight if col.numeric else Qt.AlignmentFlag.AlignLeft)
                       | Qt.AlignmentFlag.AlignVCenter)
        if role == ROW_ROLE:
            return row
        return None

    def setData(self, index, value, role=Qt.ItemDataRole.EditRole):
        if role != Qt.ItemDataRole.CheckStateRole or not self.checkable:
            return False
        on = getattr(value, "value", value) == Qt.CheckState.Checked.value
        (self.checked.add if on else self.checked.discard)(index.row())
        emit(self.dataChanged, index, index, [Qt.ItemDataRole.CheckStateRole])
        emit(self.checks_changed)
        return True

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.columns[section].title
        return None


def _size_text(r):
    return fmt.size(r.get("size")) if r.get("kind") in ("f", "h") else ""


FOUND_COLUMNS = [
    text_column("path", "Path"),
    Column("size", "Size", _size_text, sort=lambda r: r.get("size") or 0, numeric=True),
    Column("mtime_ns", "Modified", lambda r: fmt.local_time_ns(r.get("mtime_ns")),
           sort=lambda r: r.get("mtime_ns") or 0),
]

VERSION_COLUMNS = [
    time_column("created", "Image date"),
    text_column("path", "Path"),
    Column("size", "Size", _size_text, sort=lambda r: r.get("size") or 0, numeric=True),
    Column("mtime_ns", "Modified", lambda r: fmt.local_time_ns(r.get("mtime_ns")),
           sort=lambda r: r.get("mtime_ns") or 0),
    text_column("policy", "Policy"),
    text_column("image", "Image ID"),
]


def sorted_table(model, name):
    """A table of `model` that selects one row at a time, sorted by SORT_ROLE;
    (table, proxy)."""
    proxy = QSortFilterProxyModel(model)
    proxy.setSourceModel(model)
    proxy.setSortRole(SORT_ROLE)
    return data_table(proxy, name, selection=Selection.SingleSelection), proxy


class SearchPane(QWidget):
    """A pattern box with Find / Stop, a status line and a results table; the search itself
    runs on a worker thread and can be stopped; `show_result(result)` shows what it found."""

    def __init__(self, bridge, columns, checkable, placeholder, button, show_result,
                 parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.show_result = show_result
        self.results = ResultsModel(columns, checkable, self)
        self.table, self.proxy = sorted_table(self.results, "results")
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.pattern = QLineEdit()
        self.pattern.setPlaceholderText(placeholder)
        self.pattern.setClearButtonEnabled(True)
        self.case = QCheckBox("Match case")
        self.find_button = QPushButton(icon("search"), button)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.status = QLabel()
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        self.busy = False
        self._cancel = None
        self._generation = 0
        row = QHBoxLayout()
        row.addWidget(self.pattern, 1)
        row.addWidget(self.case)
        row.addWidget(self.find_button)
        row.addWidget(self.stop_button)
        self.extra = QHBoxLayout()
        self.extra.addWidget(self.status, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 6, 0, 0)
        lay.addLayout(row)
        lay.addLayout(self.extra)
        lay.addWidget(self.table, 1)
        self.pattern.returnPressed.connect(self.find_button.click)
        self.stop_button.clicked.connect(self.stop)

    def run(self, fn, *args):
        """Runs fn(master, *args, cancel_event) on a worker; its result goes to show()."""
        self.stop()
        self._generation += 1
        gen = self._generation
        self._cancel = threading.Event()
        self.busy = True
        self.find_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.status.setText("Searching…")
        self.bridge.call(fn, *args, self._cancel, done=lambda r: self._done(gen, r),
                         failed=lambda e: self._failed(gen, e), context=self)

    def stop(self):
        if self._cancel is not None:
            self._cancel.set()

    def reset(self, text=""):
        self.stop()
        self._generation += 1
        self._idle()
        self.results.set_rows([])
        self.status.setText(text)

    def _idle(self):
        self.busy = False
        self._cancel = None
        self.find_button.setEnabled(True)
        self.stop_button.setEnabled(False)

    def _done(self, gen, r):
        if gen != self._generation:
            return
        self._idle()
        self.show_result(r)

    def _failed(self, gen, err):
        if gen != self._generation:
            return
        self._idle()
        self.results.set_rows([])
        self.status.setText(str(err))

    def size_columns(self):
        t = self.table
        t.resizeColumnsToContents()
        hh = t.horizontalHeader()
        for c in range(self.results.columnCount()):
            hh.resizeSection(c, min(hh.sectionSize(c), 520))


def search_image(m, image, pattern, case, cancel):
    return m.search(image, pattern, limit=SEARCH_LIMIT, case_sensitive=case, cancel=cancel)


def find_versions(m, client, query, case, cancel):
    return m.find_versions(client, query, limit=VERSIONS_LIMIT, case_sensitive=case,
                           cancel=cancel)


def counted(r, noun, limit):
    n = r["count"]
    plural = noun + ("es" if noun.endswith("ch") else "s")
    text = f"{n:,} {noun if n == 1 else plural} found"
    if r["truncated"]:
        text += f"; the first {len(r.get('matches', r.get('versions', []))):,} are listed"
    if r["cancelled"]:
        text += " (stopped: there may be more)"
    return text



class ImageSearch(SearchPane):
    """Search this image: names or patterns in the selected image (`image()`, its dict or
    None), the files found checkable for restore, with Check all, Uncheck all and Show in
    tree."""

    #: Show in tree, or a file found activated: the path to open in the image's tree
    show_requested = Signal(str)

    def __init__(self, bridge, image, parent=None):
        super().__init__(bridge, FOUND_COLUMNS, True,
                         "Name or pattern in this image: *.log, report, "
                         "/data/*/raw/*.dat", "Search", self._show_found, parent)
        self.image = image
        self.table.setObjectName("search-results")
        self.check_all = QPushButton("Check all")
        self.uncheck_all = QPushButton("Uncheck all")
        self.show_in_tree = QPushButton(icon("files"), "Show in tree")
        for b in (self.check_all, self.uncheck_all, self.show_in_tree):
            b.setEnabled(False)
            self.extra.addWidget(b)
        self.find_button.clicked.connect(self.run_search)
        self.check_all.clicked.connect(lambda: self.results.set_all_checked(True))
        self.uncheck_all.clicked.connect(lambda: self.results.set_all_checked(False))
        self.show_in_tree.clicked.connect(self._show_found_in_tree)
        self.table.activated.connect(lambda _i: self._show_found_in_tree())

    def image_changed(self, image):
        """Another image is shown: what was found in the last one goes."""
        self.reset("" if image else "Select an image to search it.")
        self._found_buttons()

    def run_search(self):
        image = self.image()
        if image is None:
            self.status.setText("Select an image to search it.")
            return
        self.run(search_image, image["id"], self.pattern.text(), self.case.isChecked())

    def _show_found(self, r):
        self.results.set_rows(r["matches"])
        self.status.setText(counted(r, "match", SEARCH_LIMIT) + (
            ". Check the ones to restore." if r["matches"] else "."))
        self.size_columns()
        self._found_buttons()

    def _found_buttons(self):
        has = bool(self.results.rows)
        for b in (self.check_all, self.uncheck_all, self.show_in_tree):
            b.setEnabled(has)

    def _show_found_in_tree(self):
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return
        row = self.proxy.data(rows[0], ROW_ROLE)
        emit(self.show_requested, row["path"])


class VersionSearch(SearchPane):
    """Find in every image: the versions of a path or pattern in every image of the client
    (`client()`, its name or None); choosing one asks for its image, open at that file."""

    #: a version was chosen: its image's id and its path
    version_chosen = Signal(str, str)

    def __init__(self, bridge, client, parent=None):
        super().__init__(bridge, VERSION_COLUMNS, False,
                         "Path (/data/report.pdf) or pattern (report*.pdf) to find "
                         "in every image of the client", "Find versions",
                         self._show_versions, parent)
        self.client = client
        self.table.setObjectName("version-results")
        self.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
        self.find_button.clicked.connect(self.run_find_versions)
        self.table.activated.connect(self._version_chosen)
        self.table.clicked.connect(self._version_chosen)

    def run_find_versions(self):
        client = self.client()
        if client is None:
            self.status.setText("Choose a client first.")
            return
        self.run(find_versions, client, self.pattern.text(), self.case.isChecked())

    def _show_versions(self, r):
        self.results.set_rows(r["versions"])
        text = counted(r, "version", VERSIONS_LIMIT)
        if r["versions"]:
            text += ". Click one to open its image at that file."
        if r["errors"]:
            text += f" {len(r['errors'])} image(s) could not be searched: " + "; ".join(
                f"{e['image']}: {e['message']}" for e in r["errors"][:3])
        self.status.setText(text)
        self.size_columns()

    def _version_chosen(self, index):
        row = self.proxy.data(index, ROW_ROLE)
        if row is None:
            return
        emit(self.version_chosen, row["image"], row["path"])
