"""The restore dialog: where the chosen files go (their original place or a directory on any
registered host), what happens to files already there, and how their paths change on the way
(strip a prefix, add one, rename by pattern). The resulting paths are previewed by the master
before anything runs; a relocation it refuses keeps the Start button disabled and says why."""

import html

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QAbstractItemView, QButtonGroup, QComboBox, QDialog, \
    QDialogButtonBox, QFormLayout, QGridLayout, QGroupBox, QHBoxLayout, QHeaderView, QLabel, \
    QCheckBox, QLineEdit, QPushButton, QRadioButton, QTreeWidget, QTreeWidgetItem, QVBoxLayout

from ui import fmt
from ui.qtcompat import emit
from ui.resources import icon
from ui.wizards.common import Calls
from ui.wizards.dir_browser import DirBrowserDialog

PREVIEW_ROWS = 50
PREVIEW_DELAY_MS = 250

# (label, number of streams; None: the host decides)
STREAM_CHOICES = (
    ("Automatic: one per core, at most 4, for 64 MiB or more", None),
    ("1: one process", 1),
    ("2 processes", 2),
    ("3 processes", 3),
    ("4 processes", 4),
    ("8 processes", 8),
)

OVERWRITE_LABELS = (
    ("skip", "Skip them: keep the files already there"),
    ("overwrite", "Overwrite them with the backed-up version"),
    ("rename", "Keep both: restore beside them as NAME.restored"),
)


def _common_prefix(paths):
    """The deepest directory every path lies under ("" if only "/")."""
    parts = [p.strip("/").split("/")[:-1] for p in paths]
    if not parts:
        return ""
    common = parts[0]
    for p in parts[1:]:
        n = 0
        while n < min(len(common), len(p)) and common[n] == p[n]:
            n += 1
        common = common[:n]
    return "/" + "/".join(common) if common else ""


def _preview(m, image, paths, to, to_host, overwrite, relocate):
    return m.preview_restore(image, paths, to, to_host=to_host, overwrite=overwrite,
                             relocate=relocate, limit=PREVIEW_ROWS)


def _start(m, image, paths, to, to_host, overwrite, relocate, direct_io="auto", streams=None,
           copy=None):
    jid = m.start_restore(image, paths, to, to_host=to_host, overwrite=overwrite,
                          relocate=relocate, direct_io=direct_io, streams=streams, copy=copy)
    return m.job(jid)


#: the copy choice that reads the primary and falls back to the next
ANY_COPY = "The primary copy, or the next copy when it cannot be read"


