"""The tree of one backup image's files, read one directory at a time from the catalog index
through the bridge (canFetchMore/fetchMore) and handed to the view in batches, so that a
directory of a million files does not stall the window.

Every row has a check box for restore. Checking a directory chooses its whole subtree without
listing it: a directory's check state is passed down to its children when they are listed.
A directory with some children chosen and others not shows as partially checked, and the
paths to restore are the checked entries whose parent is not checked (checked_paths)."""

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QObject, Qt, Signal
from PySide6.QtGui import QAbstractFileIconProvider
from PySide6.QtWidgets import QFileIconProvider

from app.catalog_index import Entry, tree_order
from app.formats import owners
from ui import fmt
from ui.models import ROW_ROLE
from ui.qtcompat import emit

UNCHECKED, PARTIAL, CHECKED = 0, 1, 2
_QT_STATE = (Qt.CheckState.Unchecked, Qt.CheckState.PartiallyChecked, Qt.CheckState.Checked)
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_LEFT = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)

FILE_COLUMNS = ("Name", "Size", "Modified", "Mode", "Owner", "Link target")
_OWNER = FILE_COLUMNS.index("Owner")
_ROOT = Entry("/", "", "d", 0o755, 0, 0, 0, 0, 0, 0, "", "")
#: entries of a directory a remote master sends before the others (_list_dir)
FIRST_PAGE = 2000


class _Node:
    __slots__ = ("entry", "parent", "row", "children", "pending", "fetched", "loading",
                 "check", "pending_check")

    def __init__(self, entry, parent, row, check=UNCHECKED):
        self.entry = entry
        self.parent = parent
        self.row = row
        self.children = []
        self.pending = []      # listed but not yet handed to the view
        self.fetched = False
        self.loading = False
        self.check = check
        self.pending_check = check   # what the listed-but-not-shown children are

    @property
    def is_dir(self):
        return self.entry.kind == "d"


def _check_value(value):
    """A CheckStateRole value (enum or int) as UNCHECKED / PARTIAL / CHECKED."""
    v = getattr(value, "value", value)
    return {0: UNCHECKED, 1: PARTIAL, 2: CHECKED}.get(int(v), UNCHECKED)


