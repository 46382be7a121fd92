"""Progress flows while one large file is copied, not only between files, so the activity
monitor shows bytes, percent and time left for a job that backs up a single huge file."""

import io
import os

from app.agent import archiver
from app.agent.archiver import backup, filedata


class Sink(io.RawIOBase):
    def __init__(self):
        self.n = 0

    def write(self, b):
        self.n += len(b)
        return len(b)


def test_progress_inside_one_large_file(tmp_path, monkeypatch):
    # progress is throttled between entries (backup.tick) and inside a file (filedata.copy)
    for module in (backup, filedata):
        monkeypatch.setattr(module, "PROGRESS_EVERY", 0.0)
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(os.urandom(24 << 20))
    events = []
    archiver.backup_to(Sink(), [str(src)], emit=lambda e, d: events.append((e, d)),
                       is_cancelled=lambda: False, image_meta={})
    during = [d["bytes"] for e, d in events if e == "progress" and 0 < d["bytes"] < 24 << 20]
    assert len(during) >= 5, during
    assert during == sorted(during)
