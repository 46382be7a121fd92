"""New, properties, delete (and, for policies, back up now; for disk pools, verify, import of
the images the catalog does not know, and for deduplicating ones space reclaim) on a list of
configuration objects: as a toolbar above the
list and as the list's context menu. ImageActions offers verify on a list of backup images.

Deleting first asks the master what still depends on the object. If anything does, the
confirmation names it and offers no delete button, since the catalog would refuse anyway;
otherwise it says what deleting means before anything is removed. Message boxes are opened
window-modal with open(), never exec(), so the console keeps painting and tests can answer
them."""

import html

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QMessageBox, QToolBar

from plugins.storage import registry
from ui import roles
from ui.backup_now_dialog import BackupNowDialog
from ui.import_dialog import ImportDialog
from ui.properties import KIND_LABELS, PropertiesDialog
from ui.qtcompat import emit
from ui.resources import icon
from ui.tables import tab_to_buttons

_AFTER_DELETE = {
    "host": "Its backup images stay in the catalog until they expire.",
    "storage-server": "Nothing on the host is removed.",
    "disk-pool": "The volumes and any files in them stay on the storage server.",
    "storage-unit": "",
    "policy": "Its backup images stay until they expire and can still be restored.",
    "lifecycle": "The copies its duplications made stay until they expire.",
    "storage-unit-group": "Its storage units and their images stay.",
}


class _JobActions(QObject):
    """What actions that queue a job share: the signal saying so, and errors shown to the
    admin. Subclasses set .view (with .window()) and .bridge."""

    #: a job was queued (verify, space reclaim): its id and a sentence saying so
    job_queued = Signal(int, str)

    def _queue_job(self, start, text):
        """Runs start(master) off the UI thread; text(job_id) is the sentence to show."""
        self.bridge.call(start, done=lambda job_id: self._queued(job_id, text(job_id)),
                         failed=self._error, context=self)

    def _queued(self, job_id, text):
        self.last_queued = job_id
        emit(self.job_queued, job_id, text)

    def _error(self, err):
        self.last_box = show_error(self.view.window(), err)


