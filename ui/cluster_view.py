"""The Storage Scale page: the cluster a registered host belongs to, read on that host by its
agent (the probe runs the mm commands there): the cluster's nodes and their states, its file
systems with their capacity, which node mounts which file system, and the filesets and
snapshots of the file system selected.

Reading a cluster takes seconds, so the page reads it when first shown, when another host is
chosen and on Refresh, never on the main window's timer. Data shaping is in app.scale_view."""

import functools
import html
import re

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QAbstractItemView, QApplication, QComboBox, QHBoxLayout, \
    QHeaderView, QLabel, QProgressBar, QPushButton, QSplitter, QStackedWidget, QStyle, \
    QStyledItemDelegate, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from app import scale_view as sv
from ui import fmt
from ui.models import ROW_ROLE, Column, ObjectTableModel, number_column, text_column
from ui.polled import PolledPage
from ui.qtcompat import emit
from ui.resources import icon
from ui.tables import Selection, data_table, sorting_proxy

NAME = "clusters"

#: the colour names of app.scale_view to colours readable on light and dark palettes
COLOURS = {"green": "#2e9d4f", "amber": "#c98a00", "red": "#d0453a", "grey": "#8a8d91"}
LEVEL_COLOURS = {"high": COLOURS["amber"], "full": COLOURS["red"]}


def colour(name):
    return QColor(COLOURS.get(name, COLOURS["grey"]))


@functools.lru_cache(maxsize=None)
def dot_icon(name):
    """A filled circle in one of COLOURS: a node's state at a glance."""
    pm = QPixmap(16, 16)
    pm.fill(Qt.GlobalColor.transparent)
    p = QPainter(pm)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(colour(name))
    p.drawEllipse(3, 3, 10, 10)
    p.end()
    return QIcon(pm)


# ---- master calls (on the bridge's threads) ------------------------------------------------

def host_names(m):
    return [h["name"] for h in m.host_list()]


def read_cluster(m, host):
    """What the page shows of one host: its probe's Storage Scale part and host name, and
    the disk pools and hosts (to tell which storage servers write to which file system)."""
    info = m.probe_host(host)
    return {"host": host, "hostname": info.get("hostname"),
            "storage_scale": info.get("storage_scale"), "pools": m.disk_pools(),
            "hosts": m.host_list()}


# ---- tables ------------------------------------------------------------------------------------

class ColouredModel(ObjectTableModel):
    """ObjectTableModel with a text colour per column: {column key: row -> colour name}."""

    def __init__(self, columns, colours, key="name", parent=None):
        super().__init__(columns, key=key, parent=parent)
        self._colours = {i: colours[c.key] for i, c in enumerate(columns) if c.key in colours}
        self.bold = None  # row -> bool

    def cell(self, row, column, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.ForegroundRole and column in self._colours:
            name = self._colours[column](row)
            return QBrush(colour(name)) if name else None
        if role == Qt.ItemDataRole.FontRole and self.bold is not None and self.bold(row):
            f = QFont()
            f.setBold(True)
            return f
        return super().cell(row, column, role)


class CapacityDelegate(QStyledItemDelegate):
    """A file system's used space as a painted bar, the fill level and free space beside it."""

    BAR = 72

    def _text(self, row):
        cap = row.get("_capacity") or {}
        if cap.get("fraction") is None:
            return "unknown"
        return f"{cap['fraction'] * 100:.0f}% · {fmt.size(cap['free'])} free"

    def sizeHint(self, option, index):
        row = index.data(ROW_ROLE) or {}
        width = self.BAR + 14 + option.fontMetrics.horizontalAdvance(self._text(row))
        return QSize(width, super().sizeHint(option, index).height())

    def paint(self, painter, option, index):
        row = index.data(ROW_ROLE)
        if row is None:
            super().paint(painter, option, index)
            return
        self.initStyleOption(option, index)
        option.text = ""
        style = option.widget.style() if option.widget else QApplication.style()
        # The item's own background first, so a selected row stays one band.
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, option, painter, option.widget)
        cap = row.get("_capacity") or {}
        r = option.rect
        bar = QRect(r.left() + 4, r.center().y() - 5, self.BAR, 10)
        pal = option.palette
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(pal.color(QPalette.ColorRole.Mid))
        painter.setBrush(pal.color(QPalette.ColorRole.Base))
        painter.drawRoundedRect(bar, 2, 2)
        if cap.get("fraction") is not None:
            fill = QRect(bar.left(), bar.top(), max(1, round(bar.width() * cap["fraction"])),
                         bar.height())
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(LEVEL_COLOURS.get(cap["level"]))
                             if cap["level"] in LEVEL_COLOURS
                             else pal.color(QPalette.ColorRole.Highlight))
            painter.drawRoundedRect(fill, 2, 2)
        selected = option.state & QStyle.StateFlag.State_Selected
        painter.setPen(pal.color(QPalette.ColorRole.HighlightedText if selected
                                 else QPalette.ColorRole.Text))
        text_rect = QRect(bar.right() + 8, r.top(), r.right() - bar.right() - 10, r.height())
        painter.drawText(text_rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         option.fontMetrics.elidedText(self._text(row),
                                                       Qt.TextElideMode.ElideRight,
                                                       text_rect.width()))
        painter.restore()


