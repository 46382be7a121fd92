"""The "Backup & restore" page: choose a client and a backup image, check files in its tree
(or find them by name, in this image or in every image of the client), then restore them,
usually to a new location, through the restore dialog. The searches are ui/restore_search.py,
expiring an image ui/image_expire.py, the image list's columns ui/image_columns.py."""

import html
from datetime import datetime, time as dtime, timezone

from PySide6.QtCore import QDate, QDateTime, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QCheckBox, QComboBox, QDateEdit, \
    QDateTimeEdit, QHBoxLayout, QLabel, QMenu, QPushButton, QSplitter, QTabWidget, \
    QToolButton, QTreeView, QVBoxLayout, QWidget

from app import timeutil
from app.errors import NotFound
from ui import fmt
from ui.file_tree import ImageFilesModel
from ui.image_columns import IMAGE_COLUMNS, level
from ui.image_expire import ImageExpiry
from ui.models import ROW_ROLE, ObjectTableModel
from ui.object_actions import ImageActions
from ui.polled import PolledPage
from ui.qtcompat import emit
from ui.resources import icon
from ui.restore_dialog import RestoreDialog
from ui.restore_search import FOUND_COLUMNS, SEARCH_LIMIT, VERSION_COLUMNS, VERSIONS_LIMIT, \
    SearchPane, counted, find_versions, search_image, sorted_table
from ui.tables import select_keys, selected_rows
from ui.views import Placeholder

DEFAULT_DAYS = 30
REFRESH_S = 10.0

AT_FORMAT = "yyyy-MM-dd HH:mm"

EMPTY = ("No backup images yet: they appear here after a backup, e.g. "
         "<code>cairn backup POLICY --wait</code>.")


def _day_bounds(since, until):
    """ISO times of the start of day `since` and the end of day `until` (local dates)."""
    lo = datetime.combine(since, dtime.min).astimezone(timezone.utc)
    hi = datetime.combine(until, dtime.max).astimezone(timezone.utc)
    return timeutil.iso(lo.timestamp()), timeutil.iso(hi.timestamp())


def _images(m, client, since, until):
    return m.images_in_range(client=client, since=since, until=until)


