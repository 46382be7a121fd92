"""The copies of a backup image (a lifecycle's duplications made them): where each is, until
when it is kept, and the duplications still to come. Opened from the restore page's image
list."""

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QHeaderView, QLabel, QTreeWidget, \
    QTreeWidgetItem, QVBoxLayout

from ui import fmt
from ui.image_columns import image_line
from ui.resources import icon

HEADERS = ["Copy", "Disk pool", "Storage unit", "Host", "Kept until", "State"]


def copy_row(c):
    """The texts of one copy's row."""
    return [f"{c['copy']}" + (" (primary)" if c["primary"] else ""), c["pool"],
            c["storage_unit"], c["storage_host"],
            fmt.local_time(c["expires"]) if c.get("expires") else "never",
            "being removed" if c.get("expiring") else c["state"]]


class CopiesDialog(QDialog):
    """An image's copies, read from the master when it opens."""

    def __init__(self, bridge, image, parent=None):
        super().__init__(parent)
        self.setObjectName("image-copies")
        self.setWindowTitle(f"Copies of image {image['id']}")
        self.setWindowIcon(icon("lifecycle"))
        self.result = None
        head = QLabel(html.escape(image_line(image)))
        head.setWordWrap(True)
        self.tree = QTreeWidget()
        self.tree.setObjectName("image-copies-tree")
        self.tree.setHeaderLabels(HEADERS)
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.status = QLabel("Reading the copies…")
        self.status.setObjectName("image-copies-status")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(head)
        lay.addWidget(self.tree, 1)
        lay.addWidget(self.status)
        lay.addWidget(buttons)
        self.resize(820, 300)
        bridge.call(lambda m, iid: m.image_copies(iid), image["id"], done=self._show,
                    failed=lambda e: self.status.setText(f"Could not read the copies: {e}"),
                    context=self)

    def _show(self, r):
        self.result = r
        self.tree.clear()
        for c in r["copies"]:
            item = QTreeWidgetItem(copy_row(c))
            item.setIcon(0, icon("storage-unit"))
            item.setToolTip(1, c["path"] or "a set of stream images: no file of its own")
            self.tree.addTopLevelItem(item)
        lines = [f"Duplicate job {d['job']} ({d['state']}) makes copy {d['copy']} on "
                 f"storage unit {d['storage_unit']}." for d in r["duplications"]]
        n = len(r["copies"])
        lines.insert(0, f"{n} cop{'y' if n == 1 else 'ies'}. A restore reads the primary copy "
                        "and, when it cannot be read, the next one.")
        self.status.setText("\n".join(lines))
