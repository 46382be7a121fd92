import os
import random

import pytest

from app.catalog_index import (Entry, IndexCorrupt, IndexReader, IndexWriter, build_index)
from app.formats.entry import KINDS

SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def row(path, kind="f", *, mode=0o644, uid=1000, gid=100, size=0, mtime_ns=0, offset=0,
        length=512, checksum=None, link=""):
    if checksum is None:
        checksum = SHA if kind == "f" else ""
    return [path, kind, mode, uid, gid, size, mtime_ns, offset, length, checksum, link]


def d(path, **kw):
    kw.setdefault("mode", 0o755)
    return row(path, "d", **kw)


def names(entries):
    return [e.name for e in entries]


@pytest.fixture
def idx(tmp_path):
    return str(tmp_path / "image.idx")


def test_round_trip_of_every_kind_and_odd_value(idx):
    long_name = "n" * 255
    rows = [
        d("/data", mtime_ns=-1),
        row("/data/plain", size=12345, mtime_ns=1_700_000_000_123_456_789, offset=1024,
            length=13824),
        row("/data/huge", size=2**63 - 1, mtime_ns=2**63 - 1, offset=2**62, length=2**63 - 1),
        row("/data/ancient", mtime_ns=-2**63, checksum=""),
        row("/data/pre1970", mtime_ns=-86_400 * 10**9 * 365),
        row("/data/" + long_name),
        row("/data/caf\u00e9"),
        row("/data/bad\udcff\udcfename"),            # bytes 0xff 0xfe: not UTF-8
        row("/data/link", "l", mode=0o777, link="../target \udcff"),
        row("/data/hard", "h", link="/data/plain"),
        row("/data/fifo", "p", mode=0o600),
        row("/data/tty", "c", mode=0o620, uid=0, gid=5),
        row("/data/sda", "b", mode=0o660, uid=0, gid=6),
        d("/data/sub", uid=4_294_967_295, gid=4_294_967_294, mode=0o7777),
        row("/data/sub/x", checksum="ab" * 32),
    ]
    assert {r[1] for r in rows} == set(KINDS)
    stats = build_index(idx, rows)
    assert stats == {"files": len(rows), "dirs": 2, "bytes": os.path.getsize(idx),
                     "rows": len(rows)}
    with IndexReader(idx) as r:
        assert r.count() == len(rows)
        for want in rows:
            got = r.lookup(want[0])
            assert got is not None, want[0]
            assert got.to_row() == want
            assert got.name == want[0].rsplit("/", 1)[1]
            assert os.fsencode(got.path) == os.fsencode(want[0])
        listed = {e.path: e.to_row() for e in r.list_dir("/data")}
        assert listed == {rw[0]: rw for rw in rows[1:] if rw[0].count("/") == 2}


def test_list_dir_sorts_by_name_bytes(idx):
    given = ["b", "B", "a", "\u00e9t\u00e9", "\udcff", "a0", "Z", "_", "aa", "\udc80x"]
    random.Random(3).shuffle(given)
    build_index(idx, [d("/p")] + [row("/p/" + n) for n in given])
    with IndexReader(idx) as r:
        got = r.list_dir("/p")
    assert names(got) == sorted(given, key=os.fsencode)
    assert [e.path for e in got] == ["/p/" + n for n in sorted(given, key=os.fsencode)]
    assert all(isinstance(e, Entry) for e in got)


def test_root_lists_top_level_without_a_row_for_it(idx):
    build_index(idx, [d("/srv"), d("/home"), row("/home/u"), row("/srv/a")])
    with IndexReader(idx) as r:
        assert names(r.list_dir("/")) == ["home", "srv"]
        assert r.list_dir("") == r.list_dir("/")
        assert r.lookup("/") is None
        assert r.is_dir("/")


