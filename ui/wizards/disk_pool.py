"""The disk pool wizard: storage server, volumes (directories on the file systems the host
reports, checked on the host), name and limits; it can go on to a storage unit on the pool.

A deduplicating (dedup) storage server holds one pool, whose one volume is the server's
storage path: for such a server the wizard shows that path, checked on the host, instead of
the volume table.

The volumes page shows the Storage Scale (GPFS) file systems of the host's cluster among the
host's own: a GPFS file system not mounted on the storage server's node is listed too, and
choosing a volume on it warns (it does not refuse: it may be mounted before backups run)."""

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QAbstractItemView, QCheckBox, QComboBox, QFormLayout, \
    QHBoxLayout, QHeaderView, QLabel, QLineEdit, QPushButton, QSpinBox, QTableWidget, \
    QTableWidgetItem

from app import pool_mounts, scale_view, shared_volumes
from app.config import check_abs_path
from app.errors import ValidationError
from plugins.storage import registry
from ui import fmt
from ui.benchmark_dialog import BenchmarkDialog
from ui.qtcompat import emit
from ui.resources import icon
from ui.wizards.common import Page, ResultPage, SummaryPage, WizardBase, fit_combo, \
    name_problem, narrow, note
from ui.wizards.storage_unit import StorageUnitWizard

SERVER_PAGE, VOLUMES_PAGE, DEDUP_VOLUME_PAGE, SETTINGS_PAGE, SUMMARY_PAGE, RESULT_PAGE = \
    range(6)

CHECK_DELAY_MS = 300
VOLUMES_WIDTH = 1060
FS_ROLE = Qt.ItemDataRole.UserRole + 1

(COL_VOLUME, COL_MOUNT, COL_TYPE, COL_SIZE, COL_FREE, COL_MOUNTED, COL_CHECK) = range(7)
HEADERS = ("Volume directory", "Mount point", "File system", "Size", "Free", "Mounted",
           "Check on the host")


def _sentence(message):
    return message[0].upper() + message[1:] + ("" if message.endswith(".") else ".")


def _load_volumes(m, server, host=None):
    """The storage server's host's file systems, marked with its cluster's GPFS file systems
    (one probe of the host gives both), and the volumes other pools already use: one round
    trip to a master over SSH when the server's host is known (from the server page)."""
    reads = [("storage_server", (server,)), ("disk_pools",), ("policies",)]
    got = m.batch(reads + [("probe_host", (host,))] * bool(host), return_exceptions=True)
    failed = [r for r in got[:3] if isinstance(r, Exception)]
    if failed:
        raise failed[0]
    srv, all_pools, policies = got[:3]
    # the server's host as the master says now: probed again if it is another (or is gone)
    probe = got[3] if host and srv["host"] == host else m.probe_host(srv["host"])
    if isinstance(probe, Exception):
        raise probe
    used = {v: p["name"] for p in all_pools if p["server"] == server for v in p["volumes"]}
    scale = probe.get("storage_scale")
    # every pool's directories: one host's, or any host's on a shared file system, are
    # never another pool's or inside or around one (the master refuses them too)
    pools = [{"name": p["name"], "host": p["host"], "volumes": p["volumes"]}
             for p in all_pools]
    protected = [(p["name"], s) for p in policies if srv["host"] in (p["clients"] or [])
                 for s in p["selections"] or []]
    return {"host": srv["host"], "used": used, "pools": pools, "protected": protected,
            "filesystems": scale_view.mark_volumes(probe.get("filesystems") or [], scale,
                                                   probe.get("hostname")),
            "cluster": None if scale_view.problem(scale, srv["host"]) else {
                "name": scale.get("cluster_name"),
                "local_node": scale_view.local_node(scale, probe.get("hostname"))}}


def _create_pool(m, s):
    """create_disk_pool, each volume checked on the host first, with the comment given."""
    return m.create_disk_pool(s["name"], server=s["server"], volumes=s["volumes"],
                              high_water=s["high_water"], low_water=s["low_water"],
                              max_io_streams=s["max_io_streams"], comment=s["comment"])


def holds_one_pool(server):
    """Whether the server holds one pool, whose volume is its storage path (a deduplicating
    server)."""
    return bool(server) and registry.can(server.get("type"), "one_pool")


def check_text(check):
    """The host's answer about one volume, as the volume table shows it."""
    if check["ok"]:
        return f"ok, writable, {fmt.size(check.get('free'))} free"
    return check["error"]


