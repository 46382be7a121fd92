"""Adding an SSH host from a wizard: the host is connected once before it is registered, and
an unknown host key is shown (type and fingerprint) to be accepted or refused by the admin."""

import html
import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout, \
    QLabel, QLineEdit, QPushButton, QSpinBox, QStackedWidget, QVBoxLayout, QWidget

from app.config import ADDRESS_RE
from app.errors import HostKeyUnknown
from ui.resources import icon
from ui.wizards.common import StatusLine, name_problem, note


def _add_host(m, spec):
    """Registers the host after connecting to it; an untrusted key comes back as data (the
    bridge would pass on only its message) so that it can be shown for acceptance."""
    try:
        return {"host": m.add_host(spec["name"], address=spec["address"], port=spec["port"],
                                   user=spec["user"], key_file=spec["key_file"], check=True)}
    except HostKeyUnknown as e:
        return {"unknown_key": {"fingerprint": e.fingerprint, "key_type": e.key_type}}


def _add_host_trusting(m, spec, fingerprint):
    return {"host": m.add_host_trusting_key(
        spec["name"], fingerprint, address=spec["address"], port=spec["port"], user=spec["user"],
        key_file=spec["key_file"])}


class AddHostDialog(QDialog):
    """Name, address, port, user and key file of a new SSH host. `host` holds the registered
    host after the dialog was accepted."""

    def __init__(self, calls, parent=None):
        super().__init__(parent)
        self.calls = calls
        self.host = None
        self.unknown_key = None
        self.existing = set()
        self._loading = True
        self.setWindowTitle("Add a host")
        self.setWindowIcon(icon("host"))
        self.setMinimumWidth(560)

        self.name = QLineEdit()
        self.name.setPlaceholderText("e.g. gpfs-node1")
        self.address = QLineEdit()
        self.address.setPlaceholderText("host name or IP address")
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(22)
        self.user = QLineEdit()
        self.user.setPlaceholderText("the user running the console")
        self.key_file = QLineEdit()
        self.key_file.setPlaceholderText("default keys and the SSH agent")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._pick_key)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key_file, 1)
        key_row.addWidget(browse)

        form = QFormLayout()
        form.addRow("&Name:", self.name)
        form.addRow("&Address:", self.address)
        form.addRow("&Port:", self.port)
        form.addRow("&User:", self.user)
        key_label = QLabel("&Key file:")
        key_label.setBuddy(self.key_file)  # a row of two widgets gets no buddy by itself
        form.addRow(key_label, key_row)
        fields = QWidget()
        fl = QVBoxLayout(fields)
        fl.setContentsMargins(0, 0, 0, 0)
        fl.addLayout(form)
        fl.addWidget(note("The host is connected once before it is added, so that a wrong "
                          "address, a refused key or an untrusted host key shows up now."))
        fl.addStretch(1)

        # The host key page: shown when the host presents a key not trusted yet.
        self.key_text = QLabel()
        self.key_text.setWordWrap(True)
        self.key_text.setTextFormat(Qt.TextFormat.RichText)
        self.key_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        key_page = QWidget()
        kl = QVBoxLayout(key_page)
        kl.setContentsMargins(0, 0, 0, 0)
        kl.addWidget(self.key_text)
        kl.addStretch(1)

        self.pages = QStackedWidget()
        self.pages.addWidget(fields)
        self.pages.addWidget(key_page)

        self.status = StatusLine()
        self.buttons = QDialogButtonBox()
        self.add_button = self.buttons.addButton("&Add host",
                                                 QDialogButtonBox.ButtonRole.AcceptRole)
        self.trust_button = self.buttons.addButton("&Trust this key and add the host",
                                                   QDialogButtonBox.ButtonRole.AcceptRole)
        self.back_button = self.buttons.addButton("&Back",
                                                  QDialogButtonBox.ButtonRole.ResetRole)
        self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.add_button.clicked.connect(self._add)
        self.trust_button.clicked.connect(self._trust)
        self.back_button.clicked.connect(self._edit_again)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(self.pages, 1)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)

        for w in (self.name, self.address, self.user, self.key_file):
            w.textChanged.connect(self._revalidate)
        self._show_fields()
        self.status.busy("Loading the registered hosts…")
        self.calls.run(lambda m: [h["name"] for h in m.host_list()],
                       done=self._hosts_loaded, failed=self._hosts_failed, context=self)

    # ---- input ------------------------------------------------------------------------------
    def _pick_key(self):
        start = os.path.expanduser("~/.ssh")
        path, _ = QFileDialog.getOpenFileName(self, "Private key file", start)
        if path:
            self.key_file.setText(path)

    def spec(self):
        return {"name": self.name.text().strip(), "address": self.address.text().strip(),
                "port": self.port.value(), "user": self.user.text().strip() or None,
                "key_file": self.key_file.text().strip() or None}

    def problem(self):
        s = self.spec()
        p = name_problem("host", s["name"], self.existing)
        if p:
            return p
        if not s["address"]:
            return "Give the host's address (a host name or IP address)."
        if not ADDRESS_RE.match(s["address"]):
            return f"'{s['address']}' is not a host name or IP address."
        if s["key_file"]:
            path = os.path.abspath(os.path.expanduser(s["key_file"]))
            if not os.path.isfile(path):
                return f"The key file {path} does not exist."
            if not os.access(path, os.R_OK):
                return f"The key file {path} is not readable."
        return None

    def _revalidate(self, *_):
        if self._loading:
            return
        p = self.problem()
        if p:
            self.status.problem(p)
        elif self.status.kind in ("problem", "busy"):
            self.status.clear()
        self.add_button.setEnabled(p is None)

    def _hosts_loaded(self, names):
        self.existing = set(names)
        self._loading = False
        self.status.clear()
        self._revalidate()

    def _hosts_failed(self, error):
        self._loading = False
        self.status.error(error, "The registered hosts could not be read")

    # ---- connecting --------------------------------------------------------------------------
    def _set_working(self, working):
        for w in (self.name, self.address, self.port, self.user, self.key_file):
            w.setEnabled(not working)
        self.add_button.setEnabled(not working and self.problem() is None)
        self.trust_button.setEnabled(not working)
        self.back_button.setEnabled(not working)

    def _add(self):
        if self.problem() is not None:
            return
        s = self.spec()
        self._set_working(True)
        self.status.busy(f"Connecting to {s['address']}:{s['port']}…")
        self.calls.run(_add_host, s, done=self._added, failed=self._failed, context=self)

    def _trust(self):
        s = self.spec()
        self._set_working(True)
        self.status.busy(f"Trusting the key and connecting to {s['address']}…")
        self.calls.run(_add_host_trusting, s, self.unknown_key["fingerprint"],
                       done=self._added, failed=self._failed, context=self)

    def _added(self, result):
        self._set_working(False)
        if "unknown_key" in result:
            self.unknown_key = result["unknown_key"]
            self._show_key()
            return
        self.host = result["host"]
        self.accept()

    def _failed(self, error):
        self._set_working(False)
        self._show_fields()
        self.status.error(error, "The host was not added")

    def _show_key(self):
        s, k = self.spec(), self.unknown_key
        self.key_text.setText(
            f"<p><b>{html.escape(s['address'])}</b> (port {s['port']}) presents a host key that "
            "is not trusted yet:</p>"
            f"<p style='margin-left:16px'>Key type: <b>{html.escape(k['key_type'])}</b><br>"
            f"Fingerprint: <b><code>{html.escape(k['fingerprint'])}</code></b></p>"
            "<p>Compare it with the fingerprint the host's administrator reads on the host "
            "(<code>ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub</code>). Trust it only if they "
            "match: a different key may mean someone is intercepting the connection.</p>")
        self.pages.setCurrentIndex(1)
        self.add_button.hide()
        self.trust_button.show()
        self.back_button.show()
        self.status.clear()

    def _show_fields(self):
        self.pages.setCurrentIndex(0)
        self.add_button.show()
        self.trust_button.hide()
        self.back_button.hide()
        self._revalidate()

    def _edit_again(self):
        self.unknown_key = None
        self._show_fields()
