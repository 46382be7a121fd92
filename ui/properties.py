"""The properties window of a configuration object: every attribute shown, the ones that can
change (app.config_edit.editable: EDITABLE, and a storage server's type's settings such as a
deduplicating server's chunk sizes) editable, saved through the master with the error shown
in the window when the catalog refuses it."""

import html
import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFormLayout, \
    QLabel, QLineEdit, QPushButton, QSpinBox, QVBoxLayout

from app.config import CHECKSUMS, DEFAULT_COMPACT_BELOW, FILE_LIST_MODES, SNAPSHOT_MODES
from app.config_edit import editable
from app.timeutil import format_duration
from plugins.storage import registry
from plugins.storage.dedup.master import COMPRESSION_AT, DEFAULT_LEVEL, LEVEL_RANGE
from ui import fmt
from ui.benchmark_dialog import BenchmarkDialog
from ui.resources import icon
from ui.wizards.policy import CHECKSUM_TEXT, COMPRESSION_TEXT, COMPRESSION_TIP, FILE_LIST_TEXT, \
    SNAPSHOT_TEXT
from ui.wizards.policy_change import PolicyChangeWizard, excludes_text, policy_excludes
from ui.wizards.schedule_text import spoken
from ui.wizards.schedule_text import summary as schedule_summary
from ui.wizards.storage_server import CIPHER, chunk_text
from ui.wizards.stugroup import SELECTION_TEXT

KIND_LABELS = {"host": "Host", "storage-server": "Storage server", "disk-pool": "Disk pool",
               "storage-unit": "Storage unit", "policy": "Policy", "lifecycle": "Lifecycle",
               "storage-unit-group": "Storage unit group"}

# attributes shown read-only, per kind, in this order (after the name)
READ_ONLY = {
    "host": ("kind", "address", "created"),
    "storage-server": ("type", "host", "path", "options", "created"),
    "disk-pool": ("server", "server_type", "host", "volumes", "created"),
    "storage-unit": ("pool", "server", "host", "active_jobs", "created"),
    "policy": ("clients", "selections", "excludes", "schedules", "encryption", "created"),
    "lifecycle": ("steps", "policies", "created"),
    "storage-unit-group": ("selection", "unit_names", "policies", "created"),
}

LABELS = {
    "kind": "Reached", "address": "Address", "created": "Created", "type": "Type",
    "host": "Host", "path": "Path", "server": "Storage server", "server_type": "Storage type",
    "volumes": "Volumes", "pool": "Disk pool", "active_jobs": "Active jobs",
    "clients": "Clients", "selections": "Backup selections", "schedules": "Schedules",
    "excludes": "Excludes",
    "compression": "Compression", "compression_level": "Compression level",
    "encryption": "Encryption", "port": "SSH port",
    "user": "SSH user", "key_file": "Private key file", "data_address": "Data address",
    "comment": "Comment", "high_water": "High-water mark", "low_water": "Low-water mark",
    "max_io_streams": "Maximum I/O streams", "max_concurrent_jobs": "Maximum concurrent jobs",
    "storage_unit": "Storage unit", "priority": "Priority",
    "multiple_streams": "Allow multiple data streams", "checksum": "File checksums",
    "active": "Active (scheduled backups run)", "snapshot": "Snapshot",
    "file_list": "File list", "agent_env": "Agent environment",
    "max_jobs": "Maximum jobs", "options": "Deduplication", "dedup": "Deduplication",
    "compact_below": "Compact containers below",
    "verify_every": "Verify the whole pool every",
    "verify_max_mb_s": "Verify reads at most",
    "skip_nodump": "Leave out files marked nodump",
    "steps": "Steps", "policies": "Used by policies", "lifecycle": "Lifecycle",
    "storage_unit_group": "Storage unit group", "selection": "Selection",
    "unit_names": "Storage units, in order",
    "min_chunk": "Smallest chunk", "avg_chunk": "Average chunk", "max_chunk": "Largest chunk",
}
#: what a deduplicating server's chunk size editors say
CHUNK_TIP = ("The size the next backups cut new data into (e.g. 128K, 512K, 2M); smallest < "
             "average < largest, the average a power of two. Images already stored keep their "
             "chunks; data cut with other sizes deduplicates little against older images.")
