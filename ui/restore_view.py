"""The "Backup & restore" page: choose a client and a backup image, check files in its tree
(or find them by name, in this image or in every image of the client), then restore them,
usually to a new location, through the restore dialog. The page composes its parts and wires
them: the client, the dates and the images (with expire, verify and rebuild index) are
ui/restore_images.py, the point in time ("Files as of") ui/restore_point.py, the image's files
ui/restore_files.py, the two searches ui/restore_search.py; what is chosen and the restore
dialog are here."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSplitter, QTabWidget, \
    QVBoxLayout

from ui import roles
from ui.polled import PolledPage
from ui.qtcompat import emit
from ui.resources import icon
from ui.restore_dialog import RestoreDialog
from ui.restore_files import FilesPane
from ui.restore_images import ImageList
from ui.restore_point import PointInTime
from ui.restore_search import ImageSearch, VersionSearch

REFRESH_S = 10.0


def minimal_paths(paths):
    """Paths without those that lie under another one, in their first order."""
    chosen = sorted(set(paths), key=lambda p: (p.count("/"), p))
    keep = set()
    for p in chosen:
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in keep):
            keep.add(p)
    return [p for p in dict.fromkeys(paths) if p in keep]


class RestoreView(PolledPage):
    """Client and images above; the chosen image's files, a search in it, and a search of
    every image of the client below; the restore button at the bottom."""

    name = "restore"
    refresh_s = REFRESH_S
    #: a restore job was started (its dict): the main window opens its details
    job_opened = Signal(dict)
    #: an expire job was queued (its id)
    expire_started = Signal(int)

    def __init__(self, bridge, parent=None):
        super().__init__(bridge, parent)
        self.dialog = None
        self.images = ImageList(bridge)
        self.as_of = PointInTime(bridge, lambda: self.images.client_name, self)
        self.as_of.bar.addWidget(self.images.expire_button)
        head, description = self._make_head()
        self.message = QLabel()
        self.message.setObjectName("restore-message")
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.message.setWordWrap(True)
        self.message.hide()
        self._make_tabs()
        foot = self._make_footer()
        # the names the console and its tests know a page's list by (ui/pages.py, ui/app.py)
        self.model, self.table = self.images.model, self.images.table
        self.proxy, self.placeholder = self.images.proxy, self.images.placeholder
        self.image_actions = self.images.image_actions
        self.files, self.tree = self.file_pane.files, self.file_pane.tree

        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 4)
        lay.addLayout(head)
        lay.addWidget(description)
        lay.addLayout(self.images.bar)
        lay.addLayout(self.as_of.bar)
        lay.addWidget(self.message)
        lay.addWidget(self.splitter, 1)
        lay.addLayout(foot)

        self._wire()
        self._update_selection()

    def _make_head(self):
        title = QLabel("Backup & restore")
        f = title.font()
        f.setPointSizeF(f.pointSizeF() * 1.25)
        f.setBold(True)
        title.setFont(f)
        pic = QLabel()
        pic.setPixmap(icon("restore").pixmap(22, 22))
        head = QHBoxLayout()
        head.addWidget(pic)
        head.addWidget(title, 1)
        description = QLabel("Choose a client and one of its backup images, check the files "
                             "and directories to restore, then press Restore.")
        description.setWordWrap(True)
        _dim(description)
        return head, description

    def _make_tabs(self):
        """The tabs under the images (the image's files, a search in it, a search of every
        image of the client), in a splitter with the images."""
        self.file_pane = FilesPane(self.bridge)
        self.search = ImageSearch(self.bridge, lambda: self.images.image)
        self.versions = VersionSearch(self.bridge, lambda: self.images.client_name)

        self.tabs = QTabWidget()
        self.tabs.setObjectName("restore-tabs")
        self.tabs.addTab(self.file_pane, icon("files"), "Files")
        self.tabs.addTab(self.search, icon("search"), "Search this image")
        self.tabs.addTab(self.versions, icon("versions"), "Find in every image")

        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("images-splitter")
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.images)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 5)

    def _make_footer(self):
        """What is chosen to restore, Clear selection and Restore…"""
        self.selection_label = QLabel()
        self.selection_label.setObjectName("restore-selection")
        self.selection_label.setTextFormat(Qt.TextFormat.PlainText)
        self.clear_button = QPushButton("Clear selection")
        self.restore_button = roles.needs(QPushButton(icon("restore"), "Restore…"),
                                          "start_restore")
        self.restore_button.setObjectName("restore-button")
        self.restore_button.setDefault(True)
        foot = QHBoxLayout()
        foot.addWidget(self.selection_label, 1)
        foot.addWidget(self.clear_button)
        foot.addWidget(self.restore_button)
        return foot

    def _wire(self):
        self.images.listed.connect(self.refreshed)
        self.images.client_changed.connect(self._client_changed)
        self.images.message.connect(self._show_message)
        self.images.reveal_requested.connect(lambda path: self.reveal(path, check=True))
        self.images.expiry.started.connect(self.expire_started)
        self.as_of.message.connect(self._show_message)
        self.as_of.found.connect(self.images.select_image)
        self.table.selectionModel().selectionChanged.connect(self._image_selected)
        self.files.checks_changed.connect(self._update_selection)
        self.search.results.checks_changed.connect(self._update_selection)
        self.search.show_requested.connect(self.reveal)
        self.versions.version_chosen.connect(self.images.select_image)
        self.clear_button.clicked.connect(self.clear_selection)
        self.restore_button.clicked.connect(self.open_restore_dialog)

    # ---- page interface (ui/pages.py, ui/polled.py) -----------------------------------------
    @property
    def loaded(self):
        return self.images.loaded

    @property
    def settled(self):
        return (self.loaded and not self.polling and not self.images.busy
                and not self.as_of.busy and not self.files.loading and not self.search.busy
                and not self.versions.busy)

    @property
    def error(self):
        """Why the clients or the images could not be read, or None."""
        return self.images.error

    def poll_call(self):
        return (lambda m: m.image_clients(),)

    def polled(self, clients):
        self.images.set_clients(clients)

    def poll_failed(self, err):
        self.images.clients_failed(err)

    def selected_rows(self):
        return self.images.selected_rows()

    def select_key(self, key):
        return self.images.select_key(key)

    @property
    def image(self):
        return self.images.image

    # ---- what the parts say to each other ----------------------------------------------------
    def _client_changed(self, _client):
        self.versions.reset()
        self.as_of.client_changed()

    def _image_selected(self, *_):
        image = self.image
        if (image["id"] if image else None) == self.files.image_id:
            return
        self.file_pane.show_image(image)
        self.search.image_changed(image)
        self.images.expire_action.setEnabled(image is not None)

    def reveal(self, path, check=False):
        """Opens the tree down to `path`, selects it and, if asked, checks it."""
        self.tabs.setCurrentIndex(0)
        self.file_pane.reveal(path, check)

    def _show_message(self, text, error=False):
        self.message.setStyleSheet("color: #b3261e;" if error else "")
        self.message.setText(text)
        self.message.setVisible(bool(text))

    # ---- selection and restore -------------------------------------------------------------
    def chosen_paths(self):
        return minimal_paths(self.files.checked_paths() + self.search.results.checked_paths())

    def _update_selection(self):
        paths = self.chosen_paths()
        if not paths:
            self.selection_label.setText("Nothing chosen yet: check the files and directories "
                                         "to restore.")
        else:
            shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more"
                                            if len(paths) > 3 else "")
            self.selection_label.setText(f"{len(paths)} item{'s' if len(paths) != 1 else ''} "
                                         f"chosen: {shown}")
        self.selection_label.setToolTip("\n".join(paths[:50]))
        self.restore_button.setEnabled(bool(paths) and self.image is not None)
        self.clear_button.setEnabled(bool(paths))

    def clear_selection(self):
        self.files.clear_checks()
        self.search.results.set_all_checked(False)

    def open_restore_dialog(self):
        paths = self.chosen_paths()
        image = self.image
        if not paths or image is None:
            return None
        self.dialog = RestoreDialog(self.bridge, image, paths, self)
        self.dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.dialog.started.connect(self._restore_started)
        self.dialog.open()
        return self.dialog

    def _restore_started(self, job):
        emit(self.job_opened, job)

    # ---- remembered layout ------------------------------------------------------------------
    def save_state(self, settings):
        settings.setValue("views/restore-browser/header", self.table.horizontalHeader().saveState())
        settings.setValue("views/restore-browser/widths-by-hand", self.images.widths.by_hand)
        settings.setValue("views/restore-browser/splitter", self.splitter.saveState())
        settings.setValue("views/restore-browser/files-header", self.tree.header().saveState())

    def restore_state(self, settings):
        h = settings.value("views/restore-browser/header")
        if h is not None:
            self.images.restore_header(
                h, settings.value("views/restore-browser/widths-by-hand"))
        s = settings.value("views/restore-browser/splitter")
        if s is not None:
            self.splitter.restoreState(s)
        h = settings.value("views/restore-browser/files-header")
        if h is not None:
            self.tree.header().restoreState(h)


def _dim(label):
    pal = label.palette()
    pal.setColor(label.foregroundRole(), pal.color(pal.ColorRole.PlaceholderText))
    label.setPalette(pal)