def is_parallel(fs):
    return fs.get("class") == "parallel"


class ServerPage(Page):
    def __init__(self):
        super().__init__("Storage server", "The storage server whose file systems hold the "
                                           "pool's volumes.")
        self.combo = fit_combo(QComboBox())
        self.detail = note("")
        form = QFormLayout()
        form.addRow("&Storage server:", self.combo)
        form.addRow("", self.detail)
        self.body.addLayout(form)
        self.body.addStretch(1)
        self.servers = {}
        self.pool_of = {}     # storage server -> a disk pool it has
        self._loaded_once = False
        self.combo.currentIndexChanged.connect(self._changed)

    def initializePage(self):
        if self._loaded_once:
            return
        self._loaded_once = True
        self.start_loading("Loading the storage servers…")
        self.call(lambda m: m.batch([("storage_servers",), ("disk_pools",)]),
                  done=self._servers, failed=self.loaded)

    def _servers(self, result):
        servers, pools = result
        self.servers = {s["name"]: s for s in servers}
        self.pool_of = {p["server"]: p["name"] for p in pools}
        self.combo.blockSignals(True)
        for s in servers:
            self.combo.addItem(icon("storage-server"), s["name"])
        i = self.combo.findText(self.wizard().preset.get("server") or "")
        self.combo.setCurrentIndex(max(i, 0) if servers else -1)
        self.combo.blockSignals(False)
        self._changed()
        self.loaded()

    def server(self):
        return self.servers.get(self.combo.currentText())

    def _changed(self, *_):
        s = self.server()
        if not s:
            text = ""
        elif holds_one_pool(s):
            text = (f"dedup on host {s['host']}: a deduplicating pool in {s['path']}"
                    + (", encrypted at rest" if (s.get("options") or {}).get("encrypted")
                       else ""))
        else:
            text = f"{s['type']} on host {s['host']}"
        self.detail.setText(text)
        self.revalidate()

    def problem(self):
        if not self.servers:
            return "There is no storage server yet: create one with the storage server " \
                   "wizard first."
        s = self.server()
        if not s:
            return "Choose a storage server."
        if holds_one_pool(s) and s["name"] in self.pool_of:
            return (f"Dedup storage server {s['name']} already has its disk pool "
                    f"'{self.pool_of[s['name']]}': a deduplicating server holds one pool. "
                    "Choose another server, or create another dedup storage server for "
                    "another path.")
        return None

    def nextId(self):
        return DEDUP_VOLUME_PAGE if holds_one_pool(self.server()) else VOLUMES_PAGE


