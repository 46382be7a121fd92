"""`cairn console`: the desktop console on the embedded default.

The master runs in this process (catalog in CAIRN_HOME or --home), this machine is registered
as a host from the start, and the job dispatcher runs on a thread of its own, so backups
queued here or by the CLI run while the console is open. The window talks to the master only
through ui.bridge.

`--screenshot FILE --view VIEW` renders the window offscreen at 1280x800 (CAIRN_SCREENSHOT_SIZE,
e.g. 1024x700, for another size) once the view's data has loaded, writes it as PNG and exits;
it neither dispatches jobs nor touches the remembered window layout."""

import logging
import os
import signal
import sqlite3
import sys
import threading
import time

from PySide6.QtCore import QEventLoop, QObject, QTimer, qInstallMessageHandler
from PySide6.QtWidgets import QApplication, QMessageBox

from app.errors import CairnError
from app.master import Master
from app.paths import Home
from app.store.db import catalog_error
from app.terminal_text import escape
from ui import theme
from ui.benchmark_dialog import BenchmarkDialog
from ui.bridge import Bridge
from ui.main_window import VIEW_NAMES, MainWindow
from ui.remote import open_master as open_remote
from ui.resources import icon

log = logging.getLogger(__name__)

def _screenshot_size():
    w, _, h = os.environ.get("CAIRN_SCREENSHOT_SIZE", "1280x800").partition("x")
    try:
        return max(640, int(w)), max(480, int(h))
    except ValueError:
        return 1280, 800


SCREENSHOT_SIZE = _screenshot_size()
SCREENSHOT_TIMEOUT_S = 30
SHUTDOWN_TIMEOUT_S = 60


