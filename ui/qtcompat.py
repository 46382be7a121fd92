"""Emitting Qt signals from Python safely.

PySide6 6.12.0's SignalInstance.emit() returns Py_True without taking a reference to it, so
every emit from Python costs the interpreter one reference to True. A console refreshing
every second emits thousands of signals an hour and, once True's count runs out, Python
aborts with "Fatal Python error: bool_dealloc". Every emit in ui/ goes through emit() below,
which gives the reference back when this PySide6 has the fault (checked once at import, so a
fixed PySide6 is left alone).

The same release also returns None from every void Qt method (setText, update, resize, paint
overrides, ...) without taking a reference. A plot repainting once a second drops hundreds of
references to None, and Python aborts with "none_dealloc" within minutes. None, True and False
are never freed anyway, so when the fault shows, they get a margin of 2**40 references that
makes them as good as immortal, as they are from Python 3.12 on."""

import ctypes
import sys

from PySide6.QtCore import QObject, Signal

_incref = ctypes.pythonapi.Py_IncRef
_incref.argtypes = [ctypes.py_object]
_incref.restype = None


class _Probe(QObject):
    ping = Signal()


def _emit_loses_a_reference(tries=8):
    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(tries):
        probe.ping.emit()
    lost = before - sys.getrefcount(True)
    for _ in range(max(lost, 0)):
        _incref(True)          # undo what probing cost
    return lost == tries


EMIT_LOSES_REFERENCE = _emit_loses_a_reference()


def _void_call_loses_none(tries=8):
    probe = _Probe()
    before = sys.getrefcount(None)
    for _ in range(tries):
        probe.setObjectName("probe")
    lost = before - sys.getrefcount(None)
    for _ in range(max(lost, 0)):
        _incref(None)
    return lost >= tries


def _pin_singletons():
    for obj in (None, True, False):
        ref = ctypes.c_ssize_t.from_address(id(obj))
        if ref.value < 1 << 39:
            ref.value += 1 << 40


VOID_CALL_LOSES_NONE = _void_call_loses_none()
if VOID_CALL_LOSES_NONE:
    _pin_singletons()


def emit(signal, *args):
    result = signal.emit(*args)
    if EMIT_LOSES_REFERENCE and (result is True or result is False):
        _incref(result)
    return result
