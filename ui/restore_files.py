"""The restore page's Files tab: the chosen image's files as a tree with restore check boxes
(the model is ui/file_tree.py), under a line naming the image and a line saying what could
not be listed."""

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QLabel, QTreeView, QVBoxLayout, QWidget

from ui import fmt
from ui.file_tree import ImageFilesModel
from ui.image_columns import level


class FilesPane(QWidget):
    """The files of one image (show_image): `files` the model, `tree` its view, `title` and
    `error` the lines above them."""

    AUTO_EXPAND_DEPTH = 12

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self._reveal_check = False
        self.files = ImageFilesModel(bridge, self)
        self.tree = QTreeView()
        self.tree.setObjectName("image-files")
        self.tree.setModel(self.files)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.header().setStretchLastSection(True)
        self.tree.header().resizeSection(0, 360)
        self.tree.header().resizeSection(1, 90)
        self.tree.header().resizeSection(2, 150)
        self.tree.header().resizeSection(3, 100)
        self.title = QLabel("Select an image to browse its files.")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.error = QLabel()
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #b3261e;")
        self.error.hide()
        fl = QVBoxLayout(self)
        fl.setContentsMargins(0, 6, 0, 0)
        fl.addWidget(self.title)
        fl.addWidget(self.error)
        fl.addWidget(self.tree, 1)
        self.files.rowsInserted.connect(self._auto_expand)
        self.files.load_failed.connect(self._load_failed)
        self.files.revealed.connect(self._revealed)

    def show_image(self, image):
        """Shows the files of `image` (its dict), or none."""
        self.error.hide()
        if image:
            e = html.escape
            lvl = level(image.get("schedule_type"))
            self.title.setText(
                f"Files in image <b>{e(image['id'])}</b> — client {e(image['client'])}, "
                f"policy {e(image['policy'])}, {fmt.local_time(image['created'])}"
                + (f", {e(lvl)}" if lvl else "") + " — every file as of that backup")
        else:
            self.title.setText("Select an image to browse its files.")
        self.files.set_image(image["id"] if image else None)

    def _auto_expand(self, parent, first, last):
        # Images usually hold one deep selection (/gpfs/fs1/projects/x): open the chain of
        # single directories so that the files are one click away.
        if first != 0 or last != 0 or self.files.rowCount(parent) != 1:
            return
        depth, p = 0, parent
        while p.isValid():
            depth, p = depth + 1, p.parent()
        if depth >= self.AUTO_EXPAND_DEPTH:
            return
        child = self.files.index(0, 0, parent)
        if self.files.hasChildren(child):
            self.tree.expand(child)

    def _load_failed(self, path, message):
        self.error.setText(f"Could not list {fmt.shown(path)}: {message}")
        self.error.show()

    def reveal(self, path, check=False):
        """Opens the tree down to `path`, selects it and, if asked, checks it."""
        self._reveal_check = check
        self.files.reveal(path)

    def _revealed(self, path):
        idx = self.files.index_of_path(path)
        if not idx.isValid():
            return
        p = idx.parent()
        while p.isValid():
            self.tree.expand(p)
            p = p.parent()
        self.tree.setCurrentIndex(idx)
        self.tree.scrollTo(idx, QAbstractItemView.ScrollHint.PositionAtCenter)
        if self._reveal_check:
            self.files.set_checked(idx, 2)
