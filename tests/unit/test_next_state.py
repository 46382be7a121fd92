"""The state an incremental compares with, kept in the appendix of its base image's catalog
index while that index is written (app/jobs/incremental.NextState), and the short rows of
unchanged entries the master completes from the base's index."""

import os
import sys

import pytest

from app.catalog_index import IndexCorrupt, IndexReader, IndexWriter, check_index
from app.formats import entry as E
from app.formats import changes
from app.formats.changes import PreviousState
from app.jobs import incremental

SUM = "ab" * 32


def _rows():
    """Rows as a backup's master indexes them: 13 fields from the agent and the source."""
    rows = [["/d", "d", 0o755, 0, 0, 0, 1, 0, 512, "", "", 5, 10, 0]]
    for i in range(40):
        rows.append([f"/d/f{i:03d}", "f", 0o644, 1000, 100, i * 7, 10**18 + i, 512 * (i + 2),
                     1024, SUM, "", 10**18 + 2 * i, 1000 + i, 0])
    rows += [["/d/link", "l", 0o777, 0, 0, 0, 3, 60000, 512, "", "f001", 4, 99, 0],
             ["/d/sub", "d", 0o700, 0, 0, 0, 1, 61000, 512, "", "", 5, 11, 0],
             ["/d/sub/h", "h", 0o644, 1000, 100, 0, 9, 62000, 512, "", "/d/f000", 8, 1000, 0],
             ["/d/sub/odd\udcff", "f", 0o600, 7, 7, 3, 2**63 - 1, 63000, 1024, SUM, "",
              -5, 2**64 - 1, 0],
             ["/d/sub/p", "p", 0o600, 0, 0, 0, 9, 64000, 512, "", "", 8, 1001, 0]]
    return rows


def _write(path, rows, appendix=True):
    w = IndexWriter(str(path), appendix=incremental.NextState() if appendix else None)
    w.add_rows([list(r) for r in rows])
    w.close()
    return IndexReader(str(path))


def _dirs(text):
    st = PreviousState(text)
    return {k: st.directory(k) for k in st._dirs}, st.entries


def test_the_kept_state_is_the_state_worked_out_from_the_index(tmp_path):
    with _write(tmp_path / "a.cidx", _rows()) as idx:
        assert idx.appendix() is not None
        kept, kept_count = incremental.previous_state(idx)
        computed, _, count = incremental._state(idx, None)
    assert kept_count == count == 44
    assert _dirs(kept) == _dirs(computed)
    assert _dirs(kept)[0][b"/d/sub"][b"odd\xff"]  # names are the client's bytes
    assert check_index(str(tmp_path / "a.cidx")) == []


def test_a_state_is_worked_out_without_an_appendix(tmp_path):
    with _write(tmp_path / "a.cidx", _rows()) as kept_idx:
        kept, _ = incremental.previous_state(kept_idx)
    with _write(tmp_path / "b.cidx", _rows(), appendix=False) as idx:
        assert idx.appendix() is None
        computed, count = incremental.previous_state(idx)
    assert count == 44 and _dirs(kept) == _dirs(computed)


def test_a_damaged_appendix_is_not_believed(tmp_path):
    path = tmp_path / "a.cidx"
    with _write(path, _rows()) as idx:
        good, _ = incremental.previous_state(idx)
        at = idx._table_off - 40  # inside the kept state
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    with IndexReader(str(path)) as idx:
        assert idx.appendix() is None
        again, count = incremental.previous_state(idx)
        assert idx.lookup("/d/f001").size == 7  # the blocks themselves are untouched
    assert count == 44 and _dirs(again) == _dirs(good)


def test_a_split_directory_or_a_repeated_name_keeps_a_right_state(tmp_path):
    rows = _rows()
    split = rows[:10] + [["/e", "d", 0o755, 0, 0, 0, 1, 70000, 512, "", "", 5, 12, 0],
                         ["/e/x", "f", 0o644, 0, 0, 1, 1, 71000, 1024, SUM, "", 1, 13, 0]] \
        + rows[10:]
    with _write(tmp_path / "split.cidx", split) as idx:
        assert idx.appendix() is None  # blocks merged at the end: nothing kept
        assert incremental.previous_state(idx)[1] == 45
    twice = rows + [["/d/sub/p", "p", 0o600, 0, 0, 0, 10, 65000, 512, "", "", 8, 1001, 0]]
    with _write(tmp_path / "twice.cidx", twice) as idx:
        kept, count = incremental.previous_state(idx)
        computed, _, n = incremental._state(idx, None)
    assert count == n == 44 and _dirs(kept) == _dirs(computed)


