"""The storage server wizard: storage type, host, storage path (types that need one), name."""

from PySide6.QtWidgets import QButtonGroup, QComboBox, QFormLayout, QHBoxLayout, \
    QLineEdit, QPushButton, QRadioButton

import plugins.storage
from app.config import check_abs_path
from app.errors import ValidationError
from ui.wizards.common import Page, ResultPage, SummaryPage, WizardBase, fit_combo, \
    name_problem, note
from ui.wizards.host_dialog import AddHostDialog

TYPE_PAGE, HOST_PAGE, PATH_PAGE, NAME_PAGE, SUMMARY_PAGE, RESULT_PAGE = range(6)

# One sentence each, for types that are named but not shipped (plugins.storage.PLANNED).
PLANNED_DESCRIPTIONS = {
    "dedup": "Backup data cut into content-defined chunks, compressed and stored once: far "
             "less space when backups repeat the same data.",
}


def storage_types():
    """[(type, one-sentence description, reason it is unavailable or None)]"""
    types = [(name, mod.DESCRIPTION, None) for name, mod in plugins.storage.TYPES.items()]
    types += [(name, PLANNED_DESCRIPTIONS.get(name, ""), reason)
              for name, reason in plugins.storage.PLANNED.items()]
    return types


def needs_path(type_name):
    plugin = plugins.storage.get(type_name)
    return plugin.NEEDS_PATH if plugin is not None else type_name in plugins.storage.PLANNED


class TypePage(Page):
    def __init__(self):
        super().__init__("Storage type", "How the storage server keeps backup images.")
        self.group = QButtonGroup(self)
        self.buttons = {}
        for name, description, unavailable in storage_types():
            b = QRadioButton(name)
            b.setEnabled(unavailable is None)
            self.group.addButton(b)
            self.buttons[name] = b
            self.body.addWidget(b)
            text = description + (f" Not available: {unavailable}." if unavailable else "")
            d = note(text)
            d.setContentsMargins(24, 0, 0, 10)
            d.setEnabled(unavailable is None)
            self.body.addWidget(d)
        self.body.addStretch(1)
        first = next(b for b in self.buttons.values() if b.isEnabled())
        first.setChecked(True)
        self.group.buttonToggled.connect(self.revalidate)

    def type_name(self):
        b = self.group.checkedButton()
        return b.text() if b else None

    def problem(self):
        return None if self.type_name() else "Choose a storage type."


class HostPicker:
    """A combo box of the registered hosts with an "Add a host…" button beside it."""

    def __init__(self, page, label="Host"):
        self.page = page
        self.combo = fit_combo(QComboBox())
        self.add_button = QPushButton("Add a host…")
        self.add_button.clicked.connect(self.add_host)
        self.detail = note("")
        row = QHBoxLayout()
        row.addWidget(self.combo, 1)
        row.addWidget(self.add_button)
        self.form = QFormLayout()
        self.form.addRow(f"&{label}:", row)
        self.form.addRow("", self.detail)
        self.hosts = {}
        self.combo.currentIndexChanged.connect(self._changed)

    def load(self, select=None):
        self.page.start_loading("Loading the registered hosts…")
        self.page.call(lambda m: m.config.hosts(), done=lambda hosts: self._loaded(hosts, select),
                       failed=self.page.loaded)

    def _loaded(self, hosts, select):
        current = select or self.name()
        self.hosts = {h["name"]: h for h in hosts}
        self.combo.blockSignals(True)
        self.combo.clear()
        for h in hosts:
            self.combo.addItem(h["name"])
        i = self.combo.findText(current) if current else -1
        self.combo.setCurrentIndex(i if i >= 0 else 0 if hosts else -1)
        self.combo.blockSignals(False)
        self._changed()
        self.page.loaded()

    def name(self):
        return self.combo.currentText() or None

    def _changed(self, *_):
        h = self.hosts.get(self.name())
        if h is None:
            self.detail.setText("")
        elif h["kind"] == "local":
            self.detail.setText("This machine, reached without SSH.")
        else:
            self.detail.setText(f"Reached over SSH as {h.get('user') or 'the console user'}@"
                                f"{h['address']}:{h.get('port') or 22}.")
        self.page.revalidate()

    def add_host(self):
        dlg = AddHostDialog(self.page.wizard_calls(), self.page)
        self.page.host_dialog = dlg
        dlg.accepted.connect(lambda: self.load(select=dlg.host["name"]))
        dlg.open()


