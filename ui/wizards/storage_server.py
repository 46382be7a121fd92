"""The storage server wizard: storage type, host, storage path (a cloud pool's: its cache)
and, for a deduplicating server, encryption at rest and the chunk size; for a pool in a
bucket, the bucket and its credentials (bucket_page.py); then the name. The result page names
the encryption key to back up and any warning about the storage path (a network file system)
or the bucket (a pool there already)."""

from PySide6.QtWidgets import QButtonGroup, QCheckBox, QComboBox, QFormLayout, QHBoxLayout, \
    QLabel, QLineEdit, QPushButton, QRadioButton

from app.config import check_abs_path
from app.errors import ValidationError
from plugins.storage import registry
from plugins.storage.dedup.chunker import DEFAULT_AVG_SIZE
from ui.resources import icon
from ui.wizards.bucket_page import BucketPage, bucket_summary
from ui.wizards.common import Page, ResultPage, StatusLine, SummaryPage, WizardBase, \
    fit_combo, name_problem, narrow, note
from ui.wizards.host_dialog import AddHostDialog

TYPE_PAGE, HOST_PAGE, PATH_PAGE, BUCKET_PAGE, NAME_PAGE, SUMMARY_PAGE, RESULT_PAGE = range(7)

KiB = 1024
#: the average chunk sizes offered for a deduplicating server; min and max follow from it
CHUNK_SIZES = (128 * KiB, 256 * KiB, 512 * KiB, 1024 * KiB)
DEFAULT_CHUNK_SIZE = DEFAULT_AVG_SIZE
CIPHER = "AES-256-GCM"


def storage_types():
    """[(type, one-sentence description, reason it is unavailable or None)]. Types named but
    not shipped (plugins.storage.registry.PLANNED) are listed disabled, with their reason."""
    types = [(name, t.description, None) for name, t in registry.TYPES.items()]
    types += [(name, "", reason) for name, reason in registry.PLANNED.items()
              if name not in registry.TYPES]
    return types


def size_text(n):
    """`512 KiB`, `2 MiB`: chunk sizes are whole powers of two."""
    if n >= 1024 * KiB and n % (1024 * KiB) == 0:
        return f"{n // (1024 * KiB)} MiB"
    return f"{n // KiB} KiB" if n % KiB == 0 else f"{n} bytes"


def chunk_options(avg_size, encrypted):
    """The dedup server's options for an average chunk size: the smallest chunk a quarter
    of it, the largest four times it (the chunker's defaults keep that ratio)."""
    return {"encrypted": bool(encrypted), "min_size": avg_size // 4, "avg_size": avg_size,
            "max_size": avg_size * 4}


def chunk_text(options):
    return (f"{size_text(options['avg_size'])} on average ({size_text(options['min_size'])} "
            f"to {size_text(options['max_size'])})")


def result_notes(result):
    """What the admin must know after creating a storage server, apart from success:
    [(kind, text)] with kind "key" (the encryption key file to back up) or "warning" (a
    problem of the storage path, such as a network file system). The server exists either
    way."""
    notes = []
    if result.get("key_file"):
        notes.append(("key", f"Back up the encryption key {result['key_file']} now and keep "
                             "the copy away from the storage server: without it the pool's "
                             "backups cannot be read, and the master does not keep a second "
                             "copy."))
    for w in result.get("warnings") or []:
        notes.append(("warning", f"Warning: {w}"))
    return notes


def needs_path(type_name):
    plugin = registry.get(type_name)
    return plugin.needs_path if plugin is not None else type_name in registry.PLANNED


def has_chunks(type_name):
    """Whether servers of the type have chunk sizes and encryption at rest to choose."""
    return registry.can(type_name, "dedup")


def has_bucket(type_name):
    """Whether servers of the type keep their pool in a bucket (endpoint, credentials)."""
    return registry.can(type_name, "bucket")


def default_path(type_name):
    """The storage path a server of the type gets when none is given, NAME standing for its
    name, or None."""
    plugin = registry.get(type_name)
    return plugin.default_path("NAME") if plugin is not None else None


class TypePage(Page):
    def __init__(self):
        super().__init__("Storage type", "How the storage server keeps backup images.")
        self.group = QButtonGroup(self)
        self.buttons = {}
        for name, description, unavailable in storage_types():
            b = QRadioButton(name)
            b.setEnabled(unavailable is None)
            self.group.addButton(b)
            self.buttons[name] = b
            self.body.addWidget(b)
            text = " ".join(t for t in (description, f"Not available: {unavailable}."
                                        if unavailable else "") if t)
            d = note(text)
            d.setContentsMargins(24, 0, 0, 10)
            d.setEnabled(unavailable is None)
            self.body.addWidget(d)
        self.body.addStretch(1)
        first = next(b for b in self.buttons.values() if b.isEnabled())
        first.setChecked(True)
        self.group.buttonToggled.connect(self.revalidate)

    def type_name(self):
        b = self.group.checkedButton()
        return b.text() if b else None

    def problem(self):
        return None if self.type_name() else "Choose a storage type."


