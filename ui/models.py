"""Item models over the master's plain dicts.

ObjectTableModel is one model class for every list of catalog objects, driven by column
specs. It is refreshed by handing it the whole new list: rows are matched by key, changed rows
are updated in place (dataChanged), new ones inserted and vanished ones removed, so a view
refreshed every second neither flickers nor loses its selection or scroll position.

ImageFilesModel is the tree of one backup image's files, read one directory at a time through
the bridge (canFetchMore/fetchMore), and handed to the view in batches so that a directory of
a million files does not stall the window."""

from dataclasses import dataclass
from typing import Any, Callable, Optional

from PySide6.QtCore import QAbstractItemModel, QAbstractTableModel, QModelIndex, QObject, Qt, \
    Signal
from PySide6.QtGui import QAbstractFileIconProvider
from PySide6.QtWidgets import QFileIconProvider

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
        return "" if v is None else str(v)

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
        return fmt.joined(row.get(f))

    return Column(key, title, text, sort=lambda r: text(r).lower(), help=help,
                  tooltip=lambda r: "\n".join(str(v) for v in (r.get(f) or [])) or None)


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

    # ---- refreshing -----------------------------------------------------------------------
    def set_rows(self, rows):
        new = {}
        for r in rows:
            new[r[self.key]] = r
        gone = sorted((self._pos[k] for k in self._pos if k not in new), reverse=True)
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

        ncols = len(self.columns)
        for n, old in enumerate(self._rows):
            fresh = new[old[self.key]]
            if fresh != old:
                self._rows[n] = fresh
                changed = [c for c, col in enumerate(self.columns)
                           if col.text(fresh) != col.text(old)
                           or (col.icon and col.icon(fresh) is not col.icon(old))]
                if not changed:
                    continue
                emit(self.dataChanged, self.index(n, min(changed)),
                                      self.index(n, max(changed) if ncols else 0))

        added = [r for k, r in new.items() if k not in self._pos]
        if added:
            first = len(self._rows)
            self.beginInsertRows(QModelIndex(), first, first + len(added) - 1)
            for r in added:
                self._pos[r[self.key]] = len(self._rows)
                self._rows.append(r)
            self.endInsertRows()
        self.loaded = True

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
        row = self._rows[index.row()]
        col = self.columns[index.column()]
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


# ---- the files of an image ------------------------------------------------------------------

class _Node:
    __slots__ = ("entry", "parent", "row", "children", "pending", "fetched", "loading")

    def __init__(self, entry, parent, row):
        self.entry = entry
        self.parent = parent
        self.row = row
        self.children = []
        self.pending = []      # listed but not yet handed to the view
        self.fetched = False
        self.loading = False

    @property
    def is_dir(self):
        return self.entry["kind"] == "d"


FILE_COLUMNS = ("Name", "Size", "Modified", "Permissions", "Owner", "Link target")