def test_a_row_for_root_itself_is_kept_but_not_walked(idx):
    build_index(idx, [d("/", mode=0o700, mtime_ns=7), d("/etc"), row("/etc/hosts")])
    with IndexReader(idx) as r:
        root = r.lookup("/")
        assert root is not None and root.path == "/" and root.kind == "d"
        assert root.mode == 0o700 and root.mtime_ns == 7
        assert [e.path for e in r.walk("/")] == ["/etc", "/etc/hosts"]
        assert names(r.list_dir("/")) == ["etc"]
        assert r.count() == 3


def test_directory_split_over_runs_is_merged_and_later_rows_win(idx):
    rows = [
        d("/data"), d("/data/d"),
        row("/data/d/c", size=1), row("/data/d/a", size=1),   # first run of /data/d
        row("/data/d/a/x"),                                    # descends
        d("/data"), d("/data/d"),                              # second selection repeats parents
        row("/data/d/b", size=2), row("/data/d/c", size=2),   # second run of /data/d
    ]
    stats = build_index(idx, rows)
    with IndexReader(idx) as r:
        got = r.list_dir("/data/d")
        assert names(got) == ["a", "b", "c"]
        assert [e.size for e in got] == [1, 2, 2]
        assert names(r.list_dir("/data")) == ["d"]
        assert names(r.list_dir("/")) == ["data"]
        assert r.lookup("/data/d/c").size == 2
        assert r.count() == 6 == stats["files"]
    assert stats["rows"] == len(rows)


def test_many_small_runs_of_one_directory(idx):
    rows = []
    for i in range(50):
        rows += [d("/s"), row(f"/s/f{i:03d}", size=i)]
    build_index(idx, rows)
    with IndexReader(idx) as r:
        got = r.list_dir("/s")
    assert names(got) == [f"f{i:03d}" for i in range(50)]
    assert [e.size for e in got] == list(range(50))


def test_walk_is_depth_first_in_name_order_and_complete(idx):
    rows = [d("/t"), d("/t/b"), row("/t/a"), d("/t/c"),
            row("/t/b/2"), d("/t/b/1"),
            row("/t/b/1/z"),
            row("/t/c/y"),
            d("/u")]
    build_index(idx, rows)
    want = ["/t", "/t/a", "/t/b", "/t/b/1", "/t/b/1/z", "/t/b/2", "/t/c", "/t/c/y", "/u"]
    with IndexReader(idx) as r:
        assert [e.path for e in r.walk("/")] == want
        assert [e.path for e in r.walk("/t/b")] == ["/t/b", "/t/b/1", "/t/b/1/z", "/t/b/2"]
        assert [e.path for e in r.walk("/t/b/1/z")] == ["/t/b/1/z"]
        assert [e.path for e in r.walk("/u")] == ["/u"]
        assert sorted(e.path for e in r.walk("/")) == sorted(rw[0] for rw in rows)


def test_lookup_missing_paths_and_files(idx):
    build_index(idx, [d("/a"), row("/a/f"), d("/a/empty")])
    with IndexReader(idx) as r:
        assert r.lookup("/a/f").kind == "f"
        assert r.lookup("/a/nope") is None
        assert r.lookup("/nope/f") is None
        assert r.lookup("/a/f/deeper") is None
        with pytest.raises(KeyError):
            r.list_dir("/a/nope")
        with pytest.raises(KeyError):
            r.walk("/nope")
        assert r.list_dir("/a/f") == []
        assert r.list_dir("/a/empty") == []
        assert r.is_dir("/a") and r.is_dir("/a/empty") and r.is_dir("/a/")
        assert not r.is_dir("/a/f") and not r.is_dir("/a/nope")
        assert names(r.list_dir("//a/")) == ["empty", "f"]


def test_parents_without_rows_are_synthesized(idx):
    build_index(idx, [row("/x/y/z", size=5), row("/x/w")])
    with IndexReader(idx) as r:
        assert [(e.name, e.kind) for e in r.list_dir("/")] == [("x", "d")]
        assert [e.path for e in r.walk("/")] == ["/x", "/x/w", "/x/y", "/x/y/z"]
        assert r.lookup("/x/y").length == 0
        assert r.lookup("/x/y/z").size == 5