NO_LIFECYCLE = "(none: one copy, on the storage unit)"
NO_GROUP = "(none: the storage unit or lifecycle above)"
#: a policy's switches the wizard shows disabled, with its reason
POLICY_OFF = {"encryption": "no (a property of the pool, not of the policy)"}
#: a host's maximum jobs left empty: the master's setting max_jobs_per_client applies
MASTER_JOB_LIMIT = "the master's limit of jobs per client"
#: what an empty SSH setting of a host means, as the Add host dialog says it
HOST_PLACEHOLDERS = {"user": "the user running the console",
                     "key_file": "default keys and the SSH agent",
                     "data_address": "the address above"}

#: where a policy's (or a host's) backups to deduplicating pools are cut into chunks
DEDUP_MODES = {
    "policy": "As its policies say",
    "server": "On the storage server (client sends a plain stream)",
    "client": "On the client (only new chunks cross the network)",
}
DEDUP_TIPS = {
    "policy": "Where backups to deduplicating pools are cut into chunks. On the client, "
              "chunks the pool already holds are never sent, at the cost of the client's "
              "CPU. Matters only for storage units on deduplicating pools; a client's own "
              "setting (host properties) wins over this one.",
    "host": "Where this host's backups to deduplicating pools are cut into chunks; this "
            "setting wins over its policies'. On the client, chunks the pool already holds "
            "are never sent, at the cost of this host's CPU.",
}


def _options_text(options):
    """A dedup storage server's options in words; other types have none."""
    if not options or "avg_size" not in options:
        return "—"
    return (f"chunks of {chunk_text(options)}; "
            + (f"encrypted at rest ({CIPHER}, the key is kept on the master)"
               if options.get("encrypted") else "not encrypted"))


def capacity_text(cap):
    """A disk pool's capacity (master.disk_pool_capacity) in one line."""
    if cap.get("size_bytes") is None:
        return f"Cannot tell: {cap.get('error') or 'no volume could be measured'}"
    text = (f"{fmt.size(cap['used_bytes'])} used of {fmt.size(cap['size_bytes'])} "
            f"({cap['used_percent']:.0f}%), {fmt.size(cap['free_bytes'])} free")
    if cap.get("above_high_water"):
        text += f"; at or above the high-water mark ({cap['high_water']}%): no new backups"
    if cap.get("error"):
        text += f" ({cap['error']})"
    return text


def pool_usage_text(usage):
    """What master.pool_usage says about a deduplicating pool, in one line."""
    text = (f"{fmt.size(usage.get('stored_bytes'))} of chunks stored "
            f"({usage.get('chunks', 0):,} chunks) in {usage.get('containers', 0):,} "
            f"container files of {fmt.size(usage.get('container_bytes'))}")
    if usage.get("encrypted"):
        text += ", encrypted"
    return text