class RestoreDialog(QDialog):
    #: the restore job was queued (its dict)
    started = Signal(dict)

    def __init__(self, bridge, image, paths, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.image = image
        self.paths = list(paths)
        self.job = None
        self.preview = None          # the last preview that matches the form, or None
        self._generation = 0
        self.setWindowTitle("Restore files")
        self.setWindowIcon(icon("restore"))
        self.setObjectName("restore-dialog")
        self.setMinimumWidth(760)
        self._build_summary()
        dest = self._build_destination()
        streams_row = self._build_write_options()
        reloc = self._build_relocation()
        self._build_preview()
        self._build_buttons()
        self._lay_out(dest, streams_row, reloc)
        self._watch_the_form()
        self._show_destination()
        self._show_streams()
        self.bridge.call(lambda m: [h["name"] for h in m.host_list()],
                         done=self._hosts, context=self)
        self.bridge.call(lambda m, iid: m.image_copies(iid)["copies"], self.image["id"],
                         done=self._copies, context=self)
        self.resize(860, 700)
        self._timer.start()  # the first preview, or what it still needs

    # ---- building the dialog, called in this order by __init__ -------------------------------
    def _build_summary(self):
        """What is restored: the items and the image they come from."""
        e = html.escape
        n = len(self.paths)
        shown = "<br>".join(e(fmt.shown(p)) for p in self.paths[:4])
        if n > 4:
            shown += f"<br>… and {n - 4} more"
        self.summary = QLabel(
            f"<b>{n} item{'s' if n != 1 else ''}</b> from image <b>{e(self.image['id'])}</b> "
            f"(client {e(self.image['client'])}, policy {e(self.image['policy'])}, "
            f"{e(fmt.local_time(self.image['created']))}):<br>{shown}")
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def _build_destination(self):
        """The "Restore to" box: the original location, or a directory on a host."""
        dest = QGroupBox("Restore to")
        self.original = QRadioButton(f"The original location on {self.image['client']}")
        self.elsewhere = QRadioButton("A different location:")
        self.where = QButtonGroup(self)
        self.where.addButton(self.original)
        self.where.addButton(self.elsewhere)
        self.elsewhere.setChecked(True)
        self.host = QComboBox()
        self.host.setObjectName("restore-host")
        self.host.addItem(self.image["client"])
        self.host.setMinimumContentsLength(14)
        self.directory = QLineEdit()
        self.directory.setObjectName("restore-directory")
        self.directory.setPlaceholderText("/restore/target directory")
        self.directory.setClearButtonEnabled(True)
        self.browse_button = QPushButton("&Browse…")
        self.browse_button.setObjectName("restore-browse")
        self.browse_button.setToolTip("Choose the directory on the host, read from its agent")
        self.browse_button.clicked.connect(self.browse)
        self.dest_hint = QLabel()
        self.dest_hint.setWordWrap(True)
        _dim(self.dest_hint)
        grid = QGridLayout(dest)
        grid.addWidget(self.original, 0, 0, 1, 6)
        grid.addWidget(self.elsewhere, 1, 0)
        grid.addWidget(QLabel("Host"), 1, 1)
        grid.addWidget(self.host, 1, 2)
        grid.addWidget(QLabel("Directory"), 1, 3)
        grid.addWidget(self.directory, 1, 4)
        grid.addWidget(self.browse_button, 1, 5)
        grid.addWidget(self.dest_hint, 2, 0, 1, 6)
        grid.setColumnStretch(4, 1)
        return dest

    def _build_write_options(self):
        """What happens to files already there, direct I/O and parallel streams. Returns the
        streams row."""
        self.overwrite = QComboBox()
        self.overwrite.setObjectName("restore-overwrite")
        for key, label in OVERWRITE_LABELS:
            self.overwrite.addItem(label, key)
        self.direct = QCheckBox("Write large files past the page cache (direct I/O) where the "
                                "target's file system suits it")
        self.direct.setObjectName("restore-direct-io")
        self.direct.setChecked(True)
        self.direct.setToolTip(
            "Files of 64 KiB and more go straight to the disk on local and parallel file "
            "systems: less CPU, and the target host keeps what it has cached. Turn it off "
            "where storage is slow to take direct writes (thin-provisioned or remote "
            "volumes). Network, FUSE and in-memory file systems are always written through "
            "the page cache.")
        self.streams = QComboBox()
        self.streams.setObjectName("restore-streams")
        for label, n in STREAM_CHOICES:
            self.streams.addItem(label, n)
        self.streams.setToolTip(
            "When the image and the target are on one host, the files are cut into parts "
            "restored at once by several processes: faster for many files on a target that "
            "takes parallel writes (local disks, parallel file systems).")
        self.copy = QComboBox()
        self.copy.setObjectName("restore-copy")
        self.copy.addItem(ANY_COPY, None)
        self.copy.setToolTip("An image a lifecycle duplicated has a copy in each of its pools: "
                             "by default the restore reads the primary and falls back to the "
                             "next copy (a missing or damaged one, a host that does not "
                             "answer); choose one copy to read it and no other.")
        self.streams_hint = QLabel()
        self.streams_hint.setObjectName("restore-streams-hint")
        self.streams_hint.setWordWrap(True)
        _dim(self.streams_hint)
        streams_row = QHBoxLayout()
        streams_row.addWidget(self.streams)
        streams_row.addWidget(self.streams_hint, 1)
        return streams_row

    def _build_relocation(self):
        """The box that changes the restored paths: strip a prefix, rename, add a prefix."""
        reloc = QGroupBox("Change the restored paths (optional)")
        self.strip = QLineEdit()
        self.strip.setObjectName("restore-strip")
        prefix = _common_prefix(self.paths)
        self.strip.setPlaceholderText(f"e.g. {prefix}" if prefix else "e.g. /data")
        self.strip.setToolTip("A leading directory removed from every path: with /data, "
                              "/data/x is restored as DIR/x")
        self.add = QLineEdit()
        self.add.setObjectName("restore-add")
        self.add.setPlaceholderText("e.g. /restored")
        self.add.setToolTip("A directory put in front of every path")
        self.pattern = QLineEdit()
        self.pattern.setObjectName("restore-pattern")
        self.pattern.setPlaceholderText("e.g. *.log")
        self.replacement = QLineEdit()
        self.replacement.setObjectName("restore-replacement")
        self.replacement.setPlaceholderText("e.g. *.log.old")
        self.mode = QComboBox()
        self.mode.setObjectName("restore-rename-mode")
        self.mode.addItem("glob", "glob")
        self.mode.addItem("regular expression", "regex")
        self.mode.setToolTip(
            "glob: a pattern without / renames each name it matches; one beginning with / "
            "renames the leading directories it matches. Each * or ? of the replacement "
            "takes what the pattern's wildcards matched.\nregular expression: replaces the "
            "first match in the whole path; \\1 refers to a group.")
        rename = QHBoxLayout()
        rename.addWidget(self.pattern, 2)
        rename.addWidget(QLabel("→"))
        rename.addWidget(self.replacement, 2)
        rename.addWidget(self.mode)
        form = QFormLayout(reloc)
        form.addRow("Strip the prefix", self.strip)
        form.addRow("Rename", rename)
        form.addRow("Add the prefix", self.add)
        return reloc

    def _build_preview(self):
        """The preview of the first paths and the status line under it."""
        self.preview_tree = QTreeWidget()
        self.preview_tree.setObjectName("restore-preview")
        self.preview_tree.setHeaderLabels(["In the image", "Restored to"])
        self.preview_tree.setRootIsDecorated(False)
        self.preview_tree.setUniformRowHeights(True)
        self.preview_tree.setAlternatingRowColors(True)
        self.preview_tree.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.preview_tree.header().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        # a path's end is what tells two apart: cut long ones at the start
        self.preview_tree.setTextElideMode(Qt.TextElideMode.ElideLeft)
        self.preview_tree.setMinimumHeight(150)
        self.status = QLabel("Preparing the preview…")
        self.status.setObjectName("restore-status")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def _build_buttons(self):
        self.buttons = QDialogButtonBox()
        self.start_button = self.buttons.addButton("Start restore",
                                                   QDialogButtonBox.ButtonRole.AcceptRole)
        self.start_button.setObjectName("restore-start")
        self.start_button.setIcon(icon("restore"))
        self.start_button.setEnabled(False)
        self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.start)
        self.buttons.rejected.connect(self.reject)

    def _lay_out(self, dest, streams_row, reloc):
        lay = QVBoxLayout(self)
        lay.addWidget(self.summary)
        lay.addWidget(dest)
        over = QFormLayout()
        over.addRow("Files that already exist", self.overwrite)
        over.addRow("Writing", self.direct)
        over.addRow("Parallel streams", streams_row)
        over.addRow("Read from", self.copy)
        lay.addLayout(over)
        lay.addWidget(reloc)
        preview_label = QLabel(f"<b>Preview</b> (the first {PREVIEW_ROWS} paths)")
        preview_label.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(preview_label)
        lay.addWidget(self.preview_tree, 1)
        lay.addWidget(self.status)
        lay.addWidget(self.buttons)

    def _watch_the_form(self):
        """A change to the form asks for a new preview, once typing pauses."""
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(PREVIEW_DELAY_MS)
        self._timer.timeout.connect(self.update_preview)
        for w in (self.directory, self.strip, self.add, self.pattern, self.replacement):
            w.textChanged.connect(self._changed)
        for w in (self.host, self.overwrite, self.mode):
            w.currentIndexChanged.connect(self._changed)
        self.where.buttonToggled.connect(self._changed)

    # ---- the form ---------------------------------------------------------------------------
    def _hosts(self, names):
        current = self.host.currentText()
        self.host.blockSignals(True)
        self.host.clear()
        for n in names:
            self.host.addItem(n)
        i = self.host.findText(current)
        self.host.setCurrentIndex(max(i, 0))
        self.host.blockSignals(False)
        self._show_streams()

    def _copies(self, copies):
        for c in copies:
            self.copy.addItem(icon("lifecycle"), f"Copy {c['copy']} only: disk pool {c['pool']} "
                              f"on {c['storage_host']}", c["copy"])
        self.copy.setEnabled(len(copies) > 1)

    def request(self):
        """(to, to_host, overwrite, relocate) as the form says."""
        relocate = {}
        if self.strip.text().strip():
            relocate["strip"] = self.strip.text().strip()
        if self.add.text().strip():
            relocate["add"] = self.add.text().strip()
        if self.pattern.text():
            relocate["rename"] = {"pattern": self.pattern.text(),
                                  "replacement": self.replacement.text(),
                                  "mode": self.mode.currentData()}
        if self.original.isChecked():
            to, host = "/", self.image["client"]
        else:
            to, host = self.directory.text().strip(), self.host.currentText()
        return to, host, self.overwrite.currentData(), relocate or None

    def _show_destination(self):
        elsewhere = self.elsewhere.isChecked()
        self.host.setEnabled(elsewhere)
        self.directory.setEnabled(elsewhere)
        self.browse_button.setEnabled(elsewhere)
        if elsewhere:
            self.dest_hint.setText("Each path keeps its full name under the directory "
                                   "(/data/x restored to /new becomes /new/data/x) unless "
                                   "changed below.")
        else:
            self.dest_hint.setText("Files go back where they were backed up from; choose "
                                   "what happens to the files there now.")

    def _show_streams(self):
        storage = self.image.get("storage_host")
        host = self.image["client"] if self.original.isChecked() else self.host.currentText()
        if storage and host and host != storage:
            self.streams_hint.setText(f"One stream: the image is on {storage}, the target on "
                                      f"{host}.")
        else:
            self.streams_hint.setText("")

    def _changed(self, *_):
        self._show_destination()
        self._show_streams()
        self.preview = None
        self.start_button.setEnabled(False)
        self._generation += 1
        self._timer.start()

    # ---- preview ----------------------------------------------------------------------------
    def update_preview(self):
        self._timer.stop()
        to, host, overwrite, relocate = self.request()
        gen = self._generation
        if not to:
            self.preview_tree.clear()
            self.status.setText("Type the directory to restore to.")
            return
        self.status.setText("Checking where the files go…")
        self.bridge.call(_preview, self.image["id"], self.paths, to, host, overwrite, relocate,
                         done=lambda r: self._previewed(gen, r),
                         failed=lambda err: self._preview_failed(gen, err), context=self)

    def _previewed(self, gen, r):
        if gen != self._generation:
            return
        self.preview = r
        self.preview_tree.clear()
        host = r["to_host"]
        items = []
        for i in r["items"]:
            path, target = fmt.shown(i["path"]), f"{host}:{fmt.shown(i['target'])}"
            it = QTreeWidgetItem([path + ("/" if i["kind"] == "d" else ""), target])
            it.setToolTip(0, path)
            it.setToolTip(1, target)
            items.append(it)
        self.preview_tree.addTopLevelItems(items)
        more = "" if r["complete"] else \
            f" (the first {r['checked']:,} entries were checked; the rest is checked " \
            "when the restore starts)"
        self.status.setText(f"{r['checked']:,} entries will be restored to "
                            f"{host}:{r['to']}{more}.")
        _plain(self.status)
        self.start_button.setEnabled(True)

    def _preview_failed(self, gen, err):
        if gen != self._generation:
            return
        self.preview = None
        self.preview_tree.clear()
        self.status.setText(f"Cannot restore like this: {err}")
        _error(self.status)
        self.start_button.setEnabled(False)

    def browse(self):
        """A directory of the chosen host, picked from its tree, becomes the target."""
        start = self.directory.text().strip() or "/"
        dlg = DirBrowserDialog(Calls(self.bridge, self), self.host.currentText(), self,
                               start=start, choose_directory=True)
        self.browser = dlg
        dlg.accepted.connect(lambda: dlg.paths() and self.directory.setText(dlg.paths()[0]))
        dlg.open()
        return dlg

    # ---- starting ----------------------------------------------------------------------------
    def start(self):
        if self.preview is None:
            return
        to, host, overwrite, relocate = self.request()
        self.start_button.setEnabled(False)
        self.status.setText("Starting the restore…")
        self.bridge.call(_start, self.image["id"], self.paths, to, host, overwrite, relocate,
                         "auto" if self.direct.isChecked() else "off",
                         self.streams.currentData(), self.copy.currentData(),
                         done=self._started, failed=self._start_failed, context=self)

    def _started(self, job):
        self.job = job
        emit(self.started, job)
        self.accept()

    def _start_failed(self, err):
        self.status.setText(f"The restore did not start: {err}")
        _error(self.status)
        self.start_button.setEnabled(self.preview is not None)


def _dim(label):
    pal = label.palette()
    pal.setColor(label.foregroundRole(), pal.color(pal.ColorRole.PlaceholderText))
    label.setPalette(pal)


def _error(label):
    label.setStyleSheet("color: #b3261e;")


def _plain(label):
    label.setStyleSheet("")
