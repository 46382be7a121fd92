"""The one place where the console's threads meet Qt.

Every call to the master runs here, on a small set of worker threads, and its result comes
back to the UI thread as a Qt signal. The UI thread never waits for the catalog or a host:
a locked catalog or a slow SSH agent then shows up as a view that is still loading, never as
a frozen window.

    bridge.call(lambda m: m.host_list(), done=view.show_rows, failed=view.show_error,
                context=view)

`fn` gets the master as its first argument. `done(result)` or `failed(error)` then runs on the
UI thread, unless `context` (a QObject) was deleted in the meantime. `error` is a CallError:
a message and a hint fit to show to the user; stack traces go to the log only.

A remote master also pushes what changes (app/remote/streams.py): bridge.stream() follows
one on a thread of its own, each event handed to the UI thread, and opens it again (from
where the page says it is) after a lost connection:

    s = bridge.stream("job_changes", lambda: {"since": view.cursor}, event=view.apply,
                      failed=view.show_error, context=view)
    s.close()
"""

import itertools
import logging
import queue
import sqlite3
import threading
import time

import shiboken6
from PySide6.QtCore import QObject, QThread, Signal

from app.errors import CairnError
from app.remote.errors import ConnectionLost
from app.store.db import catalog_error
from app.terminal_text import escape
from ui import collector
from ui.qtcompat import emit

log = logging.getLogger(__name__)

_STOP = object()
#: a lost connection to a remote master is made again at most this often
RECONNECT_EVERY_S = 2.0


