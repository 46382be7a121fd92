"""Import images… on the disk pools page: the dialog that queues an import of the selected
pool (`cairn disk-pool import`), which records every image on the pool that the catalog does
not know. For a pool whose type encrypts at rest it takes, optionally, the file holding the
pool's key when this master does not have it. Opened window-modal with open(), never exec();
the job is queued off the UI thread by the caller (ui/object_actions.py)."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFileDialog, QHBoxLayout, QLabel,
                               QLineEdit, QPushButton, QVBoxLayout)

from plugins.storage import registry

INTRO = ("Reads every image on disk pool <b>{pool}</b> that the catalog does not know — its "
         "own metadata and file index, never its file data — and records it with its client, "
         "policy, schedule, times, file index and incremental chain. Use it on a new master "
         "after the old one's catalog was lost, or after recovering a catalog backup that is "
         "older than the pool's newest images.")
AFTER = ("An incremental whose base image is neither on the pool nor in the catalog is listed, "
         "not recorded; images that cannot be read are listed with why. Importing again "
         "records nothing new. Follow the job in the activity monitor.")
KEY_TEXT = ("Key file (only for an encrypted pool whose key this master does not have: the "
            "file with its 64 hex digits; the master keeps the key once it opened the pool)")


class ImportDialog(QDialog):
    """The import of one disk pool (its list row): `key_file()` is the file chosen, or None."""

    def __init__(self, pool_row, parent=None):
        super().__init__(parent)
        self.setObjectName("import-dialog")
        self.setWindowTitle(f"Import images of disk pool {pool_row['name']}")
        self.setWindowModality(Qt.WindowModality.WindowModal)
        layout = QVBoxLayout(self)
        for text in (INTRO.format(pool=pool_row["name"]), AFTER):
            label = QLabel(text)
            label.setWordWrap(True)
            label.setTextFormat(Qt.TextFormat.RichText)
            layout.addWidget(label)
        self.key_edit = None
        if registry.can(pool_row.get("server_type"), "encryption"):
            layout.addWidget(_wrapped(KEY_TEXT))
            row = QHBoxLayout()
            self.key_edit = QLineEdit()
            self.key_edit.setObjectName("key-file")
            self.key_edit.setPlaceholderText("none: the master's own key")
            browse = QPushButton("Browse…")
            browse.clicked.connect(self._browse)
            row.addWidget(self.key_edit, 1)
            row.addWidget(browse)
            layout.addLayout(row)
        layout.addStretch(1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.import_button = buttons.addButton("Import",
                                               QDialogButtonBox.ButtonRole.AcceptRole)
        self.import_button.setDefault(True)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.setMinimumWidth(560)
        self.resize(560, self.heightForWidth(560) if self.hasHeightForWidth()
                    else self.sizeHint().height())

    def _browse(self):
        path, _ = QFileDialog.getOpenFileName(self, "The pool's key file")
        if path:
            self.key_edit.setText(path)

    def key_file(self):
        if self.key_edit is None:
            return None
        return self.key_edit.text().strip() or None


def _wrapped(text):
    label = QLabel(text)
    label.setWordWrap(True)
    return label