def _inodes_text(row):
    used, most = sv.inodes(row)
    if used is None:
        return ""
    return f"{used:,} of {most:,}" if most else f"{used:,}"


def _capacity_tip(row):
    cap = row["_capacity"]
    if cap["fraction"] is None:
        return "The capacity could not be read (mmdf)."
    return (f"{fmt.size(cap['used'])} used of {fmt.size(cap['size'])} "
            f"({cap['fraction'] * 100:.1f}%), {fmt.size(cap['free'])} free")


NODE_COLUMNS = [
    Column("name", "Node", lambda r: sv.short(r.get("name")) + (
        "  (this host)" if r.get("_local") else ""),
        sort=lambda r: (r.get("number") or 0),
        tooltip=lambda r: f"daemon name {r.get('name')}\nadmin name {r.get('admin_name')}"
                          f"\nnode number {r.get('number')}",
        icon=lambda r: dot_icon(sv.state_colour(r.get("state")))),
    text_column("state", "State", help="mmgetstate: active, arbitrating, down; unknown when "
                                       "the node did not answer"),
    Column("designation", "Designation", sv.designation_text,
           sort=sv.designation_text, help="quorum and manager nodes; others are clients"),
    Column("roles", "Roles", sv.roles_text, sort=sv.roles_text,
           tooltip=lambda r: sv.roles_text(r) or None),
    text_column("ip", "IP address"),
]

FS_COLUMNS = [
    Column("device", "File system", lambda r: r.get("device") or "",
           sort=lambda r: r.get("device") or "",
           icon=lambda r: icon("wizard-problem") if r["_flags"] else
           icon("wizard-parallel-fs"),
           tooltip=lambda r: "\n".join(r["_flags"]) or None),
    text_column("mount_point", "Mount point"),
    number_column("block_size", "Block size", format=fmt.size),
    number_column("size", "Size", format=fmt.size),
    Column("capacity", "Capacity", lambda r: "", sort=lambda r: r["_capacity"]["fraction"] or 0,
           tooltip=_capacity_tip, help="used space, painted; the fill level and free space"),
    Column("inodes", "Inodes used", _inodes_text, sort=lambda r: sv.inodes(r)[0] or 0,
           numeric=True, help="used of the maximum number of inodes"),
    Column("filesets", "Filesets", lambda r: str(len(r.get("filesets") or [])),
           sort=lambda r: len(r.get("filesets") or []), numeric=True),
    Column("snapshots", "Snapshots", lambda r: str(len(r.get("snapshots") or [])),
           sort=lambda r: len(r.get("snapshots") or []), numeric=True),
    Column("notes", "Notes", lambda r: "; ".join(r["_notes"]),
           sort=lambda r: "; ".join(r["_notes"]),
           tooltip=lambda r: "\n".join(r["_flags"]) or None,
           help="what to look at: not mounted on this host's node, filling up, unreadable"),
]
CAPACITY_COLUMN = [c.key for c in FS_COLUMNS].index("capacity")

