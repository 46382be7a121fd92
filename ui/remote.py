"""The console on a master over SSH (`cairn console --master [USER@]HOST[:PORT]`): connecting
(an unknown host key shown with its fingerprint and trusted only when the user confirms it,
a password asked for on the UI thread), the masters connected to before (each with the SSH
key and the command it was reached with), File ▸ Open a master…, and what the title and the
status bar call the master.

The SSH client loads when a remote master is opened, not with the console: the embedded
default never needs it. Nothing here or in what it loads is POSIX-only."""

import os
import sys

from PySide6.QtCore import QProcess, Qt, QThread
from PySide6.QtWidgets import QApplication, QComboBox, QDialog, QDialogButtonBox, QFileDialog, \
    QFormLayout, QHBoxLayout, QInputDialog, QLabel, QLineEdit, QMessageBox, QPushButton, \
    QVBoxLayout

from app.errors import HostKeyUnknown, ValidationError
from app.paths import Home
from app.remote import target
from app.terminal_text import escape
from app.transport import hostkeys
from ui.settings import settings

RECENT_KEY = "masters/recent"
#: {master: {"identity": FILE, "command": CMD}}: how each recent master was reached
OPTIONS_KEY = "masters/options"
RECENT_KEEP = 8


def open_master(home, where, identity=None, trust_key=False, command=None, ask=True):
    """A RemoteMaster for `where`; with ask, an unknown host key is shown and trusted when
    the user says so (else the HostKeyUnknown stands)."""
    # loaded for a remote master only (paramiko), as the module docstring says
    from app.remote.client import RemoteMaster
    known = Home(home).known_hosts
    kw = dict(known_hosts=known, identity=identity, trust_key=trust_key, command=command,
              password_provider=_ask_password if ask else None)
    try:
        m = RemoteMaster(where, **kw)
    except HostKeyUnknown as e:
        if not ask or getattr(e, "pkey", None) is None or not confirm_key(where, e):
            raise
        # exactly the key shown, not whatever a second connection would bring
        hostkeys.add(known, e.address, e.port, e.pkey)
        m = RemoteMaster(where, **kw)
    if ask:   # not for a screenshot, which leaves what the console remembers alone
        remember(m.where, identity=identity, command=command)
    return m


def confirm_key(where, e):
    answer = QMessageBox.question(
        None, "Trust this master?",
        f"The SSH host key of master {escape(where)} is not known on this computer:\n\n"
        f"{e.key_type} {e.fingerprint}\n\nCompare it with the key of the master's machine "
        "(ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub there). Trust it and connect?",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
        QMessageBox.StandardButton.Cancel)
    return answer == QMessageBox.StandardButton.Yes


def _ask_password(prompt):
    """A passphrase or password, asked on the UI thread only: a reconnect on a worker
    thread uses the keys and the keyring alone."""
    app = QApplication.instance()
    if app is None or QThread.currentThread() is not app.thread():
        return None
    text, ok = QInputDialog.getText(None, "Cairn console", prompt, QLineEdit.EchoMode.Password)
    return text if ok else None


def recent():
    """The masters connected to before, the newest first."""
    value = settings().value(RECENT_KEY, [])
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in value or []]


def remember(where, identity=None, command=None):
    """`where` first among the recent masters, with the key file and the command it was
    reached with (none given: the SSH agent's keys and the default command)."""
    masters = ([where] + [w for w in recent() if w != where])[:RECENT_KEEP]
    options = {w: o for w, o in _all_options().items() if w in masters}
    options[where] = {"identity": os.path.abspath(os.path.expanduser(identity))
                      if identity else "", "command": command or ""}
    s = settings()
    s.setValue(RECENT_KEY, masters)
    s.setValue(OPTIONS_KEY, options)


def _all_options():
    value = settings().value(OPTIONS_KEY)
    return {str(k): dict(v) for k, v in value.items() if isinstance(v, dict)} \
        if isinstance(value, dict) else {}


def options(where):
    """(identity, command) a recent master was reached with, None for each not given."""
    o = _all_options().get(where) or {}
    return o.get("identity") or None, o.get("command") or None


