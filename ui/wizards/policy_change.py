"""A policy changed after creation: its schedules, clients, backup selections and excludes on
the policy wizard's own pages (and an excludes page), saved in one call that checks every
list before it writes any (Master.change_policy_lists). Opened from the policy's
Properties."""

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QListWidget, \
    QListWidgetItem, QPushButton, QWizard

from app.backup_excludes import check_pattern
from app.config import STREAM_MARKER
from app.errors import ValidationError
from ui.resources import icon
from ui.wizards.common import Page, ResultPage, SummaryPage, WizardBase
from ui.wizards.policy import ClientsPage, SchedulesPage, SelectionsPage
from ui.wizards.schedule_text import summary as schedule_summary

SCHEDULES_PAGE, CLIENTS_PAGE, SELECTIONS_PAGE, EXCLUDES_PAGE, SUMMARY_PAGE, RESULT_PAGE = \
    range(6)


class ExcludesPage(Page):
    """What the backups leave out: a glob on file names (*.tmp) or an absolute path whose
    subtree is left out, for every client or for one."""

    ALL = "every client"

    def __init__(self):
        super().__init__("Excludes", "What the backups leave out. /proc, /sys, /dev, /run and "
                                     "Cairn's own pool volumes inside a selection are left "
                                     "out anyway.")
        self.list = QListWidget()
        self.list.currentRowChanged.connect(self._buttons)
        self.pattern = QLineEdit()
        self.pattern.setPlaceholderText("*.tmp   or   /home/alice/.cache")
        self.pattern.setToolTip("A pattern matched against each file's and directory's name "
                                "(*.tmp, core.*, .cache), or an absolute path whose whole "
                                "subtree is left out")
        self.pattern.returnPressed.connect(self.add_typed)
        self.pattern.textChanged.connect(self.revalidate)
        self.client = QComboBox()
        self.add_button = QPushButton("&Add")
        self.add_button.clicked.connect(self.add_typed)
        self.remove_button = QPushButton("&Remove")
        self.remove_button.clicked.connect(self.remove)
        typed = QHBoxLayout()
        typed.addWidget(QLabel("Exclude:"))
        typed.addWidget(self.pattern, 1)
        typed.addWidget(QLabel("for"))
        typed.addWidget(self.client)
        typed.addWidget(self.add_button)
        side = QHBoxLayout()
        side.addStretch(1)
        side.addWidget(self.remove_button)
        self.body.addWidget(self.list, 1)
        self.body.addLayout(typed)
        self.body.addLayout(side)
        self.excludes = []      # [{"pattern", "client" (None: every client)}]
        self._buttons()

    def initializePage(self):
        current = self.client.currentData()
        self.client.clear()
        self.client.addItem(self.ALL, None)
        for c in self.wizard().clients_page.clients():
            self.client.addItem(icon("host"), c, c)
        i = self.client.findData(current)
        self.client.setCurrentIndex(max(i, 0))
        self.revalidate()

    def set_excludes(self, excludes):
        self.excludes = []
        self.list.clear()
        for e in excludes:
            self._append(e["pattern"], e.get("client"))

    def _append(self, pattern, client):
        self.excludes.append({"pattern": pattern, "client": client})
        self.list.addItem(QListWidgetItem(
            f"{pattern}    ({'every client' if client is None else 'only ' + client})"))

    def _buttons(self, *_):
        self.remove_button.setEnabled(self.list.currentRow() >= 0)

    def typed_problem(self):
        text = self.pattern.text().strip()
        if not text:
            return None
        try:
            p = check_pattern(text)
        except ValidationError as e:
            return e.message[0].upper() + e.message[1:] + (f": {e.hint}." if e.hint else ".")
        if {"pattern": p, "client": self.client.currentData()} in self.excludes:
            return f"{p} is already excluded for {self.client.currentText()}."
        return None

    def add_typed(self):
        text = self.pattern.text().strip()
        if not text or self.typed_problem():
            return
        self._append(check_pattern(text), self.client.currentData())
        self.pattern.clear()
        self.revalidate()

    def remove(self):
        i = self.list.currentRow()
        if i >= 0:
            del self.excludes[i]
            self.list.takeItem(i)
            self.revalidate()

    def problem(self):
        p = self.typed_problem()
        if p:
            return p
        if self.pattern.text().strip():
            return f"Click Add to exclude {self.pattern.text().strip()}, or clear the field."
        clients = set(self.wizard().clients_page.clients()) if self.wizard() else set()
        gone = [e["client"] for e in self.excludes if e["client"] not in (None, *clients)]
        if gone:
            return (f"{gone[0]} is no longer a client: remove its excludes or check it again "
                    "on the Clients page.")
        return None