class ImageFilesModel(QAbstractItemModel):
    """Read-only tree of an image's files. Directories are listed when first expanded."""

    BATCH = 1000
    #: (path, message) when listing a directory failed
    load_failed = Signal(str, str)
    #: path of a directory whose listing arrived
    loaded = Signal(str)

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self._bridge = bridge
        self._icons = QFileIconProvider()
        self.image_id = None
        self._generation = 0
        self._root = _Node({"path": "/", "name": "/", "kind": "d"}, None, 0)
        self._root.fetched = True   # no image: nothing to list

    def set_image(self, image_id):
        self.beginResetModel()
        self._generation += 1
        self.image_id = image_id
        self._root = _Node({"path": "/", "name": "/", "kind": "d"}, None, 0)
        self._root.fetched = image_id is None
        self.endResetModel()
        if image_id is not None:
            self.fetchMore(QModelIndex())

    @property
    def loading(self):
        """True while any directory listing is on its way."""
        stack = [self._root]
        while stack:
            n = stack.pop()
            if n.loading:
                return True
            stack.extend(c for c in n.children if c.is_dir and (c.fetched or c.loading))
        return False

    def node(self, index):
        return index.internalPointer() if index.isValid() else self._root

    def index_of_path(self, path):
        """The index of an already listed path, or an invalid index."""
        node, idx = self._root, QModelIndex()
        if path in ("", "/"):
            return idx
        for part in path.strip("/").split("/"):
            node = next((c for c in node.children if c.entry["name"] == part), None)
            if node is None:
                return QModelIndex()
            idx = self.index(node.row, 0, idx)
        return idx

    # ---- lazy loading -------------------------------------------------------------------
    def hasChildren(self, parent=QModelIndex()):
        n = self.node(parent)
        if not n.is_dir:
            return False
        if not n.fetched:
            return True
        return bool(n.children or n.pending)

    def canFetchMore(self, parent):
        if parent.isValid() and parent.column() != 0:
            return False
        n = self.node(parent)
        if not n.is_dir:
            return False
        return bool(n.pending) or (not n.fetched and not n.loading)

    def fetchMore(self, parent):
        if parent.isValid() and parent.column() != 0:
            return
        n = self.node(parent)
        if n.pending:
            self._insert_batch(parent, n)
            return
        if n.fetched or n.loading or not n.is_dir or self.image_id is None:
            return
        n.loading = True
        gen, image, path = self._generation, self.image_id, n.entry["path"]
        self._bridge.call(lambda m, i, p: m.browse(i, p)["entries"], image, path,
                          done=lambda entries: self._listed(gen, n, entries),
                          failed=lambda err: self._failed(gen, n, err), context=self)

    def _listed(self, gen, node, entries):
        if gen != self._generation:
            return
        node.loading = False
        node.fetched = True
        node.pending = sorted(entries, key=lambda e: (e["kind"] != "d", e["name"].lower(),
                                                       e["name"]))
        parent = self._index_of_node(node)
        if node.pending:
            self._insert_batch(parent, node)
        elif parent.isValid():
            # The expander goes away: the directory turned out to be empty.
            emit(self.dataChanged, parent, parent.siblingAtColumn(len(FILE_COLUMNS) - 1))
        emit(self.loaded, node.entry["path"])

    def _failed(self, gen, node, err):
        if gen != self._generation:
            return
        node.loading = False
        node.fetched = True
        parent = self._index_of_node(node)
        if parent.isValid():
            emit(self.dataChanged, parent, parent.siblingAtColumn(len(FILE_COLUMNS) - 1))
        emit(self.load_failed, node.entry["path"], str(err))

    def _insert_batch(self, parent, node):
        batch, node.pending = node.pending[:self.BATCH], node.pending[self.BATCH:]
        first = len(node.children)
        self.beginInsertRows(parent, first, first + len(batch) - 1)
        for i, e in enumerate(batch):
            node.children.append(_Node(e, node, first + i))
        self.endInsertRows()

    def _index_of_node(self, node):
        if node is self._root or node.parent is None:
            return QModelIndex()
        return self.createIndex(node.row, 0, node)

    # ---- the model interface ---------------------------------------------------------------
    def index(self, row, column, parent=QModelIndex()):
        if not self.hasIndex(row, column, parent):
            return QModelIndex()
        n = self.node(parent)
        return self.createIndex(row, column, n.children[row])

    def parent(self, index=None):
        if index is None:
            return QObject.parent(self)
        if not index.isValid():
            return QModelIndex()
        return self._index_of_node(index.internalPointer().parent)

    def rowCount(self, parent=QModelIndex()):
        if parent.isValid() and parent.column() != 0:
            return 0
        return len(self.node(parent).children)

    def columnCount(self, parent=QModelIndex()):
        return len(FILE_COLUMNS)

    def flags(self, index):
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        f = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        if not index.internalPointer().is_dir:
            f |= Qt.ItemFlag.ItemNeverHasChildren
        return f

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        e = index.internalPointer().entry
        c = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if c == 0:
                return e["name"] or "/"
            if c == 1:
                return fmt.size(e.get("size")) if e["kind"] in ("f", "h") else ""
            if c == 2:
                return fmt.local_time_ns(e.get("mtime_ns"))
            if c == 3:
                return fmt.mode(e["kind"], e.get("mode"))
            if c == 4:
                return f"{e.get('uid', '')}:{e.get('gid', '')}"
            if c == 5:
                return e.get("link") or ""
        if role == Qt.ItemDataRole.ToolTipRole and c == 0:
            return e["path"]
        if role == Qt.ItemDataRole.DecorationRole and c == 0:
            kind = (QAbstractFileIconProvider.IconType.Folder if e["kind"] == "d"
                    else QAbstractFileIconProvider.IconType.File)
            return self._icons.icon(kind)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return _RIGHT if c == 1 else _LEFT
        if role == ROW_ROLE:
            return e
        return None

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(FILE_COLUMNS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return FILE_COLUMNS[section]
        return None
