"""The count of what the selections hold, made beside a backup's copy for percent done: it
starts only after a delay (a short backup pays nothing for it), runs in a child process that
holds nothing of the agent open, and a stopped count ends at once."""

import os
import time

import pytest

from app.agent.archiver.totals import Totals


def _tree(tmp_path):
    for d in range(3):
        os.makedirs(tmp_path / f"d{d}")
        for f in range(4):
            (tmp_path / f"d{d}" / f"f{f}").write_bytes(b"x" * (100 * (f + 1)))
    os.symlink("d0/f0", tmp_path / "link")
    return [os.fsencode(tmp_path)]


def test_counts_after_its_delay(tmp_path):
    t = Totals(_tree(tmp_path), after=0.2)
    started = time.monotonic()
    t.start()
    time.sleep(0.05)
    assert t.result is None, "counted before its delay"
    t.join(5)
    assert time.monotonic() - started >= 0.2
    # 12 files and the link; bytes are allocated blocks, at most the sizes
    assert t.result["files"] == 13 and t.counted_in == "child"
    assert 0 < t.result["bytes"] <= 3 * (100 + 200 + 300 + 400) + 4096 * 12


def test_a_stopped_count_ends_without_counting(tmp_path):
    t = Totals(_tree(tmp_path), after=30)
    t.start()
    t.stop = True
    t.join(2)
    assert not t.is_alive()
    assert t.result is None


class _SlowTotals(Totals):
    """A count that takes its time: in the forked child too, which runs this same code."""

    def count(self):
        time.sleep(self.slow)
        return super().count()


def _child_of(t, timeout=5):
    end = time.monotonic() + timeout
    while t._child is None:
        assert time.monotonic() < end, "no counting child appeared"
        time.sleep(0.01)
    return t._child


def test_the_count_runs_in_a_child_holding_nothing_of_the_agent_open(tmp_path):
    # a pipe the agent has open when the count starts, as its protocol or a data
    # connection would be: the child must not keep it open
    r, w = os.pipe()
    t = _SlowTotals(_tree(tmp_path), after=0)
    t.slow = 3.0
    t.start()
    try:
        pid = _child_of(t)
        assert pid != os.getpid()
        # it closes what it inherited first thing, then counts (slowly, here)
        end = time.monotonic() + 2.5
        while len(os.listdir(f"/proc/{pid}/fd")) != 1 and time.monotonic() < end:
            time.sleep(0.01)
        assert len(os.listdir(f"/proc/{pid}/fd")) == 1  # only the pipe of its answer
        assert t.is_alive() and t.result is None  # still counting
        os.close(w)
        w = None
        os.set_blocking(r, False)
        assert os.read(r, 1) == b""  # EOF at once: no other writer is left
    finally:
        os.close(r)
        if w is not None:
            os.close(w)
    t.join(10)
    assert t.counted_in == "child" and t.result["files"] == 13
    assert t._child is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped


def test_stopping_kills_the_counting_child(tmp_path):
    t = _SlowTotals(_tree(tmp_path), after=0)
    t.slow = 60
    t.start()
    pid = _child_of(t)
    started = time.monotonic()
    t.stop = True
    t.join(5)
    assert not t.is_alive() and time.monotonic() - started < 5
    assert t.result is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_without_a_child_the_thread_counts(tmp_path, monkeypatch):
    def refuse():
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refuse)
    t = Totals(_tree(tmp_path), after=0)
    t.start()
    t.join(5)
    assert t.counted_in == "thread" and t.result["files"] == 13
