"""The lifecycle wizard: where a policy's backups go and where each is copied to, every copy
with its own retention (app/lifecycles.py)."""

from PySide6.QtWidgets import QComboBox, QFormLayout, QGridLayout, QHBoxLayout, QLabel, \
    QLineEdit, QPushButton

from app import timeutil
from app.errors import ValidationError
from app.lifecycles import MAX_STEPS
from ui.resources import icon
from ui.wizards.common import Page, ResultPage, SummaryPage, WizardBase, fit_combo, \
    name_problem, note
from ui.wizards.schedule_text import spoken

STEPS_PAGE, SUMMARY_PAGE, RESULT_PAGE = range(3)
RETENTION_TIP = "How long this copy is kept: 2w, 90d, 1y, or infinite"


def _load_lists(m):
    """The storage units and the lifecycles' names: one round trip to a master over SSH."""
    units, lifecycles = m.batch([("storage_units",), ("lifecycles",)])
    return units, [x["name"] for x in lifecycles]


class StepsPage(Page):
    def __init__(self):
        super().__init__("Lifecycle", "Where a policy's backups go, then where each backup is "
                                      "copied to, every copy kept for its own time.")
        self.name = QLineEdit()
        self.grid = QGridLayout()
        self.grid.addWidget(QLabel("<b>Copy</b>"), 0, 0)
        self.grid.addWidget(QLabel("<b>Storage unit</b>"), 0, 1)
        self.grid.addWidget(QLabel("<b>Kept for</b>"), 0, 2)
        self.grid.addWidget(QLabel("<b>Where</b>"), 0, 3)
        self.grid.setColumnStretch(4, 1)
        self.rows = []   # (label, unit combo, retention, remove button or None)
        self.wheres = []  # the disk pool and host of each row's unit
        self.add_button = QPushButton(icon("action-new"), "&Add a copy")
        self.add_button.clicked.connect(lambda: self.add_row())
        form = QFormLayout()
        form.addRow("&Name:", self.name)
        self.body.addLayout(form)
        self.body.addLayout(self.grid)
        add = QHBoxLayout()
        add.addWidget(self.add_button)
        add.addStretch(1)
        self.body.addLayout(add)
        self.body.addWidget(note(
            "Copy 1 is the backup itself; each further copy is made by a duplicate job after "
            "every backup, in the pool of its storage unit: choose a pool on another storage "
            "server, ideally another site. A restore reads copy 1, and the next copy when it "
            "cannot."))
        self.body.addStretch(1)
        self.units = {}
        self.existing = set()
        self._loaded_once = False
        self.name.textChanged.connect(self.revalidate)

    def initializePage(self):
        if self._loaded_once:
            return
        self._loaded_once = True
        self.start_loading("Loading the storage units and lifecycles…")
        self.call(_load_lists, done=self._lists, failed=self.loaded)

    def _lists(self, result):
        units, lifecycles = result
        self.units = {u["name"]: u for u in units}
        self.existing = set(lifecycles)
        self.add_row("2w")
        self.add_row("8w")
        self.loaded()

    def add_row(self, retention="8w"):
        n = len(self.rows) + 1
        label = QLabel("1 (backup)" if n == 1 else str(n))
        unit = fit_combo(QComboBox())
        unit.setObjectName(f"lifecycle-unit-{n}")
        for name, u in self.units.items():
            unit.addItem(icon("storage-unit"), name)
            unit.setItemData(unit.count() - 1, f"disk pool {u['pool']} on {u['host']}")
        unit.setCurrentIndex(min(n - 1, unit.count() - 1))
        keep = QLineEdit(retention)
        keep.setObjectName(f"lifecycle-retention-{n}")
        keep.setToolTip(RETENTION_TIP)
        keep.setMaximumWidth(keep.fontMetrics().horizontalAdvance("infinite") * 2)
        where = QLabel()
        remove = None
        if n > 2:
            remove = QPushButton(icon("action-delete"), "")
            remove.setToolTip("Remove this copy")
            remove.clicked.connect(lambda: self.remove_row(n - 1))
        for col, w in enumerate((label, unit, keep, where, remove)):
            if w is not None:
                self.grid.addWidget(w, n, col if w is not remove else 5)
        self.rows.append((label, unit, keep, remove))
        self.wheres.append(where)

        def show_where(*_):
            u = self.units.get(unit.currentText()) or {}
            where.setText(f"disk pool {u['pool']} on {u['host']}" if u else "")
        show_where()
        unit.currentIndexChanged.connect(show_where)
        unit.currentIndexChanged.connect(self.revalidate)
        keep.textChanged.connect(self.revalidate)
        self.add_button.setEnabled(len(self.rows) < MAX_STEPS)
        self.revalidate()

    def remove_row(self, index):
        if index != len(self.rows) - 1:
            return  # only the last copy is removed; the numbers stay in order
        for w in (*self.rows.pop(), self.wheres.pop()):
            if w is not None:
                self.grid.removeWidget(w)
                w.deleteLater()
        self.add_button.setEnabled(True)
        self.revalidate()

    def steps(self):
        return [f"{'backup' if i == 0 else 'duplicate'}:{unit.currentText()}:"
                f"{keep.text().strip()}" for i, (_, unit, keep, _r) in enumerate(self.rows)]

    def problem(self):
        p = name_problem("lifecycle", self.name.text().strip(), self.existing)
        if p:
            return p
        if len(self.units) < 2:
            return ("A lifecycle needs storage units of two disk pools: create another "
                    "storage unit (on another pool) first.")
        pools = {}
        for i, (_, unit, keep, _r) in enumerate(self.rows, 1):
            u = self.units.get(unit.currentText())
            if u is None:
                return f"Choose the storage unit of copy {i}."
            if u["pool"] in pools:
                return (f"Copies {pools[u['pool']]} and {i} would both be in disk pool "
                        f"{u['pool']}: a second copy in the same pool protects nothing.")
            pools[u["pool"]] = i
            try:
                timeutil.parse_duration(keep.text().strip() or "?", what="retention")
            except ValidationError as e:
                return f"Copy {i}: {e.message}."
        return None


class LifecycleWizard(WizardBase):
    KIND, WHAT, KIND_ICON = "lifecycle", "lifecycle", "lifecycle"

    def __init__(self, bridge, parent=None, **preset):
        super().__init__(bridge, parent)
        self.preset = preset
        self.setWindowTitle("New lifecycle")
        self.steps_page = self.add(STEPS_PAGE, StepsPage())
        self.summary_page = self.add(SUMMARY_PAGE, SummaryPage(self.WHAT))
        self.result_page = self.add(RESULT_PAGE, ResultPage(self.WHAT))
        if preset.get("name"):
            self.steps_page.name.setText(preset["name"])

    def spec(self):
        return {"name": self.steps_page.name.text().strip(), "steps": self.steps_page.steps()}

    def summary(self):
        s = self.spec()
        units = self.steps_page.units
        rows = [("Name", s["name"])]
        for i, step in enumerate(s["steps"], 1):
            _, unit, keep = step.split(":")
            u = units.get(unit) or {}
            rows.append((f"Copy {i}" + (" (backup)" if i == 1 else ""),
                         f"{unit} (disk pool {u.get('pool')} on {u.get('host')}), kept {spoken(keep)}"))
        return rows

    def create_call(self):
        return (lambda m, s: m.create_lifecycle(s["name"], s["steps"]), (self.spec(),))

    def created_name(self):
        return self.spec()["name"]

    def result_text(self, result):
        return ("Policies can use it now: choose it in the policy wizard, or with "
                f"`cairn policy create NAME --lifecycle {result['name']}`.")
