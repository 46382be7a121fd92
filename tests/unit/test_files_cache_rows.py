"""A full backup from a files cache (app/agent/archiver): its unchanged files become
references to the base image, which adjoin and are passed on as one; the rows are still sent
in batches while the walk goes on, so that the master indexes them beside it, not all after
it."""

import os

from app.agent import archiver
from app.agent.archiver import backup as backup_mod, index as index_mod
from app.catalog_index import IndexReader, IndexWriter
from app.jobs import incremental

FILES = 600
BATCH = 50


class Sink:
    """An image destination that takes references (as a deduplication pool's does) and
    notes, at each batch of rows, how many of the image's bytes it had taken by then."""

    def __init__(self):
        self.taken = 0
        self.references = []
        self.at_rows = []

    def write(self, buf):
        self.taken += len(buf)

    def reference(self, source, offset, length):
        self.references.append((source, offset, length))
        self.taken += length

    def emit(self, event, data):
        if event == "rows":
            self.rows += data["rows"]
            self.at_rows.append(self.taken)


def run_backup(src, sink, previous=None, references=None):
    sink.rows = []
    summary = archiver.backup_to(sink, [src], emit=sink.emit, is_cancelled=lambda: False,
                                 image_meta={"image_id": "t"}, previous=previous,
                                 references=references)
    return summary


def test_rows_of_a_files_cache_full_are_sent_while_it_walks(tmp_path, monkeypatch):
    monkeypatch.setattr(backup_mod, "ROW_BATCH", BATCH)
    monkeypatch.setattr(index_mod, "ROW_BATCH", BATCH)
    src = str(tmp_path / "src")
    os.makedirs(os.path.join(src, "d"))
    for i in range(FILES):
        with open(os.path.join(src, "d", f"f{i:04d}"), "wb") as f:
            f.write(b"%d" % i * 3)
    first = Sink()
    run_backup(src, first)
    rows = [r + [0] for r in first.rows]     # the source column the master adds
    path = str(tmp_path / "base.cidx")
    w = IndexWriter(path, appendix=incremental.NextState())
    w.add_rows(rows)
    w.close()
    with IndexReader(path) as idx:
        state, refs, _ = incremental.cache_state(idx, {0}, 0)

    again = Sink()
    summary = run_backup(src, again, previous=state, references=refs)
    assert summary["reused"] == FILES and len(again.rows) == len(first.rows)
    # the files' members are one run of the base image, passed on in parts as rows are due
    assert len(again.references) > 1
    assert all(a[1] + a[2] == b[1] for a, b in zip(again.references, again.references[1:]))
    assert len(again.at_rows) >= FILES // BATCH
    assert again.at_rows[0] < again.taken / 2, again.at_rows
