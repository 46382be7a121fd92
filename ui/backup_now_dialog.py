"""Back up now… on the policies page: which schedule the backup runs under (its type and
retention) and which of the policy's clients it takes, as a manual backup asks in the
consoles admins know. Opened window-modal with open(); the jobs are queued off the UI thread
by the caller (ui/object_actions.py)."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFormLayout,
                               QLabel, QListWidget, QListWidgetItem, QVBoxLayout)

from ui.wizards.schedule_text import TYPE_LABELS, spoken, summary as schedule_summary

CATALOG = "catalog"


class BackupNowDialog(QDialog):
    """For one policy (its list row): `schedule()`, `clients()` (None: every client) and
    `files_cache()` once accepted."""

    def __init__(self, policy_row, files_cache=True, parent=None):
        super().__init__(parent)
        self.setObjectName("backup-now-dialog")
        self.policy = policy_row
        self.setWindowTitle(f"Back up policy {policy_row['name']} now")
        self.setWindowModality(Qt.WindowModality.WindowModal)
        schedules = policy_row.get("schedules") or []
        all_clients = list(policy_row.get("clients") or [])

        self.schedule_box = QComboBox()
        self.schedule_box.setObjectName("backup-now-schedule")
        default = next((i for i, s in enumerate(schedules) if s["type"] == "full"), 0)
        for s in schedules:
            level = TYPE_LABELS.get(s["type"], s["type"]).lower()
            self.schedule_box.addItem(f"{s['name']} — {level}, kept "
                                      f"{spoken(s.get('retention') or 'infinite')}", s["name"])
            self.schedule_box.setItemData(self.schedule_box.count() - 1, schedule_summary(s),
                                          Qt.ItemDataRole.ToolTipRole)
        if not schedules:
            self.schedule_box.addItem("a full, kept for the default retention (the policy "
                                      "has no schedule)", None)
        self.schedule_box.setCurrentIndex(default)
        self.schedule_box.currentIndexChanged.connect(self._changed)

        self.client_list = QListWidget()
        self.client_list.setObjectName("backup-now-clients")
        for c in all_clients:
            item = QListWidgetItem(c)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked)
            self.client_list.addItem(item)
        self.client_list.setMaximumHeight(
            min(8, max(2, len(all_clients))) * (self.client_list.fontMetrics().height() + 8))
        self.client_list.itemChanged.connect(self._changed)

        self.read_all = QCheckBox("Read every file: a full into a deduplicating pool does not "
                                  "take unchanged files from the pool")
        self.read_all.setChecked(not files_cache)

        self.note = QLabel()
        self.note.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.ok = self.buttons.addButton("&Back up", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        form = QFormLayout()
        form.addRow("Schedule", self.schedule_box)
        form.addRow("Clients", self.client_list)
        layout = QVBoxLayout(self)
        intro = QLabel(f"A backup of policy <b>{policy_row['name']}</b> started now, outside "
                       "its start windows, under the schedule chosen here (its type and "
                       "retention).")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.read_all)
        layout.addWidget(self.note)
        layout.addWidget(self.buttons)
        self._changed()

    def schedule(self):
        return self.schedule_box.currentData()

    def _chosen(self):
        return [self.client_list.item(i).text() for i in range(self.client_list.count())
                if self.client_list.item(i).checkState() == Qt.CheckState.Checked]

    def clients(self):
        """The chosen clients, or None when every client of the policy is."""
        chosen = self._chosen()
        return None if len(chosen) == self.client_list.count() else chosen

    def files_cache(self):
        return not self.read_all.isChecked()

    def _changed(self, *_):
        sched = next((s for s in self.policy.get("schedules") or []
                      if s["name"] == self.schedule()), None)
        catalog = sched is not None and sched["type"] == CATALOG
        self.client_list.setEnabled(not catalog)
        self.read_all.setEnabled(not catalog)
        n = len(self._chosen())
        if catalog:
            self.note.setText("This schedule backs up the master's catalog, not the clients.")
            self.ok.setEnabled(True)
        elif not self.client_list.count():
            self.note.setText("The policy has no clients: add one in its properties first.")
            self.ok.setEnabled(False)
        else:
            self.note.setText("" if n else "Choose at least one client.")
            self.ok.setEnabled(n > 0)
