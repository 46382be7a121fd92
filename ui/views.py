"""The pages on the right of the main window: one list page per kind of catalog object and
the overview (the activity monitor is ui/activity.py, the restore page ui/restore_view.py)."""

import html
from dataclasses import dataclass, field
from typing import Callable

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, \
    QMenu, QSizePolicy, QVBoxLayout

from app.jobs.rules import category
from app.timeutil import format_duration
from plugins.storage import registry
from ui import fmt
from ui.models import ROW_ROLE, Column, ObjectTableModel, list_column, \
    number_column, text_column, time_column
from ui.object_actions import ObjectActions
from ui.polled import PolledPage
from ui.resources import icon
from ui.tables import HandWidths, data_table, select_keys, selected_rows, sorting_proxy
from ui.wizards.schedule_text import spoken, summary as schedule_summary
from ui.qtcompat import emit

# ---- what each list shows --------------------------------------------------------------------


@dataclass
class ListSpec:
    name: str
    title: str
    icon: str
    description: str
    columns: list
    fetch: Callable
    empty: str
    key: str = "name"
    #: the same from a shell (shown under the console's own way), html
    shell: str = ""
    sort_column: int = 0
    sort_order: Qt.SortOrder = Qt.SortOrder.AscendingOrder
    refresh_s: float = 5.0
    delegates: dict = field(default_factory=dict)
    #: the configuration kind (app.config_edit.KINDS) whose rows can be created, edited and
    #: deleted from this list; None for read-only lists
    kind: str = None


def _cmd(text):
    return f"<code>{text}</code>"


def _host_address(row):
    return "(this machine)" if row.get("kind") == "local" else (row.get("address") or "")


def _schedules_text(policy):
    return ", ".join(f"{s['name']} ({s['type']}, {s['retention']})"
                     for s in policy.get("schedules") or [])


def _schedules_tooltip(policy):
    return "\n".join(schedule_summary(s) for s in policy.get("schedules") or []) or None


def _state_column():
    """Whether the host (a storage server's host) answers: asked in the background, at most
    half a minute old (Master.hosts_with_state)."""
    return Column("state", "State", lambda r: r.get("state") or "",
                  sort=lambda r: (r.get("reachable") is not False, r.get("state") or ""),
                  tooltip=lambda r: r.get("state"),
                  help="whether the host's agent answers; asked every half minute")


HOSTS = ListSpec(
    "hosts", "Hosts", "host",
    "Machines the master reaches: clients to back up and storage servers.",
    [text_column("name", "Name", icon=lambda r: icon("host")),
     text_column("kind", "Kind", help="local: this machine, without SSH; ssh: reached over SSH"),
     Column("address", "Address", _host_address, sort=lambda r: _host_address(r).lower()),
     number_column("port", "Port"),
     text_column("user", "User"),
     _state_column(),
     time_column("last_contact", "Last contact",
                 help="when the master last heard from the host's agent")],
    lambda m: m.hosts_with_state(),
    "No hosts yet. This machine is registered by itself when the console starts.",
    shell=_cmd("cairn host add NAME --address ADDRESS"),
    kind="host")

STORAGE_SERVERS = ListSpec(
    "storage-servers", "Storage servers", "storage-server",
    "A host plus a storage type: where backup images are written.",
    [text_column("name", "Name", icon=lambda r: icon("storage-server")),
     text_column("type", "Type"),
     text_column("host", "Host"),
     text_column("path", "Path"),
     _state_column()],
    lambda m: m.storage_servers_with_state(),
    "No storage servers yet.",
    shell=_cmd("cairn storage-server create NAME --type advanced-disk --host HOST"),
    kind="storage-server")

