"""A pace limit for reads that must not starve other work (a verify reading a whole pool back
while backups write to it): the reader reports how many bytes it has read so far, and is held
back whenever that is ahead of the allowed rate since it started. Holding back sleeps in short
steps, so that a cancel is seen at once."""

import time

from app.errors import Canceled

_STEP_S = 0.2


class Pace:
    def __init__(self, bytes_per_s, is_cancelled=None, clock=time.monotonic, sleep=time.sleep):
        self.rate = float(bytes_per_s)
        self.is_cancelled = is_cancelled
        self.clock, self.sleep = clock, sleep
        self.start = clock()
        self.held_s = 0.0  # time spent held back, for the job's log

    def __call__(self, done_bytes):
        """Returns once `done_bytes` read since the start are within the rate."""
        while True:
            ahead = done_bytes / self.rate - (self.clock() - self.start)
            if ahead <= 0:
                return
            if self.is_cancelled is not None and self.is_cancelled():
                raise Canceled()
            step = min(ahead, _STEP_S)
            self.sleep(step)
            self.held_s += step


def make(bytes_per_s, is_cancelled=None):
    """A Pace for a limit in bytes per second, or None for no limit."""
    return Pace(bytes_per_s, is_cancelled) if bytes_per_s else None
