"""The bridge: master calls run off the UI thread and come back as signals."""

import gc
import threading

import pytest
from PySide6.QtCore import QObject, Qt

from app.errors import ValidationError
from ui import collector
from ui.bridge import Bridge, CallError

pytestmark = pytest.mark.gui


class FakeMaster:
    class db:
        closed = []

        @classmethod
        def close(cls):
            cls.closed.append(threading.current_thread().name)


@pytest.fixture
def bridge():
    FakeMaster.db.closed = []
    b = Bridge(FakeMaster(), workers=2)
    yield b
    b.shutdown()


def test_calls_run_on_a_worker_and_results_arrive_on_the_ui_thread(bridge, qtbot):
    seen = {}

    def fn(m, x):
        seen["thread"] = threading.current_thread()
        return x * 2

    def done(r):
        seen["result"] = r
        seen["delivered_on"] = threading.current_thread()

    bridge.call(fn, 21, done=done)
    qtbot.waitUntil(lambda: "result" in seen, timeout=3000)
    assert seen["result"] == 42
    assert seen["thread"] is not threading.main_thread()
    assert seen["delivered_on"] is threading.main_thread()
    assert bridge.pending == 0


def test_errors_reach_the_ui_as_messages(bridge, qtbot):
    errors = []

    def bad(m):
        raise ValidationError("volume /x is missing", hint="create it")

    def broken(m):
        raise ZeroDivisionError("boom")

    bridge.call(bad, failed=errors.append)
    bridge.call(broken, failed=errors.append)
    qtbot.waitUntil(lambda: len(errors) == 2, timeout=3000)
    by_msg = sorted(errors, key=lambda e: e.message)
    assert all(isinstance(e, CallError) for e in errors)
    assert by_msg[0].message.startswith("internal error: ZeroDivisionError")
    assert by_msg[1].message == "volume /x is missing" and by_msg[1].hint == "create it"
    assert by_msg[1].status == 10


def test_results_for_a_deleted_receiver_are_dropped(bridge, qtbot):
    got = []
    gate = threading.Event()
    receiver = QObject()
    bridge.call(lambda m: gate.wait(5) and "late", done=got.append, context=receiver)
    receiver.deleteLater()
    qtbot.waitUntil(lambda: not _alive(receiver), timeout=3000)
    gate.set()
    qtbot.waitUntil(lambda: bridge.pending == 0, timeout=3000)
    assert got == []


def _alive(obj):
    import shiboken6
    return shiboken6.isValid(obj)


def test_a_slow_call_does_not_block_others(bridge, qtbot):
    gate = threading.Event()
    got = []
    bridge.call(lambda m: gate.wait(5), done=lambda r: got.append("slow"))
    bridge.call(lambda m: "fast", done=got.append)
    qtbot.waitUntil(lambda: got == ["fast"], timeout=3000)
    gate.set()
    qtbot.waitUntil(lambda: got == ["fast", "slow"], timeout=3000)


def test_shutdown_closes_each_workers_catalog_connection():
    FakeMaster.db.closed = []
    b = Bridge(FakeMaster(), workers=3)
    b.shutdown()
    assert sorted(FakeMaster.db.closed) == ["cairn-bridge-0", "cairn-bridge-1", "cairn-bridge-2"]
    assert b.call(lambda m: 1) is None


class Window(QObject):
    """A parentless Qt object, as a dialog is: its Python wrapper owns it."""

    def __init__(self):
        super().__init__()
        self.deleted_on = []
        deleted_on = self.deleted_on   # not self: the connection must not keep it alive
        self.destroyed.connect(lambda *_: deleted_on.append(threading.current_thread().name),
                               Qt.ConnectionType.DirectConnection)


def test_a_window_held_only_by_a_call_is_deleted_on_the_ui_thread(qtbot):
    # One worker, so that the worker's next call would be where it let go of the last one.
    b = Bridge(FakeMaster(), workers=1)
    try:
        w = Window()
        deleted_on, got = w.deleted_on, []
        b.call(_holding(w), done=got.append)        # the function holds the window
        del w
        holder = [Window()]
        deleted_too = holder[0].deleted_on
        b.call(lambda m: holder.pop(), done=lambda r: got.append("window"))  # the result does
        for _ in range(3):
            b.call(lambda m: None)
        qtbot.waitUntil(lambda: b.pending == 0 and bool(deleted_on and deleted_too), timeout=3000)
        assert got == ["", "window"]
        assert deleted_on == ["MainThread"] and deleted_too == ["MainThread"]
    finally:
        b.shutdown()


def _holding(window):
    return lambda m: window.objectName()


def test_cycles_are_collected_on_the_ui_thread_while_a_bridge_lives(bridge, qtbot):
    gc.collect()
    assert not gc.isenabled()
    w = Window()
    w.cycle = w
    deleted_on = w.deleted_on
    del w
    churned = threading.Event()

    def churn(m):
        # enough new containers to set off every generation's automatic collection
        junk = [[] for _ in range(300_000)]
        churned.set()
        return len(junk)

    before = collector.collections()
    bridge.call(churn)
    assert churned.wait(10)        # the UI thread allocates nothing meanwhile
    assert deleted_on == []
    # the UI thread's own work sets off the next collection, as it would have without workers
    kept = [[] for _ in range(gc.get_threshold()[0] * 2)]
    qtbot.waitUntil(lambda: bool(deleted_on), timeout=3000)
    assert len(kept) > 0
    assert deleted_on == ["MainThread"] and collector.collections() > before


def test_shutdown_gives_automatic_collection_back(qtbot):
    assert gc.isenabled()
    first, second = Bridge(FakeMaster(), workers=1), Bridge(FakeMaster(), workers=1)
    assert not gc.isenabled()
    first.shutdown()
    assert not gc.isenabled()      # the second bridge's workers still run
    second.shutdown()
    assert gc.isenabled()
    second.shutdown()
    assert gc.isenabled()