class HostPicker:
    """A combo box of the registered hosts with an "Add a host…" button beside it."""

    def __init__(self, page, label="Host", on_change=None):
        self.page = page
        self.on_change = on_change
        self.combo = fit_combo(QComboBox())
        self.add_button = QPushButton("Add a host…")
        self.add_button.clicked.connect(self.add_host)
        self.detail = note("")
        row = QHBoxLayout()
        row.addWidget(self.combo, 1)
        row.addWidget(self.add_button)
        self.form = QFormLayout()
        # a row of several widgets has no buddy of its own: the label names the combo box
        caption = QLabel(f"&{label}:")
        caption.setBuddy(self.combo)
        self.form.addRow(caption, row)
        self.form.addRow("", self.detail)
        self.hosts = {}
        self.combo.currentIndexChanged.connect(self._changed)

    def load(self, select=None):
        self.page.start_loading("Loading the registered hosts…")
        self.page.call(lambda m: m.host_list(), done=lambda hosts: self._loaded(hosts, select),
                       failed=self.page.loaded)

    def _loaded(self, hosts, select):
        current = select or self.name()
        self.hosts = {h["name"]: h for h in hosts}
        self.combo.blockSignals(True)
        self.combo.clear()
        for h in hosts:
            self.combo.addItem(h["name"])
        i = self.combo.findText(current) if current else -1
        self.combo.setCurrentIndex(i if i >= 0 else 0 if hosts else -1)
        self.combo.blockSignals(False)
        self._changed()
        self.page.loaded()

    def name(self):
        return self.combo.currentText() or None

    def _changed(self, *_):
        h = self.hosts.get(self.name())
        if h is None:
            self.detail.setText("")
        elif h["kind"] == "local":
            self.detail.setText("This machine, reached without SSH.")
        else:
            self.detail.setText(f"Reached over SSH as {h.get('user') or 'the console user'}@"
                                f"{h['address']}:{h.get('port') or 22}.")
        if self.on_change is not None:
            self.on_change()
        self.page.revalidate()

    def add_host(self):
        dlg = AddHostDialog(self.page.wizard_calls(), self.page)
        self.page.host_dialog = dlg
        dlg.accepted.connect(lambda: self.load(select=dlg.host["name"]))
        dlg.open()


class HostPage(Page):
    def __init__(self):
        super().__init__("Host", "The machine whose file systems hold the backup images. Its "
                                 "agent writes the images; clients send their data to it.")
        self.picker = HostPicker(self, on_change=self._host_changed)
        self.reached = note("")
        self.picker.form.addRow("", self.reached)
        self.body.addLayout(self.picker.form)
        self.body.addStretch(1)
        self.host_dialog = None
        self._loaded_once = False
        # host -> its probe, or the error that reaching it gave: the host is asked once it is
        # chosen, as the disk pool wizard asks for its volumes, so that a storage server is
        # not made on a host that does not answer
        self.probes = {}
        self.probing = None

    def initializePage(self):
        if not self._loaded_once:
            self._loaded_once = True
            self.picker.load(self.wizard().preset.get("host"))

    def _host_changed(self):
        name = self.picker.name()
        if not name or name in self.probes:
            self._show_probe()
            return
        self.probing = name
        self.reached.setText(f"Asking host {name}…")
        self.call(lambda m, n: m.probe_host(n), name,
                  done=lambda r: self._probed(name, r), failed=lambda e: self._probed(name, e))

    def _probed(self, name, result):
        self.probes[name] = result
        if self.probing == name:
            self.probing = None
        self._show_probe()
        self.revalidate()

    def _show_probe(self):
        r = self.probes.get(self.picker.name())
        if r is None or isinstance(r, BaseException):
            self.reached.setText("")
            return
        os_name = r.get("os")
        fs = len(r.get("filesystems") or [])
        self.reached.setText(f"The host answered: {os_name or 'unknown system'}, Python "
                             f"{r.get('python') or '?'}, {fs} file system"
                             f"{'s' if fs != 1 else ''} mounted.")

    def isComplete(self):
        return super().isComplete() and self.probing is None

    def problem(self):
        if not self.picker.hosts:
            return "No host is registered yet: add one with “Add a host…”."
        name = self.picker.name()
        if not name:
            return "Choose a host."
        r = self.probes.get(name)
        if self.probing == name:
            return f"Asking host {name}…"
        if isinstance(r, BaseException):
            text = getattr(r, "message", None) or str(r)
            hint = getattr(r, "hint", None)
            return (f"Host {name} cannot be reached: {text}"
                    + (f" ({hint})" if hint else "") + ". Check it, or choose another host.")
        return None

    def nextId(self):
        return PATH_PAGE if needs_path(self.wizard().type_page.type_name()) else NAME_PAGE