def test_real_row_wins_over_synthesized_parent(idx):
    build_index(idx, [row("/m/n/o"), d("/m/n", mode=0o711, mtime_ns=9)])
    with IndexReader(idx) as r:
        n = r.lookup("/m/n")
        assert (n.mode, n.mtime_ns) == (0o711, 9)
        assert names(r.list_dir("/m")) == ["n"]


def test_checksums_with_few_many_and_no_absent_entries(idx):
    rng = random.Random(5)
    rows = [d("/few"), d("/many"), d("/none")]
    for dirname, p_absent in (("few", 0.02), ("many", 0.5), ("none", 1.0)):
        for i in range(200):
            cs = "" if rng.random() < p_absent else rng.randbytes(32).hex()
            rows.append(row(f"/{dirname}/{i:04d}", checksum=cs))
    build_index(idx, rows)
    with IndexReader(idx) as r:
        for dirname in ("few", "many", "none"):
            got = [e.checksum for e in r.list_dir("/" + dirname)]
            assert got == [rw[9] for rw in rows if rw[0].startswith(f"/{dirname}/")]


def test_kept_listings_are_copies_and_bounded(idx, monkeypatch):
    from app.catalog_index import reader
    monkeypatch.setattr(reader, "_CACHE_MAX_DIRS", 3)
    build_index(idx, [d(f"/d{i}") for i in range(6)] +
                [row(f"/d{i}/f{j}", size=j) for i in range(6) for j in range(4)])
    with IndexReader(idx) as r:
        first = r.list_dir("/d0")
        first.clear()
        again = r.list_dir("/d0")
        assert names(again) == ["f0", "f1", "f2", "f3"]
        again.pop()
        assert len(r.list_dir("/d0")) == 4
        for i in range(6):
            assert [e.size for e in r.list_dir(f"/d{i}")] == [0, 1, 2, 3]
        assert len(r._cache) == 3


def test_entry_to_dict_and_to_row():
    e = Entry("/a/b", "b", "f", 0o644, 1, 2, 3, 4, 5, 6, SHA, "")
    assert e.to_row() == ["/a/b", "f", 0o644, 1, 2, 3, 4, 5, 6, SHA, ""]
    assert e.to_dict() == {"path": "/a/b", "name": "b", "kind": "f", "mode": 0o644, "uid": 1,
                           "gid": 2, "size": 3, "mtime_ns": 4, "offset": 5, "length": 6,
                           "checksum": SHA, "link": "", "ctime_ns": 0, "ino": 0, "src": 0}
    e = Entry("/a/b", "b", "f", 0o644, 1, 2, 3, 4, 5, 6, SHA, "", 7, 8, 2)
    assert e.to_row() == ["/a/b", "f", 0o644, 1, 2, 3, 4, 5, 6, SHA, ""]
    assert e.to_full_row() == ["/a/b", "f", 0o644, 1, 2, 3, 4, 5, 6, SHA, "", 7, 8, 2]


def test_change_time_inode_and_source_columns(idx):
    """Rows of 13 fields (from a client) and 14 (with the source image) keep their change
    time, inode (full 64-bit range) and source through listing, lookup and merged runs."""
    rows = [["/d", "d", 0o755, 0, 0, 0, 1, 0, 512, "", "", 11, 2**63 + 5],
            ["/d/a", "f", 0o644, 0, 0, 3, 1, 512, 1024, SHA, "", 12, 77, 0],
            ["/d/b", "f", 0o644, 0, 0, 3, 1, 4096, 1024, SHA, "", 13, 78, 3],
            ["/e", "d", 0o755, 0, 0, 0, 1, 0, 512, "", "", 14, 79],
            # /d again in a second run: merged with the first on close
            ["/d/c", "l", 0o777, 0, 0, 0, 1, 9000, 512, "", "a", 15, 80, 1]]
    build_index(idx, rows)
    with IndexReader(idx) as r:
        got = {e.path: (e.ctime_ns, e.ino, e.src) for e in r.list_dir("/d")}
        assert got == {"/d/a": (12, 77, 0), "/d/b": (13, 78, 3), "/d/c": (15, 80, 1)}
        assert r.lookup("/d/b")[12:] == (13, 78, 3)
        assert r.lookup("/d").ino == 2**63 + 5
        assert r.lookup("/d/c").to_full_row() == rows[4]