class ImageFilesModel(QAbstractItemModel):
    """Tree of an image's files with restore check boxes. Directories are listed when first
    expanded."""

    BATCH = 1000
    #: (path, message) when listing a directory failed
    load_failed = Signal(str, str)
    #: path of a directory whose listing arrived
    loaded = Signal(str)
    #: the set of checked paths changed
    checks_changed = Signal()
    #: a path asked for with reveal() is now in the tree (its index's path)
    revealed = Signal(str)
    #: the client's owner and group names of the image arrived (the Owner column shows them)
    named = Signal()

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self._bridge = bridge
        self._icons = QFileIconProvider()
        self._folder = self._icons.icon(QAbstractFileIconProvider.IconType.Folder)
        self._file = self._icons.icon(QAbstractFileIconProvider.IconType.File)
        self.image_id = None
        self._generation = 0
        self._reveal = None
        self._root = _Node(_ROOT, None, 0)
        self._root.fetched = True   # no image: nothing to list
        # the client's names of the image's owners and groups: numbers until they arrive
        self._users, self._groups = {}, {}

    def set_image(self, image_id):
        self.beginResetModel()
        self._generation += 1
        self.image_id = image_id
        self._reveal = None
        self._root = _Node(_ROOT, None, 0)
        self._root.fetched = image_id is None
        self._users, self._groups = {}, {}
        self.endResetModel()
        emit(self.checks_changed)
        if image_id is not None:
            gen = self._generation
            # Without names the column shows numbers, as ls -n does: not worth an error.
            self._bridge.call(_owner_names, image_id,
                              done=lambda names: self._named(gen, names),
                              failed=lambda err: None, context=self)
            self.fetchMore(QModelIndex())

    def owner_text(self, entry):
        """What the Owner column shows: "user:group" by the client's names, numbers where it
        had none."""
        return owners.label(entry.uid, entry.gid, self._users, self._groups)

    def _named(self, gen, names):
        if gen != self._generation:
            return
        self._users, self._groups = names
        # the rows already shown get their names
        stack = [self._root]
        while stack:
            n = stack.pop()
            if n.children:
                parent = self._index_of_node(n)
                emit(self.dataChanged, self.index(0, _OWNER, parent),
                     self.index(len(n.children) - 1, _OWNER, parent))
                stack.extend(c for c in n.children if c.children)
        emit(self.named)

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
            node = next((c for c in node.children if c.entry.name == part), None)
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
        gen, image, path = self._generation, self.image_id, n.entry.path
        self._bridge.call(_list_dir, image, path,
                          done=lambda listed: self._listed(gen, n, *listed),
                          failed=lambda err: self._failed(gen, n, err), context=self)

    def _listed(self, gen, node, entries, rest=None):
        if gen != self._generation:
            if rest is not None:
                rest.close()
            return
        if rest is not None:
            # the others follow: added to the rows still to show once they are here
            self._bridge.call(_rest, rest, done=lambda more: self._more(gen, node, more),
                              failed=lambda err: self._failed(gen, node, err), context=self)
        node.loading = False
        node.fetched = True
        node.pending = entries
        node.pending_check = node.check if node.check != PARTIAL else node.pending_check
        parent = self._index_of_node(node)
        if node.pending:
            self._insert_batch(parent, node)
        elif parent.isValid():
            # The expander goes away: the directory turned out to be empty.
            emit(self.dataChanged, parent, parent.siblingAtColumn(len(FILE_COLUMNS) - 1))
        emit(self.loaded, node.entry.path)
        self._continue_reveal()

    def _more(self, gen, node, entries):
        if gen != self._generation or not entries:
            return
        node.pending = node.pending + entries
        parent = self._index_of_node(node)
        if not node.children:
            self._insert_batch(parent, node)
        self._continue_reveal()

    def _failed(self, gen, node, err):
        if gen != self._generation:
            return
        node.loading = False
        node.fetched = True
        parent = self._index_of_node(node)
        if parent.isValid():
            emit(self.dataChanged, parent, parent.siblingAtColumn(len(FILE_COLUMNS) - 1))
        emit(self.load_failed, node.entry.path, str(err))
        if self._reveal is not None:
            self._reveal = None

    def _insert_batch(self, parent, node, upto=0):
        n = max(self.BATCH, upto)
        batch, node.pending = node.pending[:n], node.pending[n:]
        first = len(node.children)
        check = node.pending_check
        self.beginInsertRows(parent, first, first + len(batch) - 1)
        node.children.extend([_Node(e, node, first + i, check) for i, e in enumerate(batch)])
        self.endInsertRows()

    def _index_of_node(self, node):
        if node is self._root or node.parent is None:
            return QModelIndex()
        return self.createIndex(node.row, 0, node)

    # ---- going to a path ----------------------------------------------------------------
    def reveal(self, path):
        """Lists the directories down to `path` (one at a time, as the user would by
        expanding them), then emits revealed(path). A path not in the image is dropped."""
        self._reveal = path
        self._continue_reveal()

    def _continue_reveal(self):
        path = self._reveal
        if path is None or self.image_id is None:
            return
        node, idx = self._root, QModelIndex()
        for part in [p for p in path.split("/") if p]:
            if not node.fetched:
                self.fetchMore(idx)
                return          # resumed by _listed
            child = next((c for c in node.children if c.entry.name == part), None)
            if child is None and node.pending:
                at = next((i for i, e in enumerate(node.pending) if e.name == part), None)
                if at is not None:
                    first = len(node.children)
                    self._insert_batch(idx, node, upto=at + 1)
                    child = node.children[first + at]
            if child is None:
                self._reveal = None
                return
            node, idx = child, self.index(child.row, 0, idx)
        self._reveal = None
        emit(self.revealed, path)

    # ---- check boxes ----------------------------------------------------------------------
    def set_checked(self, index, state):
        """Checks or unchecks an entry with everything below it; its parents become
        partially checked or checked as their children are."""
        node = self.node(index)
        if node is self._root:
            return
        state = CHECKED if state == CHECKED else UNCHECKED
        self._set_subtree(node, index, state)
        self._update_parents(node.parent)
        emit(self.checks_changed)

    def _set_subtree(self, node, index, state):
        node.check = node.pending_check = state
        emit(self.dataChanged, index, index, [Qt.ItemDataRole.CheckStateRole])
        stack = [node]
        while stack:
            n = stack.pop()
            changed = False
            for c in n.children:
                if c.check != state or c.pending_check != state:
                    c.check = c.pending_check = state
                    changed = True
                if c.children:
                    stack.append(c)
            if changed:
                # one signal for each run of children, not one per row
                parent = self._index_of_node(n)
                emit(self.dataChanged, self.index(0, 0, parent),
                     self.index(len(n.children) - 1, 0, parent),
                     [Qt.ItemDataRole.CheckStateRole])

    def _update_parents(self, node):
        while node is not None and node is not self._root:
            states = {c.check for c in node.children}
            if node.pending:
                states.add(node.pending_check)
            new = states.pop() if len(states) == 1 else PARTIAL
            if new == PARTIAL and not node.children and not node.pending:
                new = node.check
            if new == node.check:
                break
            node.check = new
            idx = self._index_of_node(node)
            emit(self.dataChanged, idx, idx, [Qt.ItemDataRole.CheckStateRole])
            node = node.parent

    def clear_checks(self):
        for c in list(self._root.children):
            if c.check != UNCHECKED:
                self._set_subtree(c, self.index(c.row, 0), UNCHECKED)
        emit(self.checks_changed)

    def checked_paths(self):
        """The paths to restore: each checked entry whose parent is not fully checked."""
        out = []
        stack = list(reversed(self._root.children))
        while stack:
            n = stack.pop()
            if n.check == CHECKED:
                out.append(n.entry.path)
            elif n.check == PARTIAL:
                if n.pending_check == CHECKED:
                    out.extend(e.path for e in reversed(n.pending))
                stack.extend(reversed(n.children))
        return out

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
        if index.column() == 0:
            f |= Qt.ItemFlag.ItemIsUserCheckable
        if not index.internalPointer().is_dir:
            f |= Qt.ItemFlag.ItemNeverHasChildren
        return f

    def setData(self, index, value, role=Qt.ItemDataRole.EditRole):
        if role != Qt.ItemDataRole.CheckStateRole or not index.isValid() or index.column():
            return False
        self.set_checked(index, _check_value(value))
        return True

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        node = index.internalPointer()
        e = node.entry
        c = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if c == 0:
                return fmt.shown(e.name) or "/"
            if c == 1:
                return fmt.size(e.size) if e.kind in ("f", "h") else ""
            if c == 2:
                return fmt.local_time_ns(e.mtime_ns)
            if c == 3:
                return fmt.mode(e.kind, e.mode)
            if c == _OWNER:
                return fmt.shown(self.owner_text(e))
            if c == 5:
                return fmt.shown(e.link)
        if role == Qt.ItemDataRole.CheckStateRole and c == 0:
            return _QT_STATE[node.check]
        if role == Qt.ItemDataRole.ToolTipRole and c == 0:
            return fmt.shown(e.path)
        if role == Qt.ItemDataRole.ToolTipRole and c == _OWNER:
            return fmt.shown(owners.detail(e.uid, e.gid, self._users, self._groups))
        if role == Qt.ItemDataRole.DecorationRole and c == 0:
            return self._folder if e.kind == "d" else self._file
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


def _owner_names(m, image):
    return m.owner_names(image)


def _list_dir(m, image, path):
    """A directory's entries as the tree shows them (app.catalog_index.tree_order), and for
    a master over SSH the stream its other entries follow on (worker thread). A remote
    master sends the first FIRST_PAGE entries at once and the others right after: the
    first rows of a directory of 100,000 show without waiting for them all."""
    if getattr(m, "remote", False):
        sub = m.subscribe("listing", image_id=image, path=path, first=FIRST_PAGE)
        return next(sub, []), sub
    return tree_order(m.list_entries(image, path)), None


def _rest(_m, sub):
    """The entries of a directory that came after its first page (worker thread)."""
    rest = []
    for part in sub:
        rest.extend(part)
    return rest