DISK_POOLS = ListSpec(
    "disk-pools", "Disk pools", "disk-pool",
    "Volumes (mounted directories) of a storage server, filled up to the high-water mark.",
    [text_column("name", "Name", icon=lambda r: icon("disk-pool")),
     text_column("server", "Storage server"),
     list_column("volumes", "Volumes"),
     number_column("size_bytes", "Size", format=fmt.size,
                   help="the file systems of the pool's volumes, as its storage host reports"),
     number_column("used_bytes", "Used", format=fmt.size),
     number_column("free_bytes", "Free", format=fmt.size),
     number_column("used_percent", "Use", format=lambda v: f"{v:.0f}%",
                   tooltip=lambda r: r.get("state")),
     number_column("high_water", "High water", format=lambda v: f"{v}%",
                   help="no new backups start on the pool above this fill level"),
     number_column("low_water", "Low water", format=lambda v: f"{v}%",
                   help="expiring images frees the pool down to this fill level"),
     Column("max_io_streams", "Max I/O streams",
            lambda r: "no limit" if r.get("max_io_streams") is None
            else str(r["max_io_streams"]),
            sort=lambda r: r.get("max_io_streams") or 1 << 31, numeric=True,
            help="concurrent reads and writes on the pool's volumes"),
     Column("compact_below", "Compact below",
            lambda r: "—" if not registry.can(r.get("server_type"), "reclaim")
            else "never" if not r.get("compact_below") else f"{r['compact_below']}% live",
            sort=lambda r: -1 if not registry.can(r.get("server_type"), "reclaim")
            else r.get("compact_below"),
            numeric=True,
            help="deduplicating pools: space reclaim compacts a container whose live data is "
                 "below this share of its size"),
     Column("verify_every", "Verify",
            lambda r: "by hand" if not r.get("verify_every")
            else f"every {format_duration(r['verify_every'])}",
            sort=lambda r: r.get("verify_every") or 1 << 62, numeric=True,
            help="how often the whole pool is read back and checked (disk-pool set POOL "
                 "verify_every 7d)")],
    lambda m: m.disk_pools_with_capacity(),
    "No disk pools yet: a disk pool is volumes of a storage server.",
    shell=_cmd("cairn disk-pool create NAME --server SERVER --volume PATH"),
    kind="disk-pool")

STORAGE_UNITS = ListSpec(
    "storage-units", "Storage units", "storage-unit",
    "What policies write to: a disk pool plus limits.",
    [text_column("name", "Name", icon=lambda r: icon("storage-unit")),
     text_column("pool", "Disk pool"),
     text_column("host", "Host"),
     number_column("max_concurrent_jobs", "Max concurrent jobs"),
     number_column("active_jobs", "Active jobs")],
    lambda m: m.storage_units(),
    "No storage units yet: a storage unit is what policies write to.",
    shell=_cmd("cairn storage-unit create NAME --pool POOL"),
    kind="storage-unit")

def _steps_text(lifecycle):
    """`backup to stu-a (2w) → copy to stu-b (8w)`"""
    return " → ".join(f"{'back up to' if s['kind'] == 'backup' else 'copy to'} "
                      f"{s['storage_unit']} ({s['retention']})" for s in lifecycle["steps"])


def _steps_tooltip(lifecycle):
    """`Copy 2: a copy to storage unit stu-b (disk pool ... on ...), kept 8 weeks`, in the
    lifecycle wizard's words."""
    return "\n".join(f"Copy {s['copy']}: "
                      f"{'the backup' if s['kind'] == 'backup' else 'a copy'} to storage unit "
                      f"{s['storage_unit']} (disk pool {s['pool']} on {s['host']}), kept "
                      f"{spoken(s['retention'])}" for s in lifecycle["steps"])


LIFECYCLES = ListSpec(
    "lifecycles", "Lifecycles", "lifecycle",
    "The steps a policy's images go through: a backup to one storage unit, then copies to "
    "others (another pool, another storage server), each kept for its own retention.",
    [text_column("name", "Name", icon=lambda r: icon("lifecycle")),
     Column("steps", "Steps", _steps_text, sort=lambda r: _steps_text(r).lower(),
            tooltip=_steps_tooltip),
     list_column("policies", "Policies")],
    lambda m: m.lifecycles(),
    "No lifecycles yet: a policy under a lifecycle has every backup copied to another pool.",
    shell=_cmd("cairn lifecycle create NAME --step backup:STU:2w --step duplicate:STU2:8w"),
    kind="lifecycle")