def excludes_text(excludes):
    return "\n".join(e["pattern"] + ("" if e.get("client") is None else f" (only {e['client']})")
                     for e in excludes) or "none"


def policy_excludes(policy):
    """A policy's excludes as the page lists them: [{"pattern", "client"}]."""
    return [{"pattern": p, "client": None} for p in policy.get("excludes") or ()] + \
        [{"pattern": p, "client": c}
         for c, pats in (policy.get("client_excludes") or {}).items() for p in pats]


class _ChangesSummaryPage(SummaryPage):
    def __init__(self):
        super().__init__("policy")
        self.setSubTitle("Check the changes, then click Save to write them to the catalog. "
                         "Jobs already queued keep what they were queued with.")
        self.setButtonText(QWizard.WizardButton.NextButton, "&Save")


class _ChangesResultPage(ResultPage):
    def __init__(self):
        super().__init__("policy")
        self.setSubTitle("Saving the changes in the catalog.")

    def initializePage(self):
        super().initializePage()
        self.headline.setText("Saving the changes…")

    def _created(self, result):
        super()._created(result)
        self.headline.setText(f"The changes to policy '{result['name']}' were saved.")
        self.setSubTitle("The changes are in the catalog.")

    def _failed(self, error):
        super()._failed(error)
        self.headline.setText("Nothing was changed. Go Back to change what the error names, "
                              "then save again.")
        self.setSubTitle("The changes were not saved.")


class PolicyChangeWizard(WizardBase):
    KIND, WHAT, KIND_ICON = "policy", "policy", "policy"

    def __init__(self, bridge, policy, parent=None):
        super().__init__(bridge, parent)
        self.policy = dict(policy)
        self.preset = {"clients": list(policy["clients"])}
        self.setWindowTitle(f"Change policy {policy['name']}")
        self.schedules_page = self.add(SCHEDULES_PAGE, SchedulesPage())
        self.clients_page = self.add(CLIENTS_PAGE, ClientsPage())
        self.selections_page = self.add(SELECTIONS_PAGE, SelectionsPage())
        self.excludes_page = self.add(EXCLUDES_PAGE, ExcludesPage())
        self.summary_page = self.add(SUMMARY_PAGE, _ChangesSummaryPage())
        self.result_page = self.add(RESULT_PAGE, _ChangesResultPage())
        self.schedules_page.schedules = [dict(s) for s in policy["schedules"]]
        self.schedules_page._refill()
        self.selections_page.add_paths([p for p in policy["selections"] if p != STREAM_MARKER])
        self.excludes_page.set_excludes(policy_excludes(policy))

    def spec(self):
        return {"clients": self.clients_page.clients(),
                "selections": list(self.selections_page.selections),
                "schedules": [dict(s) for s in self.schedules_page.schedules],
                "excludes": [dict(e) for e in self.excludes_page.excludes]}

    def summary(self):
        s, old = self.spec(), self.policy

        def row(label, new, before):
            return (label, (new or "none") + ("" if new == before else
                                              f"\n(was: {before or 'none'})"))
        return [row("Schedules", "\n".join(schedule_summary(x) for x in s["schedules"]),
                    "\n".join(schedule_summary(x) for x in old["schedules"])),
                row("Clients", ", ".join(s["clients"]), ", ".join(old["clients"])),
                row("Backup selections", "\n".join(s["selections"]),
                    "\n".join(p for p in old["selections"] if p != STREAM_MARKER)),
                row("Excludes", excludes_text(s["excludes"]),
                    excludes_text(policy_excludes(old)))]

    def create_call(self):
        return _save, (self.policy["name"], self.spec())

    def created_name(self):
        return self.policy["name"]

    def result_text(self, result):
        notes = result.get("warnings") or []
        return "Later backups follow the changes." + ("\n" + "\n".join(notes) if notes else "")


def _save(m, name, spec):
    return m.change_policy_lists(name, **spec)