def _text(key, value):
    if value is None or value == "":
        return "—"
    if key == "created":
        return fmt.local_time(value)
    if key == "kind":
        return "this machine, without SSH" if value == "local" else "over SSH"
    if key == "schedules":
        return "\n".join(schedule_summary(s) for s in value) or "—"
    if key == "options":
        return _options_text(value)
    if key == "steps":
        return "\n".join(f"Copy {s['copy']}: {'back up' if s['kind'] == 'backup' else 'copy'}"
                         f" to {s['storage_unit']} (disk pool {s['pool']} on {s['host']}), "
                         f"kept {spoken(s['retention'])}" for s in value)
    if key == "selection":
        return SELECTION_TEXT.get(value, value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and key not in ("port", "id"):
        return f"{value:,}"
    if isinstance(value, list):
        return "\n".join(map(str, value)) or "—"
    return str(value)


#: how many of a policy's coming backups its properties list
NEXT_BACKUPS = 5


def next_backups(m, policy):
    """The policy's next scheduled backups within a week (those that run, soonest first)."""
    upcoming = m.schedule_runs(policy, limit=0)["upcoming"]
    return [r for r in upcoming if r["runs"]][:NEXT_BACKUPS]


def next_backups_text(runs):
    if not runs:
        return ("None in the next 7 days: without start windows a policy's backups run only "
                "when started by hand.")
    lines = []
    for r in runs:
        when = time.strftime("%a %Y-%m-%d %H:%M", time.localtime(fmt.epoch(r["due"])))
        lines.append(f"{when}  {r['schedule']} ({r['type']}) of "
                     f"{r['client'] or 'the master catalog'}"
                     + (f", {r['runs']} times in that window" if r["runs"] > 1 else ""))
    return "\n".join(lines)


def editor_values(m, kind):
    """Choices some editors need from the catalog (a policy's storage units)."""
    if kind == "policy":
        return {"storage_units": [u["name"] for u in m.storage_units()],
                "lifecycles": [x["name"] for x in m.lifecycles()],
                "groups": [g["name"] for g in m.storage_unit_groups()]}
    return {}



def _one_target(out):
    """A policy's changes with at most one of storage unit, lifecycle and group: the one
    chosen (a lifecycle or group), else the unit; the others leave by themselves."""
    keys = [k for k in ("storage_unit", "lifecycle", "storage_unit_group") if k in out]
    if len(keys) < 2:
        return out
    keep = next((k for k in ("storage_unit_group", "lifecycle") if out.get(k, "none") != "none"),
                "storage_unit" if "storage_unit" in out else keys[0])
    return {k: v for k, v in out.items() if k == keep or k not in keys}


#: attributes edited in a spin box
NUMBER_KEYS = ("high_water", "low_water", "compact_below", "verify_max_mb_s", "max_io_streams",
               "max_concurrent_jobs", "priority", "port", "max_jobs", "compression_level")
#: spin boxes whose 0 reads as a word (no limit, the master's limit) and is stored as None
NONE_AT_ZERO = ("max_io_streams", "verify_max_mb_s", "max_jobs")


def value_label(text="", name=None):
    """A read-only value of a form: plain text the admin can select and copy, wrapped."""
    label = QLabel(text)
    if name:
        label.setObjectName(name)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setWordWrap(True)
    return label


def verify_text(seconds):
    """A pool's verify interval as the editor shows it: `7d`, or empty for never."""
    return "" if seconds is None else format_duration(seconds)


def benchmark_tip(pool):
    """What Test storage performance measures on a disk pool."""
    if registry.can(pool.get("server_type"), "bucket"):
        return ("Measure what the pool's bucket takes: uploads, whole and ranged reads at each "
                "thread count")
    return ("Measure what the pool's volumes can write and read at once, and which daily "
            "ingest that supports")


def with_settings(kind, obj):
    """A copy of the object; a storage server's with its type's settings (a deduplicating
    server's chunk sizes) as their editors show them."""
    out = dict(obj)
    storage_type = registry.get(obj.get("type")) if kind == "storage-server" else None
    if storage_type is not None:
        out.update(storage_type.settings_values(obj.get("options")))
    return out


class PropertiesDialog(QDialog):
    def __init__(self, bridge, kind, obj, parent=None):
        super().__init__(parent)
        self.bridge, self.kind, self.obj = bridge, kind, with_settings(kind, obj)
        self.name = obj["name"]
        self.saved = None
        self.setWindowTitle(f"{KIND_LABELS[kind]} {self.name} — properties")
        self.setWindowIcon(icon(kind if kind != "host" else "host"))
        self.setMinimumWidth(620)  # room for the sentence choices (deduplication)

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        title = QLabel(f"<b>{html.escape(self.name)}</b>")
        form.addRow("Name", title)
        self.read_only = {}
        for key in READ_ONLY[kind]:
            if key == "options" and not registry.can(obj.get("type"), "dedup"):
                continue    # only a deduplicating server has options to show
            if key in obj:
                self.read_only[key] = value_label(self._shown(key))
                if key in ("type", "server_type") and registry.get(obj[key]) is not None:
                    # the type's name is the wizard's choice; its sentence comes with it
                    self.read_only[key].setToolTip(registry.get(obj[key]).description)
                form.addRow(LABELS.get(key, key), self.read_only[key])
        self.change_button = self.change_wizard = None
        if kind == "policy":
            self.change_button = QPushButton("C&hange schedules, clients, selections and "
                                             "excludes…")
            self.change_button.setObjectName("policy-change")
            self.change_button.clicked.connect(self.change_lists)
            form.addRow("", self.change_button)
        self.next_label = None
        if kind == "policy":
            self.next_label = value_label("Looking…", "next-backups")
            form.addRow("Next backups", self.next_label)
        self.capacity_label = None
        if kind == "disk-pool":
            self.capacity_label = value_label("Looking…", "pool-capacity")
            form.addRow("Capacity", self.capacity_label)
        self.benchmark_button = self.benchmark = None
        if kind == "disk-pool":
            self.benchmark_button = QPushButton("&Test storage performance…")
            self.benchmark_button.setObjectName("pool-benchmark")
            self.benchmark_button.setToolTip(benchmark_tip(obj))
            self.benchmark_button.clicked.connect(self.test_performance)
            form.addRow("Performance", self.benchmark_button)
        self.usage_label = None
        if kind == "disk-pool" and registry.can(obj.get("server_type"), "reclaim"):
            self.usage_label = value_label("Looking…", "pool-usage")
            form.addRow("Pool usage", self.usage_label)
        self.editors = {}
        for key in editable(kind, self.obj):
            if kind == "host" and obj.get("kind") == "local" and key in (
                    "port", "user", "key_file", "data_address"):
                continue  # this machine has no SSH settings
            if key == "compact_below" and not registry.can(obj.get("server_type"), "reclaim"):
                continue  # only a deduplicating pool has containers
            w = self._editor(key, self.obj.get(key))
            self.editors[key] = w
            form.addRow(LABELS.get(key, key), w)

        self.error = QLabel()
        self.error.setObjectName("properties-error")
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setStyleSheet("color: #c0392b;")
        self.error.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.save_button = self.buttons.button(QDialogButtonBox.StandardButton.Save)
        self.save_button.setEnabled(False)
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.reject)

        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(self.error)
        lay.addWidget(self.buttons)
        if kind == "policy":
            bridge.call(editor_values, kind, done=self._choices, context=self)
            bridge.call(next_backups, self.name,
                        done=lambda runs: self._late_text(self.next_label,
                                                          next_backups_text(runs)),
                        failed=lambda e: self._late_text(
                            self.next_label, f"Cannot tell: {getattr(e, 'message', e)}"),
                        context=self)
        if self.capacity_label is not None:
            bridge.call(lambda m, name: m.disk_pool_capacity(name), self.name,
                        done=lambda c: self._late_text(self.capacity_label, capacity_text(c)),
                        failed=lambda e: self._late_text(
                            self.capacity_label, f"Cannot tell: {getattr(e, 'message', e)}"),
                        context=self)
        if self.usage_label is not None:
            bridge.call(lambda m, name: m.pool_usage(name), self.name,
                        done=lambda u: self._late_text(self.usage_label, pool_usage_text(u)),
                        failed=lambda e: self._late_text(
                            self.usage_label, f"Cannot tell: {getattr(e, 'message', e)}"),
                        context=self)

    def test_performance(self):
        """The benchmark of the pool's volumes (ui/benchmark_dialog.py)."""
        self.benchmark = BenchmarkDialog(self.bridge, self.obj["server"],
                                         volumes=self.obj.get("volumes"), pool=self.name,
                                         parent=self)
        self.benchmark.open()
        return self.benchmark

    def _shown(self, key):
        if self.kind == "policy" and key == "excludes":
            excludes = policy_excludes(self.obj)
            return excludes_text(excludes) if excludes else "—"
        if self.kind == "policy" and key in POLICY_OFF and not self.obj[key]:
            return POLICY_OFF[key]
        return _text(key, self.obj[key])

    def change_lists(self):
        """The policy wizard's pages on this policy's lists, saved by their own Save; the
        values shown here follow."""
        w = PolicyChangeWizard(self.bridge, self.obj, self)
        self.change_wizard = w
        w.created.connect(lambda *_: self._lists_changed(w.created_result))
        w.open()
        return w

    def _lists_changed(self, policy):
        self.saved = self.saved or policy
        for key in ("clients", "selections", "excludes", "schedules", "client_excludes"):
            self.obj[key] = policy[key]
        for key, label in self.read_only.items():
            if key in ("clients", "selections", "excludes", "schedules"):
                label.setText(self._shown(key))
        if self.next_label is not None:
            self.bridge.call(next_backups, self.name,
                             done=lambda runs: self._late_text(self.next_label,
                                                               next_backups_text(runs)),
                             context=self)

    def _late_text(self, label, text):
        """A value that arrives after the window is shown: the window grows to keep every
        wrapped value whole (a top-level window does not follow its labels' new heights)."""
        label.setText(text)
        lay = self.layout()
        lay.activate()
        need = lay.totalHeightForWidth(self.width())
        if need > self.height():
            self.resize(self.width(), need)

    # ---- editors --------------------------------------------------------------------------
    def _editor(self, key, value):
        if key in NUMBER_KEYS:
            w = self._number_editor(key, value)
            w.valueChanged.connect(self._changed)
        elif key in ("multiple_streams", "skip_nodump", "active"):
            w = QCheckBox()
            w.setChecked(bool(value))
            w.toggled.connect(self._changed)
        elif key in ("snapshot", "file_list"):
            w = QComboBox()
            # the wizard's sentences, the stored word kept as each item's data
            words = SNAPSHOT_TEXT if key == "snapshot" else FILE_LIST_TEXT
            for mode in (SNAPSHOT_MODES if key == "snapshot" else FILE_LIST_MODES):
                w.addItem(words.get(mode, mode), mode)
            w.setCurrentIndex(max(0, w.findData(value or ("none" if key == "snapshot"
                                                          else "auto"))))
            w.setToolTip("The live files, or a Storage Scale snapshot that each backup takes, "
                         "reads from and deletes" if key == "snapshot" else
                         "How a backup finds its files: on Storage Scale the policy engine "
                         "lists them, elsewhere (or always, if chosen) the tree is walked")
            w.currentIndexChanged.connect(self._changed)
        elif key == "dedup":
            modes = DEDUP_MODES if self.kind == "host" else {
                k: v for k, v in DEDUP_MODES.items() if k != "policy"}
            w = QComboBox()
            for mode, text in modes.items():
                w.addItem(text, mode)
            w.setCurrentIndex(max(0, w.findData(value or next(iter(modes)))))
            # the choices are sentences: the dialog grows to show them whole
            w.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            w.setToolTip(DEDUP_TIPS[self.kind])
            w.currentIndexChanged.connect(self._changed)
        elif key == "compression":
            w = QComboBox()
            for mode in COMPRESSION_AT:
                w.addItem(COMPRESSION_TEXT[mode], mode)
            w.setCurrentIndex(max(0, w.findData(value or "server")))
            w.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            w.setToolTip(COMPRESSION_TIP)
            w.currentIndexChanged.connect(self._changed)
        elif key == "verify_every":
            w = QLineEdit(verify_text(value))
            w.setPlaceholderText("never")
            w.setToolTip("How often the whole pool is read back and checked, e.g. 7d or 12h "
                         "(never: only when started by hand). Scheduled verify jobs wait "
                         "behind every other job.")
            w.setClearButtonEnabled(True)
            w.textChanged.connect(self._changed)
        elif key == "agent_env":
            text = ",".join(f"{k}={v}" for k, v in sorted((value or {}).items()))
            w = QLineEdit(text)
            w.setPlaceholderText("CAIRN_MMFS_SUDO=1")
            w.setToolTip("Variables the host's agent starts with, NAME=value separated by "
                         "commas: CAIRN_MMFS_SUDO=1 runs the Storage Scale commands through "
                         "sudo, CAIRN_MMFS_BIN names where they are")
            w.setClearButtonEnabled(True)
            w.textChanged.connect(self._changed)
        elif key == "checksum":
            w = QComboBox()
            for c in CHECKSUMS:
                w.addItem(CHECKSUM_TEXT.get(c, c), c)
            w.setCurrentIndex(max(0, w.findData(value or CHECKSUMS[0])))
            w.currentIndexChanged.connect(self._changed)
        elif key in ("storage_unit", "lifecycle", "storage_unit_group"):
            w = self._target_editor(key, value)
        else:
            w = QLineEdit(value or "")
            w.setPlaceholderText(HOST_PLACEHOLDERS.get(key, "") if self.kind == "host" else "")
            if key in LABELS and key.endswith("_chunk"):
                w.setToolTip(CHUNK_TIP)
            w.setClearButtonEnabled(True)
            w.textChanged.connect(self._changed)
        w.setObjectName(f"edit-{key}")
        return w

    def _number_editor(self, key, value):
        """A number's spin box, its 0 in words where 0 means no limit or never."""
        w = QSpinBox()
        if key in ("high_water", "low_water"):
            w.setRange(0 if key == "low_water" else 1, 100)
            w.setSuffix(" %")
            w.setValue(int(value))
        elif key == "compact_below":
            w.setRange(0, 100)
            w.setSuffix(" % live data")
            w.setSpecialValueText("never (only delete empty containers)")
            w.setValue(int(DEFAULT_COMPACT_BELOW if value is None else value))
            w.setToolTip("Space reclaim copies the live chunks of a container whose live data "
                         "is below this share of its size into new containers, then deletes "
                         "it. Higher frees more space per reclaim and copies more data.")
        elif key == "verify_max_mb_s":
            w.setRange(0, 100000)
            w.setGroupSeparatorShown(True)
            w.setSuffix(" MB/s")
            w.setSpecialValueText("no limit")
            w.setValue(int(value or 0))
            w.setToolTip("The most a verify of this pool (scheduled or by hand) reads back per "
                         "second, so that backups and restores keep their share of its disks")
        elif key in ("max_io_streams", "max_concurrent_jobs", "priority", "port"):
            hi = {"priority": 99999, "port": 65535}.get(key, 1000)
            # 30,000 as the lists write it; a port number is a name, never grouped
            w.setGroupSeparatorShown(key != "port")
            if key == "max_io_streams":
                w.setRange(0, hi)
                w.setSpecialValueText("no limit")
            else:
                w.setRange(1 if key != "priority" else 0, hi)
            w.setValue(int(value or 0))
        elif key == "compression_level":
            w.setRange(*LEVEL_RANGE)
            w.setValue(int(value or DEFAULT_LEVEL))
            w.setToolTip("zstd level of new chunks in deduplicating pools: 1 is fastest, 19 "
                         "stores least")
        elif key == "max_jobs":
            w.setRange(0, 1000)
            w.setGroupSeparatorShown(True)
            w.setSpecialValueText(MASTER_JOB_LIMIT)
            w.setValue(int(value or 0))
            w.setToolTip("How many jobs of this host run at once; at its lowest, the master's "
                         "setting max_jobs_per_client applies")
        return w

    def _choices(self, values):
        combo = self.editors.get("storage_unit")
        if combo is None:
            return
        current = combo.currentText()
        combo.blockSignals(True)
        combo.clear()
        combo.addItems(values["storage_units"])
        combo.setCurrentText(current)
        combo.blockSignals(False)
        for key, none, names, kind_icon in (
                ("lifecycle", NO_LIFECYCLE, values["lifecycles"], "lifecycle"),
                ("storage_unit_group", NO_GROUP, values.get("groups", []), "storage-unit")):
            combo = self.editors.get(key)
            if combo is None:
                continue
            current = combo.currentData()
            combo.blockSignals(True)
            combo.clear()
            combo.addItem(none, "none")
            for name in names:
                combo.addItem(icon(kind_icon), name, name)
            combo.setCurrentIndex(max(0, combo.findData(current)))
            combo.blockSignals(False)

    def _target_editor(self, key, value):
        """Where a policy's backups go: its storage unit, its lifecycle (whose backup step is
        then the unit) or its storage unit group (a unit of it chosen as each job starts)."""
        w = QComboBox()
        if key == "storage_unit":
            w.addItem(value)
            w.setCurrentText(value)
            w.currentTextChanged.connect(self._changed)
            # under a lifecycle or group the unit follows it: change that instead
            w.setEnabled(not self.obj.get("lifecycle") and not self.obj.get(
                "storage_unit_group"))
            w.setToolTip("Set by the policy's lifecycle or storage unit group; choose none "
                         "of them to choose a unit" if not w.isEnabled() else
                         "Where the policy's backups go")
            return w
        group = key == "storage_unit_group"
        w.addItem(NO_GROUP if group else NO_LIFECYCLE, "none")
        if value:
            w.addItem(icon("storage-unit" if group else "lifecycle"), value, value)
            w.setCurrentIndex(1)
        w.setToolTip("Each backup job goes to one unit of the group, chosen when it starts "
                     "(prioritized, failover, round-robin or least-loaded)" if group else
                     "A lifecycle backs up to its first step's storage unit and copies each "
                     "backup to its other steps' pools, each copy with its own retention")
        w.currentIndexChanged.connect(lambda *_: self._target_chosen(key))
        w.currentIndexChanged.connect(self._changed)
        return w

    def _target_chosen(self, key):
        """A lifecycle or group chosen leaves the other at none; the unit is free under
        neither."""
        other = self.editors.get("lifecycle" if key == "storage_unit_group"
                                 else "storage_unit_group")
        if other is not None and self.value(key) != "none":
            other.blockSignals(True)
            other.setCurrentIndex(0)
            other.blockSignals(False)
        unit = self.editors.get("storage_unit")
        if unit is not None:
            unit.setEnabled(all(self.value(k) == "none" for k in
                                ("lifecycle", "storage_unit_group") if k in self.editors))

    def value(self, key):
        w = self.editors[key]
        if isinstance(w, QSpinBox):
            v = w.value()
            return None if key in NONE_AT_ZERO and v == 0 else v
        if isinstance(w, QCheckBox):
            return w.isChecked()
        if isinstance(w, QComboBox):
            # combos that show words for a stored value keep the value as the item's data
            data = w.currentData()
            return w.currentText() if data is None else data
        return w.text().strip()

    def changes(self):
        out = {}
        for key in self.editors:
            old = self.obj.get(key)
            new = self.value(key)
            if key == "agent_env":
                old = ",".join(f"{k}={v}" for k, v in sorted((old or {}).items()))
            elif key == "verify_every":
                old = verify_text(old)
            elif key in ("lifecycle", "storage_unit_group"):
                old = old or "none"
            elif isinstance(self.editors[key], QLineEdit):
                old = old or ""
            if new != old:
                out[key] = new
        return _one_target(out)

    def _changed(self, *_):
        self.save_button.setEnabled(bool(self.changes()))
        self.error.hide()

    # ---- saving ---------------------------------------------------------------------------
    def save(self):
        changes = self.changes()
        if not changes:
            self.accept()
            return
        self.save_button.setEnabled(False)
        self.bridge.call(lambda m: m.update_object(self.kind, self.name, **changes),
                         done=self._saved, failed=self._failed, context=self)

    def _saved(self, obj):
        self.saved = obj
        self.accept()

    def _failed(self, err):
        self.error.setText(err.message + (f"\n{err.hint}" if err.hint else ""))
        self.error.show()
        self.save_button.setEnabled(True)