STORAGE_UNIT_GROUPS = ListSpec(
    "storage-unit-groups", "Storage unit groups", "storage-unit",
    "Several storage units a policy's backups are spread over: each job goes to one of them "
    "when it starts, passing over units that are full, whose host is down or that are busy.",
    [text_column("name", "Name", icon=lambda r: icon("storage-unit")),
     text_column("selection", "Selection"),
     Column("units", "Storage units", lambda r: " → ".join(r["unit_names"]),
            sort=lambda r: ",".join(r["unit_names"]).lower(),
            tooltip=lambda r: "\n".join(f"{u['position']}. {u['storage_unit']} (disk pool "
                                        f"{u['pool']} on {u['host']})" for u in r["units"])),
     list_column("policies", "Policies")],
    lambda m: m.storage_unit_groups(),
    "No storage unit groups yet: a policy writing to a group has its backups spread over "
    "several storage units.",
    shell=_cmd("cairn storage-unit-group create NAME --units STU,STU --selection "
               "least-loaded"),
    kind="storage-unit-group")

POLICIES = ListSpec(
    "policies", "Policies", "policy",
    "What is backed up, from which clients, when, and where to.",
    [text_column("name", "Name", icon=lambda r: icon("policy")),
     text_column("storage_unit", "Storage unit"),
     Column("lifecycle", "Lifecycle", lambda r: r.get("lifecycle") or "",
            sort=lambda r: (r.get("lifecycle") or "").lower(),
            help="the lifecycle that copies the policy's backups to other pools; its backup "
                 "step is the storage unit"),
     Column("storage_unit_group", "Storage unit group",
            lambda r: r.get("storage_unit_group") or "",
            sort=lambda r: (r.get("storage_unit_group") or "").lower(),
            help="the group whose units the policy's backups are spread over (the storage "
                 "unit is then its first unit)"),
     number_column("priority", "Priority"),
     list_column("clients", "Clients"),
     list_column("selections", "Selections"),
     Column("schedules", "Schedules", _schedules_text,
            sort=lambda r: _schedules_text(r).lower(),
            tooltip=_schedules_tooltip)],
    lambda m: m.policies(),
    "No policies yet: a policy says what is backed up, from which clients, when and where to.",
    shell=_cmd("cairn policy create NAME --storage-unit UNIT") + ", "
    + _cmd("cairn policy add-client POLICY HOST") + ", "
    + _cmd("cairn policy add-selection POLICY PATH"),
    kind="policy")

LIST_SPECS = (HOSTS, STORAGE_SERVERS, DISK_POOLS, STORAGE_UNITS, LIFECYCLES,
              STORAGE_UNIT_GROUPS, POLICIES)


# ---- widgets ---------------------------------------------------------------------------------

def add_column_chooser(header, model):
    """Right-click on a table's header: a checkable list of its columns to show or hide. The
    choice is part of the header state that each view saves in the settings."""
    header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)

    def menu(pos):
        m = QMenu(header)
        shown = [c for c in range(model.columnCount()) if not header.isSectionHidden(c)]
        for c in range(model.columnCount()):
            a = m.addAction(str(model.headerData(c, Qt.Orientation.Horizontal)))
            a.setCheckable(True)
            a.setChecked(not header.isSectionHidden(c))
            a.setEnabled(not (len(shown) == 1 and c in shown))  # keep one column
            a.toggled.connect(lambda on, c=c: header.setSectionHidden(c, not on))
        m.popup(header.mapToGlobal(pos))
        header._column_menu = m  # for tests: the last menu shown

    header.customContextMenuRequested.connect(menu)


class Placeholder(QLabel):
    """Text shown over an empty list: what the list is for and how to fill it."""

    def __init__(self, view):
        super().__init__(view.viewport())
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setContentsMargins(24, 24, 24, 24)
        pal = self.palette()
        pal.setColor(self.foregroundRole(), pal.color(pal.ColorRole.PlaceholderText))
        self.setPalette(pal)
        view.viewport().installEventFilter(self)
        self._fit()

    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Resize:
            self._fit()
        return False

    def _fit(self):
        vp = self.parentWidget()
        self.setGeometry(0, 0, vp.width(), min(vp.height(), 200))


