"""Reading an image back into its index rows (app/agent/reindex.py): the rows equal those the
backup sent, for every kind of entry; the trailing index's damage, a damaged member header,
damaged file data and a cut-short image each cost only what they must, and are reported."""

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from treegen import make_tree  # noqa: E402

from app.agent.archiver import backup_to  # noqa: E402
from app.agent.reindex import FileImage, StreamImage, index_image  # noqa: E402
from app.catalog_index import IndexReader, build_index  # noqa: E402
from app.errors import Canceled  # noqa: E402
from app.formats import entry  # noqa: E402
from app.formats.changes import StateEncoder, state_digest  # noqa: E402

META = {"image_id": "unit-1", "client": "unit"}


def rows_of(events):
    return [r for e, d in events if e == "rows" for r in d["rows"]]


def make_image(path, selections, checksum="crc32", previous=None):
    events = []
    with open(path, "wb") as f:
        result = backup_to(f, [str(s) for s in selections], emit=lambda e, d: events.append(
            (e, d)), is_cancelled=lambda: False, image_meta=META, checksum=checksum,
            previous=previous)
    return result, rows_of(events)


def reindex(path, checksum="crc32", is_cancelled=lambda: False):
    events = []
    image = FileImage(str(path))
    try:
        found = index_image(image, checksum=checksum, emit=lambda e, d: events.append((e, d)),
                            is_cancelled=is_cancelled)
    finally:
        image.close()
    batches = [d["rows"] for e, d in events if e == "rows"]
    return found, rows_of(events), batches


def entries(rows, path):
    build_index(str(path), rows)
    with IndexReader(str(path)) as r:
        return list(r.walk("/"))


def without_ctime_inode(es):
    return [e._replace(ctime_ns=0, ino=0) for e in es]


def damage(src, dst, offset, data):
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(offset)
        f.write(data)
    return dst


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """An image of the tree with every kind of entry, its rows and its index entries."""
    base = tmp_path_factory.mktemp("reindex")
    made = make_tree(str(base / "src"))
    path = base / "image.tar"
    result, rows = make_image(path, [base / "src"])
    return {"path": path, "rows": rows, "result": result, "made": made, "base": base,
            "entries": entries(rows, base / "orig.cidx")}


def member(img, name):
    return next(r for r in img["rows"] if r[entry.PATH].endswith("/" + name))


def test_rows_equal_the_backups_for_every_kind_of_entry(image, tmp_path):
    found, rows, batches = reindex(image["path"])
    assert rows == image["rows"]
    kinds = {r[entry.KIND] for r in rows}
    assert {"f", "d", "l", "h", "p"} <= kinds
    assert image["made"]["xattrs"] and image["made"]["sparse"]
    assert found["trailing_index"] == {"found": True, "problem": None,
                                       "rows": len(image["rows"]), "bad_lines": 0,
                                       "unchanged": 0}
    assert not (found["damage"] or found["lost"] or found["checksum_mismatch"]
                or found["differ"] or found["from_members"] or found["dropped"])
    assert found["meta"]["image_id"] == "unit-1"
    assert entries(rows, tmp_path / "x.cidx") == image["entries"]
    assert all(len(b) <= 5000 for b in batches)


def test_the_checksums_computed_again_are_the_backups(image, tmp_path):
    """Without the trailing index every row comes from its member: the checksum of each file
    (sparse ones: the data regions only) is computed as the backup did."""
    bad = damage(image["path"], tmp_path / "d.tar", image["result"]["index_offset"] + 100,
                 b"\xff" * 8)
    found, rows, _ = reindex(bad)
    assert not found["trailing_index"]["found"]
    assert "damaged" in found["trailing_index"]["problem"]
    assert found["from_members_count"] == len(image["rows"])
    got = entries(rows, tmp_path / "x.cidx")
    assert got == without_ctime_inode(image["entries"])
    sparse = next(e for e in got if e.path.endswith("/sparse.img"))
    assert sparse.size == 64 << 20 and sparse.length < 1 << 20 and sparse.checksum


def test_sha256_pieces(tmp_path):
    src = tmp_path / "src"
    make_tree(str(src))
    _, rows0 = make_image(tmp_path / "i.tar", [src], checksum="sha256")
    found, rows, _ = reindex(tmp_path / "i.tar", checksum="sha256")
    assert rows == rows0 and not found["checksum_mismatch"]
    # the wrong piece algorithm: every file with data is reported, the recorded sums kept
    found, rows, _ = reindex(tmp_path / "i.tar", checksum="crc32")
    assert rows == rows0 and found["checksum_mismatch_count"] > 5


def test_a_damaged_line_of_the_trailing_index_costs_that_rows_change_time(image, tmp_path):
    res = image["result"]
    at = res["index_offset"] + 512 + 2000
    bad = damage(image["path"], tmp_path / "d.tar", at, b"#" * 64)
    found, rows, _ = reindex(bad)
    assert found["trailing_index"]["bad_lines"] >= 1
    n = found["from_members_count"]
    assert 1 <= n <= 2
    got = entries(rows, tmp_path / "x.cidx")
    differ = [a for a, b in zip(got, image["entries"]) if a != b]
    assert len(got) == len(image["entries"]) and len(differ) == n
    assert all(a.ctime_ns == 0 and a.ino == 0 for a in differ)
    assert without_ctime_inode(got) == without_ctime_inode(image["entries"])


