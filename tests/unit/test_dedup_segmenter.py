"""Member-aware segmentation of image streams: pieces equal an independent definition (FastCDC
from each boundary, cut short at the first member start at least member_min away) for every
kind of tar header, for any split into feed() calls and for both chunker implementations;
real archiver images keep the chunks of unchanged files; non-tar bytes fall back."""

import hashlib
import os
import random

import pytest

from app.agent.archiver import backup_to
from plugins.storage.dedup import chunker as cdc
from plugins.storage.dedup import segmenter as sg
from plugins.storage.dedup.segmenter import MEMBER_MIN, Piece, Segmenter
from app.errors import ValidationError
from app.formats import entry, tarfmt

ACCEL_MISSING = ("pyfastcdc (the optional Cython accelerator) is not installed; the test "
                 "environment should have it: pip install 'pyfastcdc>=0.3.1,<0.4'")
IMPLS = [
    "reference",
    pytest.param("pyfastcdc", marks=pytest.mark.skipif(cdc.ACCELERATOR is None,
                                                       reason=ACCEL_MISSING)),
]
ACCEL = pytest.mark.skipif(cdc.ACCELERATOR is None, reason=ACCEL_MISSING)

# Small chunks, so that a stream of a few hundred KiB has many of them; FastCDC alone cuts
# below member_min (16 KiB) and above it.
SMALL = cdc.Params(4096, 16384, 65536)
MTIME = 1_700_000_000_250_000_000


# ---------------------------------------------------------------------------------------------
# streams and the definition the pieces must meet


class Stream:
    """A tar stream built member by member, remembering each member's start, length and the
    end of its header blocks."""

    def __init__(self):
        self.parts = []
        self.members = []
        self.pos = 0

    def member(self, head, data=b""):
        blob = head + data + bytes(tarfmt.padding(len(data)))
        self.members.append((self.pos, len(blob), self.pos + len(head)))
        self.parts.append(blob)
        self.pos += len(blob)

    def file(self, name, data, **kw):
        self.member(tarfmt.member_header(name, tarfmt.REGTYPE, 0o644, 1000, 1000, len(data),
                                         MTIME, **kw), data)

    @property
    def starts(self):
        return [m[0] for m in self.members]

    def bytes(self, end=True):
        return b"".join(self.parts) + (tarfmt.EOF_MARKER if end else b"")


