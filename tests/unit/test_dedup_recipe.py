"""Recipes of the dedup pool on real files and a real chunk store: round trip, exclusive
creation, torn, altered and foreign files, the virtual stream read at random positions
across chunk borders, partial-chunk entries, and chunks the store cannot give as recorded."""

import hashlib
import json
import os
import random
import struct
import time

import pytest

from app import status
from plugins.storage.dedup import chunker as cdc
from plugins.storage.dedup import recipe as rc
from plugins.storage.dedup.recipe import (Entry, Recipe, RecipeDamaged, RecipeExists, RecipeStream,
                              RecipeWriter, read_recipe)
from plugins.storage.dedup.segmenter import Segmenter
from plugins.storage.dedup.store import ChunkStore
from app.errors import ValidationError
from app.formats import tarfmt

PARAMS = cdc.Params(4096, 16384, 65536)
META = {"image_id": "img-1", "chunker": PARAMS.as_dict()}


def image_stream(seed):
    """A tar stream with small and large members, so chunks are both grouped and cut."""
    rnd = random.Random(seed)
    parts = []
    for i in range(40):
        data = rnd.randbytes(rnd.choice((0, 100, 3000, 20000, 90000)))
        parts.append(tarfmt.member_header(b"f%02d" % i, tarfmt.REGTYPE, 0o644, 0, 0,
                                          len(data), 0) + data
                     + bytes(tarfmt.padding(len(data))))
    return b"".join(parts) + tarfmt.EOF_MARKER