def test_reads_format_version_1(idx, monkeypatch):
    """Indexes written before change times and sources existed still open, with zeros."""
    from app.catalog_index import layout, writer
    rows = [["/x", "f", 0o600, 5, 6, 10, 99, 0, 1536, SHA, ""]]

    def encode_v1(names, rows_):
        block, n, nd, dn = orig(names, rows_)
        # drop the three version-2 columns (18 bytes per entry) before the name heap
        fixed1 = layout._BLOCK_HEAD.size + layout._FIXED_V1 * n
        return block[:fixed1] + block[fixed1 + 18 * n:], n, nd, dn
    orig = writer._encode_block
    monkeypatch.setattr(writer, "_encode_block", encode_v1)
    monkeypatch.setattr(writer, "FORMAT_VERSION", 1)
    build_index(idx, rows)
    monkeypatch.undo()
    with IndexReader(idx) as r:
        assert r._version == 1
        e = r.lookup("/x")
        assert e.to_row() == rows[0] and e[12:] == (0, 0, 0)
        assert [x.to_row() for x in r.list_dir("/")] == rows


def test_empty_index(idx):
    assert build_index(idx, [])["files"] == 0
    with IndexReader(idx) as r:
        assert r.list_dir("/") == []
        assert list(r.walk("/")) == []
        assert r.count() == 0


@pytest.mark.parametrize("cut", [0, 10, 16, 100, -1, -72, -73])
def test_truncated_file_is_rejected(idx, cut):
    build_index(idx, [d("/a")] + [row(f"/a/{i}") for i in range(20)])
    data = open(idx, "rb").read()
    with open(idx, "wb") as f:
        f.write(data[:cut] if cut >= 0 else data[:len(data) + cut])
    with pytest.raises(IndexCorrupt) as e:
        with IndexReader(idx) as r:
            r.list_dir("/a")
    assert isinstance(e.value, ValueError)
    assert idx in str(e.value)


def _flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def test_corrupt_bytes_are_detected(idx):
    build_index(idx, [d("/a")] + [row(f"/a/{i}", size=i) for i in range(20)])
    size = os.path.getsize(idx)
    good = open(idx, "rb").read()
    # header magic, a byte inside the block of /a, a byte of the table, the trailer
    for at in (0, 200, size - 72 - 20, size - 30):
        with open(idx, "wb") as f:
            f.write(good)
        _flip(idx, at)
        with pytest.raises(IndexCorrupt, match="corrupt"):
            with IndexReader(idx) as r:
                r.list_dir("/a")
                r.list_dir("/")


def test_corrupt_directory_key_is_detected_not_reported_missing(idx):
    build_index(idx, [d("/a"), row("/a/f")])
    size = os.path.getsize(idx)
    _flip(idx, size - 72 - 1)   # last byte of the key heap: the "a" of "/a"
    with IndexReader(idx) as r:
        with pytest.raises(IndexCorrupt, match="table record"):
            r.list_dir("/a")


def test_missing_middle_is_rejected_on_open(idx):
    build_index(idx, [d("/a")] + [row(f"/a/{i}") for i in range(20)])
    data = open(idx, "rb").read()
    with open(idx, "wb") as f:
        f.write(data[:100] + data[200:])
    with pytest.raises(IndexCorrupt, match="truncated"):
        IndexReader(idx)


def test_unknown_file_and_version_are_rejected(idx, tmp_path):
    other = tmp_path / "not-an-index"
    other.write_bytes(b"hello world" * 20)
    with pytest.raises(IndexCorrupt, match="bad magic"):
        IndexReader(str(other))
    build_index(idx, [row("/a")])
    with open(idx, "r+b") as f:
        f.seek(8)
        f.write(b"\x63\x00")
    with pytest.raises(IndexCorrupt, match="version 99"):
        IndexReader(idx)


