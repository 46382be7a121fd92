"""The count of what the selections hold, made beside a backup's copy for percent done: it
starts only after a delay (a short backup pays nothing for it) and a stopped count ends at
once."""

import os
import time

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
    assert t.result["files"] == 13
    assert 0 < t.result["bytes"] <= 3 * (100 + 200 + 300 + 400) + 4096 * 12


def test_a_stopped_count_ends_without_counting(tmp_path):
    t = Totals(_tree(tmp_path), after=30)
    t.start()
    t.stop = True
    t.join(2)
    assert not t.is_alive()
    assert t.result is None