class VolumesPage(Page):
    """The file systems the host reports, checkable, with the directory to use on each; and
    directories typed by the admin. Checked volumes are checked on the host as they change."""

    def __init__(self):
        super().__init__("Volumes", "Check the file systems to use and edit the directory on "
                                    "each (double-click), e.g. /gpfs/fs1/backup, or add a "
                                    "directory below. Each directory is checked on the host.")
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked
                                   | QAbstractItemView.EditTrigger.EditKeyPressed
                                   | QAbstractItemView.EditTrigger.SelectedClicked)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        h = self.table.horizontalHeader()
        h.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        h.setStretchLastSection(True)
        self.body.addWidget(self.table, 1)
        self.cluster_note = note("")
        self.cluster_note.hide()
        self.body.addWidget(self.cluster_note)

        self.path = QLineEdit()
        self.path.setPlaceholderText("/gpfs/fs1/backup")
        self.add_button = QPushButton("&Add directory")
        self.add_button.clicked.connect(self.add_typed)
        self.path.returnPressed.connect(self.add_typed)
        self.refresh_button = QPushButton("&Refresh")
        self.refresh_button.setToolTip("Read the host's file systems again")
        self.refresh_button.clicked.connect(self.reload)
        row = QHBoxLayout()
        row.addWidget(QLabel("Directory:"))
        row.addWidget(self.path, 1)
        row.addWidget(self.add_button)
        row.addWidget(self.refresh_button)
        self.benchmark_button = QPushButton("&Test storage performance…")
        self.benchmark_button.setObjectName("volumes-benchmark")
        self.benchmark_button.setToolTip("Measure what the checked directories can write and "
                                         "read at once, before the pool uses them")
        self.benchmark_button.clicked.connect(self.test_performance)
        row.addWidget(self.benchmark_button)
        self.benchmark = None
        self.body.addLayout(row)

        self.filesystems = []
        self.used = {}
        self.pools = []
        self.protected = []
        self.host = None
        self.server = None
        self.checks = {}          # volume path -> the host's answer
        self.checking = None      # the paths being checked now
        self.check_error = None
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(CHECK_DELAY_MS)
        self.timer.timeout.connect(self.check_now)
        self.table.itemChanged.connect(self._item_changed)

    def test_performance(self):
        """The benchmark of the checked directories (ui/benchmark_dialog.py)."""
        if not self._valid_volumes():
            self.status.error("Check or add the directories to test first.")
            return None
        vols = self.volumes()
        self.benchmark = BenchmarkDialog(self.wizard().bridge, self.server, volumes=vols,
                                         parent=self)
        self.benchmark.open()
        return self.benchmark

    # ---- loading ----------------------------------------------------------------------------
    def initializePage(self):
        server = self.wizard().server()
        if server != self.server:
            self.server = server
            self.table.setRowCount(0)
            self.checks = {}
            self.reload()

    def reload(self):
        # Checked and typed directories stay; a file system's own unchecked row goes with
        # the file system when the host no longer reports it.
        mounts = {fs["mount_point"] for fs in self.filesystems}
        keep = [(self.volume(r), self.is_checked(r)) for r in range(self.table.rowCount())
                if self.is_checked(r) or self.volume(r) not in mounts]
        self.start_loading("Reading the file systems of the storage server's host…")
        host = (self.wizard().server_page.server() or {}).get("host")
        self.call(_load_volumes, self.server, host, done=lambda r: self._loaded(r, keep),
                  failed=self._load_failed)

    def _load_failed(self, error):
        self.loaded(error)
        self.status.error(error, "The host's file systems could not be read")

    def _loaded(self, result, keep):
        self.host = result["host"]
        self.filesystems = result["filesystems"]
        self.used = result["used"]
        self.pools = result.get("pools") or []
        self.protected = result.get("protected") or []
        self._show_cluster(result.get("cluster"))
        self.table.blockSignals(True)
        self.table.setRowCount(0)
        for fs in self.filesystems:
            self._add_row(fs["mount_point"], fs, checked=False)
        for path, checked in keep:
            r = self._row_of(path)
            if r is None:
                self._add_row(path, scale_view.mount_of(path, self.filesystems), checked)
            else:
                self._set_checked(r, checked)
        self.table.blockSignals(False)
        self._fit_columns()
        self.loaded()
        self._volumes_changed()

    def _show_cluster(self, cluster):
        if not cluster:
            self.cluster_note.hide()
            return
        node = scale_view.short(cluster.get("local_node"))
        where = f"node {node}" if node else "a node (which one could not be told)"
        self.cluster_note.setText(
            f"Host {self.host} is {where} of the Storage Scale cluster {cluster['name']}; "
            "its GPFS file systems are listed whether mounted there or not.")
        self.cluster_note.show()

    def _fit_columns(self):
        self.table.resizeColumnsToContents()
        for col, most in ((COL_VOLUME, 180), (COL_MOUNT, 110), (COL_TYPE, 240),
                          (COL_MOUNTED, 240)):
            if self.table.columnWidth(col) > most:
                self.table.setColumnWidth(col, most)
        self.table.setColumnWidth(COL_VOLUME, max(self.table.columnWidth(COL_VOLUME), 170))

    # ---- rows -------------------------------------------------------------------------------
    def _add_row(self, path, fs, checked):
        r = self.table.rowCount()
        self.table.insertRow(r)
        vol = QTableWidgetItem(path)
        vol.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
                     | Qt.ItemFlag.ItemIsEditable | Qt.ItemFlag.ItemIsUserCheckable)
        vol.setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
        vol.setData(FS_ROLE, fs)
        vol.setToolTip(path)
        self.table.setItem(r, COL_VOLUME, vol)
        self._fill_fs(r, fs)
        return r

    def _fill_fs(self, r, fs):
        def cell(col, text, tip=None, align=None, ic=None):
            item = QTableWidgetItem(text)
            item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
            if tip:
                item.setToolTip(tip)
            if align:
                item.setTextAlignment(align)
            if ic is not None:
                item.setIcon(ic)
            self.table.setItem(r, col, item)

        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        if fs is None:
            for col in (COL_MOUNT, COL_TYPE, COL_SIZE, COL_FREE, COL_MOUNTED):
                cell(col, "")
            cell(COL_MOUNT, "(not on a reported file system)")
        else:
            cell(COL_MOUNT, fs["mount_point"], fs.get("device"))
            gpfs = fs.get("gpfs")
            if gpfs:
                nodes = ", ".join(scale_view.short(n) for n in gpfs["mounted_on"]) or "none"
                cell(COL_TYPE, scale_view.gpfs_type_text(fs),
                     f"Storage Scale file system {gpfs['device']} of cluster "
                     f"{gpfs['cluster']}, mounted on: {nodes}. A parallel file system: "
                     "many nodes read and write it at once, a good home for backup volumes "
                     "shared by several storage servers.",
                     ic=icon("wizard-parallel-fs"))
            elif is_parallel(fs):
                cell(COL_TYPE, f"{fs['type']} — parallel file system",
                     "A parallel file system: many nodes read and write it at once, a good "
                     "home for backup volumes shared by several storage servers.",
                     ic=icon("wizard-parallel-fs"))
            else:
                cell(COL_TYPE, fs["type"] + (" (network)" if fs.get("class") == "network"
                                             else ""))
            cell(COL_SIZE, fmt.size(fs.get("size")), align=right)
            cell(COL_FREE, fmt.size(fs.get("free")), align=right)
            warning = scale_view.volume_warning(fs, self.host)
            cell(COL_MOUNTED, scale_view.mounted_text(fs),
                 warning or scale_view.mounted_note(fs),
                 ic=icon("wizard-problem") if warning else None)
        cell(COL_CHECK, "")
        for col in (COL_MOUNT, COL_MOUNTED):
            item = self.table.item(r, col)
            if not item.toolTip():
                item.setToolTip(item.text())

    def _row_of(self, path):
        for r in range(self.table.rowCount()):
            if self.volume(r) == path:
                return r
        return None

    def volume(self, r):
        return self.table.item(r, COL_VOLUME).text().strip()

    def is_checked(self, r):
        return self.table.item(r, COL_VOLUME).checkState() == Qt.CheckState.Checked

    def _set_checked(self, r, checked):
        self.table.item(r, COL_VOLUME).setCheckState(
            Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)

    def set_checked(self, path, checked=True):
        r = self._row_of(path)
        if r is not None:
            self._set_checked(r, checked)

    def volumes(self):
        return [self.volume(r) for r in range(self.table.rowCount()) if self.is_checked(r)]

    def add_typed(self):
        text = self.path.text().strip()
        if not text:
            return
        try:
            path = check_abs_path("volume", text)
        except ValidationError as e:
            self.status.problem(_sentence(e.message))
            return
        r = self._row_of(path)
        if r is None:
            self.table.blockSignals(True)
            r = self._add_row(path, scale_view.mount_of(path, self.filesystems), True)
            self.table.blockSignals(False)
            self._fit_columns()
        else:
            self._set_checked(r, True)
        self.table.scrollToItem(self.table.item(r, COL_VOLUME))
        self.path.clear()
        self._volumes_changed()

    def _item_changed(self, item):
        if item.column() != COL_VOLUME:
            return
        r = item.row()
        path = self.volume(r)
        # An edited directory belongs to the file system that holds it.
        fs = scale_view.mount_of(path, self.filesystems) if path.startswith("/") else None
        if fs is not item.data(FS_ROLE):
            self.table.blockSignals(True)
            item.setData(FS_ROLE, fs)
            self._fill_fs(r, fs)
            self.table.blockSignals(False)
        self._volumes_changed()

    # ---- checking on the host -------------------------------------------------------------------
    def _volumes_changed(self):
        self._show_checks()
        self.revalidate()
        if self._valid_volumes() and any(v not in self.checks for v in self.volumes()):
            self.timer.start()

    def _valid_volumes(self):
        vols = self.volumes()
        if not vols:
            return False
        try:
            return all(check_abs_path("volume", v) == v for v in vols) \
                and len(set(vols)) == len(vols)
        except ValidationError:
            return False

    def check_now(self):
        vols = [v for v in self.volumes() if v not in self.checks]
        if not vols or not self._valid_volumes() or self.checking:
            return
        self.checking = tuple(vols)
        self.check_error = None
        self.revalidate()
        self.call(lambda m, s, v: m.check_volumes(s, v), self.server, list(vols),
                  done=self._checked, failed=self._check_failed)

    def _checked(self, results):
        self.checking = None
        for v in results:
            self.checks[v["path"]] = v
        self._show_checks()
        self.revalidate()
        if any(v not in self.checks for v in self.volumes()):
            self.timer.start()

    def _check_failed(self, error):
        self.checking = None
        self.check_error = error
        self.revalidate()

    def _show_checks(self):
        self.table.blockSignals(True)
        for r in range(self.table.rowCount()):
            item = self.table.item(r, COL_CHECK)
            c = self.checks.get(self.volume(r)) if self.is_checked(r) else None
            if c is None:
                item.setText("")
                item.setIcon(icon("wizard-empty"))
            else:
                item.setText(check_text(c))
                item.setIcon(icon("state-ok" if c["ok"] else "state-failed"))
            item.setToolTip(item.text())
        self.table.blockSignals(False)

    def isComplete(self):
        return super().isComplete() and self.checking is None

    def revalidate(self, *_):
        if self.loading is None and self.load_error is None and self.checking:
            self.status.busy(f"Checking {', '.join(self.checking)} on host {self.host}…")
            emit(self.completeChanged)
            return
        super().revalidate()
        warning = self.warning() if self.status.kind is None else None
        if warning:
            self.status.info(warning)
            self.status.icon.setPixmap(icon("wizard-problem").pixmap(16, 16))
            self.status.icon.setVisible(True)
            self.status.kind = "warning"

    def nextId(self):
        return SETTINGS_PAGE

    def warning(self):
        """What to do before the chosen volumes take backups (a GPFS file system not mounted
        on the storage server's node), or None; Next stays enabled."""
        out = []
        volumes = [v for v in self.volumes() if v.startswith("/")]
        for v in volumes:
            fs = scale_view.mount_of(v, self.filesystems)
            w = scale_view.volume_warning(fs, self.host)
            if w and w not in out:
                out.append(w)
        out += [w[0].upper() + w[1:] for w in pool_mounts.placement_warnings(
            volumes, self.host, self.filesystems, self.protected)]
        return " ".join(out) or None

    def overlap(self, v):
        """Why volume v may not be used because of another pool's directory, or None."""
        shared = pool_mounts.on_shared(v, self.filesystems)
        for pool in self.pools:
            if pool["host"] != self.host and not shared:
                continue
            for q in pool["volumes"]:
                rel = shared_volumes.relation(v, q)
                if rel:
                    where = "" if pool["host"] == self.host else \
                        f" on host {pool['host']}, on the same shared file system"
                    return (f"Volume {v} {rel} volume {q} of disk pool '{pool['name']}'"
                            f"{where}: give each pool its own directory beside the others'.")
        return None

    def problem(self):
        vols = self.volumes()
        if not vols:
            return "Check at least one file system, or add a directory, to use as a volume."
        seen = set()
        for v in vols:
            try:
                norm = check_abs_path("volume", v)
            except ValidationError as e:
                return _sentence(e.message)
            if norm != v:
                return f"Write volume {v} as {norm}."
            if v in seen:
                return f"Volume {v} is given twice."
            seen.add(v)
            if v in self.used:
                return f"Volume {v} already belongs to disk pool '{self.used[v]}'."
            overlap = self.overlap(v)
            if overlap:
                return overlap
        if self.check_error is not None:
            return f"The volumes could not be checked on host {self.host}: " \
                   f"{self.check_error.message}"
        for v in vols:
            c = self.checks.get(v)
            if c is None:
                return f"Volume {v} is not checked on the host yet."
            if not c["ok"]:
                return (f"Volume {v} on host {self.host}: {c['error']}. Create the directory "
                        "there and make it writable for the agent's user, or choose another.")
        return None


