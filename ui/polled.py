"""The refresh loop that the main window's pages share (see ui/pages.py).

The main window's timer asks the page shown, once a second, whether it is `due()`, and calls
its `refresh()`; navigating to a page and View > Refresh call `refresh()` at once. A hidden
page is never asked, so it reads nothing until it is shown again. A refresh makes one master
call on the bridge's threads (ui/bridge.py), never two at a time: while one is on its way the
page is not due and a refresh is refused. When the call comes back, done or failed, the page
is due again `refresh_s` seconds later; a failure is the page's to show, and the next read
comes at the same pace.

On a master over SSH a page that names a stream (stream_call(), app/remote/streams.py)
asks nothing on the clock: its first refresh opens the stream, the master pushes what
changed as it changes (Bridge.stream), and the page is never due while it follows it.
Hidden, the page closes it; shown again, it opens it from where it was. The embedded
master's pages read on the clock as before."""

import time

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget


class PolledPage(QWidget):
    """A page that reads the master every `refresh_s` seconds while it is shown.

    A subclass says what to read in poll_call() and shows the answer in polled(result), or
    the failure (a CallError) in poll_failed(err)."""

    #: after each refresh that reached the catalog, or failed (the page showed why)
    refreshed = Signal()
    #: seconds between two reads while the page is shown; None: only on demand (refresh())
    refresh_s = None
    #: a refresh asked for while a read is on its way is not dropped: the answer on its way
    #: is set aside (it answers what the page asked before) and the page reads again
    refresh_again = False

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self._busy = False      # a read is on its way
        self._again = False     # read again as soon as it is back (refresh_again)
        self._soon = False      # due at the next tick once it is back (refresh_soon)
        self._last = 0.0        # when the last read came back (time.monotonic())
        self.stream = None      # the stream followed instead (a remote master)

    # ---- what a page provides -------------------------------------------------------------
    def poll_call(self):
        """(fn, *args): the master call of one refresh, fn(master, *args) on a worker."""
        raise NotImplementedError

    def polled(self, result):
        raise NotImplementedError

    def poll_failed(self, err):
        raise NotImplementedError

    def stream_call(self):
        """(kind, kwargs()) of the stream a remote master pushes instead of the reads on the
        clock, or None (read on the clock): kwargs() gives the stream's keyword arguments
        when it is opened, again after a lost connection. Its events go to streamed()."""
        return None

    def streamed(self, event):
        raise NotImplementedError

    # ---- the loop ---------------------------------------------------------------------------
    @property
    def polling(self):
        """A read is on its way."""
        return self._busy

    def due(self, now=None):
        if self.refresh_s is None or self.stream is not None:
            return False
        now = time.monotonic() if now is None else now
        return not self._busy and now - self._last >= self.refresh_s

    def refresh(self):
        """Reads now; False when a read is already on its way."""
        if self.stream is not None:
            return False     # what changes is pushed
        if self._busy:
            if self.refresh_again:
                self._again = True
            return False
        call = self.stream_call() if getattr(self.bridge.master, "remote", False) else None
        if call is not None:
            kind, kwargs = call
            self.stream = self.bridge.stream(kind, kwargs, event=self.streamed,
                                             failed=self.poll_failed, context=self)
            return True
        self._busy = True
        fn, *args = self.poll_call()
        self.bridge.call(fn, *args, done=self._poll_done, failed=self._poll_failed,
                         context=self)
        return True

    def refresh_soon(self):
        """Reads now or, when a read is on its way, at the next tick after it: for a change
        the page itself made (a job canceled), which that read may not have seen."""
        if not self.refresh():
            self._soon = True

    def close_stream(self):
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def hideEvent(self, event):
        self.close_stream()   # shown again, refresh() opens it where the page left off
        super().hideEvent(event)

    def _poll_done(self, result):
        if self._back():
            self.polled(result)

    def _poll_failed(self, err):
        if self._back():
            self.poll_failed(err)

    def _back(self):
        """Ends the read that came back; False when its answer is set aside for a new read."""
        self._busy = False
        self._last = 0.0 if self._soon else time.monotonic()
        self._soon = False
        if self._again:
            self._again = False
            self.refresh()
            return False
        return True
