"""Signals emitted from Python must not eat references to True (see ui.qtcompat)."""

import sys

import pytest
from PySide6.QtCore import QObject, Signal

from ui.qtcompat import emit

pytestmark = pytest.mark.gui


class _Sender(QObject):
    changed = Signal(object)


def test_emit_keeps_the_reference_count_of_true(qapp):
    s = _Sender()
    got = []
    s.changed.connect(got.append)
    before = sys.getrefcount(True)
    for i in range(2000):
        emit(s.changed, i)
    assert len(got) == 2000
    assert sys.getrefcount(True) - before >= -5


def test_a_busy_console_keeps_the_reference_count_of_true(console, master, qtbot):
    console.window.select_view("activity")
    v = console.window.views["activity"]
    qtbot.waitUntil(lambda: v.loaded, timeout=5000)
    before = sys.getrefcount(True)
    for _ in range(30):
        v.refresh()
        console.window.refresh_status()
        qtbot.waitUntil(lambda: console.bridge.pending == 0, timeout=5000)
    from ui import qtcompat
    if qtcompat.VOID_CALL_LOSES_NONE:
        # pinned: pyqtgraph's own emits still cost references, but never enough to matter
        assert sys.getrefcount(True) > 1 << 39 and sys.getrefcount(None) > 1 << 39
    else:
        assert sys.getrefcount(True) - before >= -20


def test_void_qt_calls_do_not_use_up_none(qapp):
    """50,000 void calls: with this PySide6's fault unhandled, Python aborts long before."""
    from PySide6.QtWidgets import QLabel
    import ui.qtcompat  # noqa: F401 - pins the singletons when the fault is present
    label = QLabel()
    before = sys.getrefcount(None)
    for _ in range(50_000):
        label.setText("x")
    assert sys.getrefcount(None) > 0
    assert before > 50_000 or before - sys.getrefcount(None) < 100