def varied_stream(seed, count=60, big=40000):
    """Every header shape an image can hold, and some other writers' too."""
    rnd = random.Random(seed)
    s = Stream()
    s.file(b".cairn/image.json", b'{"image_id": "t"}\n')
    s.member(tarfmt.member_header(b"d/", tarfmt.DIRTYPE, 0o755, 0, 0, 0, MTIME))
    for i in range(count):
        kind = rnd.randrange(9)
        name = b"d/f%03d" % i
        size = rnd.choice((0, 1, 511, 512, 513, 3000, 9000, 20000, big))
        data = rnd.randbytes(size)
        if kind == 0:  # a pax path record: long non-ASCII name
            s.file(b"d/" + "\u00e9".encode() * 70 + b"%d" % i, data)
        elif kind == 1:  # a pax header of several blocks (xattr values)
            s.file(name, data, xattrs=[(b"user.a", rnd.randbytes(rnd.choice((100, 3000))))])
        elif kind == 2:  # members without data, one with a size field as some writers set
            s.member(tarfmt.member_header(name + b"l", tarfmt.SYMTYPE, 0o777, 0, 0, 5000, MTIME,
                                          linkname=b"target"))
            s.member(tarfmt.member_header(name + b"h", tarfmt.LNKTYPE, 0o644, 0, 0, 0, MTIME,
                                          linkname=b"d/f000"))
        elif kind == 3:  # GNU long name
            long = b"d/" + b"n" * 150 + b"%d" % i
            body = long + b"\0"
            head = tarfmt.ustar_header(b"././@LongLink", 0o644, 0, 0, len(body), 0,
                                       tarfmt.GNU_LONGNAME)
            s.member(head + body + bytes(tarfmt.padding(len(body)))
                     + tarfmt.member_header(long[:100], tarfmt.REGTYPE, 0o644, 0, 0, size,
                                            MTIME), data)
        elif kind == 4:  # a global pax header before the member
            rec = tarfmt.pax_record(b"comment", b"global")
            head = tarfmt.ustar_header(b"pax_global_header", 0o644, 0, 0, len(rec), 0,
                                       tarfmt.XGLTYPE)
            s.member(head + rec + bytes(tarfmt.padding(len(rec)))
                     + tarfmt.member_header(name, tarfmt.REGTYPE, 0o644, 0, 0, size, MTIME),
                     data)
        elif kind == 5:  # the size only in a pax record (ustar size field 0)
            rec = tarfmt.pax_record(b"size", b"%d" % size)
            head = tarfmt.ustar_header(b"././@PaxHeader", 0o644, 0, 0, len(rec), 0,
                                       tarfmt.XHDTYPE)
            s.member(head + rec + bytes(tarfmt.padding(len(rec)))
                     + tarfmt.ustar_header(name, 0o644, 0, 0, 0, 0, tarfmt.REGTYPE), data)
        elif kind == 6:  # GNU sparse 1.0: the size field covers map and data
            segs = [(0, len(data) // 2), (100000, len(data) - len(data) // 2)]
            area = tarfmt.sparse_map_bytes(segs, 200000) + data
            s.member(tarfmt.member_header(name, tarfmt.REGTYPE, 0o644, 0, 0, len(area), MTIME,
                                          sparse_realsize=200000), area)
        else:
            s.file(name, data)
    return s


def reference_cut(params, stream, b):
    return cdc.reference_cut(params, stream, b, len(stream))


def accelerated_cut(params, stream, b):
    # FastCDC looks at most max_size bytes ahead: this view decides the first cut
    view = memoryview(stream)[b:b + params.max_size]
    return cdc.chunks(view, params, implementation="pyfastcdc")[0].length


def defined_pieces(stream, members, params=SMALL, member_min=MEMBER_MIN, cut=reference_cut):
    """The boundaries by their definition: FastCDC from each boundary on the whole stream,
    unless a member start comes first that is member_min away or where a large member
    (member_min bytes or more) begins or ends."""
    gap = max(member_min, 1)
    starts = []
    for i, (start, length, *_) in enumerate(members):
        forced = length >= member_min or (i > 0 and members[i - 1][1] >= member_min)
        starts.append((start, forced))
    out = []
    b = 0
    n = len(stream)
    while b < n:
        e = b + cut(params, stream, b)
        m = next((x for x, forced in starts if x > b and (forced or x >= b + gap)), None)
        if m is not None and m < e:
            e = m
        out.append((b, e - b))
        b = e
    return out


def segment(data, params=SMALL, splits=None, **kw):
    seg = Segmenter(params, **kw)
    out = []
    pos = 0
    for n in splits or [len(data)]:
        out += seg.feed(data[pos:pos + n])
        pos += n
    assert pos >= len(data)
    out += seg.finish()
    kinds = (bytes, memoryview) if kw.get("views") else (bytes,)
    assert all(type(p) is Piece and type(p.data) in kinds and len(p.data) == p.length
               for p in out)
    assert all(p.data.readonly for p in out if type(p.data) is memoryview)
    assert b"".join(p.data for p in out) == data
    return out, seg


def shape(pieces):
    return [(p.offset, p.length) for p in pieces]


def random_splits(rnd, total):
    out = []
    while sum(out) < total:
        out.append(rnd.choice((1, 3, 511, 512, 4096, 65537, rnd.randint(1, 300_000))))
    return out


# ---------------------------------------------------------------------------------------------
# definition, splits, implementations


@pytest.mark.parametrize("impl", IMPLS)
def test_pieces_meet_the_definition_for_every_header_shape(impl):
    s = varied_stream(1)
    data = s.bytes()
    pieces, seg = segment(data, implementation=impl)
    assert seg.implementation == impl
    assert seg.members == len(s.starts)
    assert seg.lost_at is None
    assert shape(pieces) == defined_pieces(data, s.members)
    # the member starts really cut: many pieces start at one
    assert len({p.offset for p in pieces} & set(s.starts)) > len(pieces) // 4


@pytest.mark.parametrize("impl", IMPLS)
def test_any_split_gives_the_same_pieces(impl, monkeypatch):
    # a small gathering threshold, so that gathered, in-place and joined cutting all happen
    monkeypatch.setattr(sg, "GATHER", 64 * 1024)
    s = varied_stream(2, count=40)
    # a pax header larger than the window settles only once it is whole
    s.file(b"d/xattrs", b"x" * 5000, xattrs=[(b"user.big", random.Random(3).randbytes(100000))])
    s.file(b"d/after", random.Random(4).randbytes(30000))
    data = s.bytes()
    whole, _ = segment(data, implementation=impl)
    assert shape(whole) == defined_pieces(data, s.members)
    rnd = random.Random(5)
    for _ in range(6):
        got, _ = segment(data, splits=random_splits(rnd, len(data)), implementation=impl)
        assert got == whole


@pytest.mark.parametrize("impl", IMPLS)
def test_views_of_handed_over_buffers_give_the_same_pieces(impl, monkeypatch):
    # views=True: pieces cut in place are views of the caller's buffer, and the held tail is
    # settled on a few first bytes of the next buffer, taking more only as its chunks need
    monkeypatch.setattr(sg, "GATHER", 64 * 1024)
    monkeypatch.setattr(sg, "SETTLE_FIRST", 700)
    s = varied_stream(7, count=40)
    data = s.bytes()
    whole, _ = segment(data, implementation=impl)
    rnd = random.Random(8)
    viewed = 0
    for _ in range(6):
        splits = [rnd.choice((64 * 1024, 100_000, 300_000, 5000)) for _ in range(60)]
        got, _ = segment(data, splits=splits, implementation=impl, views=True)
        assert shape(got) == shape(whole)
        assert [bytes(p.data) for p in got] == [p.data for p in whole]
        viewed += sum(type(p.data) is memoryview for p in got)
    assert viewed > len(whole)  # most pieces came out of the large buffers uncopied


def test_a_content_cut_one_byte_before_a_member_start():
    # FastCDC decides a cut looking one byte past it: a content cut just before a member
    # start must not be lost by looking only up to the member start.
    params = cdc.Params(64, 256, 1024)
    rnd = random.Random(195)
    s = Stream()
    for i in range(40):
        s.file(b"f%d" % i, rnd.randbytes(rnd.randint(0, 1500)))
    data = s.bytes()
    expect = defined_pieces(data, s.members, params, member_min=300)
    assert any(o + n + 1 in s.starts and n % 2 == 0 for o, n in expect)
    for impl in ("reference", cdc.ACCELERATOR or "reference"):
        got, _ = segment(data, params, member_min=300, implementation=impl)
        assert shape(got) == expect


def test_feeds_that_end_inside_a_members_header_blocks(monkeypatch):
    # Until its last header block arrives, a member's length (large or not) is unknown, and
    # so is whether a boundary must come before it: nothing may be cut past its start.
    monkeypatch.setattr(sg, "GATHER", 1)  # cut each feed at once
    rnd = random.Random(16)
    s = Stream()
    s.file(b"a", rnd.randbytes(200000))
    s.file(b"b", rnd.randbytes(50000), xattrs=[(b"user.big", rnd.randbytes(100000))])
    s.file(b"c", rnd.randbytes(3000), xattrs=[(b"user.small", b"v")])
    s.file(b"d", rnd.randbytes(90000))
    data = s.bytes()
    expect = defined_pieces(data, s.members)
    for start, length, head_end in s.members:
        for cut in (start + 512, head_end - 512, head_end - 1):
            if start < cut < len(data):
                got, _ = segment(data, splits=[cut, len(data) - cut])
                assert shape(got) == expect, cut


@ACCEL
def test_any_split_with_the_default_sizes():
    rnd = random.Random(6)
    s = Stream()
    for i in range(6):
        s.file(b"big%d" % i, rnd.randbytes(rnd.randint(1 << 20, 3 << 20)))
        for j in range(30):
            s.file(b"small%d_%d" % (i, j), rnd.randbytes(rnd.randint(0, 3000)))
    data = s.bytes()
    whole, _ = segment(data, params=cdc.Params())
    assert shape(whole) == defined_pieces(data, s.members, cdc.Params(), cut=accelerated_cut)
    for splits in ([1 << 20] * 20, [9 << 20, 1 << 20, 9 << 20, 5 << 20],
                   random_splits(rnd, len(data)) + [len(data)]):
        got, _ = segment(data, params=cdc.Params(), splits=splits)
        assert shape(got) == shape(whole)


@ACCEL
def test_reference_and_accelerator_agree_on_an_archiver_image(tmp_path):
    make_tree(tmp_path / "src", 8)
    data, _ = backup(tmp_path / "src")
    ref, _ = segment(data, params=ARCH, implementation="reference")
    acc, _ = segment(data, params=ARCH, implementation="pyfastcdc")
    assert ref == acc


def test_member_min_groups_small_members_and_zero_cuts_before_each():
    rnd = random.Random(7)
    s = Stream()
    for i in range(50):
        s.file(b"s%02d" % i, rnd.randbytes(600))  # 1.5 KiB members
    data = s.bytes()
    params = cdc.Params(MEMBER_MIN, 2 * MEMBER_MIN, 8 * MEMBER_MIN)  # no cut below 16 KiB
    grouped, _ = segment(data, params)
    assert shape(grouped) == defined_pieces(data, s.members, params)
    assert len(grouped) > 3
    assert all(p.length >= MEMBER_MIN and p.offset + p.length in s.starts
               for p in grouped[:-1])
    each, _ = segment(data, member_min=0)
    assert set(s.starts) <= {p.offset for p in each}
    assert shape(each) == defined_pieces(data, s.members, member_min=0)


def test_params_as_a_dict_and_bad_arguments():
    seg = Segmenter(SMALL.as_dict())
    assert seg.params.as_dict() == SMALL.as_dict()
    assert Segmenter().params.as_dict() == cdc.Params().as_dict()
    for bad in (-1, 1.5, True, "16K"):
        with pytest.raises(ValidationError, match="member_min"):
            Segmenter(member_min=bad)
    with pytest.raises(ValidationError, match="Params or a mapping"):
        Segmenter(4096)
    with pytest.raises(cdc.ChunkerParameterError):
        Segmenter({"min_size": 1000, "avg_size": 3000, "max_size": 9000})
    seg = Segmenter(SMALL)
    seg.feed(b"abc")
    assert seg.held == 3 and seg.offset == 0
    assert [p.data for p in seg.finish()] == [b"abc"]
    assert seg.finish() == []
    with pytest.raises(RuntimeError):
        seg.feed(b"more")


# ---------------------------------------------------------------------------------------------
# not tar, damaged tar, truncated tar


@pytest.mark.parametrize("impl", IMPLS)
def test_bytes_that_are_not_tar_are_cut_by_fastcdc_alone(impl):
    data = random.Random(8).randbytes(300_000)
    pieces, seg = segment(data, splits=random_splits(random.Random(9), len(data)),
                          implementation=impl)
    assert seg.lost_at == 0 and seg.members == 0
    assert shape(pieces) == [tuple(c) for c in cdc.chunks(data, SMALL)]
    zeros = bytes(100_000)  # looks like an end-of-archive marker: no members either
    pieces, seg = segment(zeros, implementation=impl)
    assert seg.members == 0 and shape(pieces) == [tuple(c) for c in cdc.chunks(zeros, SMALL)]


@pytest.mark.parametrize("damage", ["checksum", "size field", "pax size record", "truncated"])
def test_damaged_tar_falls_back_after_the_damage(damage):
    s = varied_stream(10, count=30)
    data = bytearray(s.bytes())
    i = len(s.members) // 2
    at = s.starts[i]  # its first header block
    if damage == "checksum":
        data[at + 10] ^= 0x41
    elif damage == "size field":
        field = b"99999999999\0"  # 9 is no octal digit
        head = bytearray(data[at:at + 512])
        head[124:136] = field
        head[148:156] = b"        "
        head[148:155] = b"%06o\0" % sum(head)
        data[at:at + 512] = head
    elif damage == "pax size record":
        rec = tarfmt.pax_record(b"size", b"12x4")
        head = tarfmt.ustar_header(b"././@PaxHeader", 0o644, 0, 0, len(rec), 0, tarfmt.XHDTYPE)
        data[at:at] = head + rec + bytes(tarfmt.padding(len(rec)))
    else:
        del data[at + 700:]
    data = bytes(data)
    rnd = random.Random(11)
    pieces, seg = segment(data, splits=random_splits(rnd, len(data)))
    before = s.members[:i]
    if damage == "truncated":
        # a member counts once its header blocks are read: its length is known then
        assert seg.lost_at is None
        read = [s.members[i]] if s.members[i][2] <= len(data) else []
        assert seg.members == i + len(read)
        assert shape(pieces) == defined_pieces(data, before + read)
    else:
        assert seg.lost_at == at and seg.members == i
        assert shape(pieces) == defined_pieces(data, before)
    # the same with the whole stream at once
    whole, _ = segment(data)
    assert whole == pieces


def test_bytes_after_the_end_of_archive_are_no_members():
    s = varied_stream(12, count=10)
    trailing = Stream()
    trailing.file(b"after-the-end", random.Random(13).randbytes(50000))
    data = s.bytes() + trailing.bytes()
    pieces, seg = segment(data)
    assert seg.members == len(s.starts) and seg.lost_at is None
    assert shape(pieces) == defined_pieces(data, s.members)


# ---------------------------------------------------------------------------------------------
# images made by the archiver

# the default sizes scaled down, so that a tree of a few MB makes many chunks
ARCH = cdc.Params(16 * 1024, 64 * 1024, 256 * 1024)


class Sink:
    def __init__(self):
        self.parts = []

    def write(self, b):
        self.parts.append(bytes(b))
        return len(b)


def backup(src, image_id="seg-1"):
    rows = []
    sink = Sink()

    def emit(event, payload):
        if event == "rows":
            rows.extend(payload["rows"])
    backup_to(sink, [str(src)], emit=emit, is_cancelled=lambda: False,
              image_meta={"image_id": image_id})
    return b"".join(sink.parts), rows


LARGE = ["a/s020big", "a/s060big", "b/big0", "b/big1", "b/big2"]


def make_tree(root, seed):
    """Directories of small files with large ones among them, and one of large files."""
    rnd = random.Random(seed)
    for d in ("a", "c"):
        os.makedirs(root / d)
        for i in range(80):
            (root / d / ("s%03d" % i)).write_bytes(rnd.randbytes(rnd.randint(0, 6000)))
    os.makedirs(root / "b")
    for name in LARGE:
        (root / name).write_bytes(rnd.randbytes(rnd.randint(300000, 500000)))


def fingerprinted(data):
    pieces, _ = segment(data, params=ARCH)
    return [(p.offset, p.length, hashlib.sha256(p.data).digest()) for p in pieces]


def ranges(rows, path):
    return [(r[entry.OFFSET], r[entry.LENGTH]) for r in rows if r[entry.PATH] == path]


def overlaps(piece, spans):
    o, n = piece[0], piece[1]
    return any(o < so + sn and so < o + n for so, sn in spans)


def index_range(rows, image):
    at = max(r[entry.OFFSET] + r[entry.LENGTH] for r in rows)
    return (at, len(image) - at)


def test_an_unchanged_tree_stores_only_the_image_metadata_and_index_again(tmp_path):
    src = tmp_path / "src"
    make_tree(src, 13)
    first, _ = backup(src, "seg-1")
    second, rows = backup(src, "seg-2")
    # with the default sizes, as a pool uses them
    seg = Segmenter()
    before = {hashlib.sha256(p.data).digest() for p in seg.feed(first) + seg.finish()}
    seg = Segmenter()
    after = [(p.offset, p.length, hashlib.sha256(p.data).digest())
             for p in seg.feed(second) + seg.finish()]
    index = index_range(rows, second)
    new = [p for p in after if p[2] not in before]
    assert new and all(overlaps(p, [(0, 1536), index]) for p in new), new
    assert sum(p[1] for p in new) <= 2 * MEMBER_MIN + index[1] + 8192
    assert sum(p[1] for p in new) < 0.01 * len(second)


def test_one_changed_small_file_costs_only_its_own_chunk(tmp_path):
    src = tmp_path / "src"
    make_tree(src, 14)
    first, _ = backup(src)
    victim = src / "a" / "s040"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 1
    victim.write_bytes(bytes(data))
    second, rows = backup(src)
    before = {fp for _, _, fp in fingerprinted(first)}
    after = fingerprinted(second)
    # what differs: the changed file, the image metadata (its time) and the index at the end
    changed = ranges(rows, str(victim)) + [(0, 1536), index_range(rows, second)]
    assert len(changed) == 3
    new = [p for p in after if p[2] not in before]
    assert new and all(overlaps(p, changed) for p in new), new
    assert sum(p[1] for p in new) < 0.05 * len(second)


def test_a_file_inserted_early_leaves_later_large_files_alone(tmp_path):
    src = tmp_path / "src"
    make_tree(src, 15)
    first, rows1 = backup(src)
    (src / "a" / "r000-new").write_bytes(b"inserted" * 1000)  # before every s* file
    second, rows2 = backup(src)
    p1, p2 = fingerprinted(first), fingerprinted(second)
    for name in LARGE:
        (o1, n1), = ranges(rows1, str(src / name))
        (o2, n2), = ranges(rows2, str(src / name))
        assert o2 > o1 and n1 == n2  # moved by the inserted member
        own1 = [p for p in p1 if overlaps(p, [(o1, n1)])]
        own2 = [p for p in p2 if overlaps(p, [(o2, n2)])]
        # boundaries at the member's start and end: its chunks are its own
        assert own1[0][0] == o1 and own2[0][0] == o2
        assert own1[-1][0] + own1[-1][1] == o1 + n1 and own2[-1][0] + own2[-1][1] == o2 + n2
        assert [p[2] for p in own1] == [p[2] for p in own2]
        assert len(own1) >= 3