class HostPage(Page):
    def __init__(self):
        super().__init__("Host", "The machine whose file systems hold the backup images. Its "
                                 "agent writes the images; clients send their data to it.")
        self.picker = HostPicker(self)
        self.body.addLayout(self.picker.form)
        self.body.addStretch(1)
        self.host_dialog = None
        self._loaded_once = False

    def initializePage(self):
        if not self._loaded_once:
            self._loaded_once = True
            self.picker.load(self.wizard().preset.get("host"))

    def problem(self):
        if not self.picker.hosts:
            return "No host is registered yet: add one with “Add a host…”."
        return None if self.picker.name() else "Choose a host."

    def nextId(self):
        return PATH_PAGE if needs_path(self.wizard().type_page.type_name()) else NAME_PAGE


class PathPage(Page):
    def __init__(self):
        super().__init__("Storage path", "The directory on the host where this storage type "
                                         "keeps its data.")
        self.path = QLineEdit()
        self.path.setPlaceholderText("/gpfs/fs1/cairn-dedup")
        form = QFormLayout()
        form.addRow("&Path:", self.path)
        self.body.addLayout(form)
        self.body.addStretch(1)
        self.path.textChanged.connect(self.revalidate)

    def problem(self):
        try:
            check_abs_path("storage path", self.path.text().strip())
        except ValidationError as e:
            return e.message[0].upper() + e.message[1:] + "."
        return None

    def nextId(self):
        return NAME_PAGE


class NamePage(Page):
    def __init__(self):
        super().__init__("Name", "The name policies and disk pools know the storage server by.")
        self.name = QLineEdit()
        form = QFormLayout()
        form.addRow("&Name:", self.name)
        self.body.addLayout(form)
        self.body.addStretch(1)
        self.existing = set()
        self._suggested = ""
        self.name.textChanged.connect(self.revalidate)

    def initializePage(self):
        host = self.wizard().host()
        if not self.name.text() or self.name.text() == self._suggested:
            self._suggested = f"{host}-disk" if host else ""
            self.name.setText(self._suggested)
        self.start_loading("Loading the storage servers…")
        self.call(lambda m: [s["name"] for s in m.config.storage_servers()],
                  done=self._names, failed=self.loaded)

    def _names(self, names):
        self.existing = set(names)
        self.loaded()

    def problem(self):
        return name_problem("storage server", self.name.text().strip(), self.existing)


class StorageServerWizard(WizardBase):
    KIND, WHAT, KIND_ICON = "storage-server", "storage server", "storage-server"

    def __init__(self, bridge, parent=None, **preset):
        super().__init__(bridge, parent)
        self.preset = preset
        self.setWindowTitle("New storage server")
        self.type_page = self.add(TYPE_PAGE, TypePage())
        self.host_page = self.add(HOST_PAGE, HostPage())
        self.path_page = self.add(PATH_PAGE, PathPage())
        self.name_page = self.add(NAME_PAGE, NamePage())
        self.summary_page = self.add(SUMMARY_PAGE, SummaryPage(self.WHAT))
        self.result_page = self.add(RESULT_PAGE, ResultPage(self.WHAT))
        if preset.get("name"):
            self.name_page.name.setText(preset["name"])

    def host(self):
        return self.host_page.picker.name()

    def spec(self):
        t = self.type_page.type_name()
        return {"name": self.name_page.name.text().strip(), "type": t, "host": self.host(),
                "path": self.path_page.path.text().strip() if needs_path(t) else None}

    def summary(self):
        s = self.spec()
        rows = [("Name", s["name"]), ("Type", s["type"]), ("Host", s["host"])]
        if s["path"]:
            rows.append(("Storage path", s["path"]))
        return rows

    def create_call(self):
        s = self.spec()
        return (lambda m, s: m.create_storage_server(s["name"], type=s["type"], host=s["host"],
                                                     path=s["path"]), (s,))

    def created_name(self):
        return self.spec()["name"]

    def result_text(self, result):
        return (f"Disk pools can now use the file systems of {result['host']}: create one "
                "with the disk pool wizard.")