class DedupVolumePage(Page):
    """The one volume of a deduplicating pool: the storage server's storage path, shown
    read-only and checked on the host."""

    def __init__(self):
        super().__init__("Volume", "A deduplicating pool has one volume: the storage path of "
                                   "its storage server.")
        self.path = QLineEdit()
        self.path.setObjectName("dedup-volume")
        self.path.setReadOnly(True)
        self.check_label = QLabel()
        self.check_label.setTextFormat(Qt.TextFormat.PlainText)
        self.why = note("")
        form = QFormLayout()
        form.addRow("Volume:", self.path)
        form.addRow("On the host:", self.check_label)
        form.addRow("", self.why)
        self.benchmark_button = QPushButton("&Test storage performance…")
        self.benchmark_button.setToolTip("Measure what the storage path can write and read at "
                                         "once")
        self.benchmark_button.clicked.connect(self.test_performance)
        form.addRow("", self.benchmark_button)
        self.benchmark = None
        self.body.addLayout(form)
        self.body.addStretch(1)
        self.server = None
        self.check = None

    def test_performance(self):
        """The benchmark of the storage path (ui/benchmark_dialog.py)."""
        self.benchmark = BenchmarkDialog(self.wizard().bridge, self.server["name"],
                                         volumes=self.volumes(), parent=self)
        self.benchmark.open()
        return self.benchmark

    def initializePage(self):
        s = self.wizard().server_page.server()
        if self.server is not None and s == self.server and self.check is not None:
            return
        self.server, self.check = s, None
        self.path.setText(s["path"])
        self.why.setText(
            "The pool keeps all its chunks in one chunk store, so that a chunk is stored once "
            f"whichever backup brings it: that store is {s['path']}, the storage path given "
            f"when storage server {s['name']} was created. It cannot be changed here; another "
            "path needs another dedup storage server.")
        self.check_label.setText("")
        self.start_loading(f"Checking {s['path']} on host {s['host']}…")
        self.call(lambda m, name, path: m.check_volumes(name, [path])[0], s["name"], s["path"],
                  done=self._checked, failed=self._failed)

    def _checked(self, check):
        self.check = check
        self.check_label.setText(check_text(check))
        self.loaded()

    def _failed(self, error):
        self.loaded(error)
        self.status.error(error, "The storage path could not be checked")

    def volumes(self):
        return [self.server["path"]] if self.server else []

    def problem(self):
        c = self.check
        if c is not None and not c["ok"]:
            return (f"The storage path {c['path']} on host {self.server['host']}: "
                    f"{c['error']}. Make it writable for the agent's user.")
        return None

    def nextId(self):
        return SETTINGS_PAGE