FILESET_COLUMNS = [
    text_column("name", "Fileset"),
    text_column("status", "Status"),
    Column("path", "Junction path", lambda r: r.get("path") or "(unlinked)",
           sort=lambda r: r.get("path") or ""),
    Column("independent", "Inode space", lambda r: "independent" if r.get("independent")
           else "dependent", sort=lambda r: bool(r.get("independent"))),
    text_column("comment", "Comment"),
]

SNAPSHOT_COLUMNS = [
    text_column("name", "Snapshot"),
    Column("fileset", "Fileset", lambda r: r.get("fileset") or "(global)",
           sort=lambda r: r.get("fileset") or ""),
    text_column("status", "Status"),
    text_column("created", "Created"),
]


def _table(model, name, selection=Selection.SingleSelection):
    proxy = sorting_proxy(model, model)
    t = data_table(proxy, name, selection=selection)
    t.horizontalHeader().setStretchLastSection(True)
    t.horizontalHeader().setMinimumSectionSize(36)
    return proxy, t


def _heading(text):
    label = QLabel(text)
    f = label.font()
    f.setBold(True)
    label.setFont(f)
    return label


def _section(heading, widget):
    box = QWidget()
    lay = QVBoxLayout(box)
    lay.setContentsMargins(0, 4, 0, 0)
    lay.setSpacing(3)
    lay.addWidget(heading)
    lay.addWidget(widget, 1)
    return box


def _fit(table, model):
    """Columns as wide as their contents or title; the last one takes what is left (its
    long texts are cut, with the whole in their tooltips)."""
    hh = table.horizontalHeader()
    fm = hh.fontMetrics()
    arrow = hh.style().pixelMetric(hh.style().PixelMetric.PM_HeaderMarkSize) + 6
    for c in range(model.columnCount() - 1):
        title = fm.horizontalAdvance(str(model.headerData(c, Qt.Orientation.Horizontal))) + 14
        if c == hh.sortIndicatorSection():
            title += arrow
        hh.resizeSection(c, max(table.sizeHintForColumn(c) + 8, title))


# ---- the page ------------------------------------------------------------------------------