def test_abort_leaves_no_file(idx):
    w = IndexWriter(idx)
    w.add_rows([d("/a"), row("/a/b")])
    assert os.path.exists(idx + ".tmp") and not os.path.exists(idx)
    w.abort()
    assert not os.path.exists(idx + ".tmp") and not os.path.exists(idx)
    w.abort()  # twice is harmless
    with pytest.raises(ValueError):
        w.add_rows([row("/c")])


def test_exception_in_context_manager_aborts_and_keeps_old_index(idx):
    build_index(idx, [row("/old")])
    with pytest.raises(RuntimeError):
        with IndexWriter(idx) as w:
            w.add_rows([row("/new")])
            raise RuntimeError("interrupted")
    assert not os.path.exists(idx + ".tmp")
    with IndexReader(idx) as r:
        assert names(r.list_dir("/")) == ["old"]


def test_context_manager_closes_on_success(idx):
    with IndexWriter(idx) as w:
        w.add_rows([d("/a")])
        w.add_rows([row("/a/b")])
    assert not os.path.exists(idx + ".tmp")
    with IndexReader(idx) as r:
        assert names(r.list_dir("/a")) == ["b"]


@pytest.mark.parametrize("bad, words", [
    (row("relative/x"), "not a canonical absolute path"),
    (row("/a/"), "not a canonical absolute path"),
    (row("/a/x", "z"), "kind"),
    (row("/a/x", checksum="abc"), "checksum"),
    (row("/a/x", uid=-1), "uid"),
    (row("/a/x", size="12"), "size"),
    (["/a/x", "f"], "fields"),
    (row("/a/\ud800"), "/a/"),                    # a surrogate that no byte maps to
])
def test_bad_rows_are_rejected_with_a_clear_message(idx, bad, words):
    w = IndexWriter(idx)
    with pytest.raises(ValueError, match=words):
        w.add_rows([d("/a"), bad, row("/b")])
        w.close()
    w.abort()
    assert not os.path.exists(idx) and not os.path.exists(idx + ".tmp")


def test_200k_rows_build_and_list(idx):
    rng = random.Random(11)
    rows = [d("/big")]
    expected = {}
    n_dirs = 1000
    dir_names = [f"dir{i:04d}" for i in range(n_dirs)]
    for name in dir_names:
        rows.append(d("/big/" + name))
    off = 0
    per_dir = (200_000 - len(rows) - n_dirs) // n_dirs
    for name in dir_names:
        kids = sorted({"".join(rng.choices("abcdefghijklmnop", k=12)) for _ in range(per_dir)})
        while len(kids) < per_dir:
            kids.append(f"zz{len(kids)}")
        rng.shuffle(kids)
        rows.append(d(f"/big/{name}"))   # repeated parent row: merged, not doubled
        run = [row(f"/big/{name}/{k}", size=off, offset=off, checksum=f"{off:064x}")
               for k in kids]
        off += len(kids)
        expected[name] = sorted(kids)
        rows.extend(run)
    while len(rows) < 200_000:
        rows.append(row(f"/big/extra{len(rows)}"))
    assert len(rows) == 200_000
    stats = build_index(idx, rows)
    assert stats["rows"] == 200_000
    assert stats["files"] == 200_000 - n_dirs   # the repeated directory rows merge away
    assert stats["bytes"] < 150 * 200_000
    with IndexReader(idx) as r:
        assert r.count() == stats["files"]
        top = r.list_dir("/big")
        n_extra = sum(1 for rw in rows if rw[0].startswith("/big/extra"))
        assert n_extra > 0 and len(top) == n_dirs + n_extra
        for name in rng.sample(dir_names, 25):
            got = r.list_dir(f"/big/{name}")
            assert names(got) == expected[name]
            for e in got[:3]:
                assert e.checksum == f"{e.offset:064x}" and e.size == e.offset
        assert sum(1 for _ in r.walk("/big")) == stats["files"]