class SettingsPage(Page):
    def __init__(self):
        super().__init__("Name and limits", "How full the pool may get, and how many streams "
                                            "may read and write it at once.")
        self.name = QLineEdit()
        self.comment = QLineEdit()
        self.comment.setPlaceholderText("optional")
        self.high = narrow(QSpinBox())
        self.high.setRange(1, 100)
        self.high.setSuffix(" %")
        self.high.setValue(98)
        self.low = narrow(QSpinBox())
        self.low.setRange(0, 100)
        self.low.setSuffix(" %")
        self.low.setValue(80)
        self.no_limit = QCheckBox("No limit")
        self.no_limit.setChecked(True)
        self.streams = QSpinBox()
        self.streams.setRange(1, 1000)
        self.streams.setValue(4)
        self.streams.setEnabled(False)
        self.no_limit.toggled.connect(lambda on: self.streams.setEnabled(not on))
        streams_row = QHBoxLayout()
        streams_row.addWidget(self.no_limit)
        streams_row.addWidget(self.streams)
        streams_row.addStretch(1)

        form = QFormLayout()
        form.addRow("&Name:", self.name)
        form.addRow("&Comment:", self.comment)
        form.addRow("&High-water mark:", self.high)
        form.addRow("", note("No new backup starts on the pool once it is this full."))
        form.addRow("&Low-water mark:", self.low)
        form.addRow("", note("Expiring images frees the pool down to this fill level; it "
                             "must be below the high-water mark."))
        form.addRow("Maximum I/O streams:", streams_row)
        form.addRow("", note("Concurrent reads and writes on the pool's volumes; a limit "
                             "keeps many jobs from thrashing a slow disk."))
        self.body.addLayout(form)
        self.body.addStretch(1)
        self.existing = set()
        self._suggested = ""
        for w in (self.name, self.comment):
            w.textChanged.connect(self.revalidate)
        for w in (self.high, self.low, self.streams):
            w.valueChanged.connect(self.revalidate)
        self.no_limit.toggled.connect(self.revalidate)

    def initializePage(self):
        server = self.wizard().server()
        if not self.name.text() or self.name.text() == self._suggested:
            self._suggested = f"{server}-pool" if server else ""
            self.name.setText(self._suggested)
        self.start_loading("Loading the disk pools…")
        self.call(lambda m: [p["name"] for p in m.disk_pools()],
                  done=self._names, failed=self.loaded)

    def _names(self, names):
        self.existing = set(names)
        self.loaded()

    def max_io_streams(self):
        return None if self.no_limit.isChecked() else self.streams.value()

    def problem(self):
        p = name_problem("disk pool", self.name.text().strip(), self.existing)
        if p:
            return p
        if self.low.value() >= self.high.value():
            return (f"The low-water mark ({self.low.value()} %) must be below the high-water "
                    f"mark ({self.high.value()} %).")
        return None


