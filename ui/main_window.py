"""The console's main window: the navigation tree of the storage model on the left, the page
of the selected node on the right, the master's state in the status bar."""

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QLabel, QMainWindow, QMessageBox, QSplitter, QStackedWidget, \
    QTreeWidget, QTreeWidgetItem

from app import __version__
from ui import roles, wizards
from ui.pages import make_pages
from ui.alerts_dialog import AlertsDialog
from ui.catalog_backup_dialog import CatalogBackupDialog
from ui.job_dialog import JobDetailsDialog
from ui.qtcompat import emit
from ui.remote import describe, open_in_new_console
from ui.resources import icon
from ui.settings import settings

# (view name, label, icon, children); the names are also the --view choices.
NAVIGATION = (
    ("overview", "Master", "master", (
        ("dashboard", "Dashboard", "report", ()),
        ("getting-started", "Getting started", "getting-started", ()),
        ("hosts", "Hosts", "host", ()),
        ("storage", "Storage", "storage", (
            ("storage-servers", "Storage servers", "storage-server", ()),
            ("disk-pools", "Disk pools", "disk-pool", ()),
            ("storage-units", "Storage units", "storage-unit", ()),
            ("lifecycles", "Lifecycles", "lifecycle", ()),
            ("storage-unit-groups", "Storage unit groups", "storage-unit", ()),
            ("clusters", "Storage Scale", "cluster", ()),
        )),
        ("policies", "Policies", "policy", ()),
        ("activity", "Activity monitor", "activity", ()),
        ("restore", "Backup & restore", "restore", ()),
        ("reports", "Reports", "report", ()),
        ("audit", "Audit log", "versions", ()),
    )),
)


def _names(nodes):
    for name, _, _, children in nodes:
        yield name
        yield from _names(children)


VIEW_NAMES = tuple(_names(NAVIGATION))

STATUS_REFRESH_MS = 1000
#: how often the status bar asks every host's agent whether it answers
REACHABILITY_S = 30

NEW_OBJECTS = (("host", "&Host…"), ("storage-server", "&Storage server…"),
               ("disk-pool", "&Disk pool…"), ("storage-unit", "Storage &unit…"),
               ("lifecycle", "&Lifecycle…"), ("storage-unit-group", "Storage unit &group…"),
               ("policy", "&Policy…"))
VIEW_ROLE = Qt.ItemDataRole.UserRole + 1


def status_summary(m):
    # one round trip to a remote master (Master.batch, RemoteMaster.batch)
    active, queued, hosts, backup, dups = m.batch([
        ("job_list", (), {"state": "active"}), ("job_list", (), {"state": "queued"}),
        ("host_list",), ("catalog_backup_state",), ("duplication_problems",)])
    remote = getattr(m, "remote", False)
    return {
        "catalog": m.hello.get("home") if remote else m.home.catalog,
        "master": describe(m),
        "hosts": len(hosts),
        "running": len(active),
        "queued": len(queued),
        # jobs this console's dispatcher runs: closing the console stops them (a remote
        # master's run on its machine)
        "mine": 0 if remote else sum(j.get("runner") == m.dispatcher.id for j in active),
        "catalog_backup": backup,
        # the copies lifecycles want that keep failing
        "duplications": dups,
    }


def ago(seconds):
    """An age in the largest whole unit: 5 min ago, 3 h ago, 2 days ago, just now."""
    seconds = max(0, int(seconds))
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'s' if unit == 'day' and n != 1 else ''} ago"
    return "just now"


def catalog_backup_text(state):
    """The status bar's words on the catalog backup: None while there is nothing to protect
    and none was ever made; else (text, warning)."""
    keys = state.get("keys_not_escrowed") or []
    if state["last"] is None and not state["images"] and not keys:
        return None
    text = "Catalog backup: " + ("none" if state["last"] is None else ago(state["age_s"]))
    if keys:
        text += f" · key of {', '.join(keys)} in none"
    return text, state["overdue"] or bool(keys)


