"""The policy wizard: attributes, schedules, clients and backup selections, created in one
call that leaves nothing behind when a part is refused."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QHBoxLayout, QLabel, \
    QLineEdit, QListWidget, QListWidgetItem, QPushButton, QSpinBox, QVBoxLayout

from app.backup_excludes import selection_warnings
from app.config import CHECKSUMS, FILE_LIST_MODES, SNAPSHOT_MODES, check_abs_path
from app.errors import ValidationError
from plugins.storage import registry
from plugins.storage.dedup.master import COMPRESSION_AT, DEFAULT_LEVEL, LEVEL_RANGE
from plugins.storage.dedup.master import MODES as DEDUP_MODES
from ui.resources import icon
from ui.wizards.common import Page, ResultPage, SummaryPage, WizardBase, disabled_check, \
    fit_combo, name_problem, narrow, note
from ui.wizards.dir_browser import DirBrowserDialog
from ui.wizards.host_dialog import AddHostDialog
from ui.wizards.schedule_text import spoken
from ui.wizards.schedule_text import summary as schedule_summary
from ui.wizards.schedule_dialog import ScheduleDialog

ATTRIBUTES_PAGE, SCHEDULES_PAGE, CLIENTS_PAGE, SELECTIONS_PAGE, SUMMARY_PAGE, RESULT_PAGE = \
    range(6)
CHECKSUM_TEXT = {"crc32": "crc32 — fast; catches corruption",
                 "sha256": "sha256 — also evidence against tampering; costs CPU"}
SNAPSHOT_TEXT = {"none": "none — read the live files",
                 "filesystem": "Storage Scale file system snapshot",
                 "fileset": "Storage Scale fileset snapshot (independent filesets)"}
FILE_LIST_TEXT = {"auto": "policy engine on Storage Scale, tree walk elsewhere",
                  "walk": "always walk the tree"}
DEDUP_TEXT = {"server": "On the storage server (client sends a plain stream)",
              "client": "On the client (only new chunks cross the network)"}
#: where a policy's backups are compressed
COMPRESSION_TEXT = {"server": "On the storage server (as it stores the data)",
                    "client": "On the client (before the data crosses the network)",
                    "off": "Off (data is stored as it is)"}
COMPRESSION_TIP = ("Where backup data is compressed (zstd): new chunks in deduplicating "
                   "pools, the whole image file in advanced-disk pools (a zstd-compressed tar "
                   "that `tar -I zstd -xf` reads; restores read only the frames they need). "
                   "On the client, fewer bytes cross the network at the cost of the client's "
                   "CPU. Higher levels store less and cost more CPU.")


class AttributesPage(Page):
    def __init__(self):
        super().__init__("Policy attributes", "What the policy is called, where its backups "
                                              "go and how they are written.")
        self.name = QLineEdit()
        self.unit = fit_combo(QComboBox())
        self.unit.setObjectName("policy-target")
        self.unit.setToolTip("A storage unit keeps one copy of each backup; a lifecycle backs "
                             "up to its first storage unit and copies each backup to the "
                             "others, every copy kept for its own time; a storage unit group "
                             "places each backup on one of its units when the job starts")
        self.unit_detail = note("")
        self.priority = narrow(QSpinBox())
        self.priority.setRange(0, 99999)
        self.checksum = QComboBox()
        for c in CHECKSUMS:
            self.checksum.addItem(CHECKSUM_TEXT.get(c, c), c)
        self.snapshot = QComboBox()
        for m in SNAPSHOT_MODES:
            self.snapshot.addItem(SNAPSHOT_TEXT[m], m)
        self.snapshot.setToolTip(
            "Back up a consistent point in time: each backup takes a Storage Scale snapshot "
            "of the file system (or fileset) holding the selections, reads from it and "
            "deletes it afterwards, also when the backup fails or is canceled.")
        self.file_list = QComboBox()
        for m in FILE_LIST_MODES:
            self.file_list.addItem(FILE_LIST_TEXT[m], m)
        self.file_list.setToolTip(
            "How a backup finds its files. On Storage Scale the policy engine (mmapplypolicy) "
            "scans the inodes instead of reading every directory; incrementals then skip "
            "files whose change time is older than the previous backup.")
        self.dedup = QComboBox()
        for m in DEDUP_MODES:
            self.dedup.addItem(DEDUP_TEXT[m], m)
        self.dedup.setToolTip(
            "Where backup data is cut into chunks and checked against the pool. On the "
            "client, chunks the pool already holds are never sent, at the cost of the "
            "client's CPU; a client's own setting (host properties) wins over the policy's.")
        self.dedup_note = note("")
        self.dedup.currentIndexChanged.connect(lambda *_: self._compression_changed())
        self.compression = QComboBox()
        self.compression.setObjectName("policy-compression")
        for m in COMPRESSION_AT:
            self.compression.addItem(COMPRESSION_TEXT[m], m)
        self.compression.setToolTip(COMPRESSION_TIP)
        self.compression_level = narrow(QSpinBox())
        self.compression_level.setObjectName("policy-compression-level")
        self.compression_level.setRange(*LEVEL_RANGE)
        self.compression_level.setValue(DEFAULT_LEVEL)
        self.compression_level.setPrefix("level ")
        self.compression_level.setToolTip("zstd level: 1 is fastest, 19 stores least")
        self.compression.currentIndexChanged.connect(self._compression_changed)
        # until the admin picks one, the choice follows the storage: off on advanced-disk
        # (plain tar files), server on deduplicating pools, as `policy create` does
        self.compression_chosen = False
        self.compression.activated.connect(
            lambda *_: setattr(self, "compression_chosen", True))
        self.compression_note = note("")
        self.encryption = disabled_check("Encryption",
                                         "a property of the pool: create a dedup storage "
                                         "server that encrypts its chunks")
        self.multiple_streams = QCheckBox("Allow multiple data streams")
        self.multiple_streams.setToolTip("Back up the selections of a client in parallel "
                                         "streams, one per selection.")
        self.skip_nodump = QCheckBox("Leave out files marked nodump (chattr +d)")
        self.skip_nodump.setToolTip("Files and directories marked nodump (chattr +d) are not "
                                    "backed up, as dump leaves them out.")
        form = QFormLayout()
        form.addRow("&Name:", self.name)
        form.addRow("&Backups go to:", self.unit)
        form.addRow("", self.unit_detail)
        form.addRow("&Priority:", self.priority)
        form.addRow("", note("Jobs of policies with a higher priority leave the queue first."))
        form.addRow("&Checksum:", self.checksum)
        form.addRow("Sna&pshot:", self.snapshot)
        form.addRow("&File list:", self.file_list)
        form.addRow("&Deduplication:", self.dedup)
        form.addRow("", self.dedup_note)
        row = QHBoxLayout()
        row.addWidget(self.compression, 1)
        row.addWidget(self.compression_level)
        label = QLabel("C&ompression:")
        label.setBuddy(self.compression)
        form.addRow(label, row)
        form.addRow("", self.compression_note)
        form.addRow("", self.encryption)
        form.addRow("", self.multiple_streams)
        form.addRow("", self.skip_nodump)
        self.body.addLayout(form)
        self.body.addStretch(1)
        self.units = {}
        self.lifecycles = {}
        self.groups = {}
        self.dedup_units = set()
        self.existing = set()
        self._loaded_once = False
        self.name.textChanged.connect(self.revalidate)
        self.unit.currentIndexChanged.connect(self._unit_changed)

    def initializePage(self):
        if self._loaded_once:
            return
        self._loaded_once = True
        self.start_loading("Loading the storage units and policies…")
        self.call(_load_lists, done=self._lists, failed=self.loaded)

    def _lists(self, result):
        units, policies, dedup_servers, lifecycles, groups = result
        self.units = {u["name"]: u for u in units}
        self.lifecycles = {x["name"]: x for x in lifecycles}
        self.groups = {g["name"]: g for g in groups}
        self.dedup_units = {u["name"] for u in units if u["server"] in dedup_servers}
        self.existing = set(policies)
        self.unit.blockSignals(True)
        for u in units:
            self.unit.addItem(icon("storage-unit"), u["name"], f"storage_unit:{u['name']}")
        if lifecycles:
            self.unit.insertSeparator(self.unit.count())
        for x in lifecycles:
            self.unit.addItem(icon("lifecycle"), f"{x['name']} (lifecycle)",
                              f"lifecycle:{x['name']}")
        if groups:
            self.unit.insertSeparator(self.unit.count())
        for g in groups:
            self.unit.addItem(icon("storage-unit"), f"{g['name']} (storage unit group)",
                              f"storage_unit_group:{g['name']}")
        preset = self.wizard().preset
        want = (f"lifecycle:{preset['lifecycle']}" if preset.get("lifecycle")
                else f"storage_unit_group:{preset['storage_unit_group']}"
                if preset.get("storage_unit_group")
                else f"storage_unit:{preset.get('storage_unit')}")
        i = self.unit.findData(want)
        self.unit.setCurrentIndex(max(i, 0) if units else -1)
        self.unit.blockSignals(False)
        self._unit_changed()
        self.loaded()

    def target(self):
        """("storage_unit", "lifecycle" or "storage_unit_group", its name), or (None,
        None)."""
        data = self.unit.currentData()
        return tuple(data.split(":", 1)) if data else (None, None)

    def backup_unit(self):
        """The storage unit the policy's backups write to."""
        kind, name = self.target()
        if kind == "lifecycle":
            return self.lifecycles[name]["steps"][0]["storage_unit"]
        if kind == "storage_unit_group":
            return self.groups[name]["unit_names"][0]
        return name

    def _unit_changed(self, *_):
        kind, name = self.target()
        u = self.units.get(self.backup_unit() or "")
        text = (f"Disk pool {u['pool']} on host {u['host']}, at most "
                f"{u['max_concurrent_jobs']} concurrent jobs" if u else "")
        if kind == "lifecycle":
            text = "Backs up to " + " and copies to ".join(
                f"{s['storage_unit']} (pool {s['pool']} on {s['host']}, kept {spoken(s['retention'])})"
                for s in self.lifecycles[name]["steps"]) + (
                "; each copy is kept for its step's time, which takes the place of the "
                "schedules' retention.")
        if kind == "storage_unit_group":
            g = self.groups[name]
            text = (f"Each backup goes to one of {', '.join(g['unit_names'])}, chosen when "
                    f"the job starts ({g['selection']}); an incremental goes where its chain "
                    f"is.")
        self.unit_detail.setText(text)
        if u and u["name"] in self.dedup_units:
            text = (f"Storage unit {u['name']} is on a deduplicating pool: this chooses where "
                    "its backups are cut into chunks.")
        else:
            text = ("Matters only for storage units on deduplicating pools; kept for when "
                    "the policy moves to one.")
        self.dedup_note.setText(text)
        if not self.compression_chosen:
            units = self.target_units()
            default = "server" if any(x in self.dedup_units for x in units) else "off"
            self.compression.setCurrentIndex(self.compression.findData(default))
        self._compression_changed()
        self.revalidate()

    def target_units(self):
        """The storage units the policy may write to: its unit, its lifecycle's backup
        unit, or every unit of its group."""
        kind, name = self.target()
        if kind == "storage_unit_group":
            return list(self.groups[name]["unit_names"])
        unit = self.backup_unit()
        return [unit] if unit else []

    def compresses(self):
        """Whether the policy writes somewhere (every storage type compresses: chunks in
        deduplicating pools, the image file in advanced-disk pools)."""
        return bool(self.target_units())

    def _compression_changed(self, *_):
        on = self.compresses()
        self.compression.setEnabled(on)
        at = self.compression.currentData()
        self.compression_level.setEnabled(on and at != "off")
        plain = on and not any(u in self.dedup_units for u in self.target_units())
        if plain and at == "off":
            text = "Advanced-disk images stay plain tar files."
        elif plain:
            text = ("Advanced-disk images become zstd-compressed tar files (`tar -I zstd -xf` "
                    "reads them); restores decompress only the parts they need.")
        elif self.compression.currentData() == "client" and self.dedup.currentData() != "client":
            text = ("With deduplication on the storage server, the client compresses its "
                    "stream in transit and the storage server the chunks it stores.")
        else:
            text = ""
        self.compression_note.setText(text)

    def problem(self):
        p = name_problem("policy", self.name.text().strip(), self.existing)
        if p:
            return p
        if not self.units:
            return "There is no storage unit yet: create one with the storage unit wizard first."
        return None if self.target()[0] else \
            "Choose a storage unit, a lifecycle or a storage unit group."


