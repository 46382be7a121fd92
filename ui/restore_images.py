"""The restore page's list of backup images: the client and the dates above it (`bar`, laid
out by the page), the images of that client in those dates, newest first, and what the list
does besides restoring (its context menu: expire, verify, rebuild index). Expiring is
ui/image_expire.py, the columns ui/image_columns.py. An image asked for by id (a version
found, a point in time) is selected once listed, the dates widened when it lies outside
them."""

import html
from datetime import datetime, time as dtime, timezone

from PySide6.QtCore import QDate, Qt, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QDateEdit, QHBoxLayout, QLabel, QMenu, \
    QToolButton, QVBoxLayout, QWidget

from app import timeutil
from ui import fmt
from ui.image_columns import IMAGE_COLUMNS
from ui.image_copies import CopiesDialog
from ui.image_expire import ImageExpiry
from ui.models import ObjectTableModel
from ui.object_actions import ImageActions
from ui.qtcompat import emit
from ui.resources import icon
from ui.restore_search import sorted_table
from ui.tables import HandWidths, select_keys, selected_rows
from ui.views import Placeholder

DEFAULT_DAYS = 30

EMPTY = ("No backup images yet: they appear here after a backup (Policies page, "
         "<b>Back up now</b>).<br><br><small>In a shell: <code>cairn backup POLICY --wait"
         "</code></small>")


def _day_bounds(since, until):
    """ISO times of the start of day `since` and the end of day `until` (local dates)."""
    lo = datetime.combine(since, dtime.min).astimezone(timezone.utc)
    hi = datetime.combine(until, dtime.max).astimezone(timezone.utc)
    return timeutil.iso(lo.timestamp()), timeutil.iso(hi.timestamp())


def _images(m, client, since, until):
    return m.images_in_range(client=client, since=since, until=until)


