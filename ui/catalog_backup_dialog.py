"""File ▸ Back up the catalog…: queues a catalog backup of the master's own state (its catalog,
file indexes, host keys and sealed pool keys) to a storage unit, as `cairn catalog backup`
does. The first catalog backup sets the passphrase, so the dialog asks for it twice then;
later ones must give the same. The passphrase goes to the master once, to open (or make) the
key the pool keys are sealed to, and is kept nowhere, not in this dialog after it closes."""

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, \
    QLineEdit, QVBoxLayout

from ui.qtcompat import emit
from ui.resources import icon

MIN_PASSPHRASE = 8  # as the master requires (app/catalog_backup/escrow.py)


def _choices(m):
    return {"units": [u["name"] for u in m.storage_units()],
            "has_passphrase": m.catalog_backup_state()["has_passphrase"]}


def _start(m, unit, passphrase, retention):
    return m.start_catalog_backup(unit, passphrase, retention=retention or None)


class CatalogBackupDialog(QDialog):
    #: the catalog backup job was queued (its id)
    queued = Signal(int)

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.has_passphrase = None
        self.setWindowTitle("Back up the catalog")
        self.setWindowIcon(icon("cairn"))
        self.unit = QComboBox()
        self.passphrase = QLineEdit()
        self.passphrase.setEchoMode(QLineEdit.EchoMode.Password)
        self.again = QLineEdit()
        self.again.setEchoMode(QLineEdit.EchoMode.Password)
        self.retention = QLineEdit()
        self.retention.setPlaceholderText("keep them all")
        self.retention.setToolTip("Once this catalog backup is written, remove the catalog "
                                  "backups in the same folder made longer ago, e.g. 4w (the "
                                  "newest always stays)")
        self.about = QLabel()
        self.about.setWordWrap(True)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #c0392b;")
        self.error.hide()
        form = QFormLayout()
        form.addRow("Storage unit", self.unit)
        form.addRow("Passphrase", self.passphrase)
        form.addRow("Passphrase again", self.again)
        form.addRow("Remove older than", self.retention)
        self.form = form
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.ok = self.buttons.addButton("Back up", QDialogButtonBox.ButtonRole.AcceptRole)
        self.ok.setEnabled(False)
        self.buttons.accepted.connect(self.start)
        self.buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(self.about)
        lay.addLayout(form)
        lay.addWidget(self.error)
        lay.addWidget(self.buttons)
        self.setMinimumWidth(560)
        bridge.call(_choices, done=self._filled, failed=self._failed, context=self)

    def _filled(self, choices):
        self.unit.addItems(choices["units"])
        self.has_passphrase = choices["has_passphrase"]
        self.form.setRowVisible(self.again, not self.has_passphrase)
        self.about.setText(
            "The catalog, every image's file index, the trusted host keys and the keys of "
            "encrypted pools, as one archive in the folder catalog-backups of the storage "
            "unit's pool: what brings a lost master back (cairn catalog recover).\n\n"
            + ("Give the passphrase of the catalog backups: it opens their pool keys when a "
               "master is recovered, and is stored nowhere."
               if self.has_passphrase else
               "This first catalog backup sets the passphrase (at least 8 characters). It is "
               "stored nowhere: keep it apart from the master, as without it no catalog "
               "backup gives back the pool keys."))
        self.adjustSize()
        if not choices["units"]:
            self._failed("there is no storage unit yet: create one first")
            return
        self.ok.setEnabled(True)

    def problem(self):
        text = self.passphrase.text()
        if len(text.encode()) < MIN_PASSPHRASE:
            return f"the passphrase needs at least {MIN_PASSPHRASE} characters"
        if not self.has_passphrase and self.again.text() != text:
            return "the two passphrases differ"
        return None

    def start(self):
        why = self.problem()
        if why:
            self._failed(why)
            return
        self.ok.setEnabled(False)
        self.error.hide()
        self.bridge.call(_start, self.unit.currentText(), self.passphrase.text().encode(),
                         self.retention.text().strip(), done=self._queued,
                         failed=self._failed_start, context=self)

    def _queued(self, job_id):
        self.passphrase.clear()
        self.again.clear()
        emit(self.queued, job_id)
        self.accept()

    def _failed_start(self, err):
        self.ok.setEnabled(True)
        self._failed(err)

    def _failed(self, err):
        self.error.setText(str(err))
        self.error.show()