class Console(QObject):
    """The master, the bridge, the dispatcher thread and the main window, started and stopped
    together."""

    def __init__(self, master, run_dispatcher=True, remember_layout=True, parent=None):
        super().__init__(parent)
        self.master = master
        self.bridge = Bridge(master, parent=self)
        self.window = MainWindow(self.bridge, remember_layout=remember_layout)
        self.window.closing.connect(self.shutdown)
        self.dispatcher_thread = None
        self.closed = False
        if run_dispatcher:
            self.start_dispatcher()

    def start_dispatcher(self):
        self.dispatcher_thread = threading.Thread(target=self._dispatch, name="cairn-dispatcher",
                                                  daemon=True)
        self.dispatcher_thread.start()

    def _dispatch(self):
        try:
            self.master.dispatcher.run_forever()
        except Exception:  # noqa: BLE001 - the console stays usable without dispatching
            log.exception("the job dispatcher stopped")
        finally:
            self.master.db.close()

    def shutdown(self):
        """Stops dispatching (canceling the jobs this console runs), the bridge and the
        master. The window stays responsive to painting while running jobs wind down."""
        if self.closed:
            return
        self.closed = True
        finished = threading.Event()
        threading.Thread(target=self._stop_dispatching, args=(finished,),
                         name="cairn-shutdown", daemon=True).start()
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S + 5
        while not finished.wait(0.05) and time.monotonic() < deadline:
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.ExcludeUserInputEvents)
        self.bridge.shutdown()
        self.master.close()

    def _stop_dispatching(self, finished):
        m = self.master
        if self.dispatcher_thread is None:
            # a remote master, or a screenshot: no dispatcher runs in this console
            finished.set()
            return
        try:
            m.dispatcher.stop()
            t = self.dispatcher_thread
            if t is not None and t.is_alive():
                for job in m.job_list(state="active"):
                    if job.get("runner") == m.dispatcher.id:
                        m.cancel_job(job["id"])
                t.join(SHUTDOWN_TIMEOUT_S)
                if t.is_alive():
                    log.warning("the dispatcher did not stop within %d s", SHUTDOWN_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - closing must go on
            log.exception("stopping the dispatcher failed")
        finally:
            m.db.close()
            finished.set()


def _has_display():
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _quiet_platform_noise():
    """The offscreen platform warns about window size hints it cannot pass on, which says
    nothing to a user taking a screenshot; every other Qt message still goes to stderr."""
    def handler(_mode, _context, message):
        if "propagateSizeHints" not in message:
            sys.stderr.write(message + "\n")
    qInstallMessageHandler(handler)


def _application():
    app = QApplication.instance()
    if app is None:
        if os.environ.get("QT_QPA_PLATFORM") == "offscreen":
            _quiet_platform_noise()
        app = QApplication([sys.argv[0] if sys.argv else "cairn"])
        app.setApplicationName("cairn")
        app.setApplicationDisplayName("Cairn console")
        app.setDesktopFileName("cairn-console")
        theme.apply(app)
    app.setWindowIcon(icon("cairn"))
    return app


def _report(error, gui, screenshot=None):
    """An error that keeps the console from starting: on stderr and in a message box (with
    --screenshot, the box is what the screenshot shows)."""
    print(f"cairn console: {escape(error.message)}", file=sys.stderr)
    if error.hint:
        print(f"  {escape(error.hint)}", file=sys.stderr)
    if not gui:
        return
    text = escape(error.message)
    box = QMessageBox(QMessageBox.Icon.Critical, "Cairn console",
                      text[:1].upper() + text[1:]
                      + (f"\n\n{escape(error.hint)}" if error.hint else ""))
    if not screenshot:
        box.exec()
        return
    box.show()
    wait_until(lambda: False, 0.3)  # let the layout settle
    if not box.grab().save(screenshot, "PNG"):
        print(f"cairn console: cannot write the screenshot to {screenshot}", file=sys.stderr)
    box.close()


def wait_until(condition, timeout_s):
    """Runs the event loop until condition() holds; False on timeout."""
    loop = QEventLoop()
    deadline = time.monotonic() + timeout_s
    result = {"ok": False}

    def check():
        if condition():
            result["ok"] = True
            loop.quit()
        elif time.monotonic() > deadline:
            loop.quit()

    timer = QTimer()
    timer.setInterval(30)
    timer.timeout.connect(check)
    timer.start()
    QTimer.singleShot(0, check)
    loop.exec()
    timer.stop()
    return result["ok"]


def settle(console, timeout_s=SCREENSHOT_TIMEOUT_S):
    """Waits until the current view and the status bar show the catalog's data."""
    w = console.window
    state = {"stable": 0}

    def ready():
        view = w.current_view
        # a view that could not read the catalog shows why: that is its settled state
        failed = bool(getattr(view, "error", None))
        if not (view.loaded or failed) or (w.summary is None and not failed):
            state["stable"] = 0
            return False
        if view.name == "restore" and view.model.rowCount() and not view.selected_rows():
            # An image list without its file tree shows half of the page.
            view.table.selectRow(0)
        busy = console.bridge.pending or getattr(view, "settled", True) is False
        state["stable"] = 0 if busy else state["stable"] + 1
        return state["stable"] >= 3

    return wait_until(ready, timeout_s)


def take_screenshot(console, path):
    w = console.window
    w.resize(*SCREENSHOT_SIZE)
    w.show()
    w.refresh_current()
    if not settle(console):
        print(f"cairn console: the {w.current_view.name} view did not load within "
              f"{SCREENSHOT_TIMEOUT_S} s; no screenshot written", file=sys.stderr)
        return 1
    QApplication.processEvents()
    if not w.grab().save(path, "PNG"):
        print(f"cairn console: cannot write the screenshot to {path}", file=sys.stderr)
        return 1
    return 0


WIZARD_VIEWS = tuple(f"wizard:{k}" for k in ("storage-server", "disk-pool", "storage-unit",
                                               "lifecycle", "storage-unit-group", "policy"))
DIALOG_VIEWS = ("dialog:alerts", "dialog:policy-properties", "dialog:benchmark")
SCREENSHOT_VIEWS = VIEW_NAMES + WIZARD_VIEWS + DIALOG_VIEWS
WIZARD_SHOWCASE_PAGES = {"disk-pool": 1}


def _save_grab(widget, path):
    """Writes what `widget` shows once its layout settled; 0, or 1 with the reason said."""
    wait_until(lambda: False, 0.3)  # let the layout settle
    QApplication.processEvents()
    if not widget.grab().save(path, "PNG"):
        print(f"cairn console: cannot write the screenshot to {path}", file=sys.stderr)
        return 1
    return 0


def take_wizard_screenshot(console, kind, path):
    """The wizard of `kind` over the main window, at its first page once its data loaded."""
    w = console.window
    w.resize(*SCREENSHOT_SIZE)
    w.show()
    wizard = w.open_wizard(kind)
    ok = wait_until(lambda: not getattr(wizard, "busy", False) and not console.bridge.pending,
                    SCREENSHOT_TIMEOUT_S)
    if not ok:
        print(f"cairn console: the {kind} wizard did not load within {SCREENSHOT_TIMEOUT_S} s;"
              " no screenshot written", file=sys.stderr)
        return 1
    # The disk pool's first page only picks the server; its volumes page says more, and the
    # catalog's first server is preselected, so go on when the wizard allows it.
    for _ in range(WIZARD_SHOWCASE_PAGES.get(kind, 0)):
        button = wizard.button(wizard.WizardButton.NextButton)
        if not button.isEnabled():
            break
        wizard.next()
        wait_until(lambda: not wizard.busy and not console.bridge.pending,
                   SCREENSHOT_TIMEOUT_S)
    return _save_grab(wizard, path)


def take_dialog_screenshot(console, which, path):
    """File ▸ Alerts… or the first policy's Properties, over the main window, once loaded."""
    w = console.window
    w.resize(*SCREENSHOT_SIZE)
    w.show()
    if which == "alerts":
        dlg = w.open_alerts()
    elif which == "benchmark":
        # the first disk pool's Test storage performance, showing its newest run
        pools = console.master.disk_pools()
        if not pools:
            print("cairn console: there is no disk pool to test; no screenshot written",
                  file=sys.stderr)
            return 1
        dlg = BenchmarkDialog(console.bridge, pools[0]["server"], volumes=pools[0]["volumes"],
                              pool=pools[0]["name"], parent=w)
        dlg.show()
    else:
        w.select_view("policies")
        view = w.current_view
        if not wait_until(lambda: view.loaded, SCREENSHOT_TIMEOUT_S) or not \
                view.model.rowCount():
            print("cairn console: there is no policy to show; no screenshot written",
                  file=sys.stderr)
            return 1
        view.table.selectRow(0)
        dlg = view.object_actions._properties()
    wait_until(lambda: False, 0.3)
    if not wait_until(lambda: not console.bridge.pending, SCREENSHOT_TIMEOUT_S):
        print(f"cairn console: the {which} window did not load within "
              f"{SCREENSHOT_TIMEOUT_S} s; no screenshot written", file=sys.stderr)
        return 1
    return _save_grab(dlg, path)


def first_view(master):
    """Getting started until the four setup steps are done, then the dashboard."""
    done = master.storage_servers() and master.disk_pools() and master.storage_units() \
        and master.policies()
    return "dashboard" if done else "getting-started"


def _open(home, remote, screenshot):
    """The embedded master, or with `remote` ({"where", "identity", "trust_key", "command"})
    the master on another machine over SSH (ui/remote.py)."""
    if remote is None:
        master = Master(home)
        master.ensure_local_host()
        return master
    return open_remote(home, remote["where"], identity=remote.get("identity"),
                       trust_key=remote.get("trust_key", False),
                       command=remote.get("command"), ask=not screenshot)


def main(home=None, screenshot=None, view=None, remote=None):
    if view is not None and view not in SCREENSHOT_VIEWS or (
            view in WIZARD_VIEWS + DIALOG_VIEWS and not screenshot):
        print(f"cairn console: there is no view {view!r}\n  choose one of: "
              + ", ".join(VIEW_NAMES if not screenshot else SCREENSHOT_VIEWS), file=sys.stderr)
        return 2
    if screenshot and not _has_display():
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = _application()

    master = None
    try:
        try:
            master = _open(home, remote, screenshot)
            if view is None:
                view = first_view(master)
        except sqlite3.Error as e:
            raise catalog_error(Home(home).catalog, e, any_error=True) from None
    except CairnError as e:
        if master is not None:
            master.close()
        _report(e, gui=True, screenshot=screenshot)
        return e.status or 1

    # A remote master's jobs run in its own dispatcher, on its machine.
    console = Console(master, run_dispatcher=not screenshot and remote is None,
                      remember_layout=not screenshot)
    if view in WIZARD_VIEWS + DIALOG_VIEWS:
        console.window.select_view("getting-started")
    else:
        console.window.select_view(view)
    if screenshot:
        try:
            if view in WIZARD_VIEWS:
                return take_wizard_screenshot(console, view.split(":", 1)[1], screenshot)
            if view in DIALOG_VIEWS:
                return take_dialog_screenshot(console, view.split(":", 1)[1], screenshot)
            return take_screenshot(console, screenshot)
        finally:
            console.window.close()

    # Ctrl-C in the terminal closes the window like File > Quit; the timer lets Python
    # look at signals while Qt's loop runs.
    signal.signal(signal.SIGINT, lambda *_: console.window.close())
    tick = QTimer()
    tick.timeout.connect(lambda: None)
    tick.start(250)
    console.window.show()
    app.exec()
    console.shutdown()
    return 0