def test_a_damaged_member_header_loses_that_member_only(image, tmp_path):
    big = member(image, "big.bin")
    bad = damage(image["path"], tmp_path / "d.tar", big[entry.OFFSET] + 100, os.urandom(64))
    found, rows, _ = reindex(bad)
    # the row stays (a restore names the file as lost); everything else is checked
    assert rows == image["rows"]
    assert [x["path"] for x in found["lost"]] == [big[entry.PATH]]
    assert found["damage"][0]["offset"] == big[entry.OFFSET]
    # the other members, image.json and summary.json included
    assert found["members"] == len(image["rows"]) + 1


def test_damaged_file_data_is_reported_and_the_recorded_checksum_kept(image, tmp_path):
    big = member(image, "big.bin")
    at = big[entry.OFFSET] + big[entry.LENGTH] // 2
    bad = damage(image["path"], tmp_path / "d.tar", at, bytes(64))
    found, rows, _ = reindex(bad)
    assert rows == image["rows"]
    assert found["checksum_mismatch"] == [big[entry.PATH]]
    assert not found["damage"]


def test_without_the_trailing_index_reading_resumes_after_a_damaged_header(image, tmp_path):
    big = member(image, "big.bin")
    res = image["result"]
    bad = damage(image["path"], tmp_path / "d.tar", res["index_offset"] + 100, os.urandom(64))
    with open(bad, "r+b") as f:
        f.seek(big[entry.OFFSET] + 100)
        f.write(os.urandom(64))
    found, rows, _ = reindex(bad)
    assert found["damage"] and found["damage"][0]["offset"] == big[entry.OFFSET]
    paths = {r[entry.PATH] for r in rows}
    # every entry but the damaged one (its pax header is lost; its ustar header follows)
    assert {r[entry.PATH] for r in image["rows"]} - paths <= {big[entry.PATH]}
    assert len(rows) >= len(image["rows"]) - 1


def test_a_cut_short_image_gives_what_precedes_the_cut(image, tmp_path):
    size = os.path.getsize(image["path"])
    shutil.copyfile(image["path"], tmp_path / "d.tar")
    os.truncate(tmp_path / "d.tar", size // 3)
    found, rows, _ = reindex(tmp_path / "d.tar")
    assert not found["trailing_index"]["found"]
    assert found["damage"] and found["damage"][-1]["offset"] + found["damage"][-1][
        "length"] == size // 3
    assert rows and all(r[entry.OFFSET] + r[entry.LENGTH] <= size // 3 for r in rows)
    want = [r[:entry.CHECKSUM] for r in image["rows"]
            if r[entry.OFFSET] + r[entry.LENGTH] <= size // 3]
    assert [r[:entry.CHECKSUM] for r in rows] == want


def test_an_incrementals_unchanged_rows_pass_through(tmp_path):
    src = tmp_path / "src"
    make_tree(str(src))
    _, full_rows = make_image(tmp_path / "full.tar", [src])
    # the state the master sends for an incremental: every entry of the full
    state = StateEncoder()
    by_dir = {}
    for r in full_rows:
        if r[entry.KIND] != entry.KIND_DIR:
            parent, _, name = r[entry.PATH].rpartition("/")
            by_dir.setdefault(parent or "/", []).append(
                (os.fsencode(name), state_digest(r[1], r[2], r[3], r[4], r[5], r[6], r[11],
                                                 r[12], r[10])))
    for d, items in sorted(by_dir.items(), key=lambda kv: os.fsencode(kv[0])):
        state.add(os.fsencode(d), sorted(items))
    (src / "new.txt").write_text("new since the full\n")
    _, inc_rows = make_image(tmp_path / "inc.tar", [src], previous=state.text())
    # unchanged entries have short rows, the rest whole ones
    unchanged = [r for r in inc_rows if entry.is_short(r)]
    assert len(unchanged) > 10 and all(r[1] == entry.UNCHANGED for r in unchanged)
    assert not [r for r in inc_rows if not entry.is_short(r) and r[entry.OFFSET] == -1]
    assert "/new.txt" not in {r[entry.PATH][-8:] for r in unchanged}
    found, rows, _ = reindex(tmp_path / "inc.tar")
    assert rows == inc_rows
    assert found["trailing_index"]["unchanged"] == len(unchanged)


def test_cancel(image):
    with pytest.raises(Canceled):
        reindex(image["path"], is_cancelled=lambda: True)


def test_a_stream_image_with_an_unreadable_chunk(image, tmp_path):
    """StreamImage: bytes a chunk holds that cannot be read are damage, nothing more."""
    from app.errors import CairnError

    data = open(image["path"], "rb").read()
    big = member(image, "big.bin")
    bad_at = big[entry.OFFSET] + big[entry.LENGTH] // 2
    chunk = 1 << 16
    bad_start = bad_at - bad_at % chunk

    class Damaged(CairnError):
        pass

    class Entry:
        def __init__(self, i):
            self.stream_offset, self.length = i * chunk, chunk

    class Recipe:
        path = "fake.recipe"

        def index_at(self, pos):
            return pos // chunk

        def entry(self, i):
            return Entry(i)

    class Stream:
        size = len(data)
        recipe = Recipe()

        def preadinto(self, buf, pos):
            n = min(len(buf), self.size - pos)
            if pos <= bad_start < pos + n:
                e = Damaged("chunk damaged")
                e.stream_offset = bad_start
                raise e
            buf[:n] = data[pos:pos + n]
            return n

    events = []
    found = index_image(StreamImage(Stream()), checksum="crc32",
                        emit=lambda e, d: events.append((e, d)), is_cancelled=lambda: False)
    assert rows_of(events) == image["rows"]
    assert found["damage"] == [{"offset": bad_start, "length": chunk,
                                "reason": "chunk damaged"}]
    assert [x["path"] for x in found["lost"]] == [big[entry.PATH]]