def _load_lists(m):
    """The storage units, the policies' names, the deduplicating storage servers, the
    lifecycles and the storage unit groups."""
    units, policies, servers, lifecycles, groups = m.batch(
        [("storage_units",), ("policies",), ("storage_servers",), ("lifecycles",),
         ("storage_unit_groups",)])   # one round trip to a master over SSH
    return (units, [p["name"] for p in policies],
            {s["name"] for s in servers if registry.can(s["type"], "dedup")},
            lifecycles, groups)


class SchedulesPage(Page):
    def __init__(self):
        super().__init__("Schedules", "When backups run and how long their images are kept.")
        self.list = QListWidget()
        self.list.setWordWrap(True)
        self.list.setSpacing(2)
        self.list.itemDoubleClicked.connect(lambda _: self.edit())
        self.list.currentRowChanged.connect(self._buttons)
        self.add_button = QPushButton("&Add…")
        self.edit_button = QPushButton("&Edit…")
        self.remove_button = QPushButton("&Remove")
        self.add_button.clicked.connect(self.add)
        self.edit_button.clicked.connect(self.edit)
        self.remove_button.clicked.connect(self.remove)
        buttons = QVBoxLayout()
        for b in (self.add_button, self.edit_button, self.remove_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        row = QHBoxLayout()
        row.addWidget(self.list, 1)
        row.addLayout(buttons)
        self.body.addLayout(row, 1)
        self.hint = note("")
        self.body.addWidget(self.hint)
        self.schedules = []
        self.dialog = None
        self._buttons()

    def initializePage(self):
        if not self.schedules and not self.list.count():
            self._refill()

    def _refill(self):
        self.list.clear()
        for s in self.schedules:
            item = QListWidgetItem(icon("wizard-schedule"), schedule_summary(s, "\n"))
            item.setToolTip(schedule_summary(s))
            self.list.addItem(item)
        types = {s["type"] for s in self.schedules}
        if not self.schedules:
            hint = ("Without a schedule, the policy's backups run only when started by hand "
                    "(a full backup with the default retention).")
        elif "full" not in types:
            hint = ("There is no full schedule: the first backup of each client is taken as a "
                    "full, and every later one is an incremental built on it.")
        else:
            hint = ""
        self.hint.setText(hint)
        self._buttons()
        self.revalidate()

    def _buttons(self, *_):
        has = self.list.currentRow() >= 0
        self.edit_button.setEnabled(has)
        self.remove_button.setEnabled(has)

    def _open(self, schedule, index):
        taken = [s["name"] for i, s in enumerate(self.schedules) if i != index]
        dlg = ScheduleDialog(schedule, taken, self)
        self.dialog = dlg

        def accepted():
            s = dlg.schedule()
            if index is None:
                self.schedules.append(s)
            else:
                self.schedules[index] = s
            self._refill()
            self.list.setCurrentRow(index if index is not None else len(self.schedules) - 1)
        dlg.accepted.connect(accepted)
        dlg.open()
        return dlg

    def add(self):
        return self._open(None, None)

    def edit(self):
        i = self.list.currentRow()
        if i >= 0:
            return self._open(dict(self.schedules[i]), i)
        return None

    def remove(self):
        i = self.list.currentRow()
        if i >= 0:
            del self.schedules[i]
            self._refill()


class ClientsPage(Page):
    def __init__(self):
        super().__init__("Clients", "The hosts whose files this policy backs up.")
        self.list = QListWidget()
        self.add_button = QPushButton("Add a &host…")
        self.add_button.clicked.connect(self.add_host)
        row = QHBoxLayout()
        row.addWidget(self.list, 1)
        side = QVBoxLayout()
        side.addWidget(self.add_button)
        side.addStretch(1)
        row.addLayout(side)
        self.body.addLayout(row, 1)
        self.hosts = {}
        self.host_dialog = None
        self._loaded_once = False
        self.list.itemChanged.connect(self.revalidate)

    def initializePage(self):
        if not self._loaded_once:
            self._loaded_once = True
            self.load(set(self.wizard().preset.get("clients") or ()))

    def load(self, check=()):
        keep = set(self.clients()) | set(check)
        self.start_loading("Loading the registered hosts…")
        self.call(lambda m: m.host_list(), done=lambda h: self._hosts(h, keep),
                  failed=self.loaded)

    def _hosts(self, hosts, keep):
        self.hosts = {h["name"]: h for h in hosts}
        self.list.blockSignals(True)
        self.list.clear()
        for h in hosts:
            where = "this machine" if h["kind"] == "local" else h["address"]
            item = QListWidgetItem(icon("host"), f"{h['name']}  ({where})")
            item.setData(Qt.ItemDataRole.UserRole, h["name"])
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if h["name"] in keep
                               else Qt.CheckState.Unchecked)
            self.list.addItem(item)
        self.list.blockSignals(False)
        self.loaded()

    def set_checked(self, name, checked=True):
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == name:
                item.setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)

    def clients(self):
        return [self.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.list.count())
                if self.list.item(i).checkState() == Qt.CheckState.Checked]

    def add_host(self):
        dlg = AddHostDialog(self.wizard_calls(), self)
        self.host_dialog = dlg
        dlg.accepted.connect(lambda: self.load({dlg.host["name"]}))
        dlg.open()
        return dlg

    def problem(self):
        if not self.hosts:
            return "No host is registered yet: add one with “Add a host…”."
        return None if self.clients() else "Check at least one client to back up."