def _image_at(m, client, at):
    """The client's newest image at or before `at`, or None when it has none then."""
    try:
        return m.image_at(client, at=at)
    except NotFound:
        return None


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

    AUTO_EXPAND_DEPTH = 12

    def __init__(self, bridge, parent=None):
        super().__init__(bridge, parent)
        self.error = None
        self._images_busy = False
        self._images_again = False
        self._clients_loaded = False
        self._client = None
        self._pending_select = None     # (image id, path or None) to select once listed
        self._pending_reloaded = False
        self._point_busy = False
        self._point_generation = 0
        self.dialog = None
        # ---- what the image list does besides restoring: expire, verify, rebuild index
        self.expiry = ImageExpiry(self, self._show_message)
        self.expiry.started.connect(self.expire_started)
        self.expire_action = self.expiry.action

        head, description = self._make_head()
        bar = self._make_client_bar()
        point_bar = self._make_point_bar()
        self.message = QLabel()
        self.message.setObjectName("restore-message")
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.message.setWordWrap(True)
        self.message.hide()
        self._make_images()
        self._make_files_and_searches()
        foot = self._make_footer()

        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 4)
        lay.addLayout(head)
        lay.addWidget(description)
        lay.addLayout(bar)
        lay.addLayout(point_bar)
        lay.addWidget(self.message)
        lay.addWidget(self.splitter, 1)
        lay.addLayout(foot)

        self._wire()
        self._set_dates(None)
        self._update_selection()
        self._update_placeholder()

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

    def _make_client_bar(self):
        """The client and the dates of the images listed."""
        self.client = QComboBox()
        self.client.setObjectName("restore-client")
        self.client.setMinimumContentsLength(16)
        self.client.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.since = QDateEdit()
        self.until = QDateEdit()
        for d in (self.since, self.until):
            d.setCalendarPopup(True)
            d.setDisplayFormat("yyyy-MM-dd")
        self.since.setObjectName("restore-since")
        self.until.setObjectName("restore-until")
        self.all_dates = QCheckBox("All dates")
        self.all_dates.setObjectName("restore-all-dates")
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Client"))
        bar.addWidget(self.client)
        bar.addSpacing(16)
        bar.addWidget(QLabel("Images from"))
        bar.addWidget(self.since)
        bar.addWidget(QLabel("to"))
        bar.addWidget(self.until)
        bar.addWidget(self.all_dates)
        bar.addStretch(1)
        return bar

    def _make_point_bar(self):
        """The point in time (the image that was the newest at a moment) and Expire; a row of
        its own, so that the page stays as narrow as a small window."""
        self.point = QComboBox()
        self.point.setObjectName("restore-point")
        self.point.addItem("Newest", None)
        self.point.addItem("At a time", "at")
        self.point.setToolTip("Shows the files as they were at a moment: selects the client's "
                              "newest image made at or before it")
        self.at = QDateTimeEdit(QDateTime.currentDateTime())
        self.at.setObjectName("restore-at")
        self.at.setCalendarPopup(True)
        self.at.setDisplayFormat(AT_FORMAT)
        self.at.setEnabled(False)
        point_bar = QHBoxLayout()
        point_bar.addWidget(QLabel("Files as of"))
        point_bar.addWidget(self.point)
        point_bar.addWidget(self.at)
        point_bar.addStretch(1)
        expire = QToolButton()
        expire.setObjectName("expire-button")
        expire.setDefaultAction(self.expire_action)
        expire.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        expire.setAutoRaise(True)
        point_bar.addWidget(expire)
        return point_bar

    def _make_images(self):
        self.model = ObjectTableModel(IMAGE_COLUMNS, key="id", parent=self)
        self.table, self.proxy = sorted_table(self.model, "restore-table")
        self.proxy.setDynamicSortFilter(True)
        self.proxy.setSortCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.image_actions = ImageActions(self)
        self.placeholder = Placeholder(self.table)
        self.placeholder.setText("Loading…")

    def _make_files_and_searches(self):
        """The tabs under the images (the image's files, a search in it, a search of every
        image of the client), in a splitter with the images."""
        self.files = ImageFilesModel(self.bridge, self)
        self.tree = QTreeView()
        self.tree.setObjectName("image-files")
        self.tree.setModel(self.files)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.header().setStretchLastSection(True)
        self.tree.header().resizeSection(0, 360)
        self.tree.header().resizeSection(1, 90)
        self.tree.header().resizeSection(2, 150)
        self.tree.header().resizeSection(3, 100)
        self.files_title = QLabel("Select an image to browse its files.")
        self.files_title.setTextFormat(Qt.TextFormat.RichText)
        self.files_error = QLabel()
        self.files_error.setTextFormat(Qt.TextFormat.PlainText)
        self.files_error.setWordWrap(True)
        self.files_error.setStyleSheet("color: #b3261e;")
        self.files_error.hide()
        files_page = QWidget()
        fl = QVBoxLayout(files_page)
        fl.setContentsMargins(0, 6, 0, 0)
        fl.addWidget(self.files_title)
        fl.addWidget(self.files_error)
        fl.addWidget(self.tree, 1)

        self.search = SearchPane(self.bridge, FOUND_COLUMNS, True,
                                 "Name or pattern in this image: *.log, report, "
                                 "/data/*/raw/*.dat", "Search", self._show_found)
        self.search.table.setObjectName("search-results")
        self.check_all = QPushButton("Check all")
        self.uncheck_all = QPushButton("Uncheck all")
        self.show_in_tree = QPushButton(icon("files"), "Show in tree")
        for b in (self.check_all, self.uncheck_all, self.show_in_tree):
            b.setEnabled(False)
            self.search.extra.addWidget(b)

        self.versions = SearchPane(self.bridge, VERSION_COLUMNS, False,
                                   "Path (/data/report.pdf) or pattern (report*.pdf) to find "
                                   "in every image of the client", "Find versions",
                                   self._show_versions)
        self.versions.table.setObjectName("version-results")
        self.versions.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)

        self.tabs = QTabWidget()
        self.tabs.setObjectName("restore-tabs")
        self.tabs.addTab(files_page, icon("files"), "Files")
        self.tabs.addTab(self.search, icon("search"), "Search this image")
        self.tabs.addTab(self.versions, icon("versions"), "Find in every image")

        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("images-splitter")
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 5)

    def _make_footer(self):
        """What is chosen to restore, Clear selection and Restore…"""
        self.selection_label = QLabel()
        self.selection_label.setObjectName("restore-selection")
        self.selection_label.setTextFormat(Qt.TextFormat.PlainText)
        self.clear_button = QPushButton("Clear selection")
        self.restore_button = QPushButton(icon("restore"), "Restore…")
        self.restore_button.setObjectName("restore-button")
        self.restore_button.setDefault(True)
        foot = QHBoxLayout()
        foot.addWidget(self.selection_label, 1)
        foot.addWidget(self.clear_button)
        foot.addWidget(self.restore_button)
        return foot

    def _wire(self):
        self.client.currentIndexChanged.connect(self._client_changed)
        self.since.dateChanged.connect(self._dates_changed)
        self.until.dateChanged.connect(self._dates_changed)
        self.all_dates.toggled.connect(self._dates_changed)
        self.point.currentIndexChanged.connect(self._point_changed)
        self.at.dateTimeChanged.connect(self._point_changed)
        self.table.selectionModel().selectionChanged.connect(self._image_selected)
        self.files.rowsInserted.connect(self._auto_expand)
        self.files.load_failed.connect(self._load_failed)
        self.files.checks_changed.connect(self._update_selection)
        self.files.revealed.connect(self._revealed)
        self.search.results.checks_changed.connect(self._update_selection)
        self.search.find_button.clicked.connect(self.run_search)
        self.versions.find_button.clicked.connect(self.run_find_versions)
        self.versions.table.activated.connect(self._version_chosen)
        self.versions.table.clicked.connect(self._version_chosen)
        self.check_all.clicked.connect(lambda: self.search.results.set_all_checked(True))
        self.uncheck_all.clicked.connect(lambda: self.search.results.set_all_checked(False))
        self.show_in_tree.clicked.connect(self._show_found_in_tree)
        self.search.table.activated.connect(lambda _i: self._show_found_in_tree())
        self.clear_button.clicked.connect(self.clear_selection)
        self.restore_button.clicked.connect(self.open_restore_dialog)

    # ---- page interface (ui/pages.py, ui/polled.py) -----------------------------------------
    @property
    def loaded(self):
        return self._clients_loaded and self.model.loaded

    @property
    def settled(self):
        return (self.loaded and not self.polling and not self._images_busy
                and not self._point_busy and not self.files.loading and not self.search.busy
                and not self.versions.busy)

    def poll_call(self):
        return (lambda m: m.image_clients(),)

    def polled(self, clients):
        self.error = None
        self._newest = {c["client"]: c["newest"] for c in clients}
        names = [c["client"] for c in clients]
        current = self.client.currentText()
        if names != [self.client.itemText(i) for i in range(self.client.count())]:
            self.client.blockSignals(True)
            self.client.clear()
            for c in clients:
                self.client.addItem(icon("host"), c["client"])
                self.client.setItemData(self.client.count() - 1,
                                        f"{c['images']} images, newest "
                                        f"{fmt.local_time(c['newest'])}",
                                        Qt.ItemDataRole.ToolTipRole)
            i = self.client.findText(current)
            self.client.setCurrentIndex(i if i >= 0 else (0 if names else -1))
            self.client.blockSignals(False)
        self._clients_loaded = True
        if self.client.currentText() != self._client:
            self._client_changed()
        else:
            self.load_images()

    def poll_failed(self, err):
        self.error = str(err)
        self._clients_loaded = True
        self.model.set_rows([])
        self._update_placeholder()
        emit(self.refreshed)

    # ---- client, dates, images ----------------------------------------------------------------
    def _set_dates(self, newest_iso):
        """The last DEFAULT_DAYS days; for a client without recent backups the
        DEFAULT_DAYS days up to its newest image, so that choosing a client always shows
        its latest backups."""
        today = QDate.currentDate()
        end = today
        newest = fmt.epoch(newest_iso)
        if newest is not None:
            d = datetime.fromtimestamp(newest).date()
            newest_day = QDate(d.year, d.month, d.day)
            if newest_day.addDays(DEFAULT_DAYS) < today:
                end = newest_day
        for w in (self.since, self.until):
            w.blockSignals(True)
        self.since.setDate(end.addDays(-DEFAULT_DAYS))
        self.until.setDate(today)
        for w in (self.since, self.until):
            w.blockSignals(False)

    def _client_changed(self, *_):
        self._client = self.client.currentText() or None
        self._set_dates(getattr(self, "_newest", {}).get(self._client))
        self.versions.reset()
        self.load_images()
        if self.point.currentData() == "at":
            self.go_to_point_in_time()

    def _dates_changed(self, *_):
        on = not self.all_dates.isChecked()
        self.since.setEnabled(on)
        self.until.setEnabled(on)
        if self.since.date() > self.until.date():
            self.until.blockSignals(True)
            self.until.setDate(self.since.date())
            self.until.blockSignals(False)
        self.load_images()

    def date_range(self):
        """(since, until) ISO times of the chosen range; (None, None) for all dates."""
        if self.all_dates.isChecked():
            return None, None
        return _day_bounds(self.since.date().toPython(), self.until.date().toPython())

    def load_images(self):
        if self._images_busy:
            self._images_again = True
            return
        if self._client is None:
            self.model.set_rows([])
            self._update_placeholder()
            emit(self.refreshed)
            return
        self._images_busy = True
        since, until = self.date_range()
        self.bridge.call(_images, self._client, since, until, done=self._show_images,
                         failed=self._images_failed, context=self)

    def _show_images(self, rows):
        self._images_busy = False
        if self._images_again:
            self._images_again = False
            self.load_images()
            return
        self.model.set_rows(rows)
        self._update_placeholder()
        if self._pending_select:
            self._go_to_version()
        # An image still to be found (beyond these dates) is selected once listed; until
        # then the tree keeps what it shows.
        if not self.table.selectionModel().hasSelection() and rows \
                and not self._pending_select:
            self.table.selectRow(0)
        self._size_columns()
        emit(self.refreshed)

    def _images_failed(self, err):
        self._images_busy = False
        self.error = str(err)
        self._update_placeholder()
        emit(self.refreshed)

    def _size_columns(self):
        if getattr(self, "_sized", False) or not self.model.rowCount():
            return
        self._sized = True
        self.table.resizeColumnsToContents()
        hh = self.table.horizontalHeader()
        for c in range(self.model.columnCount()):
            hh.resizeSection(c, hh.sectionSize(c) + 12)
        hh.setStretchLastSection(True)

    def _update_placeholder(self):
        n = self.model.rowCount()
        if self.error and not n:
            self.placeholder.setText(f"Could not read the catalog: {html.escape(self.error)}")
        elif not self.loaded:
            self.placeholder.setText("Loading…")
        elif self.client.count() == 0:
            self.placeholder.setText(EMPTY)
        else:
            self.placeholder.setText("No images of this client in these dates: choose "
                                     "earlier dates or <b>All dates</b>.")
        self.placeholder.setVisible(n == 0)

    def selected_rows(self):
        return selected_rows(self.table)

    def select_key(self, key):
        return select_keys(self.table, self.model, [key])

    @property
    def image(self):
        rows = self.selected_rows()
        return rows[0] if rows else None

    # ---- the files of the chosen image -------------------------------------------------------
    def _image_selected(self, *_):
        image = self.image
        new_id = image["id"] if image else None
        if new_id == self.files.image_id:
            return
        self.files_error.hide()
        if image:
            e = html.escape
            lvl = level(image.get("schedule_type"))
            self.files_title.setText(
                f"Files in image <b>{e(image['id'])}</b> — client {e(image['client'])}, "
                f"policy {e(image['policy'])}, {fmt.local_time(image['created'])}"
                + (f", {e(lvl)}" if lvl else "") + " — every file as of that backup")
        else:
            self.files_title.setText("Select an image to browse its files.")
        self.files.set_image(new_id)
        self.search.reset("" if image else "Select an image to search it.")
        self._found_buttons()
        self.expire_action.setEnabled(image is not None)

    def _auto_expand(self, parent, first, last):
        # Images usually hold one deep selection (/gpfs/fs1/projects/x): open the chain of
        # single directories so that the files are one click away.
        if first != 0 or last != 0 or self.files.rowCount(parent) != 1:
            return
        depth, p = 0, parent
        while p.isValid():
            depth, p = depth + 1, p.parent()
        if depth >= self.AUTO_EXPAND_DEPTH:
            return
        child = self.files.index(0, 0, parent)
        if self.files.hasChildren(child):
            self.tree.expand(child)

    def _load_failed(self, path, message):
        self.files_error.setText(f"Could not list {fmt.shown(path)}: {message}")
        self.files_error.show()

    def reveal(self, path, check=False):
        """Opens the tree down to `path`, selects it and, if asked, checks it."""
        self._reveal_check = check
        self.tabs.setCurrentIndex(0)
        self.files.reveal(path)

    def _revealed(self, path):
        idx = self.files.index_of_path(path)
        if not idx.isValid():
            return
        p = idx.parent()
        while p.isValid():
            self.tree.expand(p)
            p = p.parent()
        self.tree.setCurrentIndex(idx)
        self.tree.scrollTo(idx, QAbstractItemView.ScrollHint.PositionAtCenter)
        if getattr(self, "_reveal_check", False):
            self.files.set_checked(idx, 2)

    # ---- search in this image ----------------------------------------------------------------
    def run_search(self):
        image = self.image
        if image is None:
            self.search.status.setText("Select an image to search it.")
            return
        self.search.run(search_image, image["id"], self.search.pattern.text(),
                        self.search.case.isChecked())

    def _show_found(self, r):
        self.search.results.set_rows(r["matches"])
        self.search.status.setText(counted(r, "match", SEARCH_LIMIT) + (
            ". Check the ones to restore." if r["matches"] else "."))
        self.search.size_columns()
        self._found_buttons()

    def _found_buttons(self):
        has = bool(self.search.results.rows)
        for b in (self.check_all, self.uncheck_all, self.show_in_tree):
            b.setEnabled(has)

    def _show_found_in_tree(self):
        rows = self.search.table.selectionModel().selectedRows()
        if not rows:
            return
        row = self.search.proxy.data(rows[0], ROW_ROLE)
        self.reveal(row["path"])

    # ---- find in every image ----------------------------------------------------------------
    def run_find_versions(self):
        if self._client is None:
            self.versions.status.setText("Choose a client first.")
            return
        self.versions.run(find_versions, self._client, self.versions.pattern.text(),
                          self.versions.case.isChecked())

    def _show_versions(self, r):
        self.versions.results.set_rows(r["versions"])
        text = counted(r, "version", VERSIONS_LIMIT)
        if r["versions"]:
            text += ". Click one to open its image at that file."
        if r["errors"]:
            text += f" {len(r['errors'])} image(s) could not be searched: " + "; ".join(
                f"{e['image']}: {e['message']}" for e in r["errors"][:3])
        self.versions.status.setText(text)
        self.versions.size_columns()

    def _version_chosen(self, index):
        row = self.versions.proxy.data(index, ROW_ROLE)
        if row is None:
            return
        self.select_image(row["image"], row["path"])

    def select_image(self, image_id, path=None):
        """Selects an image in the list (showing all dates if it lies outside the chosen
        ones) and, given a path, opens the tree at it and checks it."""
        self._pending_select = (image_id, path)
        self._pending_reloaded = False
        if not self._images_busy:
            self._go_to_version()
        # else _show_images goes on

    def _go_to_version(self):
        image, path = self._pending_select
        if self.select_key(image):
            self._pending_select = None
            if path:
                self.reveal(path, check=True)
        elif not self.all_dates.isChecked():
            self.all_dates.setChecked(True)     # outside the chosen dates: _show_images goes on
        elif not self._pending_reloaded:
            self._pending_reloaded = True       # newer than the list: read it again
            self.load_images()
        else:
            self._pending_select = None

    # ---- point in time ------------------------------------------------------------------------
    def point_in_time(self):
        """The chosen moment as an ISO time, or None for the newest image."""
        if self.point.currentData() != "at":
            return None
        # The edit shows minutes: 20:00 takes in the images made during that minute.
        start = self.at.dateTime().toSecsSinceEpoch()
        return timeutil.iso(start - start % 60 + 59)

    def set_point_in_time(self, when):
        """`when`: None for the newest image, or seconds since the epoch."""
        self.at.blockSignals(True)
        if when is not None:
            self.at.setDateTime(QDateTime.fromSecsSinceEpoch(int(when)))
        self.at.blockSignals(False)
        index = self.point.findData(None if when is None else "at")
        if index != self.point.currentIndex():
            self.point.setCurrentIndex(index)   # _point_changed goes on
        else:
            self._point_changed()

    def _point_changed(self, *_):
        self.at.setEnabled(self.point.currentData() == "at")
        self.go_to_point_in_time()

    def go_to_point_in_time(self):
        """Selects the client's newest image made at or before the chosen moment."""
        if self._client is None:
            return False
        self._point_generation += 1
        gen, at, client = self._point_generation, self.point_in_time(), self._client
        shown = self.at.dateTime().toString(AT_FORMAT) if at else None
        self._point_busy = True
        self.bridge.call(_image_at, client, at,
                         done=lambda image: self._point_found(gen, client, shown, image),
                         failed=lambda err: self._point_failed(gen, err), context=self)
        return True

    def _point_found(self, gen, client, shown, image):
        if gen != self._point_generation:
            return
        self._point_busy = False
        if image is None:
            self._show_message(f"Client {client} has no image at or before {shown}: choose "
                               "a later time, or Newest." if shown else
                               f"Client {client} has no image.", error=True)
            return
        if shown is None:
            self._show_message("")
        else:
            self._show_message(f"The newest image at or before {shown} is {image['id']}, "
                               f"from {fmt.local_time(image['created'])}: its files show the "
                               "client as it was then.")
        self.select_image(image["id"])

    def _point_failed(self, gen, err):
        if gen != self._point_generation:
            return
        self._point_busy = False
        message = getattr(err, "message", str(err))
        self._show_message(f"Cannot find the image of that time: {message}", error=True)

    def _show_message(self, text, error=False):
        self.message.setStyleSheet("color: #b3261e;" if error else "")
        self.message.setText(text)
        self.message.setVisible(bool(text))

    # ---- expire (ui/image_expire.py) ---------------------------------------------------------
    def _context_menu(self, pos):
        if not self.table.indexAt(pos).isValid():
            return
        menu = QMenu(self)
        menu.addAction(self.expire_action)
        menu.addAction(self.image_actions.verify)
        menu.addAction(self.image_actions.rebuild_index)
        menu.popup(self.table.viewport().mapToGlobal(pos))
        self.context_menu = menu

    def expire_selected(self):
        """Asks what goes with the selected image, then for a confirmation (expire_box)."""
        return self.expiry.expire_selected()

    @property
    def expire_box(self):
        """The expire confirmation shown last, or None."""
        return self.expiry.box

    @property
    def expire_job(self):
        """The expire job queued last, or None."""
        return self.expiry.job

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
        settings.setValue("views/restore-browser/splitter", self.splitter.saveState())
        settings.setValue("views/restore-browser/files-header", self.tree.header().saveState())

    def restore_state(self, settings):
        h = settings.value("views/restore-browser/header")
        if h is not None and self.table.horizontalHeader().restoreState(h):
            self._sized = True
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