def test_short_rows_are_completed_from_the_base(tmp_path):
    with _write(tmp_path / "base.cidx", _rows()) as idx:
        c = incremental.Completer({"id": "base_1", "sources": ["older_1"]}, idx, 44)
        rows = c.complete([["/d", "d", 0o755, 0, 0, 0, 1, 0, 512, "", "", 5, 10],
                           ["/d/f002", E.UNCHANGED], ["/d/link", E.UNCHANGED],
                           ["/d/new", "f", 0o644, 0, 0, 1, 1, 512, 1024, SUM, "", 1, 2]])
        base = idx.lookup("/d/f002")
    assert rows[1] == ["/d/f002", *base[2:14], 1]
    assert rows[2][E.KIND] == "l" and rows[2][E.LINK] == "f001"
    assert rows[3][-1] == 0 and c.sources == ["base_1"]
    assert (c.unchanged, c.new, c.deleted) == (2, 1, 42)


@pytest.mark.parametrize("row", [["/d/gone", E.UNCHANGED], ["/d/sub", E.UNCHANGED],
                                 ["/d/f001", 0], [7, E.UNCHANGED]])
def test_a_short_row_the_base_does_not_hold_is_refused(tmp_path, row):
    with _write(tmp_path / "base.cidx", _rows()) as idx:
        c = incremental.Completer({"id": "base_1", "sources": []}, idx, 44)
        with pytest.raises(IndexCorrupt):
            c.complete([list(row)])


def test_the_appendix_costs_no_reader_anything(tmp_path):
    with _write(tmp_path / "a.cidx", _rows()) as a, \
            _write(tmp_path / "b.cidx", _rows(), appendix=False) as b:
        assert list(a.walk("/")) == list(b.walk("/"))
        assert a.count() == b.count()
    assert os.path.getsize(tmp_path / "a.cidx") > os.path.getsize(tmp_path / "b.cidx")


def test_a_synthesized_parent_beside_real_children_keeps_no_appendix(tmp_path):
    # "/" holds a real file row and, synthesized, the parent of another selection's rows
    rows = [["/top", "f", 0o644, 0, 0, 1, 1, 512, 1024, SUM, "", 1, 2, 0],
            ["/a/b", "d", 0o755, 0, 0, 0, 1, 1536, 512, "", "", 1, 3, 0],
            ["/a/b/f", "f", 0o644, 0, 0, 1, 1, 2048, 1024, SUM, "", 1, 4, 0]]
    with _write(tmp_path / "a.cidx", rows) as idx:
        assert idx.appendix() is None
        kept, count = incremental.previous_state(idx)
        assert [e.name for e in idx.list_dir("/")] == ["a", "top"]
    assert count == 2 and _dirs(kept)[0][b"/"].keys() == {b"top"}


def _with_refs(state, refs):
    st = PreviousState(state, refs)
    return {k: st.directory_with_references(k) for k in st._dirs}


def test_the_kept_references_are_a_files_caches_with_every_source_there(tmp_path):
    rows = _rows()
    rows[5][-1] = 1  # held by the image's first source
    rows[6][E.CHECKSUM] = ""  # nothing to refer to
    with _write(tmp_path / "a.cidx", rows) as idx:
        state, refs, count = incremental._kept(idx)
        want_state, want_refs, want_count = incremental._state(idx, {0, 1})
        _, partial_refs, _ = incremental._state(idx, {0})
    kept = _with_refs(state, refs)
    assert count == want_count == 44 and kept == _with_refs(want_state, want_refs)
    files = kept[b"/d"]
    assert files[b"f004"][1] == (1, rows[5][E.OFFSET], 1024, SUM)
    assert files[b"f005"][1] is None and files[b"f000"][1] == (0, 1024, 1024, SUM)
    # a source image gone: its files have no reference, and the kept ones are not used
    assert _with_refs(state, partial_refs)[b"/d"][b"f004"][1] is None


def test_a_files_cache_uses_the_kept_references_only_with_every_source_there(tmp_path,
                                                                           monkeypatch):
    rows = _rows()
    rows[5][-1] = 1
    worked_out = []
    real = incremental._state

    def counted(index, usable):
        worked_out.append(usable)
        return real(index, usable)

    monkeypatch.setattr(incremental, "_state", counted)
    with _write(tmp_path / "a.cidx", rows) as idx:
        every = incremental.cache_state(idx, {0, 1}, 1)
        assert worked_out == []
        some = incremental.cache_state(idx, {0}, 1)
        assert worked_out == [{0}]
    assert _with_refs(*every[:2])[b"/d"][b"f004"][1] is not None
    assert _with_refs(*some[:2])[b"/d"][b"f004"][1] is None


@pytest.mark.parametrize("deflate", ["isal", "zlib"])
def test_the_state_reads_the_same_whichever_deflate_wrote_it(tmp_path, monkeypatch, deflate):
    """The master compresses with ISA-L where it has it; the agent reads with zlib alone."""
    monkeypatch.setattr(changes, "_deflate", None)
    if deflate == "zlib":
        monkeypatch.setitem(sys.modules, "isal", None)   # a master without it
    with _write(tmp_path / "a.cidx", _rows()) as idx:
        kept, _ = incremental.previous_state(idx)
        computed, _, _ = incremental._state(idx, None)
    assert changes._deflate.__name__ == ("isal.isal_zlib" if deflate == "isal" else "zlib")
    assert _dirs(kept) == _dirs(computed)
    assert _dirs(kept)[1] == 44