class SelectionsPage(Page):
    def __init__(self):
        super().__init__("Backup selections", "The directories and files backed up on each "
                                              "client.")
        self.list = QListWidget()
        self.list.currentRowChanged.connect(self._buttons)
        self.path = QLineEdit()
        self.path.setPlaceholderText("/data/projects")
        self.path.returnPressed.connect(self.add_typed)
        self.path.textChanged.connect(self.revalidate)
        self.add_button = QPushButton("&Add")
        self.add_button.clicked.connect(self.add_typed)
        self.client = QComboBox()
        self.browse_button = QPushButton("&Browse…")
        self.browse_button.clicked.connect(self.browse)
        self.remove_button = QPushButton("&Remove")
        self.remove_button.clicked.connect(self.remove)

        typed = QHBoxLayout()
        typed.addWidget(QLabel("Path:"))
        typed.addWidget(self.path, 1)
        typed.addWidget(self.add_button)
        browse = QHBoxLayout()
        browse.addWidget(QLabel("Browse the files of"))
        browse.addWidget(self.client)
        browse.addWidget(self.browse_button)
        browse.addStretch(1)
        browse.addWidget(self.remove_button)
        self.warnings = note("")
        self.warnings.setObjectName("selection-warnings")
        self.warnings.hide()
        self.body.addWidget(self.list, 1)
        self.body.addWidget(self.warnings)
        self.body.addLayout(typed)
        self.body.addLayout(browse)
        self.selections = []
        self.browser = None
        self.pools = {}         # every pool's files, as backups leave them out
        self._buttons()

    def initializePage(self):
        current = self.client.currentText()
        self.client.clear()
        for c in self.wizard().clients_page.clients():
            self.client.addItem(icon("host"), c)
        i = self.client.findText(current)
        if i >= 0:
            self.client.setCurrentIndex(i)
        self.browse_button.setEnabled(self.client.count() > 0)
        self.call(lambda m: m.pool_paths(), done=self._pools)
        self.revalidate()

    def _pools(self, pools):
        self.pools = pools
        self._warn()

    def _warn(self):
        """Says which selections the backups leave out, in part or whole (pseudo file
        systems, Cairn's own pools)."""
        found = [w for p in self.selections for w in selection_warnings(None, p, self.pools)]
        self.warnings.setText("\n".join(f"⚠ {w}" for w in found))
        self.warnings.setVisible(bool(found))

    def _buttons(self, *_):
        self.remove_button.setEnabled(self.list.currentRow() >= 0)

    def typed_problem(self):
        text = self.path.text().strip()
        if not text:
            return None
        try:
            p = check_abs_path("backup selection", text)
        except ValidationError as e:
            return e.message[0].upper() + e.message[1:] + (f": {e.hint}." if e.hint else ".")
        if p in self.selections:
            return f"{p} is already selected."
        return None

    def add_paths(self, paths):
        for p in paths:
            if p not in self.selections:
                self.selections.append(p)
                self.list.addItem(QListWidgetItem(p))
        self._warn()
        self.revalidate()

    def add_typed(self):
        text = self.path.text().strip()
        if not text or self.typed_problem():
            return
        self.add_paths([check_abs_path("backup selection", text)])
        self.path.clear()

    def remove(self):
        i = self.list.currentRow()
        if i >= 0:
            del self.selections[i]
            self.list.takeItem(i)
            self._warn()
            self.revalidate()

    def browse(self):
        client = self.client.currentText()
        if not client:
            return None
        dlg = DirBrowserDialog(self.wizard_calls(), client, self)
        self.browser = dlg
        dlg.accepted.connect(lambda: self.add_paths(dlg.paths()))
        dlg.open()
        return dlg

    def problem(self):
        p = self.typed_problem()
        if p:
            return p
        if self.path.text().strip():
            return f"Click Add to add {self.path.text().strip()}, or clear the field."
        return None if self.selections else "Add at least one path to back up."