def describe(m):
    """(title, status bar text, tooltip) naming the master a console works with."""
    if getattr(m, "remote", False):
        home = (m.hello or {}).get("home", "")
        host = (m.hello or {}).get("host", "")
        state = "" if m.connected else " — connection lost, retrying"
        return (f"Cairn console — {m.where}",
                f"Master: {m.where}{state}",
                f"The master on {host or m.where}, state directory {home}, reached over SSH "
                f"as {m.ssh_user}; working as Cairn user {m.cairn_user[0]} "
                f"(role {m.cairn_user[1]})")
    return "Cairn console", None, None


def console_command(where, identity=None, command=None):
    """The command that opens a console on master `where` ([USER@]HOST[:PORT]), with the SSH
    key file and the command that serves the master when they are given."""
    base = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "app"]
    return base + ["console", "--master", where] + (["--identity", identity] if identity
                                                     else []) \
        + (["--master-command", command] if command else [])


class OpenMasterDialog(QDialog):
    """File ▸ Open a master…: the master (the recent ones offered; choosing one fills in the
    key and the command it was reached with), the SSH key file (empty: the SSH agent's keys,
    then ~/.ssh/id_*) and the command that serves it. A name that is none, or a key file that
    is not there, is said here and the dialog stays open."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("open-master-dialog")
        self.setWindowTitle("Open a master")
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.setMinimumWidth(560)
        self.master = QComboBox()
        self.master.setEditable(True)
        self.master.addItems(recent())
        self.master.lineEdit().setPlaceholderText("admin@backup1 or admin@192.0.2.7:2222")
        self.identity = QLineEdit()
        self.identity.setPlaceholderText("the SSH agent's keys, then ~/.ssh/id_*")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        key_row = QHBoxLayout()
        key_row.addWidget(self.identity, 1)
        key_row.addWidget(browse)
        self.command = QLineEdit()
        self.command.setPlaceholderText(target.DEFAULT_COMMAND)
        self.error = QLabel()
        self.error.setObjectName("open-master-error")
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setWordWrap(True)
        self.error.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.open_button = self.buttons.addButton("&Open",
                                                  QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        form = QFormLayout()
        form.addRow("Master, [USER@]HOST[:PORT]:", self.master)
        form.addRow("SSH key file:", key_row)
        form.addRow("Command on the master:", self.command)
        lay = QVBoxLayout(self)
        intro = QLabel("A console of its own on a master on another machine, reached over "
                       "SSH; this window stays as it is.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        lay.addLayout(form)
        lay.addWidget(self.error)
        lay.addWidget(self.buttons)
        self.master.currentTextChanged.connect(self._master_changed)
        self._master_changed(self.master.currentText())

    def _master_changed(self, text):
        if text.strip() in recent():
            identity, command = options(text.strip())
            self.identity.setText(identity or "")
            self.command.setText(command or "")

    def _browse(self):
        path, _ = QFileDialog.getOpenFileName(self, "The SSH private key", self.identity.text()
                                              or os.path.expanduser("~/.ssh"))
        if path:
            self.identity.setText(path)

    def choice(self):
        """(master, identity or None, command or None) as given."""
        return (self.master.currentText().strip(), self.identity.text().strip() or None,
                self.command.text().strip() or None)

    def problem(self):
        where, identity, _command = self.choice()
        if not where:
            return "Name the master: [USER@]HOST[:PORT]."
        try:
            target.parse(where)
        except ValidationError as e:
            return f"{e.message}\n{e.hint or ''}".strip()
        if identity and not os.path.isfile(os.path.expanduser(identity)):
            return f"There is no key file {identity} on this computer."
        return None

    def accept(self):
        problem = self.problem()
        self.error.setText(problem or "")
        self.error.setVisible(bool(problem))
        if not problem:
            super().accept()


def open_in_new_console(parent, started=None):
    """File ▸ Open a master…: asks for a master, its key and its command (OpenMasterDialog)
    and opens a console on it in a process of its own, this window staying as it is;
    started(master) then. The dialog, opened window-modal."""
    dlg = OpenMasterDialog(parent)
    dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

    def start():
        where, identity, command = dlg.choice()
        if identity:
            identity = os.path.abspath(os.path.expanduser(identity))
        cmd = console_command(where, identity, command)
        QProcess.startDetached(cmd[0], cmd[1:])
        if started is not None:
            started(where)
    dlg.accepted.connect(start)
    dlg.open()
    return dlg