class ObjectListView(PolledPage):
    """One kind of catalog object as a sortable table, refreshed in place."""

    #: a row was double-clicked or Enter pressed on it (the row's dict)
    opened = Signal(dict)

    def __init__(self, spec, bridge, parent=None):
        super().__init__(bridge, parent)
        self.spec = spec
        self.name = spec.name
        self.refresh_s = spec.refresh_s
        self.model = ObjectTableModel(spec.columns, key=spec.key, parent=self)
        self.proxy = sorting_proxy(self.model, self)
        self._sized = False
        self.error = None

        self.title = QLabel()
        f = self.title.font()
        f.setPointSizeF(f.pointSizeF() * 1.25)
        f.setBold(True)
        self.title.setFont(f)
        icon_label = QLabel()
        icon_label.setPixmap(icon(spec.icon).pixmap(22, 22))
        head = QHBoxLayout()
        head.addWidget(icon_label)
        head.addWidget(self.title, 1)
        self.description = QLabel(spec.description)
        self.description.setWordWrap(True)
        pal = self.description.palette()
        pal.setColor(self.description.foregroundRole(), pal.color(pal.ColorRole.PlaceholderText))
        self.description.setPalette(pal)

        self.table = data_table(self.proxy, f"{spec.name}-table")
        self.table.sortByColumn(spec.sort_column, spec.sort_order)
        hh = self.table.horizontalHeader()
        hh.setMinimumSectionSize(36)
        self.widths = HandWidths(hh)
        for col, delegate in spec.delegates.items():
            self.table.setItemDelegateForColumn(col, delegate(self.table))
        # activated: a double-click, or Enter on the current row
        self.table.activated.connect(self._open)
        add_column_chooser(self.table.horizontalHeader(), self.model)
        self.placeholder = Placeholder(self.table)
        self.placeholder.setText("Loading…")
        self._size_columns(contents=False)

        self.object_actions = None
        if spec.kind:
            self.object_actions = ObjectActions(self)
            head.addWidget(self.object_actions.toolbar)

        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 4)
        lay.addLayout(head)
        lay.addWidget(self.description)
        lay.addWidget(self.table, 1)
        self._update_title()

    # ---- refreshing (ui/polled.py) ---------------------------------------------------------
    @property
    def loaded(self):
        return self.model.loaded

    def poll_call(self):
        return (self.spec.fetch,)

    def polled(self, rows):
        self.error = None
        self.model.set_rows(rows)
        # Hosts' states and pools' capacity are asked in the background (Master.
        # hosts_with_state): read again soon while they are on their way, and fit the
        # columns again once they came, unless the user sized a column by hand.
        checking = any(r.get("state") == "checking…" for r in rows)
        came = getattr(self, "settled", True) is False and not checking
        self.settled = not checking
        self.refresh_s = 1.0 if checking else self.spec.refresh_s
        if not self._sized and rows or came and not self.widths.by_hand:
            self._size_columns()
        self._update_title()
        emit(self.refreshed)

    def poll_failed(self, err):
        self.error = str(err)
        self._update_title()
        emit(self.refreshed)

    def _size_columns(self, contents=True):
        """Columns as wide as their contents (once there are rows) or their title, whichever
        is wider. Qt's own header hint reserves room for a sort arrow on every column, which
        pushes the activity monitor's last columns off screen."""
        hh = self.table.horizontalHeader()
        fm = hh.fontMetrics()
        limit = max(160, fm.averageCharWidth() * 40)
        arrow = hh.style().pixelMetric(hh.style().PixelMetric.PM_HeaderMarkSize) + 6
        last = self.model.columnCount() - 1
        # A right-aligned number stretched across the rest of the table ends up far from
        # its title; only a text column takes the spare width.
        stretch = not self.model.columns[last].numeric
        # The stretched last column never shrinks below the size it had before stretching.
        hh.setStretchLastSection(False)
        widths = []
        for c in range(last + 1):
            title = fm.horizontalAdvance(self.model.columns[c].title) + 14
            if c == hh.sortIndicatorSection():
                title += arrow
            width = title
            if contents and not (stretch and c == last):
                # right-aligned numbers need a little air before the next column's text
                pad = 6 if self.model.columns[c].numeric else 0
                width = max(self.table.sizeHintForColumn(c) + pad, title)
            widths.append(width)
        # Long texts (a policy's selections) are cut only when the columns would not fit.
        if sum(widths) > self.table.viewport().width():
            widths = [min(w, limit) for w in widths]
        with self.widths.fitting():
            for c, width in enumerate(widths):
                hh.resizeSection(c, width)
            hh.setStretchLastSection(stretch)
        if contents:
            self._sized = True
            # A view filled while hidden sees a tiny viewport: size it again when shown.
            self._resize_on_show = not self.table.isVisible()

    def showEvent(self, event):
        super().showEvent(event)
        if getattr(self, "_resize_on_show", False):
            self._resize_on_show = False
            self._size_columns()

    def _update_title(self):
        n = self.model.rowCount()
        self.title.setText(self.spec.title + (f"  ({n})" if self.model.loaded else ""))
        if self.error and not n:
            self.placeholder.setText(f"Could not read the catalog: {html.escape(self.error)}")
        elif not self.model.loaded:
            self.placeholder.setText("Loading…")
        elif self.object_actions is not None:
            self.placeholder.setText(
                self.spec.empty + f"<br><br>Click <b>{html.escape(self.object_actions.new.text())}"
                "</b> above (Ctrl+N): a wizard checks each choice on the hosts as you go."
                + (f"<br><br><small>In a shell: {self.spec.shell}</small>"
                   if self.spec.shell else ""))
        else:
            self.placeholder.setText(self.spec.empty + (
                f"<br><br><small>In a shell: {self.spec.shell}</small>"
                if self.spec.shell else ""))
        self.placeholder.setVisible(n == 0)

    # ---- selection ------------------------------------------------------------------------
    def selected_rows(self):
        return selected_rows(self.table)

    def select_key(self, key):
        return select_keys(self.table, self.model, [key])

    def _open(self, index):
        row = self.proxy.data(index, ROW_ROLE)
        if row is not None:
            emit(self.opened, row)

    # ---- remembered layout ------------------------------------------------------------------
    def save_state(self, settings):
        settings.setValue(f"views/{self.name}/header",
                          self.table.horizontalHeader().saveState())
        settings.setValue(f"views/{self.name}/widths-by-hand", self.widths.by_hand)

    def restore_state(self, settings):
        state = settings.value(f"views/{self.name}/header")
        if state is not None and self.widths.restore(
                state, settings.value(f"views/{self.name}/widths-by-hand")) \
                and self.widths.by_hand:
            self._sized = True
            self._resize_on_show = False  # the admin's own column widths win