class ObjectActions(_JobActions):
    #: the admin asked to create an object of this kind (the main window opens its wizard)
    new_requested = Signal(str)
    #: an action changed the catalog: (kind, name)
    changed = Signal(str, str)
    #: backups were queued from a policy: the job ids
    jobs_started = Signal(list)

    def __init__(self, view):
        super().__init__(view)
        self.view = view
        self.kind = view.spec.kind
        self.bridge = view.bridge
        self.last_box = None
        self.last_menu = None
        self.last_dialog = None
        self.last_queued = None
        label = KIND_LABELS[self.kind].lower()

        def action(text, icon_name, slot, shortcut=None, tip=None):
            a = QAction(icon(icon_name), text, view)
            a.triggered.connect(slot)
            if shortcut:
                a.setShortcut(shortcut)
                a.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            a.setToolTip(tip or text.rstrip("…"))
            view.addAction(a)
            return a

        self.new = roles.needs(action(f"New {label}…", "action-new", self._new, "Ctrl+N",
                                      f"Create a {label} with a wizard"),
                               roles.CREATE.get(self.kind, "update_object"))
        self.properties = action("Properties…", "action-properties", self._properties,
                                 "Alt+Return", f"Show and change the selected {label}")
        self.delete = roles.needs(action(
            "Delete…", "action-delete", self._delete, "Delete",
            f"Delete the selected {label}, after saying what depends on it"), "delete_object")
        self.backup = self.backup_reading_all = None
        if self.kind == "policy":
            self.backup = action("Back up now…", "action-backup", self._backup_now, "Ctrl+B",
                                 "Queue a backup of every client of the selected policy "
                                 "(Ctrl+B)")
            # In the context menu only: the rare case, for when a file may have changed
            # without any change to its size, times or inode (a raw device write).
            self.backup_reading_all = action(
                "Back up now, reading every file…", "action-backup",
                lambda: self._backup_now(files_cache=False), None,
                "Queue a backup of every client of the selected policy; a full into a "
                "deduplicating pool reads every file instead of taking the unchanged ones "
                "from the newest image")
        roles.needs(self.backup, "start_backup")
        roles.needs(self.backup_reading_all, "start_backup")
        self.verify = self.reclaim = self.import_images = None
        if self.kind == "disk-pool":
            self.verify = action("Verify pool", "state-ok", self._verify_pool, None,
                                 "Read every image of the selected disk pool back and check "
                                 "it (every tar header and file checksum, or every chunk of "
                                 "a deduplicating pool), and make the pool's files private "
                                 "again where they are not")
            self.import_images = action(
                "Import images…", "versions", self._import_pool, None,
                "Record the images on the selected disk pool that the catalog does not know "
                "(after the catalog was lost, or images newer than its catalog backup)")
            self.reclaim = action("Reclaim space", "storage", self._reclaim, None,
                                  "Remove the chunks no image uses any more from the selected "
                                  "deduplicating pool and compact its container files")
        for a, method in ((self.verify, "start_verify"), (self.import_images, "start_import"),
                          (self.reclaim, "start_reclaim")):
            roles.needs(a, method)
        self.refresh = action("Refresh", "action-refresh", view.refresh, None,
                              "Read the list again from the catalog")

        self.toolbar = QToolBar()
        self.toolbar.setObjectName(f"{view.name}-toolbar")
        self.toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toolbar.setIconSize(self.toolbar.iconSize().scaled(16, 16,
                                                               Qt.AspectRatioMode.KeepAspectRatio))
        for a in self._ordered():
            self.toolbar.addAction(a)
        self.toolbar.insertSeparator(self.refresh)
        tab_to_buttons(self.toolbar)

        t = view.table
        t.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        t.customContextMenuRequested.connect(self._menu)
        t.selectionModel().selectionChanged.connect(self.update_enabled)
        view.model.modelReset.connect(self.update_enabled)
        self.update_enabled()

    def _ordered(self):
        return [a for a in (self.new, self.backup, self.verify, self.import_images,
                            self.reclaim, self.properties, self.delete, self.refresh)
                if a is not None]

    def selected(self):
        rows = self.view.selected_rows()
        return rows[0] if len(rows) == 1 else None

    def update_enabled(self, *_):
        row = self.selected()
        for a in (self.properties, self.delete, self.backup, self.backup_reading_all,
                  self.verify, self.import_images):
            if a is not None:
                a.setEnabled(row is not None)
        if self.reclaim is not None:
            self.reclaim.setEnabled(is_dedup_pool(row))

    def _menu(self, pos):
        menu = QMenu(self.view)
        for a in self._ordered():
            if a is self.refresh:
                menu.addSeparator()
            menu.addAction(a)
            if a is self.backup:
                menu.addAction(self.backup_reading_all)
        self.last_menu = menu
        menu.popup(self.view.table.viewport().mapToGlobal(pos))

    # ---- actions --------------------------------------------------------------------------
    def _new(self):
        emit(self.new_requested, self.kind)

    def _properties(self):
        row = self.selected()
        if row is None:
            return None
        dlg = PropertiesDialog(self.bridge, self.kind, row, self.view.window())
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        # finished, not accepted: a policy's lists are saved by their own wizard, also when
        # the Properties are then closed with Cancel
        dlg.finished.connect(lambda _: self._saved(dlg))
        self.last_dialog = dlg
        dlg.open()
        return dlg

    def _saved(self, dlg):
        if dlg.saved is not None:
            self.view.refresh()
            emit(self.changed, self.kind, dlg.name)

    def _delete(self):
        row = self.selected()
        if row is None:
            return
        name = row["name"]
        self.bridge.call(lambda m: m.dependents(self.kind, name), done=self._confirm_delete,
                         failed=self._error, context=self)

    def _confirm_delete(self, deps):
        what = f"{KIND_LABELS[self.kind].lower()} {deps['name']}"
        box = QMessageBox(self.view.window())
        box.setObjectName("confirm-delete")
        box.setWindowTitle(f"Delete {what}")
        box.setTextFormat(Qt.TextFormat.RichText)
        if deps["dependents"]:
            box.setIcon(QMessageBox.Icon.Warning)
            box.setText(f"<b>{html.escape(what.capitalize())}</b> cannot be deleted: it is "
                        f"used by {html.escape(deps['text'])}.")
            box.setInformativeText("Delete or change those first; then try again.")
            box.setStandardButtons(QMessageBox.StandardButton.Ok)
        else:
            box.setIcon(QMessageBox.Icon.Question)
            box.setText(f"Delete <b>{html.escape(what)}</b>?")
            box.setInformativeText(("Nothing else uses it. " + _AFTER_DELETE[self.kind]).strip())
            box.setStandardButtons(QMessageBox.StandardButton.Yes
                                   | QMessageBox.StandardButton.Cancel)
            box.button(QMessageBox.StandardButton.Yes).setText("Delete")
            box.setDefaultButton(QMessageBox.StandardButton.Cancel)
            box.accepted.connect(lambda: self._do_delete(deps["name"]))
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.last_box = box
        box.open()

    def _do_delete(self, name):
        self.bridge.call(lambda m: m.delete_object(self.kind, name),
                         done=lambda _r: self._deleted(name), failed=self._error, context=self)

    def _deleted(self, name):
        self.view.refresh()
        emit(self.changed, self.kind, name)

    def _backup_now(self, files_cache=True):
        """Asks which schedule and clients (BackupNowDialog), then queues the backups."""
        row = self.selected()
        if row is None:
            return None
        dlg = BackupNowDialog(row, files_cache=files_cache, parent=self.view.window())
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.accepted.connect(lambda: self._start_backups(
            row["name"], dlg.schedule(), dlg.clients(), dlg.files_cache()))
        self.last_dialog = dlg
        dlg.open()
        return dlg

    def _start_backups(self, name, schedule, clients, files_cache):
        def start(m):
            if clients is None:
                return m.start_backup(name, schedule=schedule, files_cache=files_cache)
            return [jid for c in clients
                    for jid in m.start_backup(name, client=c, schedule=schedule,
                                              files_cache=files_cache)]
        self.bridge.call(start, done=self._backups_queued, failed=self._error, context=self)

    def _backups_queued(self, ids):
        emit(self.jobs_started, list(ids))

    def _verify_pool(self):
        row = self.selected()
        if row is None:
            return
        name = row["name"]
        self._queue_job(lambda m: m.start_verify(pool=name),
                        lambda job_id: f"Verify job {job_id} queued for disk pool {name}")

    def _import_pool(self):
        """Asks (a dialog: with the key file of an encrypted pool whose key this master
        lacks), then queues the import."""
        row = self.selected()
        if row is None:
            return None
        dlg = ImportDialog(row, self.view.window())
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.accepted.connect(lambda: self._start_import(row["name"], dlg.key_file()))
        self.last_dialog = dlg
        dlg.open()
        return dlg

    def _start_import(self, name, key_file):
        self._queue_job(lambda m: m.start_import(name, key_file=key_file),
                        lambda job_id: f"Import job {job_id} queued for disk pool {name}")

    def _reclaim(self):
        row = self.selected()
        if not is_dedup_pool(row):
            return
        name = row["name"]
        self._queue_job(lambda m: m.start_reclaim(name),
                        lambda job_id: f"Space reclaim job {job_id} queued for disk pool {name}")


