"""Whether the running thread is inside the master's own work, where its calls of the master
API are not checked against the user (app/access.py): a call that passed its check, and the
threads the master runs for itself (the dispatcher's loop and jobs, the alerter)."""

import threading
from contextlib import contextmanager

_local = threading.local()


def inside():
    return getattr(_local, "depth", 0) > 0


@contextmanager
def internal():
    """The master's own work: its calls of the master API are not checked again."""
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