class ImageList(QWidget):
    """The images table (with its placeholder and context menu); `bar` is the client and the
    dates it lists, `expire_button` the Expire tool button, both for the page to lay out.
    The page hands it the clients it polled (set_clients) and selects images by id
    (select_image)."""

    #: the images were listed, or could not be (the placeholder says why)
    listed = Signal()
    #: another client was chosen (its name, or None when there is none); its images are
    #: being read
    client_changed = Signal(object)
    #: an image asked for with a path (select_image) is selected: the path to open and check
    reveal_requested = Signal(str)
    #: a sentence for the page's message line, and whether it tells of an error
    message = Signal(str, bool)

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.setObjectName("restore-images")
        self.bridge = bridge
        self.error = None
        self.client_name = None         # the client listed, or None when there is none
        self._busy = False
        self._again = False
        self._clients_loaded = False
        self._newest = {}               # client: its newest image's time
        self._pending_select = None     # (image id, path or None) to select once listed
        self._pending_reloaded = False
        self._sized = False
        self.context_menu = None
        self.copies_dialog = None
        # ---- what the image list does besides restoring: expire, verify, rebuild index
        self.expiry = ImageExpiry(self, self._say)
        self.expire_action = self.expiry.action
        self.bar = self._make_bar()
        self.expire_button = self._make_expire_button()
        self._make_table()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.table)
        self.client.currentIndexChanged.connect(self._client_changed)
        self.since.dateChanged.connect(self._dates_changed)
        self.until.dateChanged.connect(self._dates_changed)
        self.all_dates.toggled.connect(self._dates_changed)
        self._set_dates(None)
        self.update_placeholder()

    def _make_bar(self):
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

    def _make_expire_button(self):
        expire = QToolButton()
        expire.setObjectName("expire-button")
        expire.setDefaultAction(self.expire_action)
        expire.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        expire.setAutoRaise(True)
        return expire

    def _make_table(self):
        self.model = ObjectTableModel(IMAGE_COLUMNS, key="id", parent=self)
        self.table, self.proxy = sorted_table(self.model, "restore-table")
        self.widths = HandWidths(self.table.horizontalHeader())
        self.proxy.setDynamicSortFilter(True)
        self.proxy.setSortCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.image_actions = ImageActions(self)
        self.placeholder = Placeholder(self.table)
        self.placeholder.setText("Loading…")

    # ---- the clients, polled by the page -----------------------------------------------------
    @property
    def loaded(self):
        return self._clients_loaded and self.model.loaded

    @property
    def busy(self):
        """The images are being read."""
        return self._busy

    def set_clients(self, clients):
        """The clients that have images (the master's image_clients()): lists them and reads
        the images of the one chosen."""
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
        if self.client.currentText() != self.client_name:
            self._client_changed()
        else:
            self.load()

    def clients_failed(self, err):
        self.error = str(err)
        self._clients_loaded = True
        self.model.set_rows([])
        self.update_placeholder()
        emit(self.listed)

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
        self.client_name = self.client.currentText() or None
        self._set_dates(self._newest.get(self.client_name))
        self.load()
        emit(self.client_changed, self.client_name)

    def _dates_changed(self, *_):
        on = not self.all_dates.isChecked()
        self.since.setEnabled(on)
        self.until.setEnabled(on)
        if self.since.date() > self.until.date():
            self.until.blockSignals(True)
            self.until.setDate(self.since.date())
            self.until.blockSignals(False)
        self.load()

    def date_range(self):
        """(since, until) ISO times of the chosen range; (None, None) for all dates."""
        if self.all_dates.isChecked():
            return None, None
        return _day_bounds(self.since.date().toPython(), self.until.date().toPython())

    def load(self):
        """Reads the chosen client's images in the chosen dates."""
        if self._busy:
            self._again = True
            return
        if self.client_name is None:
            self.model.set_rows([])
            self.update_placeholder()
            emit(self.listed)
            return
        self._busy = True
        since, until = self.date_range()
        self.bridge.call(_images, self.client_name, since, until, done=self._show_images,
                         failed=self._images_failed, context=self)

    def _show_images(self, rows):
        self._busy = False
        if self._again:
            self._again = False
            self.load()
            return
        self.model.set_rows(rows)
        self.update_placeholder()
        if self._pending_select:
            self._go_to_version()
        # An image still to be found (beyond these dates) is selected once listed; until
        # then the tree keeps what it shows.
        if not self.table.selectionModel().hasSelection() and rows \
                and not self._pending_select:
            self.table.selectRow(0)
        self._size_columns()
        emit(self.listed)

    def _images_failed(self, err):
        self._busy = False
        self.error = str(err)
        self.update_placeholder()
        emit(self.listed)

    def _size_columns(self):
        if self._sized or not self.model.rowCount():
            return
        self._sized = True
        hh = self.table.horizontalHeader()
        with self.widths.fitting():
            self.table.resizeColumnsToContents()
            for c in range(self.model.columnCount()):
                hh.resizeSection(c, hh.sectionSize(c) + 12)
            hh.setStretchLastSection(True)

    def restore_header(self, state, by_hand):
        """Puts back the columns as the page saved them; widths the admin chose are not
        sized again."""
        if self.widths.restore(state, by_hand):
            self._sized = self.widths.by_hand

    def update_placeholder(self):
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

    # ---- the image selected -------------------------------------------------------------------
    def selected_rows(self):
        return selected_rows(self.table)

    def select_key(self, key):
        return select_keys(self.table, self.model, [key])

    @property
    def image(self):
        rows = self.selected_rows()
        return rows[0] if rows else None

    def select_image(self, image_id, path=None):
        """Selects an image in the list (showing all dates if it lies outside the chosen
        ones) and, given a path, asks for it to be opened and checked (reveal_requested)."""
        self._pending_select = (image_id, path)
        self._pending_reloaded = False
        if not self._busy:
            self._go_to_version()
        # else _show_images goes on

    def _go_to_version(self):
        image, path = self._pending_select
        if self.select_key(image):
            self._pending_select = None
            if path:
                emit(self.reveal_requested, path)
        elif not self.all_dates.isChecked():
            self.all_dates.setChecked(True)     # outside the chosen dates: _show_images goes on
        elif not self._pending_reloaded:
            self._pending_reloaded = True       # newer than the list: read it again
            self.load()
        else:
            self._pending_select = None

    # ---- expire (ui/image_expire.py), verify, rebuild index ------------------------------------
    def _context_menu(self, pos):
        if not self.table.indexAt(pos).isValid():
            return
        menu = QMenu(self)
        menu.addAction(icon("lifecycle"), "Copies…", self.show_copies)
        menu.addAction(self.expire_action)
        menu.addAction(self.image_actions.verify)
        menu.addAction(self.image_actions.rebuild_index)
        menu.popup(self.table.viewport().mapToGlobal(pos))
        self.context_menu = menu

    def show_copies(self):
        """The selected image's copies, in a window of their own."""
        image = self.image
        if image is None:
            return None
        dlg = CopiesDialog(self.bridge, image, self.window())
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.copies_dialog = dlg
        dlg.open()
        return dlg

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

    def _say(self, text, error=False):
        emit(self.message, text, error)
