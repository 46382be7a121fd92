"""The console on a master over SSH (`cairn console --master [USER@]HOST[:PORT]`): connecting
(an unknown host key shown with its fingerprint and trusted only when the user confirms it,
a password asked for on the UI thread), the masters connected to before, and what the title
and the status bar call the master.

The SSH client loads when a remote master is opened, not with the console: the embedded
default never needs it. Nothing here or in what it loads is POSIX-only."""

import sys

from PySide6.QtCore import QProcess, QThread
from PySide6.QtWidgets import QApplication, QInputDialog, QLineEdit, QMessageBox

from app.errors import HostKeyUnknown
from app.paths import Home
from app.remote import target
from app.terminal_text import escape
from app.transport import hostkeys
from ui.settings import settings

RECENT_KEY = "masters/recent"
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
        remember(m.where)
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


def remember(where):
    masters = [where] + [w for w in recent() if w != where]
    settings().setValue(RECENT_KEY, masters[:RECENT_KEEP])


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


def console_command(where):
    """The command that opens a console on master `where` ([USER@]HOST[:PORT])."""
    base = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "app"]
    return base + ["console", "--master", where]


def open_in_new_console(parent):
    """File ▸ Open a master…: asks for a master (the recent ones offered) and opens a console
    on it in a process of its own, this window staying as it is. The name given, or None."""
    text, ok = QInputDialog.getItem(parent, "Open a master",
                                    "Master on another machine, [USER@]HOST[:PORT]:",
                                    recent(), 0, True)
    where = text.strip() if ok else ""
    if not where:
        return None
    target.parse(where)   # a name that is none is said here, not by a console that fails
    cmd = console_command(where)
    QProcess.startDetached(cmd[0], cmd[1:])
    return where