def is_dedup_pool(row):
    """Whether a disk pool's row is a pool of a deduplicating storage server."""
    return bool(row) and registry.can(row.get("server_type"), "reclaim")


def show_error(parent, err):
    """A failed action's message with its hint, window-modal."""
    box = QMessageBox(QMessageBox.Icon.Warning, "Cairn console", err.message,
                      QMessageBox.StandardButton.Ok, parent)
    box.setObjectName("action-error")
    if err.hint:
        box.setInformativeText(err.hint)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box


class ImageActions(_JobActions):
    """Verify image, for a page that lists backup images (`view` has .bridge, .table and
    .image, the selected image's dict or None): reads the image back from its pool and checks
    it. `verify` is the action to put in the page's context menu or toolbar."""

    def __init__(self, view):
        super().__init__(view)
        self.view = view
        self.bridge = view.bridge
        self.last_box = None
        self.last_queued = None
        self.verify = QAction(icon("state-ok"), "Verify image", view)
        self.verify.setToolTip("Read the selected image back from its pool and check it: "
                               "every tar header and file checksum, or every chunk on a "
                               "deduplicating pool")
        self.verify.triggered.connect(self._verify)
        roles.needs(self.verify, "start_verify")
        # Any image, on any pool: its catalog index is rebuilt from the image itself.
        self.rebuild_index = QAction(icon("action-restart"), "Rebuild index", view)
        self.rebuild_index.setToolTip("Rebuild the selected image's catalog index (what "
                                      "browsing and restoring read) from the image itself; "
                                      "the old index is kept aside")
        self.rebuild_index.triggered.connect(self._rebuild_index)
        roles.needs(self.rebuild_index, "start_rebuild_index")
        view.table.selectionModel().selectionChanged.connect(self.update_enabled)
        self.update_enabled()

    def update_enabled(self, *_):
        self.verify.setEnabled(bool(self.view.image))

    def _verify(self):
        image = self.view.image
        if not image:
            return
        iid = image["id"]
        self._queue_job(lambda m: m.start_verify(image=iid),
                        lambda job_id: f"Verify job {job_id} queued for image {iid}")

    def _rebuild_index(self):
        image = self.view.image
        if not image:
            return
        iid = image["id"]
        self._queue_job(lambda m: m.start_rebuild_index(iid),
                        lambda job_id: f"Rebuild-index job {job_id} queued for image {iid}")