class CallError(Exception):
    """A failed master call, as the user sees it."""

    def __init__(self, message, hint=None, status=None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.status = status

    def __str__(self):
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class _Worker(QThread):
    def __init__(self, bridge, index):
        super().__init__()
        self.setObjectName(f"cairn-bridge-{index}")
        self._bridge = bridge

    def run(self):
        b = self._bridge
        # Named for Python too, so that logs and tracebacks say which thread it was.
        threading.current_thread().name = self.objectName()
        try:
            while True:
                call_id = b._queue.get()
                if call_id is _STOP:
                    return
                entry = b._pending.get(call_id)
                if entry is None:
                    continue    # dropped by shutdown()
                fn, args = entry[:2]
                del entry
                outcome = b._run(fn, args)
                # The call's function often holds a window (a method, a lambda over self),
                # and its result may too. This thread lets go of both before the UI thread
                # hears of the result, so that their last references always die on the UI
                # thread: a Qt object deleted on a worker while the UI thread paints or
                # animates it crashes the process.
                del fn, args
                b._results[call_id] = outcome
                del outcome
                emit(b._finished, call_id)
        finally:
            # Catalog connections are per thread; only this thread can close its own.
            b._close_thread_resources()


class Bridge(QObject):
    _finished = Signal(int)

    def __init__(self, master, workers=3, parent=None):
        super().__init__(parent)
        self.master = master
        self._queue = queue.Queue()
        self._ids = itertools.count(1)
        self._pending = {}      # call id: (fn, args, done, failed, context)
        self._results = {}      # call id: (ok, result), until the UI thread delivers it
        self._lock = threading.Lock()
        self._closed = False
        self._reconnect_lock = threading.Lock()
        self._reconnect_last = 0.0
        self._streams = set()
        self._retired = set()   # closed streams, kept until their threads have ended
        self._finished.connect(self._deliver)
        # Qt objects freed by the cycle collector are freed on the UI thread (ui/collector.py)
        collector.hold()
        self._workers = [_Worker(self, i) for i in range(workers)]
        for w in self._workers:
            w.start()

    @property
    def pending(self):
        """Calls submitted whose results have not been delivered yet."""
        return len(self._pending)

    def call(self, fn, *args, done=None, failed=None, context=None):
        if self._closed:
            return None
        call_id = next(self._ids)
        self._pending[call_id] = (fn, args, done, failed, context)
        self._queue.put(call_id)
        return call_id

    def stream(self, kind, kwargs, event, failed=None, context=None):
        """Follows stream `kind` of a remote master (RemoteMaster.subscribe): event(value)
        runs on the UI thread for each event it pushes, failed(CallError) when it broke (it
        is opened again, with the keyword arguments kwargs() gives then, once the connection
        is back). A Stream; close() ends it."""
        s = Stream(self, kind, kwargs, event, failed, context)
        self._streams.add(s)
        s.start()
        return s

    def shutdown(self, timeout_ms=10000):
        """Stops the workers after the calls already running; queued calls are dropped."""
        if self._closed:
            return
        self._closed = True
        for s in list(self._streams):
            s.close()
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        for _ in self._workers:
            self._queue.put(_STOP)
        for w in self._workers:
            if not w.wait(timeout_ms):
                log.warning("bridge worker %s did not stop in time", w.objectName())
        self._pending.clear()
        self._results.clear()
        self._retire_streams()
        collector.release()

    # ---- worker side ----------------------------------------------------------------------
    def _run(self, fn, args):
        try:
            try:
                try:
                    return True, fn(self.master, *args)
                except ConnectionLost:
                    # A remote master's connection dropped: made again (by one worker, not
                    # more often than RECONNECT_EVERY_S) and the call tried once more; the
                    # window keeps its state and shows the loss until it is back.
                    if not self._reconnect():
                        raise
                    return True, fn(self.master, *args)
            except sqlite3.Error as e:
                # what the catalog layer did not name yet: a damaged or locked catalog file
                raise catalog_error(self.master.db.path, e, any_error=True) from None
        except CairnError as e:
            # Messages quote paths and host output: shown with control characters escaped.
            return False, CallError(escape(e.message), e.hint and escape(e.hint), e.status)
        except Exception as e:  # noqa: BLE001 - nothing may kill a worker or reach the user raw
            log.exception("master call failed")
            return False, CallError(f"internal error: {type(e).__name__}: {e}",
                                    "see the console's log for details")

    def _reconnect(self):
        with self._reconnect_lock:
            if getattr(self.master, "connected", True):
                return True   # another worker made it again meanwhile
            if time.monotonic() - self._reconnect_last < RECONNECT_EVERY_S:
                return False
            self._reconnect_last = time.monotonic()
            try:
                self.master.reconnect()
            except CairnError as e:
                log.warning("reconnecting to the master failed: %s", e)
                return False
            return True

    def _close_thread_resources(self):
        if getattr(self.master, "remote", False):
            return   # a remote master's catalog connections are on its machine
        try:
            self.master.db.close()
        except Exception:  # noqa: BLE001 - the thread is ending anyway
            log.exception("closing a worker's catalog connection failed")

    # ---- UI side ----------------------------------------------------------------------------
    def _deliver(self, call_id):
        self._retire_streams()
        entry = self._pending.pop(call_id, None)
        ok, result = self._results.pop(call_id, (False, None))
        if entry is None:
            return
        _, _, done, failed, context = entry
        if context is not None and not shiboken6.isValid(context):
            callback = None
        else:
            callback = done if ok else failed
        if callback is not None:
            callback(result)
        elif not ok:
            log.warning("master call failed: %s", result)

    def _retire_streams(self):
        """Closed streams whose threads have ended are let go here, on the UI thread, for the
        same reason as a call's function (_Worker.run)."""
        if self._retired:
            self._retired = {s for s in self._retired if s._thread.is_alive()}


class Stream(QObject):
    """One stream a remote master pushes, followed on a thread of its own (Bridge.stream)."""

    _event = Signal(object)
    _failed = Signal(object)

    def __init__(self, bridge, kind, kwargs, event, failed, context):
        super().__init__()
        self.kind = kind
        self.events = 0          # events handed on so far
        self.opened = 0          # subscriptions made (more than one: made again after a loss)
        self._bridge, self._kwargs = bridge, kwargs
        self._on_event, self._on_failed, self._context = event, failed, context
        self._stop = threading.Event()
        self._sub = None
        self._event.connect(self._deliver_event)
        self._failed.connect(self._deliver_failed)
        self._thread = threading.Thread(target=self._run, name=f"cairn-stream-{kind}",
                                        daemon=True)

    def start(self):
        self._thread.start()

    @property
    def active(self):
        return not self._stop.is_set()

    def close(self):
        self._stop.set()
        sub = self._sub
        if sub is not None:
            sub.close()
        b = self._bridge
        if self in b._streams:
            b._streams.discard(self)
            b._retired.add(self)

    def _run(self):
        b = self._bridge
        while not self._stop.is_set():
            try:
                self._sub = b.master.subscribe(self.kind, **self._kwargs())
                self.opened += 1
                if self._stop.is_set():
                    self._sub.close()
                for value in self._sub:
                    emit(self._event, value)
                if self._stop.is_set():
                    return
                raise ConnectionLost(f"the master ended the {self.kind} stream")
            except ConnectionLost as e:
                error = e
                self._stop.wait(0.1 if b._reconnect() else RECONNECT_EVERY_S)
            except CairnError as e:
                error = e
                self._stop.wait(RECONNECT_EVERY_S)
            except Exception as e:  # noqa: BLE001 - nothing may kill the stream or reach the user raw
                log.exception("the %s stream failed", self.kind)
                error = CairnError(f"internal error: {type(e).__name__}: {e}",
                                   hint="see the console's log for details")
                self._stop.wait(RECONNECT_EVERY_S)
            if not self._stop.is_set():
                emit(self._failed, CallError(escape(error.message),
                                             error.hint and escape(error.hint), error.status))

    def _alive(self):
        return self.active and (self._context is None or shiboken6.isValid(self._context))

    def _deliver_event(self, value):
        if self._alive():
            self.events += 1
            self._on_event(value)

    def _deliver_failed(self, err):
        if self._alive() and self._on_failed is not None:
            self._on_failed(err)
        elif self._alive():
            log.warning("the %s stream failed: %s", self.kind, err)