# ---- the overview ------------------------------------------------------------------------------

@dataclass
class Step:
    key: str
    title: str
    icon: str
    hint: str


def _gui_step(page, action, shell):
    return (f"on the <b>{page}</b> page, <b>{action}</b> (a wizard); in a shell: "
            + _cmd(shell))


STEPS = (
    Step("hosts", "Hosts", "host",
         _gui_step("Hosts", "New host…", "cairn host add NAME --address ADDRESS")),
    Step("storage_servers", "Storage servers", "storage-server",
         _gui_step("Storage servers", "New storage server…",
                   "cairn storage-server create NAME --type advanced-disk --host HOST")),
    Step("disk_pools", "Disk pools", "disk-pool",
         _gui_step("Disk pools", "New disk pool…",
                   "cairn disk-pool create NAME --server SERVER --volume PATH")),
    Step("storage_units", "Storage units", "storage-unit",
         _gui_step("Storage units", "New storage unit…",
                   "cairn storage-unit create NAME --pool POOL")),
    Step("policies", "Policies", "policy",
         _gui_step("Policies", "New policy…",
                   "cairn policy create NAME --storage-unit UNIT")),
    Step("images", "Backup images", "restore",
         "on the <b>Policies</b> page, <b>Back up now</b> (Ctrl+B); in a shell: "
         + _cmd("cairn backup POLICY")),
)


