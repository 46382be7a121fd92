"""The storage unit group wizard: several storage units a policy's backups are spread over,
in order, and how each job's unit is chosen when it starts (app/stugroups.py)."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFormLayout, QHBoxLayout, QLineEdit, QListWidget, \
    QListWidgetItem, QPushButton, QVBoxLayout

from app.stugroups import SELECTIONS
from ui.resources import icon
from ui.wizards.common import Page, ResultPage, SummaryPage, WizardBase, name_problem, note

UNITS_PAGE, SUMMARY_PAGE, RESULT_PAGE = range(3)
SELECTION_TEXT = {
    "prioritized": "Prioritized: the first unit in the list that can take the job",
    "failover": "Failover: the first available unit; wait while it is only busy",
    "round-robin": "Round-robin: the units in turn, one job after the other",
    "least-loaded": "Least-loaded: the storage server running the fewest jobs",
}


def _load_lists(m):
    """The storage units and the groups' names: one round trip to a master over SSH."""
    units, groups = m.batch([("storage_units",), ("storage_unit_groups",)])
    return units, [g["name"] for g in groups]


class UnitsPage(Page):
    def __init__(self):
        super().__init__("Storage unit group", "The storage units a policy's backups are "
                                               "spread over, and how each job's is chosen.")
        self.name = QLineEdit()
        self.selection = QComboBox()
        self.selection.setObjectName("group-selection")
        for s in SELECTIONS:
            self.selection.addItem(SELECTION_TEXT[s], s)
        self.selection.setCurrentIndex(SELECTIONS.index("least-loaded"))
        self.units = QListWidget()
        self.units.setObjectName("group-units")
        up = QPushButton("Move &up")
        up.setToolTip("Move the selected unit up: earlier units are tried first")
        up.clicked.connect(self._up)
        form = QFormLayout()
        form.addRow("&Name:", self.name)
        form.addRow("&Selection:", self.selection)
        self.body.addLayout(form)
        row = QHBoxLayout()
        row.addWidget(self.units, 1)
        side = QVBoxLayout()
        side.addWidget(up)
        side.addStretch(1)
        row.addLayout(side)
        self.body.addLayout(row)
        self.body.addWidget(note(
            "Tick the storage units of the group; their order is the order prioritized and "
            "failover use. A job passes over units that are full (high-water mark), whose "
            "host is down or that are at their limits. An incremental goes where its chain "
            "is, and is made a full (the job log says why) when that unit cannot take it."))
        self.existing = set()
        self._loaded_once = False
        self.info = {}
        self.name.textChanged.connect(self.revalidate)
        self.units.itemChanged.connect(self.revalidate)

    def initializePage(self):
        if self._loaded_once:
            return
        self._loaded_once = True
        self.start_loading("Loading the storage units and groups…")
        self.call(_load_lists, done=self._lists, failed=self.loaded)

    def _lists(self, result):
        units, groups = result
        self.existing = set(groups)
        for u in units:
            self.info[u["name"]] = u
            item = QListWidgetItem(icon("storage-unit"),
                                   f"{u['name']}  (disk pool {u['pool']} on {u['host']})")
            item.setData(Qt.ItemDataRole.UserRole, u["name"])
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if self.units.count() < 2
                               else Qt.CheckState.Unchecked)
            self.units.addItem(item)
        self.loaded()

    def _up(self):
        row = self.units.currentRow()
        if row > 0:
            item = self.units.takeItem(row)
            self.units.insertItem(row - 1, item)
            self.units.setCurrentRow(row - 1)
            self.revalidate()

    def chosen(self):
        return [self.units.item(i).data(Qt.ItemDataRole.UserRole)
                for i in range(self.units.count())
                if self.units.item(i).checkState() == Qt.CheckState.Checked]

    def problem(self):
        p = name_problem("storage unit group", self.name.text().strip(), self.existing)
        if p:
            return p
        if not self.info:
            return "Create a storage unit first: a group is made of storage units."
        if not self.chosen():
            return "Tick at least one storage unit (two or more to spread backups)."
        return None


class StorageUnitGroupWizard(WizardBase):
    KIND, WHAT, KIND_ICON = "storage-unit-group", "storage unit group", "storage-unit"

    def __init__(self, bridge, parent=None, **preset):
        super().__init__(bridge, parent)
        self.setWindowTitle("New storage unit group")
        self.units_page = self.add(UNITS_PAGE, UnitsPage())
        self.summary_page = self.add(SUMMARY_PAGE, SummaryPage(self.WHAT))
        self.result_page = self.add(RESULT_PAGE, ResultPage(self.WHAT))
        if preset.get("name"):
            self.units_page.name.setText(preset["name"])

    def spec(self):
        p = self.units_page
        return {"name": p.name.text().strip(), "units": p.chosen(),
                "selection": p.selection.currentData()}

    def summary(self):
        s = self.spec()
        rows = [("Name", s["name"]), ("Selection", SELECTION_TEXT[s["selection"]])]
        for i, unit in enumerate(s["units"], 1):
            u = self.units_page.info.get(unit) or {}
            rows.append((f"Unit {i}", f"{unit} (disk pool {u.get('pool')} on {u.get('host')})"))
        return rows

    def create_call(self):
        return (lambda m, s: m.create_storage_unit_group(s["name"], s["units"], s["selection"]),
                (self.spec(),))

    def created_name(self):
        return self.spec()["name"]

    def result_text(self, result):
        return ("Policies can use it now: choose it in the policy wizard, or with "
                f"`cairn policy create NAME --storage-unit-group {result['name']}`.")