class PathPage(Page):
    def __init__(self):
        super().__init__("Storage path", "The directory on the host where this storage type "
                                         "keeps its data.")
        self.path = QLineEdit()
        self.path.setPlaceholderText("/gpfs/fs1/cairn-dedup")
        self.path_note = note("Created on the host if it does not exist. Prefer a local or "
                              "parallel file system (such as GPFS) to NFS or CIFS: the pool "
                              "reads its chunks at random and locks its index.")

        # Settings of a deduplicating server, fixed once it is created.
        self.encrypted = QCheckBox(f"&Encrypt chunks at rest ({CIPHER})")
        self.encrypted.setToolTip("Every chunk is encrypted before it is written; the key "
                                  "stays on the master and is handed to the storage server's "
                                  "agent with each request.")
        self.chunk_size = narrow(QComboBox(), 200)
        for n in CHUNK_SIZES:
            self.chunk_size.addItem(size_text(n) + (" (default)" if n == DEFAULT_CHUNK_SIZE
                                                    else ""), n)
        self.chunk_size.setCurrentIndex(CHUNK_SIZES.index(DEFAULT_CHUNK_SIZE))
        self.form = QFormLayout()
        self.form.addRow("&Path:", self.path)
        self.form.addRow("", self.path_note)
        first = self.form.rowCount()
        self.form.addRow("", self.encrypted)
        self.form.addRow("", note("The key is kept on the master, not in the pool: back it up "
                                  "with the catalog, since without it nothing in the pool can "
                                  "be read."))
        self.form.addRow("Average &chunk size:", self.chunk_size)
        self.form.addRow("", note("Smaller chunks find more repeated data but make the chunk "
                                  "index bigger. Fixed once the pool exists."))
        self.dedup_rows = range(first, self.form.rowCount())
        self.body.addLayout(self.form)
        self.body.addStretch(1)
        self.path.textChanged.connect(self.revalidate)
        self.chunk_size.currentIndexChanged.connect(self.revalidate)

    def initializePage(self):
        t = self.wizard().type_page.type_name()
        chunked = has_chunks(t)
        cache = has_bucket(t)
        self.setTitle(("Cache" if cache else "Storage path")
                      + (" and deduplication" if chunked else ""))
        self.form.labelForField(self.path).setText("&Cache directory:" if cache else "&Path:")
        self.path_note.setText(
            "The local cache of the pool on the host: backups land here, recent containers "
            f"stay. Empty: {default_path(t)}. Prefer a local file system." if cache else
            "Created on the host if it does not exist. Prefer a local or parallel file system "
            "(such as GPFS) to NFS or CIFS: the pool reads its chunks at random and locks its "
            "index.")
        for row in self.dedup_rows:
            self.form.setRowVisible(row, chunked)
        self.revalidate()

    def options(self):
        """The server's options, or None for a type without any."""
        if not has_chunks(self.wizard().type_page.type_name()):
            return None
        return chunk_options(self.chunk_size.currentData(), self.encrypted.isChecked())

    def problem(self):
        t = self.wizard().type_page.type_name() if self.wizard() is not None else None
        try:
            if self.path.text().strip() or default_path(t) is None:
                check_abs_path("storage path", self.path.text().strip())
        except ValidationError as e:
            return e.message[0].upper() + e.message[1:] + "."
        if has_bucket(t):
            return None  # its options are checked with the bucket's, on the next page
        if self.wizard() is not None and self.options() is not None:
            try:
                registry.get(self.wizard().type_page.type_name()).check_options(
                    self.options())
            except ValidationError as e:
                return e.message[0].upper() + e.message[1:] + (f": {e.hint}." if e.hint
                                                               else ".")
        return None

    def nextId(self):
        return BUCKET_PAGE if has_bucket(self.wizard().type_page.type_name()) else NAME_PAGE