class PolicyWizard(WizardBase):
    KIND, WHAT, KIND_ICON = "policy", "policy", "policy"

    def __init__(self, bridge, parent=None, **preset):
        super().__init__(bridge, parent)
        self.preset = preset
        self.setWindowTitle("New policy")
        self.attributes_page = self.add(ATTRIBUTES_PAGE, AttributesPage())
        self.schedules_page = self.add(SCHEDULES_PAGE, SchedulesPage())
        self.clients_page = self.add(CLIENTS_PAGE, ClientsPage())
        self.selections_page = self.add(SELECTIONS_PAGE, SelectionsPage())
        self.summary_page = self.add(SUMMARY_PAGE, SummaryPage(self.WHAT))
        self.result_page = self.add(RESULT_PAGE, ResultPage(self.WHAT))
        if preset.get("name"):
            self.attributes_page.name.setText(preset["name"])

    def spec(self):
        a = self.attributes_page
        kind, target = a.target()
        return {"name": a.name.text().strip(), kind or "storage_unit": target,
                "priority": a.priority.value(), "checksum": a.checksum.currentData(),
                "multiple_streams": a.multiple_streams.isChecked(),
                "skip_nodump": a.skip_nodump.isChecked(),
                "snapshot": a.snapshot.currentData(), "file_list": a.file_list.currentData(),
                "dedup": a.dedup.currentData(),
                **({"compression": a.compression.currentData(),
                    "compression_level": a.compression_level.value()} if a.compresses()
                   else {}),
                "clients": self.clients_page.clients(),
                "selections": list(self.selections_page.selections),
                "schedules": [dict(s) for s in self.schedules_page.schedules]}

    def summary(self):
        s = self.spec()
        where = (("Lifecycle", f"{s['lifecycle']} (backs up to "
                  f"{self.attributes_page.backup_unit()}, then copies)")
                 if s.get("lifecycle") else
                 ("Storage unit group", f"{s['storage_unit_group']} (each backup on one of its "
                  f"units)") if s.get("storage_unit_group") else
                 ("Storage unit", s["storage_unit"]))
        return [("Name", s["name"]), where,
                ("Priority", str(s["priority"])), ("Checksum", s["checksum"]),
                ("Multiple data streams", "yes" if s["multiple_streams"] else "no"),
                ("Files marked nodump", "left out" if s["skip_nodump"] else "backed up"),
                ("Snapshot", SNAPSHOT_TEXT[s["snapshot"]]),
                ("File list", FILE_LIST_TEXT[s["file_list"]]),
                ("Deduplication", DEDUP_TEXT[s["dedup"]]),
                ("Compression", (COMPRESSION_TEXT[s["compression"]]
                                 + (f", level {s['compression_level']}"
                                    if s["compression"] != "off" else ""))
                 if "compression" in s else "none"),
                ("Schedules", "\n".join(schedule_summary(x) for x in s["schedules"])
                 or "none: backups only when started by hand"),
                ("Clients", ", ".join(s["clients"])),
                ("Backup selections", "\n".join(s["selections"]))]

    def create_call(self):
        return _create_policy, (self.spec(),)

    def created_name(self):
        return self.spec()["name"]

    def result_text(self, result):
        return ("Its backups can be started now from the policy list or with "
                f"`cairn backup {result['name']}`.")


def _create_policy(m, s):
    s = dict(s)
    return m.create_policy(s.pop("name"), **s)
