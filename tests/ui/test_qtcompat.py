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
    assert sys.getrefcount(True) - before >= -20