class NamePage(Page):
    def __init__(self):
        super().__init__("Name", "The name policies and disk pools know the storage server by.")
        self.name = QLineEdit()
        form = QFormLayout()
        form.addRow("&Name:", self.name)
        self.body.addLayout(form)
        self.body.addStretch(1)
        self.existing = set()
        self._suggested = ""
        self.name.textChanged.connect(self.revalidate)

    def initializePage(self):
        host = self.wizard().host()
        if not self.name.text() or self.name.text() == self._suggested:
            t = self.wizard().type_page.type_name()
            kind = "cloud" if has_bucket(t) else "dedup" if has_chunks(t) else "disk"
            self._suggested = f"{host}-{kind}" if host else ""
            self.name.setText(self._suggested)
        self.start_loading("Loading the storage servers…")
        self.call(lambda m: [s["name"] for s in m.storage_servers()],
                  done=self._names, failed=self.loaded)

    def _names(self, names):
        self.existing = set(names)
        self.loaded()

    def problem(self):
        return name_problem("storage server", self.name.text().strip(), self.existing)


class ServerResultPage(ResultPage):
    """The result page, plus what to do about the new server: back up its encryption key,
    heed a warning about its storage path. Those show under the success line, each with a
    warning sign: the server was created, they are not errors."""

    def __init__(self, what):
        super().__init__(what)
        self.notes = []
        self.note_lines = []
        self._at = self.body.count() - 1     # above the closing stretch

    def initializePage(self):
        self.show_notes([])
        super().initializePage()

    def _created(self, result):
        super()._created(result)
        self.show_notes(result_notes(result))

    def show_notes(self, notes):
        for line in self.note_lines:
            line.setParent(None)
            line.deleteLater()
        self.notes, self.note_lines = list(notes), []
        for n, (kind, text) in enumerate(self.notes):
            line = StatusLine()
            line.setObjectName(f"result-{kind}")
            # in the page first: shown before it has a parent, it would be a window
            self.body.insertWidget(self._at + n, line)
            line.info(text)
            line.icon.setPixmap(icon("wizard-problem").pixmap(16, 16))
            line.icon.setVisible(True)
            line.kind = kind
            self.note_lines.append(line)

    def notes_text(self):
        return "\n".join(line.plain_text() for line in self.note_lines)


class StorageServerWizard(WizardBase):
    KIND, WHAT, KIND_ICON = "storage-server", "storage server", "storage-server"

    def __init__(self, bridge, parent=None, **preset):
        super().__init__(bridge, parent)
        self.preset = preset
        self.setWindowTitle("New storage server")
        self.type_page = self.add(TYPE_PAGE, TypePage())
        self.host_page = self.add(HOST_PAGE, HostPage())
        self.path_page = self.add(PATH_PAGE, PathPage())
        self.bucket_page = self.add(BUCKET_PAGE, BucketPage())
        self.name_page = self.add(NAME_PAGE, NamePage())
        self.summary_page = self.add(SUMMARY_PAGE, SummaryPage(self.WHAT))
        self.result_page = self.add(RESULT_PAGE, ServerResultPage(self.WHAT))
        if preset.get("name"):
            self.name_page.name.setText(preset["name"])

    def host(self):
        return self.host_page.picker.name()

    def storage_type(self):
        return registry.get(self.type_page.type_name())

    def spec(self):
        t = self.type_page.type_name()
        options = self.path_page.options() if needs_path(t) else None
        credentials = None
        if has_bucket(t):
            options = dict(options or {}, **self.bucket_page.options())
            credentials = self.bucket_page.credentials()
        return {"name": self.name_page.name.text().strip(), "type": t, "host": self.host(),
                "path": (self.path_page.path.text().strip() or None) if needs_path(t) else None,
                "options": options, "credentials": credentials}

    def summary(self):
        s = self.spec()
        rows = [("Name", s["name"]), ("Type", s["type"]), ("Host", s["host"])]
        if has_bucket(s["type"]):
            rows.append(("Cache directory", s["path"] or registry.get(
                s["type"]).default_path(s["name"])))
        elif s["path"]:
            rows.append(("Storage path", s["path"]))
        o = s["options"]
        if o is not None:
            rows.append(("Encryption at rest",
                         f"yes, {CIPHER}; the key is made on the master" if o["encrypted"]
                         else "no"))
            rows.append(("Chunk size", chunk_text(o)))
        if s["credentials"] is not None:
            rows += bucket_summary(o, s["credentials"])
        return rows

    def create_call(self):
        return _create_server, (self.spec(),)

    def created_name(self):
        return self.spec()["name"]

    def result_text(self, result):
        if registry.can(result.get("type"), "one_pool"):
            return (f"Create its disk pool with the disk pool wizard: the storage path "
                    f"{result['path']} is the pool's one volume.")
        return (f"Disk pools can now use the file systems of {result['host']}: create one "
                "with the disk pool wizard.")


def _create_server(m, s):
    """create_storage_server; an encrypted server's result names its key file to back up."""
    return m.create_storage_server(s["name"], type=s["type"], host=s["host"], path=s["path"],
                                   options=s["options"], credentials=s.get("credentials"))
