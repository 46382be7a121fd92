"""Python's cycle collector, run on the UI thread only while the console has worker threads.

A Qt object without a parent belongs to its Python wrapper, and when that wrapper sits in a
reference cycle (a dialog whose signals are connected to its own methods, say), the C++ object
is deleted when the cycle collector frees the cycle. Automatic collection runs on whichever
thread happens to allocate past the threshold: a bridge worker, a job's thread, paramiko's.
A dialog deleted there while the UI thread animates or paints it crashes the process
(a segmentation fault in QAbstractAnimation::setCurrentTime, from a line edit's fading clear
button). So while a Bridge lives, automatic collection is off and a timer on the UI thread
collects each generation once its count passes the threshold Python would have used.
"""

import gc
import threading

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QTimer

#: how often the UI thread looks at the collector's counts
TICK_MS = 200


class _Collector(QObject):
    def __init__(self):
        super().__init__(QCoreApplication.instance())
        self.holders = 0
        self.was_enabled = False
        self.collections = 0        # collections run by the timer, for the tests
        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self.tick)

    def tick(self):
        if gc.isenabled():
            # code that turns collection off around a large read turns it back on after
            gc.disable()
        counts, thresholds = gc.get_count(), gc.get_threshold()
        generation = -1
        for g in range(3):
            if counts[g] <= thresholds[g]:
                break
            generation = g
        if generation >= 0:
            gc.collect(generation)
            self.collections += 1


_collector = None
_lock = threading.Lock()


def hold():
    """Turns automatic collection off and starts the UI thread's collections; called on the
    UI thread before the first worker thread starts. Each hold() is matched by a release()."""
    global _collector
    with _lock:
        if _collector is None or not shiboken6.isValid(_collector):
            _collector = _Collector()
        c = _collector
        if c.holders == 0:
            c.was_enabled = gc.isenabled()
            gc.disable()
            c.timer.start()
        c.holders += 1


def release():
    """After the last holder's threads have stopped: collects what is left on this (the UI)
    thread, then gives automatic collection back."""
    with _lock:
        c = _collector
        if c is None or c.holders == 0:
            return
        c.holders -= 1
        if c.holders:
            return
        if shiboken6.isValid(c):
            c.timer.stop()
        gc.collect()
        if c.was_enabled:
            gc.enable()


def holders():
    """How many bridges hold automatic collection off now."""
    return _collector.holders if _collector is not None else 0


def collections():
    """How many collections the UI thread's timer has run so far."""
    return _collector.collections if _collector is not None else 0