class ClusterView(PolledPage):
    """The Storage Scale page (see ui/pages.py for what a page provides). `refreshed` comes
    after each probe's answer (or failure) is shown.

    A refresh lists the hosts again; it reads the cluster only when the chosen host's was not
    read yet (the Refresh button reads it again). A probe runs the mm commands on the host
    for seconds: only on demand, never on the main window's timer (refresh_s is None)."""

    def __init__(self, bridge, parent=None):
        super().__init__(bridge, parent)
        self.name = NAME
        self.result = None        # read_cluster()'s answer for the host shown
        self.error = None         # a failed probe (CallError)
        self.local = None         # the shown host's node name in the cluster
        self._probing = None      # the host being read now
        self._wanted_host = None  # remembered choice, applied once the hosts are listed
        self._hosts_listed = False
        self._shown_host = None   # the host whose answer (cluster or error) is shown
        self._panes_sized = False  # by the remembered layout, or once to the first cluster
        self._size_on_show = False

        head = self._make_head()
        status = self._make_status()
        self._make_cluster()

        self.stack = QStackedWidget()
        self.stack.addWidget(self.message)
        self.stack.addWidget(self.splitter)

        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 4)
        lay.addLayout(head)
        lay.addWidget(self.description)
        lay.addLayout(status)
        lay.addWidget(self.stack, 1)
        self._show_message("Reading the cluster…", None)
        self._set_busy(False)

    def _make_head(self):
        """Title, host, refresh; the description under them."""
        pic = QLabel()
        pic.setPixmap(icon("cluster").pixmap(22, 22))
        title = QLabel("Storage Scale")
        f = title.font()
        f.setPointSizeF(f.pointSizeF() * 1.25)
        f.setBold(True)
        title.setFont(f)
        self.host_box = QComboBox()
        self.host_box.setObjectName("cluster-host")
        self.host_box.setMinimumContentsLength(16)
        self.host_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.host_box.setToolTip("The host whose agent reads the cluster: a node of it")
        self.host_box.currentIndexChanged.connect(self._host_changed)
        self.refresh_button = QPushButton(icon("action-refresh"), "Refresh")
        self.refresh_button.setToolTip("Read the cluster again on the host (takes a few "
                                       "seconds)")
        self.refresh_button.clicked.connect(self.probe)
        head = QHBoxLayout()
        head.addWidget(pic)
        head.addWidget(title, 1)
        host_label = QLabel("&Host:")
        host_label.setBuddy(self.host_box)
        head.addWidget(host_label)
        head.addWidget(self.host_box)
        head.addWidget(self.refresh_button)

        self.description = QLabel(
            "The IBM Storage Scale (GPFS) cluster a host belongs to, read on that host: its "
            "nodes, its file systems, and which node mounts which file system.")
        self.description.setWordWrap(True)
        pal = self.description.palette()
        pal.setColor(self.description.foregroundRole(),
                     pal.color(QPalette.ColorRole.PlaceholderText))
        self.description.setPalette(pal)
        return head

    def _make_status(self):
        """What is going on: reading, or the cluster's identity; and the message shown
        instead of the cluster (reading, errors)."""
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setTextVisible(False)
        self.busy_bar.setFixedSize(90, 14)
        self.summary = QLabel()
        self.summary.setObjectName("cluster-summary")
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        status = QHBoxLayout()
        status.addWidget(self.busy_bar, 0, Qt.AlignmentFlag.AlignVCenter)
        status.addWidget(self.summary, 1)

        # -- the message shown instead of the cluster (reading, errors)
        self.message = QLabel()
        self.message.setObjectName("cluster-message")
        self.message.setTextFormat(Qt.TextFormat.RichText)
        self.message.setWordWrap(True)
        self.message.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.setContentsMargins(4, 16, 24, 16)
        return status

    def _make_cluster(self):
        """The cluster: nodes and mount map, file systems, filesets and snapshots, in
        splitters."""
        self.nodes = ColouredModel(NODE_COLUMNS, {"state": lambda r: sv.state_colour(
            r.get("state"))}, parent=self)
        self.nodes.bold = lambda r: r.get("_local")
        self.nodes_proxy, self.nodes_table = _table(self.nodes, "cluster-nodes")
        self.nodes_table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.nodes_heading = _heading("Nodes")

        self.mounts = QTableWidget()
        self.mounts.setObjectName("cluster-mount-map")
        self.mounts.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.mounts.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.mounts.setWordWrap(False)
        self.mounts.verticalHeader().setDefaultSectionSize(
            self.mounts.fontMetrics().height() + 10)
        self.mounts.horizontalHeader().setHighlightSections(False)
        self.mounts.verticalHeader().setHighlightSections(False)
        self.mounts_heading = _heading("Mount map")
        self.mounts_heading.setToolTip("Which node mounts which file system (mmlsmount): "
                                       "RW read-write, RO read-only; missing: not "
                                       "mounted on the node of a storage server whose "
                                       "disk pool is on it")

        self.filesystems = ColouredModel(
            FS_COLUMNS, {"notes": lambda r: "amber" if r["_notes"] else None}, key="device",
            parent=self)
        self.fs_proxy, self.fs_table = _table(self.filesystems, "cluster-filesystems")
        self.fs_table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.fs_table.setItemDelegateForColumn(CAPACITY_COLUMN,
                                               CapacityDelegate(self.fs_table))
        self.fs_heading = _heading("File systems")
        self.fs_table.selectionModel().selectionChanged.connect(self._fs_selected)

        self.filesets = ObjectTableModel(FILESET_COLUMNS, key="_key", parent=self)
        self.filesets_proxy, self.filesets_table = _table(self.filesets, "cluster-filesets")
        self.filesets_heading = _heading("Filesets")
        self.snapshots = ObjectTableModel(SNAPSHOT_COLUMNS, key="_key", parent=self)
        self.snapshots_proxy, self.snapshots_table = _table(self.snapshots,
                                                            "cluster-snapshots")
        self.snapshots_heading = _heading("Snapshots")

        self.top = QSplitter(Qt.Orientation.Horizontal)
        self.top.addWidget(_section(self.nodes_heading, self.nodes_table))
        self.top.addWidget(_section(self.mounts_heading, self.mounts))
        self.top.setStretchFactor(0, 3)
        self.top.setStretchFactor(1, 2)
        self.details = QSplitter(Qt.Orientation.Horizontal)
        self.details.addWidget(_section(self.filesets_heading, self.filesets_table))
        self.details.addWidget(_section(self.snapshots_heading, self.snapshots_table))
        self.details.setStretchFactor(0, 3)
        self.details.setStretchFactor(1, 2)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.top)
        self.splitter.addWidget(_section(self.fs_heading, self.fs_table))
        self.splitter.addWidget(self.details)
        for s in (self.top, self.details, self.splitter):
            s.setChildrenCollapsible(False)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setStretchFactor(2, 2)

    # ---- the page protocol ------------------------------------------------------------------
    @property
    def loaded(self):
        return self.result is not None or self.error is not None or self.no_hosts

    @property
    def settled(self):
        return self.loaded and not self._probing and not self.polling

    @property
    def no_hosts(self):
        return self._hosts_listed and self.host_box.count() == 0

    def poll_call(self):
        return (host_names,)

    def host(self):
        return self.host_box.currentText() or None

    def select_host(self, name):
        """Chooses a host (which reads its cluster); before the hosts are listed, the choice
        waits for them."""
        i = self.host_box.findText(name)
        if i >= 0:
            self.host_box.setCurrentIndex(i)
        else:
            self._wanted_host = name
        return i >= 0

    def polled(self, names):
        self._hosts_listed = True
        current = self._wanted_host or self.host()
        self.host_box.blockSignals(True)
        self.host_box.clear()
        for n in names:
            self.host_box.addItem(icon("host"), n)
        i = self.host_box.findText(current or "")
        if i >= 0:
            self._wanted_host = None
        self.host_box.setCurrentIndex(max(i, 0) if names else -1)
        self.host_box.blockSignals(False)
        if not names:
            self.result = self.error = self._shown_host = None
            self.summary.setText("")
            self._show_message("No hosts yet",
                               "Register a node of the cluster as a host (Hosts page, "
                               "<b>New host…</b>), then choose it here.")
            emit(self.refreshed)
        elif self._shown_host != self.host() and not self._probing:
            self.probe()

    def poll_failed(self, err):
        self._hosts_listed = True
        self.error = err
        self._show_message("Could not read the catalog", html.escape(str(err)))
        emit(self.refreshed)

    def _host_changed(self, *_):
        if self.host():
            self.probe()

    def probe(self):
        """Reads the cluster on the chosen host, off the UI thread."""
        host = self.host()
        if host is None:
            return False
        self.summary.setText(f"Reading the cluster on host {html.escape(host)}…")
        if self._shown_host != host:
            self._show_message("Reading the cluster…",
                               f"The agent on host {html.escape(host)} runs the Storage Scale "
                               "commands (mmlscluster, mmgetstate, mmlsmount, mmdf, …); "
                               "this can take a few seconds.")
        if self._probing is not None:
            # One probe at a time: its answer, if for another host, starts this one.
            return False
        self._probing = host
        self._set_busy(True)
        self.bridge.call(read_cluster, host, done=self._arrived, failed=self._failed,
                         context=self)
        return True

    def _arrived(self, result):
        self._probing = None
        if result["host"] != self.host():   # another host was chosen meanwhile
            self.probe()
            return
        self._set_busy(False)
        self.result, self.error = result, None
        self._shown_host = result["host"]
        self.show_cluster(result)
        emit(self.refreshed)

    def _failed(self, err):
        host = self._probing
        self._probing = None
        if host != self.host():
            self.probe()
            return
        self._set_busy(False)
        self.result, self.error = None, err
        self._shown_host = host
        self.summary.setText("")
        self._show_message(f"Host {host} could not be probed",
                           html.escape(getattr(err, "message", str(err))),
                           getattr(err, "hint", None))
        emit(self.refreshed)

    def _set_busy(self, busy):
        self.busy_bar.setVisible(busy)
        self.refresh_button.setEnabled(not busy)

    # ---- showing ----------------------------------------------------------------------------
    def _show_message(self, title, text, hint=None):
        """A title with what happened and what to do, in place of the cluster."""
        rich = f"<p style='font-size:large'><b>{html.escape(title)}</b></p>"
        if text:
            rich += f"<p>{text}</p>"
        if hint:
            # Commands and sudo rules quoted `like this` are shown as code, to copy.
            hint = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(hint))
            rich += f"<p><b>What to do:</b> {hint}</p>"
        self.message.setText(rich)
        self.stack.setCurrentWidget(self.message)

    def message_text(self):
        """The message shown instead of the cluster, as plain text (for tests)."""
        doc = self.message.text()
        return html.unescape(re.sub(r"<[^>]+>", " ", doc))

    def show_cluster(self, result):
        host, scale = result["host"], result["storage_scale"]
        p = sv.problem(scale, host)
        if p is not None:
            self.local = None
            self.summary.setText("")
            self._show_message(p["title"], html.escape(p["message"]), p["hint"])
            for m in (self.nodes, self.filesystems, self.filesets, self.snapshots):
                m.set_rows([])
            self.mounts.clear()
            return
        self.local = sv.local_node(scale, result.get("hostname"))
        seen = (f"seen from node <b>{html.escape(sv.short(self.local))}</b> (host "
                f"{html.escape(host)})" if self.local else
                f"seen from host {html.escape(host)}, which is not matched to a node")
        parts = [f"Cluster <b>{html.escape(scale.get('cluster_name') or '?')}</b>",
                 f"ID {html.escape(str(scale.get('cluster_id') or '?'))}",
                 f"Storage Scale {html.escape((scale.get('version') or '?').strip())}",
                 seen]
        self.summary.setText(" · ".join(parts))
        self.stack.setCurrentWidget(self.splitter)

        nodes = [dict(n, _local=bool(self.local) and n.get("name") == self.local)
                 for n in scale.get("nodes") or []]
        self.nodes.set_rows(nodes)
        self.nodes_heading.setText(f"Nodes — {sv.node_counts(nodes)}")
        found = sv.members(scale, result.get("pools"), result.get("hosts"),
                           probed=(host, result.get("hostname")))
        fss = [dict(fs, _capacity=sv.capacity(fs), _flags=sv.flags(fs, self.local,
                                                                  found=found),
                    _notes=sv.flags(fs, self.local, fill=False, found=found))
               for fs in scale.get("filesystems") or []]
        self.filesystems.set_rows(fss)
        self.fs_heading.setText(f"File systems ({len(fss)})")
        self._show_mount_map(sv.mount_map(scale, self.local, found))
        for table, model in ((self.nodes_table, self.nodes), (self.fs_table, self.filesystems)):
            _fit(table, model)
        if not self._panes_sized:
            if self.isVisible():
                self._size_panes()
                self._panes_sized = True
            else:
                self._size_on_show = True
        if fss and not self.fs_table.selectionModel().hasSelection():
            self.fs_table.selectRow(0)
        else:
            self._fs_selected()

    def _show_mount_map(self, mm):
        t = self.mounts
        t.clear()
        nodes, rows = mm["nodes"], mm["rows"]
        t.setColumnCount(len(nodes))
        t.setRowCount(len(rows))
        tint = QColor(t.palette().color(QPalette.ColorRole.Highlight))
        tint.setAlpha(40)
        mounted = QColor(COLOURS["green"])
        mounted.setAlpha(60)
        missing = QColor(COLOURS["amber"])
        missing.setAlpha(110)
        for c, n in enumerate(nodes):
            item = QTableWidgetItem(n["label"])
            tip = f"node {n['name']}, {n['state']}"
            if n["local"]:
                item.setIcon(icon("host"))
                f = item.font()
                f.setBold(True)
                item.setFont(f)
                tip += " — the node of the host this page reads"
            elif n["remote"]:
                tip = f"node {n['name']} of another cluster"
            else:
                item.setIcon(dot_icon(sv.state_colour(n["state"])))
            item.setToolTip(tip)
            t.setHorizontalHeaderItem(c, item)
        for r, row in enumerate(rows):
            # The row's flags on its header: with many nodes the end of a row is off screen.
            head = QTableWidgetItem(row["device"])
            tip = [row.get("mount_point") or ""] + row["flags"] + [row.get("unmatched")]
            head.setToolTip("\n".join(t_ for t_ in tip if t_))
            if row["flags"]:
                head.setIcon(icon("wizard-problem"))
            t.setVerticalHeaderItem(r, head)
            for c, mode in enumerate(row["cells"]):
                writers = row.get("members", {}).get(c) or []
                item = QTableWidgetItem(mode or ("missing" if writers else ""))
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                where = nodes[c]["label"]
                if mode:
                    item.setBackground(mounted)
                    tip = (f"{row['device']} is mounted on {where}"
                           + (" read-only" if mode == "RO" else
                              " read-write" if mode == "RW" else ""))
                elif writers:
                    # A storage server writes here: backups would miss the file system.
                    item.setBackground(missing)
                    item.setIcon(icon("wizard-problem"))
                    tip = (f"{row['device']} is not mounted on {where}, although a disk pool "
                           f"there is on it: mount it (mmmount {row['device']} -N "
                           f"{where.split(' ')[0]}) before backups run")
                else:
                    tip = f"{row['device']} is not mounted on {where}"
                    if nodes[c]["local"]:
                        item.setBackground(tint)
                if writers:
                    tip += "\nwritten by " + "\n".join(writers)
                item.setToolTip(tip)
                t.setItem(r, c, item)
        t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)

    def _size_panes(self):
        """Each pane as tall as its rows (up to a share of the page), the file system's
        filesets and snapshots the rest: no band of empty rows under a short list."""
        total = self.splitter.height()
        if total <= 0:
            return

        def wanted(table, heading, rows):
            t = table
            return (heading.sizeHint().height() + 8 + t.horizontalHeader().height()
                    + rows * t.verticalHeader().defaultSectionSize()
                    + 2 * t.frameWidth() + t.horizontalScrollBar().sizeHint().height())

        top = max(wanted(self.nodes_table, self.nodes_heading, self.nodes.rowCount()),
                  wanted(self.mounts, self.mounts_heading, self.mounts.rowCount()))
        fs = wanted(self.fs_table, self.fs_heading, max(1, self.filesystems.rowCount()))
        top, fs = min(top, int(total * 0.45)), min(fs, int(total * 0.3))
        self.splitter.setSizes([top, fs, max(total - top - fs, 120)])

    def selected_filesystem(self):
        rows = self.fs_table.selectionModel().selectedRows()
        return self.fs_proxy.data(rows[0], ROW_ROLE) if rows else None

    def select_filesystem(self, device):
        r = self.filesystems.row_of(device)
        if r is None:
            return False
        self.fs_table.selectRow(self.fs_proxy.mapFromSource(self.filesystems.index(r, 0)).row())
        return True

    def _fs_selected(self, *_):
        fs = self.selected_filesystem()
        sets = (fs or {}).get("filesets") or []
        snaps = (fs or {}).get("snapshots") or []
        self.filesets.set_rows([dict(f, _key=i) for i, f in enumerate(sets)])
        self.snapshots.set_rows([dict(s, _key=i) for i, s in enumerate(snaps)])
        dev = fs.get("device") if fs else None
        self.filesets_heading.setText(f"Filesets of {dev} ({len(sets)})" if dev
                                      else "Filesets")
        self.snapshots_heading.setText(f"Snapshots of {dev} ({len(snaps)})" if dev
                                       else "Snapshots")
        for table, model in ((self.filesets_table, self.filesets),
                             (self.snapshots_table, self.snapshots)):
            _fit(table, model)

    def showEvent(self, event):
        super().showEvent(event)
        if self._size_on_show and not self._panes_sized:
            self._size_on_show = False
            self._size_panes()
            self._panes_sized = True

    # ---- remembered layout ------------------------------------------------------------------
    def save_state(self, settings):
        if self.host():
            settings.setValue(f"views/{NAME}/host", self.host())
        for key, s in (("splitter", self.splitter), ("top", self.top),
                       ("details", self.details)):
            settings.setValue(f"views/{NAME}/{key}", s.saveState())

    def restore_state(self, settings):
        host = settings.value(f"views/{NAME}/host")
        if host:
            self.select_host(str(host))
        for key, s in (("splitter", self.splitter), ("top", self.top),
                       ("details", self.details)):
            state = settings.value(f"views/{NAME}/{key}")
            if state is not None and s.restoreState(state) and s is self.splitter:
                self._panes_sized = True