class PoolSummaryPage(SummaryPage):
    def __init__(self):
        super().__init__("disk pool")
        self.make_unit = QCheckBox("Create a storage unit using this disk pool")
        self.make_unit.setChecked(True)
        self.make_unit.setToolTip("Policies write to storage units; after Finish the storage "
                                  "unit wizard opens with this pool chosen.")
        self.body.addWidget(self.make_unit)


class DiskPoolWizard(WizardBase):
    KIND, WHAT, KIND_ICON = "disk-pool", "disk pool", "disk-pool"

    #: the wizard opened after Finish to go on (the storage unit wizard)
    continued = Signal(object)

    def __init__(self, bridge, parent=None, **preset):
        super().__init__(bridge, parent)
        self.preset = preset
        self.follow_up = None
        self.setWindowTitle("New disk pool")
        # The volumes page's table has seven columns: room for them from the start, as far
        # as the screen allows (a 1024-pixel screen gets a window it can show whole).
        screen = self.screen() or QGuiApplication.primaryScreen()
        room = screen.availableGeometry().width() - 40 if screen else VOLUMES_WIDTH
        self.resize(max(self.minimumWidth(), min(VOLUMES_WIDTH, room)), self.minimumHeight())
        self.server_page = self.add(SERVER_PAGE, ServerPage())
        self.volumes_page = self.add(VOLUMES_PAGE, VolumesPage())
        self.dedup_page = self.add(DEDUP_VOLUME_PAGE, DedupVolumePage())
        self.settings_page = self.add(SETTINGS_PAGE, SettingsPage())
        self.summary_page = self.add(SUMMARY_PAGE, PoolSummaryPage())
        self.result_page = self.add(RESULT_PAGE, ResultPage(self.WHAT))
        if preset.get("name"):
            self.settings_page.name.setText(preset["name"])
        self.accepted.connect(self._go_on)

    def server(self):
        s = self.server_page.server()
        return s["name"] if s else None

    def dedup(self):
        return holds_one_pool(self.server_page.server())

    def host(self):
        s = self.server_page.server()
        return s["host"] if s else None

    def spec(self):
        sp = self.settings_page
        vols = self.dedup_page.volumes() if self.dedup() else self.volumes_page.volumes()
        return {"name": sp.name.text().strip(), "server": self.server(),
                "volumes": vols, "high_water": sp.high.value(),
                "low_water": sp.low.value(), "max_io_streams": sp.max_io_streams(),
                "comment": sp.comment.text().strip()}

    def summary(self):
        s = self.spec()
        rows = [("Name", s["name"]), ("Storage server", f"{s['server']} (host {self.host()})"),
                ("Volumes", "\n".join(s["volumes"])
                 + ("\n(the storage path of the dedup storage server: one chunk store)"
                    if self.dedup() else "")),
                ("High-water mark", f"{s['high_water']} %"),
                ("Low-water mark", f"{s['low_water']} %"),
                ("Maximum I/O streams", "no limit" if s["max_io_streams"] is None
                 else str(s["max_io_streams"]))]
        if s["comment"]:
            rows.append(("Comment", s["comment"]))
        return rows

    def create_call(self):
        return _create_pool, (self.spec(),)

    def created_name(self):
        return self.spec()["name"]

    def result_text(self, result):
        if self.summary_page.make_unit.isChecked():
            return "Click Finish to go on to the storage unit that policies will write to."
        return ("Policies write to storage units: create one on this pool with the storage "
                "unit wizard.")

    def _go_on(self):
        if self.created_result is not None and self.summary_page.make_unit.isChecked():
            self.follow_up = StorageUnitWizard(self.bridge, self.parentWidget(),
                                               pool=self.created_name())
            emit(self.continued, self.follow_up)
            self.follow_up.show()
