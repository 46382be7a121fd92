"""A full backup from a files cache (app/agent/archiver): its unchanged files become
references to the base image, which adjoin and are passed on as one; the rows are still sent
in batches while the walk goes on, so that the master indexes them beside it, not all after
it."""

import json
import os

from app.agent import archiver
from app.agent.archiver import backup as backup_mod, index as index_mod
from app.catalog_index import IndexReader, IndexWriter
from app.jobs import incremental

FILES = 600
BATCH = 50
NOBODY = 65534


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
    monkeypatch.setattr(backup_mod, "ROW_SEND", BATCH)
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


def _cache_of(tmp_path, rows):
    path = str(tmp_path / "base.cidx")
    w = IndexWriter(path, appendix=incremental.NextState())
    w.add_rows([r + [0] for r in rows])      # the source column the master adds
    w.close()
    with IndexReader(path) as idx:
        return incremental.cache_state(idx, {0}, 0)[:2]


def test_a_files_cache_row_says_what_the_file_s_own_row_said(tmp_path):
    """The row of a file taken from the files cache is written as text at once: it parses to
    the row the first backup sent for the file, but for where its member lies, also for
    names JSON must escape and names that are not UTF-8."""
    src = tmp_path / "src"
    os.makedirs(src)
    names = [b'quote"d', b"back\\slash", b"new\nline", b"tab\tand\x01control",
             b"not-utf8-\xff\xfe", "caf\u00e9".encode(), "\u2603".encode(), b"plain"]
    for i, name in enumerate(names):
        path = os.path.join(os.fsencode(src), name)
        with open(path, "wb") as f:
            f.write(b"x" * (i * 100 + 1))
        os.chmod(path, 0o600 + i)
        if os.geteuid() == 0:
            # owner and group told apart; the last file's are named in the image's summary
            os.chown(path, *((1000 + i, 2000 + i) if name != b"plain" else (NOBODY, NOBODY)))
    texts = []
    first = Sink()
    run_backup(str(src), first)
    state, refs = _cache_of(tmp_path, first.rows)
    again = Sink()
    again.emit_encoded = lambda event, text: texts.append(text)
    summary = archiver.backup_to(again, [str(src)], emit=again.emit, is_cancelled=lambda: False,
                                 image_meta={"image_id": "t"}, previous=state, references=refs,
                                 emit_encoded=again.emit_encoded)
    assert summary["reused"] == len(names)
    if os.geteuid() == 0:
        assert str(NOBODY) in json.dumps(summary["owners"]), summary["owners"]
    sent = [r for t in texts for r in json.loads(t)["rows"]]
    by_path = {r[0]: r for r in first.rows}
    files = [r for r in sent if r[1] == "f"]
    assert len(files) == len(names)
    for row in files:
        before = by_path[row[0]]
        assert row[:7] + row[8:] == before[:7] + before[8:], (row, before)
        assert isinstance(row[7], int) and row[7] > 0
    # the paths are the files' own bytes
    assert sorted(os.fsencode(r[0]).rsplit(b"/", 1)[1] for r in files) == sorted(names)