class MainWindow(QMainWindow):
    #: the window is closing for good: time to stop the dispatcher and the master
    closing = Signal()

    def __init__(self, bridge, remember_layout=True, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.remember_layout = remember_layout
        #: ask before closing while this console's dispatcher runs jobs
        self.confirm_close_with_running_jobs = True
        self.summary = None
        self._status_busy = False
        self.setWindowTitle(describe(bridge.master)[0])
        self.setWindowIcon(icon("cairn"))
        self.setObjectName("cairn-main-window")

        self.nav = QTreeWidget()
        self.nav.setObjectName("navigation")
        self.nav.setHeaderHidden(True)
        self.nav.setRootIsDecorated(True)
        self.nav.setUniformRowHeights(True)
        self.nav.setMinimumWidth(170)
        self.stack = QStackedWidget()
        self.views = {}
        self._items = {}

        for page in make_pages(bridge):
            self._add_view(page)
            if hasattr(page, "job_opened"):  # a job's row, to show in its details window
                page.job_opened.connect(self.open_job)
            elif page.name == "activity":
                page.opened.connect(self.open_job)
            if hasattr(page, "jobs_requested"):   # the dashboard: jobs in one state
                page.jobs_requested.connect(self.show_jobs)
            if hasattr(page, "alerts_requested"):  # the dashboard: the alert settings
                page.alerts_requested.connect(self.open_alerts)
            if hasattr(page, "wizard_requested"):
                page.wizard_requested.connect(self.open_wizard)
            actions = getattr(page, "object_actions", None)
            if actions is not None:
                actions.new_requested.connect(self.open_wizard)
                actions.changed.connect(self._catalog_changed)
                actions.jobs_started.connect(self._jobs_started)
                actions.job_queued.connect(self._job_queued)
            image_actions = getattr(page, "image_actions", None)
            if image_actions is not None:
                image_actions.job_queued.connect(self._job_queued)
        self._fill_nav(self.nav.invisibleRootItem(), NAVIGATION)
        where = getattr(bridge.master, "where", None)
        if where:   # a master over SSH: the tree's top names it
            self.nav.topLevelItem(0).setText(0, f"Master {where}")
        self.nav.expandAll()
        self.nav.currentItemChanged.connect(self._nav_changed)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("main-splitter")
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.nav)
        self.splitter.addWidget(self.stack)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([self._nav_width(), 1280 - self._nav_width()])
        self.setCentralWidget(self.splitter)

        self.master_label = QLabel("Master: …")
        self.hosts_label = QLabel("Hosts: …")
        self.jobs_label = QLabel("Jobs: …")
        self.catalog_backup_label = QLabel()
        self.catalog_backup_label.hide()
        self.copies_label = QLabel()
        self.copies_label.setObjectName("missing-copies")
        self.copies_label.hide()
        for label in (self.master_label, self.hosts_label, self.jobs_label,
                      self.catalog_backup_label, self.copies_label):
            label.setContentsMargins(6, 0, 6, 0)
            label.setTextFormat(Qt.TextFormat.PlainText)
        sb = self.statusBar()
        sb.addWidget(self.master_label, 1)
        sb.addPermanentWidget(self.copies_label)
        sb.addPermanentWidget(self.catalog_backup_label)
        sb.addPermanentWidget(self.hosts_label)
        sb.addPermanentWidget(self.jobs_label)

        self._make_menus()
        self.resize(1280, 800)
        if remember_layout:
            self.restore_layout()

        self.reachability = None
        self._reach_busy = False
        self._reach_last = 0.0
        self.wizard = None

        #: the user the master acts for (Master.whoami); None until it is known
        self.user = None
        self.bridge.call(lambda m: m.whoami(), done=self.apply_user,
                         failed=lambda _err: None, context=self)

        self.timer = QTimer(self)
        self.timer.setInterval(STATUS_REFRESH_MS)
        self.timer.timeout.connect(self.tick)
        self.timer.start()

    # ---- building ---------------------------------------------------------------------------
    def _add_view(self, view):
        self.views[view.name] = view
        self.stack.addWidget(view)

    def _fill_nav(self, parent, nodes):
        for name, label, icon_name, children in nodes:
            item = QTreeWidgetItem(parent, [label])
            item.setIcon(0, icon(icon_name))
            item.setData(0, VIEW_ROLE, name)
            self._items[name] = item
            self._fill_nav(item, children)

    def _nav_width(self):
        """Wide enough for the deepest, longest label, so none is cut off."""
        fm = self.nav.fontMetrics()
        widest, stack = 0, [(self.nav.invisibleRootItem(), 0)]
        while stack:
            item, depth = stack.pop()
            for i in range(item.childCount()):
                child = item.child(i)
                widest = max(widest, (depth + 1) * self.nav.indentation()
                             + fm.horizontalAdvance(child.text(0)))
                stack.append((child, depth + 1))
        return widest + self.nav.iconSize().width() + 40

    def _make_menus(self):
        file_menu = self.menuBar().addMenu("&File")
        new_menu = file_menu.addMenu(icon("action-new"), "&New")
        for kind, label in NEW_OBJECTS:
            a = roles.needs(QAction(icon(kind), label, self), roles.CREATE[kind])
            a.triggered.connect(lambda _=False, k=kind: self.open_wizard(k))
            new_menu.addAction(a)
        catalog_backup = roles.needs(QAction(icon("action-backup"), "Back up the &catalog…",
                                             self), "start_catalog_backup")
        catalog_backup.setToolTip("A catalog backup of this master to a storage unit")
        catalog_backup.triggered.connect(self.open_catalog_backup)
        file_menu.addAction(catalog_backup)
        alerts = roles.needs(QAction(icon("action-alerts"), "&Alerts…", self),
                             "set_alert_settings")
        alerts.setToolTip("What the master alerts about, and where it sends it")
        alerts.triggered.connect(self.open_alerts)
        file_menu.addAction(alerts)
        file_menu.addSeparator()
        open_master = QAction("Open a &master…", self)
        open_master.setToolTip("A console on a master on another machine, reached over SSH "
                               "(the masters opened before are offered)")
        open_master.triggered.connect(self.open_other_master)
        file_menu.addAction(open_master)
        file_menu.addSeparator()
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        file_menu.addAction(quit_action)

        view_menu = self.menuBar().addMenu("&View")
        refresh = QAction("&Refresh", self)
        refresh.setShortcut(QKeySequence.StandardKey.Refresh)
        refresh.triggered.connect(self.refresh_current)
        view_menu.addAction(refresh)
        view_menu.addSeparator()
        for name in VIEW_NAMES:
            item = self._items[name]
            a = QAction(item.icon(0), item.text(0), self)
            a.triggered.connect(lambda _=False, n=name: self.select_view(n))
            view_menu.addAction(a)

        help_menu = self.menuBar().addMenu("&Help")
        about = QAction("&About Cairn", self)
        about.triggered.connect(self._about)
        help_menu.addAction(about)

    def _about(self):
        QMessageBox.about(self, "About Cairn",
                          f"<b>Cairn {__version__}</b><p>Backup administration for Linux and "
                          "parallel file systems.</p>")

    def apply_user(self, who):
        """Hides what the user's role may not do (ui/roles.py) and names the user in the
        title; for an admin nothing is hidden."""
        self.user = who
        if who["role"] != "admin" or not who.get("local"):
            self.setWindowTitle(f"Cairn console — {who['user']} ({who['role']})")
        if who["role"] != "admin":
            roles.apply(self, set(who["can"]))

    # ---- navigation -----------------------------------------------------------------------
    @property
    def current_view(self):
        return self.stack.currentWidget()

    def select_view(self, name):
        if name not in self.views:
            raise KeyError(name)
        self.nav.setCurrentItem(self._items[name])

    def show_jobs(self, state):
        """The activity monitor, filtered to the jobs in one state ("failed")."""
        self.select_view("activity")
        self.views["activity"].set_filter(state=state)

    def nav_item(self, name):
        return self._items.get(name)

    def _nav_changed(self, item, _previous=None):
        if item is None:
            return
        view = self.views[item.data(0, VIEW_ROLE)]
        self.stack.setCurrentWidget(view)
        view.refresh()

    def refresh_current(self):
        view = self.current_view
        if view is not None:
            view.refresh()
        self.refresh_status()

    def tick(self):
        view = self.current_view
        if view is not None and view.due(time.monotonic()):
            view.refresh()
        self.refresh_status()

    # ---- status bar ------------------------------------------------------------------------
    def refresh_status(self):
        if self._status_busy:
            return
        self._status_busy = True
        self.bridge.call(status_summary, done=self._show_status, failed=self._status_failed,
                         context=self)

    def _show_status(self, s):
        self._status_busy = False
        self.summary = s
        title, remote_text, remote_tip = s["master"]
        self.setWindowTitle(title)
        self.master_label.setText(remote_text or f"Master: embedded — catalog {s['catalog']}")
        self.master_label.setToolTip(remote_tip or s["catalog"])
        self._show_hosts()
        self.jobs_label.setText(f"Jobs: {s['running']} running, {s['queued']} queued")
        self._show_catalog_backup(s["catalog_backup"])
        self._show_missing_copies(s.get("duplications") or [])
        now = time.monotonic()
        if not self._reach_busy and (self.reachability is None or
                                     now - self._reach_last >= REACHABILITY_S):
            self.check_hosts()

    def _show_catalog_backup(self, state):
        shown = catalog_backup_text(state)
        self.catalog_backup_label.setVisible(shown is not None)
        if shown is None:
            return
        text, warn = shown
        keys = state.get("keys_not_escrowed") or []
        self.catalog_backup_label.setText(text)
        self.catalog_backup_label.setStyleSheet("color: #c0392b;" if warn else "")
        self.catalog_backup_label.setToolTip(
            ("No catalog backup for over a day: a lost state directory would lose every "
             "image's record and the keys of encrypted pools. " if state["overdue"] else
             "The newest catalog backup that ended well. ")
            + (f"No catalog backup holds the key of the encrypted pool(s) of "
               f"{', '.join(keys)} yet: without it their images cannot be read after a lost "
               "state directory. " if keys else "")
            + "File ▸ Back up the catalog…, or `cairn catalog backup --storage-unit STU "
              "--passphrase-file F --wait` (README, Disaster recovery).")
    def _show_missing_copies(self, problems):
        """A warning while copies a lifecycle wants are not made and no attempt is left."""
        self.copies_label.setVisible(bool(problems))
        if not problems:
            return
        n = len(problems)
        self.copies_label.setText(f"Copies: {n} missing")
        self.copies_label.setStyleSheet("color: #c0392b;")
        lines = [f"Image {p['image']} has no copy {p['copy']} in disk pool {p['pool']}: "
                 f"duplicate job {p['job']} (attempt {p['attempts']}) ended with status "
                 f"{p['status']}, {p['why']}" for p in problems[:10]]
        if n > 10:
            lines.append(f"… and {n - 10} more")
        self.copies_label.setToolTip(
            "\n".join(lines) + "\nFix the cause, then restart the job in the activity monitor "
            "(`cairn jobs restart ID`); `cairn lifecycle list` lists them.")

    def check_hosts(self):
        """Asks every host's agent whether it answers, off the UI thread."""
        if self._reach_busy:
            return
        self._reach_busy = True
        self.bridge.call(lambda m: m.host_reachability(), done=self._reached,
                         failed=self._reach_failed, context=self)

    def _reached(self, result):
        self._reach_busy = False
        self._reach_last = time.monotonic()
        self.reachability = result
        self._show_hosts()

    def _reach_failed(self, _err):
        self._reach_busy = False
        self._reach_last = time.monotonic()

    def _show_hosts(self):
        r = self.reachability
        total = (self.summary or {}).get("hosts")
        if r is None:
            self.hosts_label.setText(f"Hosts: {total if total is not None else '…'}")
            return
        up = [h for h in r if h["reachable"]]
        down = [h for h in r if not h["reachable"]]
        self.hosts_label.setText(f"Hosts: {len(up)} of {len(r)} reachable")
        self.hosts_label.setStyleSheet("color: #c0392b;" if down else "")
        self.hosts_label.setToolTip("\n".join(
            [f"{h['name']}: answers" for h in up]
            + [f"{h['name']}: {h['error']}" for h in down]))

    def open_other_master(self):
        """File ▸ Open a master…: the dialog (ui/remote.py), open while it asks."""
        self.open_master_dialog = open_in_new_console(
            self, started=lambda where: self.statusBar().showMessage(
                f"Opening a console on {where}…", 8000))
        return self.open_master_dialog

    def _status_failed(self, err):
        self._status_busy = False
        m = self.bridge.master
        if getattr(m, "remote", False):
            self.master_label.setText(f"Master: {m.where} — {err.message}; retrying")
            return
        self.master_label.setText(f"Master: catalog unreadable — {err}")

    # ---- wizards and catalog changes --------------------------------------------------------
    def open_wizard(self, kind, **preset):
        """The wizard that creates an object of `kind` (the add-host dialog for a host)."""
        if self.wizard is not None and self.wizard.isVisible():
            self.wizard.raise_()
            self.wizard.activateWindow()
            return self.wizard
        if kind == "host":
            w = wizards.make_host_dialog(self.bridge, self)
            w.accepted.connect(lambda: w.host and self._created("host", w.host["name"]))
        else:
            w = wizards.make_wizard(kind, self.bridge, self, **preset)
        self._track_wizard(w)
        w.show()
        return w

    def _track_wizard(self, w):
        w.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        if hasattr(w, "created"):
            w.created.connect(self._created)
        if hasattr(w, "continued"):  # the disk pool wizard goes on to a storage unit
            w.continued.connect(self._track_wizard)
        w.destroyed.connect(lambda *_: self._wizard_gone(w))
        self.wizard = w

    def _wizard_gone(self, w):
        if self.wizard is w:
            self.wizard = None

    def _created(self, kind, name):
        self._catalog_changed(kind, name)
        view = {"host": "hosts", "storage-server": "storage-servers",
                "disk-pool": "disk-pools", "storage-unit": "storage-units",
                "policy": "policies"}.get(kind)
        if view in self.views:
            self.views[view].refresh()

    def _catalog_changed(self, kind, _name):
        for name in ("getting-started", "overview", "storage"):
            if name in self.views:
                self.views[name].refresh()
        if kind == "host":
            self.reachability = None
        self.refresh_status()

    def _jobs_started(self, ids):
        self.select_view("activity")
        self.statusBar().showMessage(
            f"Backup job{'s' if len(ids) != 1 else ''} {', '.join(map(str, ids))} queued", 8000)

    def _job_queued(self, _job_id, text):
        self.select_view("activity")
        self.statusBar().showMessage(text, 8000)

    def open_catalog_backup(self):
        dlg = CatalogBackupDialog(self.bridge, self)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.queued.connect(lambda jid: self._job_queued(jid, f"Catalog backup job {jid} "
                                                             "queued"))
        dlg.show()
        return dlg

    def open_alerts(self):
        """One alerts window: opening it again brings the open one forward."""
        for dlg in self.findChildren(AlertsDialog):
            if dlg.isVisible():
                dlg.raise_()
                dlg.activateWindow()
                return dlg
        dlg = AlertsDialog(self.bridge, self)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.show()
        return dlg

    # ---- jobs ---------------------------------------------------------------------------------
    def open_job(self, job):
        """One details window per job: opening it again brings the open one forward."""
        for dlg in self.findChildren(JobDetailsDialog):
            if dlg.job_id == job["id"] and dlg.isVisible():
                dlg.raise_()
                dlg.activateWindow()
                return dlg
        dlg = JobDetailsDialog(self.bridge, job, self)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.show()
        return dlg

    # ---- remembered layout ------------------------------------------------------------------
    def save_layout(self):
        s = settings()
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.setValue("window/splitter", self.splitter.saveState())
        for v in self.views.values():
            v.save_state(s)
        s.sync()

    def restore_layout(self):
        s = settings()
        g = s.value("window/geometry")
        if g is not None:
            self.restoreGeometry(g)
        st = s.value("window/state")
        if st is not None:
            self.restoreState(st)
        sp = s.value("window/splitter")
        if sp is not None:
            self.splitter.restoreState(sp)
        for v in self.views.values():
            v.restore_state(s)

    # ---- closing -------------------------------------------------------------------------------
    def closeEvent(self, event):
        mine = (self.summary or {}).get("mine", 0)
        if mine and self.confirm_close_with_running_jobs:
            answer = QMessageBox.question(
                self, "Jobs are running",
                f"{mine} job{'s are' if mine != 1 else ' is'} running in this console. "
                "Closing the console stops them; they end as canceled and can be started "
                "again.\n\nClose anyway?",
                QMessageBox.StandardButton.Close | QMessageBox.StandardButton.Cancel,
                QMessageBox.StandardButton.Cancel)
            if answer != QMessageBox.StandardButton.Close:
                event.ignore()
                return
        if self.remember_layout:
            self.save_layout()
        self.timer.stop()
        emit(self.closing)
        event.accept()
