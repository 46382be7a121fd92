"""The storage unit wizard: a disk pool plus the number of jobs that may write to it at once."""

from PySide6.QtWidgets import QComboBox, QFormLayout, QLineEdit, QSpinBox

from app.config import MAX_CONCURRENT_JOBS
from ui.resources import icon
from ui.wizards.common import Page, ResultPage, SummaryPage, WizardBase, fit_combo, \
    name_problem, narrow, note

SETTINGS_PAGE, SUMMARY_PAGE, RESULT_PAGE = range(3)


def _load_lists(m):
    """The disk pools and the storage units' names: one round trip to a master over SSH."""
    pools, units = m.batch([("disk_pools",), ("storage_units",)])
    return pools, [u["name"] for u in units]


class SettingsPage(Page):
    def __init__(self):
        super().__init__("Storage unit", "What policies write to: a disk pool and how many "
                                         "backups may write to it at once.")
        self.pool = fit_combo(QComboBox())
        self.pool_detail = note("")
        self.name = QLineEdit()
        self.jobs = narrow(QSpinBox())
        self.jobs.setRange(1, MAX_CONCURRENT_JOBS)
        self.jobs.setValue(1)
        form = QFormLayout()
        form.addRow("&Disk pool:", self.pool)
        form.addRow("", self.pool_detail)
        form.addRow("&Name:", self.name)
        form.addRow("Maximum &concurrent jobs:", self.jobs)
        form.addRow("", note("Raising it lets the backups of several clients run in parallel; "
                             "jobs beyond the limit wait in the queue."))
        self.body.addLayout(form)
        self.body.addStretch(1)
        self.pools = {}
        self.existing = set()
        self._suggested = ""
        self._loaded_once = False
        self.pool.currentIndexChanged.connect(self._pool_changed)
        self.name.textChanged.connect(self.revalidate)

    def initializePage(self):
        if self._loaded_once:
            return
        self._loaded_once = True
        self.start_loading("Loading the disk pools and storage units…")
        self.call(_load_lists, done=self._loaded_lists, failed=self.loaded)

    def _loaded_lists(self, result):
        pools, units = result
        self.existing = set(units)
        self.pools = {p["name"]: p for p in pools}
        self.pool.blockSignals(True)
        for p in pools:
            self.pool.addItem(icon("disk-pool"), p["name"])
        i = self.pool.findText(self.wizard().preset.get("pool") or "")
        self.pool.setCurrentIndex(max(i, 0) if pools else -1)
        self.pool.blockSignals(False)
        self.loaded()
        self._pool_changed()

    def pool_name(self):
        return self.pool.currentText() or None

    def _pool_changed(self, *_):
        p = self.pools.get(self.pool_name())
        self.pool_detail.setText(
            f"On storage server {p['server']} (host {p['host']}): {', '.join(p['volumes'])}"
            if p else "")
        # The suggested name follows the pool until the admin types another.
        if p and (not self.name.text() or self.name.text() == self._suggested):
            self._suggested = f"{p['name']}-stu"
            self.name.setText(self._suggested)
        self.revalidate()

    def problem(self):
        if not self.pools:
            return "There is no disk pool yet: create one with the disk pool wizard first."
        if not self.pool_name():
            return "Choose a disk pool."
        return name_problem("storage unit", self.name.text().strip(), self.existing)


class StorageUnitWizard(WizardBase):
    KIND, WHAT, KIND_ICON = "storage-unit", "storage unit", "storage-unit"

    def __init__(self, bridge, parent=None, **preset):
        super().__init__(bridge, parent)
        self.preset = preset
        self.setWindowTitle("New storage unit")
        self.settings_page = self.add(SETTINGS_PAGE, SettingsPage())
        self.summary_page = self.add(SUMMARY_PAGE, SummaryPage(self.WHAT))
        self.result_page = self.add(RESULT_PAGE, ResultPage(self.WHAT))
        if preset.get("name"):
            self.settings_page.name.setText(preset["name"])

    def spec(self):
        sp = self.settings_page
        return {"name": sp.name.text().strip(), "pool": sp.pool_name(),
                "max_concurrent_jobs": sp.jobs.value()}

    def summary(self):
        s = self.spec()
        p = self.settings_page.pools.get(s["pool"]) or {}
        return [("Name", s["name"]),
                ("Disk pool", f"{s['pool']} on {p.get('server')} (host {p.get('host')})"),
                ("Maximum concurrent jobs", str(s["max_concurrent_jobs"]))]

    def create_call(self):
        return (lambda m, s: m.create_storage_unit(
            s["name"], pool=s["pool"], max_concurrent_jobs=s["max_concurrent_jobs"]),
            (self.spec(),))

    def created_name(self):
        return self.spec()["name"]

    def result_text(self, result):
        return "Policies can now write to it: create one with the policy wizard."