class CountingStore(ChunkStore):
    """A real store that counts the chunks read from it."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.gets = 0

    def get(self, fp):
        self.gets += 1
        return super().get(fp)


def stored_image(tmp_path, seed=1):
    """(stream, store, recipe path): the stream cut by the segmenter, its chunks in a store
    and its recipe written."""
    stream = image_stream(seed)
    store = CountingStore(tmp_path / "store")
    seg = Segmenter(PARAMS)
    pieces = seg.feed(stream) + seg.finish()
    path = tmp_path / "img.recipe"
    w = RecipeWriter(path)
    with store.writer() as sw:
        for p in pieces:
            fp = hashlib.sha256(p.data).digest()
            sw.add(fp, p.data)
            w.add(fp, p.length)
    info = w.finish(META)
    assert info["chunks"] == len(pieces) and info["bytes"] == len(stream)
    assert info["file_bytes"] == os.path.getsize(path)
    return stream, store, path, pieces


# ---------------------------------------------------------------------------------------------
# the file


def test_round_trip(tmp_path):
    stream, store, path, pieces = stored_image(tmp_path)
    r = read_recipe(path)
    assert isinstance(r, Recipe) and r.path == str(path)
    assert r.meta == META
    assert r.size == len(stream) and len(r) == len(pieces) > 20
    fps = [hashlib.sha256(p.data).digest() for p in pieces]
    assert list(r) == [Entry(fp, 0, p.length, p.offset) for fp, p in zip(fps, pieces)]
    assert r.entry(3) == Entry(fps[3], 0, pieces[3].length, pieces[3].offset)
    assert r.fingerprints() == set(fps)
    held = set(fps[::3])
    assert r.fingerprints_not_in(held) == set(fps) - held
    assert r.fingerprints_not_in(dict.fromkeys(fps).keys()) == set()
    assert store.lacking(r) == 0
    assert r.index_at(0) == 0 and r.index_at(len(stream) - 1) == len(pieces) - 1
    assert r.index_at(pieces[5].offset) == 5 and r.index_at(pieces[5].offset - 1) == 4
    with pytest.raises(ValueError):
        r.index_at(len(stream))
    hit = {fps[2], fps[7]}
    assert r.ranges_of(hit) == [(pieces[i].offset, pieces[i].length, fps[i]) for i in (2, 7)]
    assert r.ranges_of([b"\0" * 32]) == []


def test_empty_recipe(tmp_path):
    path = tmp_path / "empty.recipe"
    assert RecipeWriter(path).finish({"image_id": "e"})["chunks"] == 0
    r = Recipe.load(path)
    assert (len(r), r.size, r.meta, list(r), r.fingerprints()) == (0, 0, {"image_id": "e"},
                                                                   [], set())
    s = RecipeStream(ChunkStore(tmp_path / "store"), r)
    assert s.read() == b"" and s.preadinto(bytearray(10), 0) == 0


def test_an_existing_file_is_never_overwritten(tmp_path):
    path = tmp_path / "img.recipe"
    path.write_bytes(b"precious")
    with pytest.raises(RecipeExists, match="exists already") as e:
        RecipeWriter(path)
    assert str(path) in str(e.value)
    assert path.read_bytes() == b"precious"


def test_abort_and_unfinished_writers_leave_nothing(tmp_path):
    path = tmp_path / "a.recipe"
    w = RecipeWriter(path)
    w.add(b"\1" * 32, 10)
    w.abort()
    assert not path.exists()
    w.abort()  # twice is harmless
    with pytest.raises(ValidationError, match="aborted"):
        w.add(b"\1" * 32, 10)
    with RecipeWriter(path) as w:
        w.add(b"\1" * 32, 10)
    assert not path.exists()
    with pytest.raises(KeyError):
        with RecipeWriter(path) as w:
            raise KeyError("boom")
    assert not path.exists()
    with RecipeWriter(path) as w:
        w.add(bytearray(b"\2" * 32), 10, start=5)
        w.finish({})
    w.abort()  # a finished recipe stays
    assert list(Recipe.load(path)) == [Entry(b"\2" * 32, 5, 10, 0)]
    with pytest.raises(ValidationError, match="finished"):
        w.add(b"\1" * 32, 10)


def test_bad_entries_and_meta_are_refused(tmp_path):
    w = RecipeWriter(tmp_path / "b.recipe")
    for fp, length, start in ((b"\1" * 31, 10, 0), ("ab" * 32, 10, 0), (None, 1, 0),
                              (b"\1" * 32, 0, 0), (b"\1" * 32, -1, 0), (b"\1" * 32, 10, -1),
                              (b"\1" * 32, 1.0, 0), (b"\1" * 32, 2 ** 32, 0),
                              (b"\1" * 32, 10, 2 ** 32 - 5)):
        with pytest.raises(ValidationError):
            w.add(fp, length, start)
    with pytest.raises(ValidationError, match="dict"):
        w.finish(["not", "a", "dict"])
    with pytest.raises(ValidationError, match="JSON"):
        w.finish({"x": object()})
    w.add(b"\1" * 32, 10)  # still usable after a refused meta
    assert w.finish({"ok": True}) == {"chunks": 1, "bytes": 10,
                                      "file_bytes": os.path.getsize(tmp_path / "b.recipe")}


def test_entries_are_written_in_batches(tmp_path, monkeypatch):
    writes = []
    real_write = os.write

    def counting_write(fd, data):
        writes.append(len(data))
        return real_write(fd, data)
    monkeypatch.setattr(rc.os, "write", counting_write)
    w = RecipeWriter(tmp_path / "many.recipe")
    for i in range(60000):
        w.add(i.to_bytes(32, "big"), 1000)
    w.finish({})
    assert len(writes) <= 4  # 2.4 MB of entries: two or three batches and the trailer


def damaged(path, match):
    with pytest.raises(RecipeDamaged, match=match) as e:
        Recipe.load(path)
    assert e.value.status == status.IMAGE_DAMAGED
    assert str(path) in e.value.message and e.value.path == str(path)
    return e.value


def test_torn_files_are_refused(tmp_path):
    _, _, path, _ = stored_image(tmp_path)
    whole = path.read_bytes()
    n = len(whole)
    torn = tmp_path / "torn.recipe"
    for cut in (0, 3, 8, 16, 17, 16 + 40 * 5, n // 2, n - rc.TRAILER.size - 1,
                n - rc.TRAILER.size, n - 8, n - 1):
        torn.write_bytes(whole[:cut])
        damaged(torn, "empty|cut short|incomplete")
    damaged(tmp_path / "missing.recipe", "is missing")


def test_altered_bytes_are_found_wherever_they_are(tmp_path):
    _, _, path, _ = stored_image(tmp_path)
    whole = path.read_bytes()
    n = len(whole)
    bad = tmp_path / "bad.recipe"
    meta_at = n - rc.TRAILER.size - len(json.dumps(META, sort_keys=True,
                                                   separators=(",", ":")))
    places = {
        "version": (9, "format version"),
        "entry fingerprint": (16 + 40 * 3 + 5, "SHA-256"),
        "entry length": (16 + 40 * 3 + 39, "SHA-256"),
        "meta": (meta_at + 2, "SHA-256"),
        "trailer count": (n - rc.TRAILER.size + 7, "trailer records"),
        "trailer size": (n - rc.TRAILER.size + 15, "SHA-256"),
        "digest": (n - 20, "SHA-256"),
        "end magic": (n - 3, "incomplete"),
    }
    for what, (at, match) in places.items():
        data = bytearray(whole)
        data[at] ^= 0x10
        bad.write_bytes(bytes(data))
        damaged(bad, match)
    # an appended byte moves the trailer
    bad.write_bytes(whole + b"\0")
    damaged(bad, "incomplete")


def test_foreign_files_are_not_recipes(tmp_path):
    other = tmp_path / "image.tar"
    other.write_bytes(image_stream(2)[:5000])
    damaged(other, "is not a recipe")
    old = tmp_path / "old.recipe"
    _, _, path, _ = stored_image(tmp_path)
    data = bytearray(path.read_bytes())
    data[:8] = b"CRNRCPE0"
    old.write_bytes(bytes(data))
    damaged(old, "is not a recipe")


def test_a_hundred_thousand_entries_load_quickly(tmp_path):
    path = tmp_path / "big.recipe"
    w = RecipeWriter(path)
    rnd = random.Random(3)
    fps = [rnd.randbytes(32) for _ in range(1000)]
    for i in range(100_000):
        w.add(fps[i % 1000], 400_000 + i % 500)
    w.finish({"image_id": "big"})
    t0 = time.perf_counter()
    r = Recipe.load(path)
    took = time.perf_counter() - t0
    assert len(r) == 100_000 and r.size == sum(400_000 + i % 500 for i in range(100_000))
    assert took < 0.5, took
    assert r.entry(99_999).stream_offset == r.size - (400_000 + 99_999 % 500)
    assert len(r.fingerprints()) == 1000
    assert len(r.ranges_of({fps[0]})) == 100


# ---------------------------------------------------------------------------------------------
# the stream


def test_random_ranges_read_back_the_original_bytes(tmp_path):
    stream, store, path, pieces = stored_image(tmp_path)
    s = RecipeStream(store, read_recipe(path))
    assert s.size == len(stream)
    rnd = random.Random(4)
    borders = [p.offset for p in pieces[1:]]
    for i in range(200):
        if i % 2:  # straddle a chunk border
            b = rnd.choice(borders)
            pos = max(0, b - rnd.randint(1, 3000))
            n = rnd.randint(b - pos + 1, b - pos + 100000)
        else:
            pos = rnd.randrange(len(stream))
            n = rnd.randint(1, 200000)
        buf = bytearray(n)
        got = s.preadinto(buf, pos)
        want = stream[pos:pos + n]
        assert got == len(want) and bytes(buf[:got]) == want
    assert s.preadinto(bytearray(10), len(stream)) == 0
    assert s.preadinto(bytearray(10), len(stream) + 5) == 0
    assert s.preadinto(memoryview(bytearray(0)), 0) == 0
    with pytest.raises(ValueError):
        s.preadinto(bytearray(1), -1)


def test_sequential_reading_and_the_chunk_cache(tmp_path):
    stream, store, path, pieces = stored_image(tmp_path)
    s = RecipeStream(store, Recipe.load(path), read_ahead=False)
    # a restore reads members in order: many reads out of one chunk cost one get
    big = max(pieces, key=lambda p: p.length)
    s.seek(big.offset)
    store.gets = 0
    for _ in range(big.length // 512):
        assert s.read(512) == stream[s.tell() - 512:s.tell()]
    assert store.gets == 1
    s.seek(0)
    out = []
    while True:
        piece = s.read(7777)
        if not piece:
            break
        out.append(piece)
    assert b"".join(out) == stream and s.tell() == len(stream)
    assert s.seek(-100, os.SEEK_END) == len(stream) - 100
    assert s.read() == stream[-100:]
    s.seek(10)
    assert s.seek(5, os.SEEK_CUR) == 15
    buf = bytearray(40)
    assert s.readinto(buf) == 40 and bytes(buf) == stream[15:55]
    assert s.readable() and s.seekable()
    s.close()
    with pytest.raises(ValueError):
        s.read(1)


def test_read_ahead_reads_each_chunk_once_in_order_and_stops_on_close(tmp_path):
    stream, store, path, pieces = stored_image(tmp_path)
    recipe = Recipe.load(path)
    distinct = len(recipe.fingerprints())
    assert distinct > RecipeStream.AHEAD + 2
    s = RecipeStream(store, recipe)
    out = []
    while True:
        piece = s.read(100_000)
        if not piece:
            break
        out.append(piece)
    assert b"".join(out) == stream
    assert store.gets == distinct  # nothing read twice, nothing read in vain
    # a jump back: what was read ahead for the old place is dropped, the bytes are right
    s.seek(pieces[1].offset + 3)
    assert s.read(5000) == stream[pieces[1].offset + 3:pieces[1].offset + 5003]
    s.close()
    assert s._pool is None and not s._ahead


def test_read_ahead_stopped_midway_reads_the_rest_in_the_reading_thread(tmp_path):
    stream, store, path, pieces = stored_image(tmp_path)
    recipe = Recipe.load(path)
    s = RecipeStream(store, recipe)
    first = s.read(pieces[2].offset)
    assert s._ahead  # chunks after the third are being read ahead
    s.stop_reading_ahead()
    assert not s._ahead
    pool = s._pool
    out = [first]
    while True:
        piece = s.read(100_000)
        if not piece:
            break
        out.append(piece)
        assert not s._ahead  # nothing planned any more
    assert b"".join(out) == stream
    assert store.gets <= len(recipe.fingerprints()) + RecipeStream.AHEAD  # dropped ones again
    s.close()
    assert pool._shutdown and s._pool is None


def test_partial_chunk_entries(tmp_path):
    store = ChunkStore(tmp_path / "store")
    rnd = random.Random(5)
    chunks = [rnd.randbytes(rnd.randint(1000, 9000)) for _ in range(6)]
    fps = [hashlib.sha256(c).digest() for c in chunks]
    with store.writer() as w:
        for fp, c in zip(fps, chunks):
            w.add(fp, c)
    # parts of chunks, a chunk twice, out of order
    plan = [(0, 100, 500), (3, 0, len(chunks[3])), (0, 2000, 1), (5, 17, 4000),
            (3, 1, 999), (1, len(chunks[1]) - 10, 10)]
    expect = b"".join(chunks[i][start:start + n] for i, start, n in plan)
    path = tmp_path / "part.recipe"
    w = RecipeWriter(path)
    for i, start, n in plan:
        w.add(fps[i], n, start=start)
    assert w.finish({"image_id": "p"})["bytes"] == len(expect)
    r = Recipe.load(path)
    assert [(e.start, e.length) for e in r] == [(start, n) for _, start, n in plan]
    s = RecipeStream(store, r)
    assert s.read() == expect
    for pos in range(0, len(expect), 97):
        buf = bytearray(1500)
        n = s.preadinto(buf, pos)
        assert bytes(buf[:n]) == expect[pos:pos + 1500]


def test_chunks_the_store_cannot_give_as_recorded(tmp_path):
    stream, store, path, pieces = stored_image(tmp_path)
    # a recipe whose entry needs more bytes than its chunk holds
    short = tmp_path / "short.recipe"
    w = RecipeWriter(short)
    fp0 = hashlib.sha256(pieces[0].data).digest()
    fp1 = hashlib.sha256(pieces[1].data).digest()
    w.add(fp0, pieces[0].length)
    w.add(fp1, pieces[1].length + 1)
    w.finish({})
    s = RecipeStream(store, Recipe.load(short))
    assert s.read(pieces[0].length) == pieces[0].data
    with pytest.raises(RecipeDamaged, match=f"stream offset {pieces[0].length} ") as e:
        s.read(10)
    assert e.value.fingerprint == fp1 and e.value.stream_offset == pieces[0].length
    assert e.value.status == status.IMAGE_DAMAGED
    # a chunk missing from the store
    lost = tmp_path / "lost.recipe"
    w = RecipeWriter(lost)
    w.add(fp0, pieces[0].length)
    w.add(b"\7" * 32, 50)
    w.finish({})
    s = RecipeStream(store, Recipe.load(lost))
    with pytest.raises(RecipeDamaged, match="missing from the chunk store") as e:
        s.preadinto(bytearray(pieces[0].length + 10), 0)
    assert e.value.stream_offset == pieces[0].length and e.value.fingerprint == b"\7" * 32
    # a chunk damaged in its container: which stream bytes does it take away?
    r = Recipe.load(path)
    victim = pieces[len(pieces) // 2]
    vfp = hashlib.sha256(victim.data).digest()
    loc = store.locate(vfp)
    cpath = store.container_path(loc.container)
    data = bytearray(open(cpath, "rb").read())
    data[loc.offset + 100] ^= 0xFF  # inside the record's stored bytes
    with open(cpath, "wb") as f:
        f.write(data)
    s = RecipeStream(store, r)
    with pytest.raises(RecipeDamaged, match=f"stream offset {victim.offset}") as e:
        s.preadinto(bytearray(100), victim.offset + 5)
    assert e.value.fingerprint == vfp
    assert r.ranges_of({e.value.fingerprint}) == [(victim.offset, victim.length, vfp)]
    # the bytes before it still read
    assert s.preadinto(bytearray(victim.offset), 0) == victim.offset


def test_entry_layout_is_the_documented_one(tmp_path):
    path = tmp_path / "l.recipe"
    w = RecipeWriter(path)
    w.add(b"\xaa" * 32, 0x01020304, start=7)
    w.finish({"image_id": "l"})
    raw = path.read_bytes()
    assert raw[:16] == b"CRNRCPE1" + struct.pack(">II", 2, 40)
    assert raw[16:56] == b"\xaa" * 32 + struct.pack(">II", 7, 0x01020304)
    meta = b'{"image_id":"l"}'
    assert raw[56:56 + len(meta)] == meta
    count, size, meta_len, digest, end = struct.unpack(">QQI32s8s", raw[56 + len(meta):])
    assert (count, size, meta_len, end) == (1, 0x01020304, len(meta), b"CRNRCPE.")
    assert digest == hashlib.sha256(raw[:-40]).digest()


def _entries_of(r, offset, length):
    """The entries for bytes offset..offset+length, one by one."""
    out, pos, i, end = [], offset, r.index_at(offset), offset + length
    while pos < end:
        e = r.entry(i)
        skip = pos - e.stream_offset
        n = min(e.length - skip, end - pos)
        out.append((e.fp, e.start + skip, n))
        pos, i = pos + n, i + 1
    return out


def test_a_copied_range_gives_the_same_entries_and_bytes_as_entry_by_entry(tmp_path):
    """A files cache's reference copies a base recipe's whole entries as they are and cuts
    only the first and last ones: the recipe written reads back the same stream."""
    stream, store, path, pieces = stored_image(tmp_path)
    r = read_recipe(path)
    rnd = random.Random(3)
    bounds = [p.offset for p in pieces] + [len(stream)]
    cases = [(0, len(stream)), (pieces[3].offset, pieces[3].length),
             (pieces[3].offset + 1, pieces[3].length - 2),
             (pieces[2].offset, pieces[6].offset - pieces[2].offset),
             (pieces[2].offset + 5, pieces[6].offset + 9 - pieces[2].offset - 5)]
    for _ in range(200):
        a = rnd.choice(bounds[:-1]) + rnd.choice((0, 0, 1, 700))
        b = rnd.choice(bounds[1:]) - rnd.choice((0, 0, 1, 300))
        if a < b <= len(stream):
            cases.append((a, b - a))
    for k, (offset, length) in enumerate(cases):
        got = r.copy_range(offset, length)
        flat = []
        for item in got:
            if type(item) is tuple:
                flat.append(item)
            else:
                flat += [(fp, s, n) for fp, s, n in rc.ENTRY.iter_unpack(item.raw)]
                assert item.chunks == len(item.raw) // rc.ENTRY.size
                assert item.bytes == sum(n for _, _, n in rc.ENTRY.iter_unpack(item.raw))
        assert flat == _entries_of(r, offset, length), (offset, length)
        assert sum(type(i) is tuple for i in got) <= 2
        w = RecipeWriter(tmp_path / f"copy{k}.recipe")
        for item in got:
            if type(item) is tuple:
                w.add(item[0], item[2], item[1])
            else:
                w.add_entries(item)
        assert w.finish(META)["bytes"] == length
        back = RecipeStream(store, read_recipe(tmp_path / f"copy{k}.recipe"))
        try:
            assert back.read() == stream[offset:offset + length]
        finally:
            back.close()
