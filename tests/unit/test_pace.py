"""The verify pace (app/formats/pace.py): a reader ahead of the rate is held back until it is
within it, in short sleeps that see a cancel; a reader behind it is never held."""

import pytest

from app.errors import Canceled
from app.formats.pace import Pace, make


class Clock:
    def __init__(self):
        self.t = 100.0
        self.slept = []

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.slept.append(s)
        self.t += s


def test_a_reader_ahead_of_the_rate_is_held_until_it_is_within_it():
    c = Clock()
    p = Pace(1000, clock=c, sleep=c.sleep)       # 1000 bytes per second
    p(500)                                       # half a second's worth at once
    assert c.t == pytest.approx(100.5)
    assert max(c.slept) <= 0.2 + 1e-9            # in short steps
    c.t += 2.0                                   # the reader was slow meanwhile
    c.slept.clear()
    p(2000)                                      # 2 s allowed, 2.5 s passed: not held
    assert c.slept == []
    p(4000)
    assert c.t == pytest.approx(104.0) and p.held_s == pytest.approx(2.0)


def test_a_cancel_ends_the_wait():
    c = Clock()
    asked = []

    def cancelled():
        asked.append(1)
        return len(asked) > 2
    p = Pace(10, is_cancelled=cancelled, clock=c, sleep=c.sleep)
    with pytest.raises(Canceled):
        p(1000)                                  # 100 s ahead
    assert c.t - 100.0 < 1.0


def test_no_limit_is_no_pace():
    assert make(None) is None and make(0) is None
    assert make(5).rate == 5