def overview_counts(m):
    jobs = m.job_list()
    return {
        "catalog": (f"{m.where}:{m.hello.get('home')}" if getattr(m, "remote", False)
                    else m.home.catalog),
        "hosts": len(m.host_list()),
        "storage_servers": len(m.storage_servers()),
        "disk_pools": len(m.disk_pools()),
        "storage_units": len(m.storage_units()),
        "policies": len(m.policies()),
        "images": len(m.images()),
        "running": sum(j["state"] == "active" for j in jobs),
        "queued": sum(j["state"] == "queued" for j in jobs),
        "failed": sum(category(j) == "failed" for j in jobs),
    }


class CatalogCountsPage(PolledPage):
    """A page that shows the catalog's counts (overview_counts), read again every refresh_s
    seconds; subclasses show them in show_counts() and a failure in show_error()."""

    refresh_s = 5.0

    def __init__(self, name, bridge, parent=None):
        super().__init__(bridge, parent)
        self.name = name
        self.loaded = False
        self.counts = None

    def poll_call(self):
        return (overview_counts,)

    def polled(self, counts):
        self.loaded = True
        self.counts = counts
        self.show_counts(counts)
        emit(self.refreshed)

    def poll_failed(self, err):
        self.show_error(f"Could not read the catalog: {err}")
        emit(self.refreshed)

    def show_counts(self, counts):
        raise NotImplementedError

    def show_error(self, text):
        raise NotImplementedError

    def save_state(self, settings):
        pass

    def restore_state(self, settings):
        pass


class OverviewView(CatalogCountsPage):
    """What the catalog holds and, while setting up, which step comes next."""

    def __init__(self, name, title, icon_name, steps, bridge, parent=None):
        super().__init__(name, bridge, parent)
        self.steps = steps

        head = QHBoxLayout()
        pic = QLabel()
        pic.setPixmap(icon(icon_name).pixmap(22, 22))
        self.title = QLabel(title)
        f = self.title.font()
        f.setPointSizeF(f.pointSizeF() * 1.25)
        f.setBold(True)
        self.title.setFont(f)
        head.addWidget(pic)
        head.addWidget(self.title, 1)
        self.subtitle = QLabel("Loading…")
        self.subtitle.setTextFormat(Qt.TextFormat.PlainText)
        self.subtitle.setWordWrap(True)
        self.subtitle.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(10)
        self._counts, self._hints = {}, {}
        for r, s in enumerate(steps):
            pic = QLabel()
            pic.setPixmap(icon(s.icon).pixmap(16, 16))
            name_label = QLabel(s.title)
            count = QLabel("…")
            count.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            count.setMinimumWidth(count.fontMetrics().horizontalAdvance("00000"))
            hint = QLabel()
            hint.setTextFormat(Qt.TextFormat.RichText)
            hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(pic, r, 0)
            grid.addWidget(name_label, r, 1)
            grid.addWidget(count, r, 2)
            grid.addWidget(hint, r, 3)
            self._counts[s.key], self._hints[s.key] = count, hint
        grid.setColumnStretch(3, 1)
        box = QFrame()
        box.setFrameShape(QFrame.Shape.StyledPanel)
        box.setLayout(grid)
        box.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

        self.jobs = QLabel()
        self.jobs.setTextFormat(Qt.TextFormat.PlainText)
        self.jobs.setWordWrap(True)

        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 4)
        lay.addLayout(head)
        lay.addWidget(self.subtitle)
        lay.addSpacing(6)
        lay.addWidget(box)
        lay.addSpacing(6)
        lay.addWidget(self.jobs)
        lay.addStretch(1)

    def show_counts(self, c):
        self.subtitle.setText(f"Catalog: {c['catalog']}")
        next_step = next((s.key for s in self.steps if not c[s.key]), None)
        for s in self.steps:
            self._counts[s.key].setText(str(c[s.key]))
            if s.key == next_step:
                self._hints[s.key].setText("<b>Next step:</b> " + s.hint)
            elif not c[s.key]:
                self._hints[s.key].setText(s.hint)
            else:
                self._hints[s.key].setText("")
        self.jobs.setText(f"Jobs: {c['running']} running, {c['queued']} queued, "
                          f"{c['failed']} failed (see the activity monitor).")

    def show_error(self, text):
        self.subtitle.setText(text)

