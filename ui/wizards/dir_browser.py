"""A client's file system as a tree, read one directory at a time from its agent as folders
are opened, for picking backup selections."""

import posixpath

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QApplication, QDialog, QDialogButtonBox, \
    QLabel, QStyle, QTreeWidget, QTreeWidgetItem, QVBoxLayout

from ui import fmt
from ui.wizards.common import StatusLine

PATH_ROLE = Qt.ItemDataRole.UserRole + 1
LOADED_ROLE = Qt.ItemDataRole.UserRole + 2
KIND_ROLE = Qt.ItemDataRole.UserRole + 3
_PLACEHOLDER = "Loading…"


class DirBrowserDialog(QDialog):
    """`paths()` are the chosen paths after the dialog was accepted."""

    def __init__(self, calls, client, parent=None, start="/", choose_directory=False):
        super().__init__(parent)
        self.choose_directory = choose_directory
        # opened down to `start` as each directory on the way is read
        self._open_to = posixpath.normpath(start) if start and start.startswith("/") else "/"
        self.calls = calls
        self.client = client
        self.loading = set()
        self.setWindowTitle(f"Browse {client}")
        self.resize(620, 520)
        style = QApplication.style()
        self._dir_icon = style.standardIcon(QStyle.StandardPixmap.SP_DirIcon)
        self._file_icon = style.standardIcon(QStyle.StandardPixmap.SP_FileIcon)
        self._link_icon = style.standardIcon(QStyle.StandardPixmap.SP_FileLinkIcon)

        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Name", "Size", "Modified"])
        self.tree.setSelectionMode(
            QAbstractItemView.SelectionMode.SingleSelection if choose_directory
            else QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setUniformRowHeights(True)
        self.tree.setColumnWidth(0, 320)
        self.tree.setColumnWidth(1, 90)
        self.tree.itemExpanded.connect(self._expanded)
        self.tree.itemSelectionChanged.connect(self._selection_changed)
        self.chosen = QLabel()
        self.chosen.setWordWrap(True)
        self.status = StatusLine()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.add_button = self.buttons.addButton(
            "&Choose" if choose_directory else "&Add selected",
            QDialogButtonBox.ButtonRole.AcceptRole)
        self.add_button.setEnabled(False)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(
            f"Files and directories of <b>{client}</b>. Open a directory to read it from the "
            "host; " + ("select the directory to restore into." if choose_directory
                        else "select what to back up.")))
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.chosen)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)

        root = self._make_item(self.tree.invisibleRootItem(), "/", "/", "d")
        root.setExpanded(True)

    def _make_item(self, parent, label, path, kind, size=None, mtime=None):
        item = QTreeWidgetItem(parent, [label, "" if kind == "d" else fmt.size(size),
                                        "" if mtime is None else fmt.local_time_ns(mtime * 1e9)])
        item.setData(0, PATH_ROLE, path)
        item.setData(0, KIND_ROLE, kind)
        item.setTextAlignment(1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if kind == "d":
            item.setIcon(0, self._dir_icon)
            item.setData(0, LOADED_ROLE, False)
            QTreeWidgetItem(item, [_PLACEHOLDER])
        else:
            item.setIcon(0, self._link_icon if kind == "l" else self._file_icon)
            item.setData(0, LOADED_ROLE, True)
        return item

    def _expanded(self, item):
        if item.data(0, LOADED_ROLE) or id(item) in self.loading:
            return
        path = item.data(0, PATH_ROLE)
        self.loading.add(id(item))
        self.status.busy(f"Reading {path} on {self.client}…")
        self.calls.run(lambda m, c, p: m.list_host_dir(c, p), self.client, path,
                       done=lambda r: self._listed(item, r),
                       failed=lambda e: self._list_failed(item, e), context=self)

    def _listed(self, item, result):
        self.loading.discard(id(item))
        item.takeChildren()
        item.setData(0, LOADED_ROLE, True)
        base = item.data(0, PATH_ROLE)
        entries = sorted(result["entries"], key=lambda e: (e["kind"] != "d", e["name"]))
        for e in entries:
            self._make_item(item, e["name"], posixpath.join(base, e["name"]), e["kind"],
                            e.get("size"), e.get("mtime"))
        if not entries:
            empty = QTreeWidgetItem(item, ["(empty)"])
            empty.setFlags(Qt.ItemFlag.NoItemFlags)
        self._open_towards_start(item)
        if not self.loading:
            self.status.clear()

    def _open_towards_start(self, item):
        base = item.data(0, PATH_ROLE)
        target = self._open_to
        if target == base:
            if self.choose_directory and target != "/":
                self.tree.setCurrentItem(item)
            return
        if not target.startswith(base.rstrip("/") + "/"):
            return
        name = target[len(base.rstrip("/")) + 1:].split("/")[0]
        for i in range(item.childCount()):
            child = item.child(i)
            if child.text(0) == name and child.data(0, KIND_ROLE) == "d":
                child.setExpanded(True)
                self.tree.scrollToItem(child)
                return

    def _list_failed(self, item, error):
        self.loading.discard(id(item))
        item.setExpanded(False)
        self.status.error(error, f"Cannot read {item.data(0, PATH_ROLE)}")

    # ---- choosing ---------------------------------------------------------------------------
    def item_for(self, path):
        """The loaded item of a path, or None (its parents must have been opened)."""
        item = self.tree.topLevelItem(0)
        if path == "/":
            return item
        for part in path.strip("/").split("/"):
            match = None
            for i in range(item.childCount()):
                if item.child(i).text(0) == part:
                    match = item.child(i)
                    break
            if match is None:
                return None
            item = match
        return item

    def paths(self):
        return [i.data(0, PATH_ROLE) for i in self.tree.selectedItems()
                if i.data(0, PATH_ROLE)
                and (not self.choose_directory or i.data(0, KIND_ROLE) == "d")]

    def _selection_changed(self):
        paths = self.paths()
        self.add_button.setEnabled(bool(paths))
        self.chosen.setText("Selected: " + ", ".join(paths) if paths else "")
