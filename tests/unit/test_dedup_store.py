"""Chunk store of the dedup pool on real files: round trips per codec, deduplication,
concurrent writers in two processes, abort and crashed writers, index rebuild, damage
detection and torn container ends."""

import hashlib
import multiprocessing
import os
import random
import struct
import zlib

import pytest

from app.dedup import store as st
from app.errors import ValidationError

ZSTD_MISSING = "the optional zstandard module is not installed"


def chunk(seed, size=None, compressible=True):
    rnd = random.Random(seed)
    size = size or rnd.randint(1, 6000)
    if compressible:
        # text-like data, so the codec really compresses and the codec byte is not "none"
        words = [b"alpha", b"beta", b"gamma", b"delta", bytes([rnd.randrange(256)])]
        data = b" ".join(rnd.choice(words) for _ in range(size // 4 + 1))[:size]
    else:
        data = rnd.randbytes(size)
    return hashlib.sha256(data).digest(), data


def fill(store, seeds, **kw):
    chunks = dict(chunk(s, **kw) for s in seeds)
    with store.writer() as w:
        for fp, data in chunks.items():
            known = store.has(fp)
            assert w.add(fp, data) is not known
    return chunks


def files(store, suffix):
    return sorted(n for n in os.listdir(store.containers_dir) if n.endswith(suffix))


def record_codecs(store):
    codecs = []
    for number in store.committed_containers():
        for offset, header, error in store._scan(number, decode=False):
            assert error is None
            codecs.append(header[2])
    return codecs


@pytest.mark.parametrize("codec", [
    "zlib", "none",
    pytest.param("zstd", marks=pytest.mark.skipif(st._zstd is None, reason=ZSTD_MISSING)),
])
def test_round_trip_per_codec(tmp_path, codec):
    store = st.ChunkStore(tmp_path, codec=codec)
    chunks = fill(store, range(30))
    chunks.update(fill(store, range(100, 103), compressible=False))
    reopened = st.ChunkStore(tmp_path)  # the default codec reads whatever was recorded
    for fp, data in chunks.items():
        assert reopened.has(fp)
        assert reopened.get(fp) == data
    assert len(reopened) == len(chunks)
    codes = record_codecs(store)
    assert codes.count(st.CODECS[codec]) >= 30
    # random data does not compress: kept as is instead of growing
    assert codes.count(st.CODEC_NONE) >= 3
    assert list(reopened.verify()) == []


def test_zstd_record_without_zstandard_names_the_module(tmp_path, monkeypatch):
    data = b"zstd frame bytes" * 10
    fp = hashlib.sha256(data).digest()
    store = st.ChunkStore(tmp_path, codec="zlib")
    with store.writer() as w:
        w.add(fp, data)
    # rewrite the record's codec byte to zstd, as a zstd-equipped host would have written it
    path = store.container_path(1)
    raw = bytearray(open(path, "rb").read())
    raw[st.CONTAINER_HEADER.size + 4 + 32] = st.CODEC_ZSTD
    open(path, "wb").write(bytes(raw))
    monkeypatch.setattr(st, "_zstd", None)
    with pytest.raises(st.CodecUnavailable, match="zstandard"):
        store.get(fp)
    with pytest.raises(ValidationError, match="zstandard"):
        st.ChunkStore(tmp_path, codec="zstd")


def test_duplicates_are_stored_once(tmp_path):
    store = st.ChunkStore(tmp_path)
    fp, data = chunk(1)
    with store.writer() as w:
        assert w.add(fp, data) is True
        assert w.add(fp, data) is False  # already added by this writer
    size = os.path.getsize(store.container_path(1))
    with store.writer() as w:
        assert w.add(fp, data) is False  # already in the index
    assert files(store, ".ctr") == [st.container_name(1)]  # empty writer: no container
    assert os.path.getsize(store.container_path(1)) == size
    assert len(store) == 1


def test_full_containers_roll_over_and_are_indexed(tmp_path):
    store = st.ChunkStore(tmp_path, container_size=8192)
    chunks = fill(store, range(40), size=1500, compressible=False)
    assert len(files(store, ".ctr")) >= 7
    assert all(os.path.getsize(store.container_path(n)) <= 8192
               for n in store.committed_containers())
    for fp, data in chunks.items():
        assert store.get(fp) == data


def _write_worker(root, seeds, barrier):
    # small containers: many index appends from both processes, to give races a chance
    store = st.ChunkStore(root, container_size=4096)
    barrier.wait()  # both processes write at the same time
    with store.writer() as w:
        for s in seeds:
            fp, data = chunk(s)
            w.add(fp, data)
    os._exit(0)


def test_two_processes_with_overlapping_chunks(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    seeds = [list(range(0, 60)), list(range(30, 90))]
    procs = [ctx.Process(target=_write_worker, args=(str(tmp_path), s, barrier)) for s in seeds]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = st.ChunkStore(tmp_path)
    assert len(store) == 90
    for s in range(90):
        fp, data = chunk(s)
        assert store.get(fp) == data
    assert list(store.verify()) == []
    numbers = store.committed_containers()
    assert len(numbers) == len(set(numbers)) and files(store, ".partial") == []
    # the index log holds whole entries only: interleaved appends would show as a torn tail
    size = os.path.getsize(store.index_path) - len(st.INDEX_MAGIC)
    assert size % st.INDEX_RECORD.size == 0


def _commit_worker(root, conn):
    store = st.ChunkStore(root)
    w = store.writer()
    w.add(*chunk(1))  # takes the lock too, to claim a container number
    conn.send("added")
    conn.recv()  # the parent holds the index lock now
    w.commit()
    os._exit(0)


def test_index_update_waits_for_the_lock_held_by_another_process(tmp_path):
    store = st.ChunkStore(tmp_path)
    fill(store, [0])  # the index log exists
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    # forked before the lock is taken: a child inheriting the locked descriptor would keep
    # the flock alive after the parent lets go
    p = ctx.Process(target=_commit_worker, args=(str(tmp_path), theirs))
    p.start()
    try:
        assert ours.poll(60) and ours.recv() == "added"
        with store._locked():
            ours.send("go")
            p.join(0.5)  # bounded: the child needs milliseconds once it may go on
            assert p.is_alive(), "the child's commit did not wait for the index lock"
            assert not store.has(chunk(1)[0])
        p.join(60)
        assert p.exitcode == 0
        assert store.get(chunk(1)[0]) == chunk(1)[1]
    finally:
        if p.is_alive():
            p.kill()


def test_threads_share_one_store(tmp_path):
    import threading
    store = st.ChunkStore(tmp_path, container_size=8192)

    def work(seeds):
        with store.writer() as w:
            for s in seeds:
                w.add(*chunk(s))

    threads = [threading.Thread(target=work, args=(range(i, i + 40),)) for i in (0, 20, 40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store) == 80
    assert all(store.get(chunk(s)[0]) == chunk(s)[1] for s in range(80))


def test_abort_leaves_nothing(tmp_path):
    store = st.ChunkStore(tmp_path)
    fp, data = chunk(7)
    w = store.writer()
    assert w.add(fp, data)
    assert files(store, ".partial")
    w.abort()
    assert os.listdir(store.containers_dir) == []
    assert not store.has(fp)
    with pytest.raises(st.ChunkNotFound):
        store.get(fp)
    with pytest.raises(ValidationError, match="already committed or aborted"):
        w.add(fp, data)
    with pytest.raises(ValueError):
        with store.writer() as w2:
            w2.add(fp, data)
            raise ValueError("the backup failed")
    assert os.listdir(store.containers_dir) == []


def _killed_worker(root):
    store = st.ChunkStore(root)
    w = store.writer()
    for s in range(5):
        w.add(*chunk(s))
    os._exit(3)  # dies before commit: no cleanup runs


def test_killed_writer_leaves_an_ignored_partial(tmp_path):
    store = st.ChunkStore(tmp_path)
    kept = fill(store, [100])
    p = multiprocessing.get_context("fork").Process(target=_killed_worker, args=(str(tmp_path),))
    p.start()
    p.join(60)
    assert p.exitcode == 3
    assert files(store, ".partial") == [st.container_name(2, committed=False)]
    assert store.committed_containers() == [1]
    assert not any(store.has(chunk(s)[0]) for s in range(5))
    counts = store.rebuild_index()
    assert counts["containers"] == 1 and counts["chunks"] == 1
    assert store.fingerprints().keys() == kept.keys()
    # the same chunks can be written again, to a fresh container number
    again = fill(store, range(5))
    assert store.committed_containers() == [1, 3]
    assert all(store.get(fp) == data for fp, data in again.items())
    assert store.remove_stale_partials() == [store.container_path(2, committed=False)]
    assert files(store, ".partial") == []


def test_live_partial_is_not_removed_as_stale(tmp_path):
    store = st.ChunkStore(tmp_path)
    w = store.writer()
    w.add(*chunk(1))
    assert st.ChunkStore(tmp_path).remove_stale_partials() == []
    w.commit()
    assert store.has(chunk(1)[0])


def test_rebuild_equals_incremental_index(tmp_path):
    store = st.ChunkStore(tmp_path, container_size=8192)
    fill(store, range(50))
    fill(store, range(40, 70))  # 10 already stored
    assert sum(1 for n in store.committed_containers()
               for _ in store._scan(n, decode=False)) == 70
    before = store.fingerprints()
    assert len(before) == 70
    os.unlink(store.index_path)
    fresh = st.ChunkStore(tmp_path)
    assert len(fresh) == 0
    counts = fresh.rebuild_index()
    assert counts["chunks"] == 70 and counts["damaged"] == counts["torn"] == 0
    assert fresh.fingerprints() == before
    # an open store notices the replaced log
    assert store.fingerprints() == before
    assert st.ChunkStore(tmp_path).fingerprints() == before


def test_torn_index_tail_is_ignored_and_cut(tmp_path):
    store = st.ChunkStore(tmp_path)
    fill(store, range(3))
    with open(store.index_path, "ab") as f:
        f.write(b"\x01" * 20)  # half an entry from a crashed append
    reopened = st.ChunkStore(tmp_path)
    assert len(reopened) == 3
    fill(reopened, [10])
    assert len(st.ChunkStore(tmp_path)) == 4
    size = os.path.getsize(store.index_path) - len(st.INDEX_MAGIC)
    assert size == 4 * st.INDEX_RECORD.size


def test_flipped_byte_is_found_by_get_and_verify(tmp_path):
    store = st.ChunkStore(tmp_path)
    chunks = fill(store, range(5))
    fps = list(chunks)
    victim = fps[2]
    loc = store.locate(victim)
    path = store.container_path(loc.container)
    with open(path, "r+b") as f:
        at = loc.offset + st.RECORD_HEADER.size + loc.stored_length // 2
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(st.ChunkDamaged) as info:
        store.get(victim)
    assert info.value.container == path and info.value.offset == loc.offset
    assert path in str(info.value) and str(loc.offset) in str(info.value)
    assert "crc32" in info.value.reason
    damage = list(store.verify())
    assert damage == [st.Damage(victim, path, loc.offset, info.value.reason)]
    for fp in fps:
        if fp != victim:
            assert store.get(fp) == chunks[fp]
    counts = store.rebuild_index()
    assert counts["damaged"] == 1 and counts["chunks"] == 4
    assert not store.has(victim)  # left out, so a later backup stores it again


def test_wrong_data_with_a_valid_crc_fails_the_hash(tmp_path):
    store = st.ChunkStore(tmp_path, codec="none")
    fp, data = chunk(3)
    with store.writer() as w:
        w.add(fp, data)
    loc = store.locate(fp)
    path = store.container_path(loc.container)
    raw = bytearray(open(path, "rb").read())
    start = loc.offset + st.RECORD_HEADER.size
    raw[start] ^= 1
    # recompute the crc so only the sha256 check can notice
    struct.pack_into(">I", raw, loc.offset + st.RECORD_HEADER.size - 4,
                     zlib.crc32(bytes(raw[start:start + loc.stored_length])))
    open(path, "wb").write(bytes(raw))
    with pytest.raises(st.ChunkDamaged, match="sha256"):
        store.get(fp)
    assert [d.offset for d in store.verify()] == [loc.offset]


def test_truncated_container_end_is_tolerated_by_rebuild(tmp_path):
    store = st.ChunkStore(tmp_path)
    chunks = fill(store, range(6))
    last = max(chunks, key=lambda fp: store.locate(fp).offset)
    loc = store.locate(last)
    path = store.container_path(loc.container)
    os.truncate(path, loc.offset + st.RECORD_HEADER.size + loc.stored_length - 3)
    counts = store.rebuild_index()
    assert counts == {"containers": 1, "chunks": 5, "duplicates": 0, "damaged": 0, "torn": 1}
    assert not store.has(last)
    assert all(store.get(fp) == data for fp, data in chunks.items() if fp != last)
    assert [(d.fingerprint, d.offset) for d in store.verify()] == [(last, loc.offset)]
    # cut inside a record header too
    os.truncate(path, loc.offset + 10)
    assert store.rebuild_index()["chunks"] == 5


def test_bad_input_is_refused_clearly(tmp_path):
    store = st.ChunkStore(tmp_path)
    w = store.writer()
    with pytest.raises(ValidationError, match="32 bytes"):
        w.add(b"ab" * 32, b"x")  # hex text, not a digest
    with pytest.raises(ValidationError, match="must be bytes"):
        w.add(b"\0" * 32, "text")
    with pytest.raises(ValidationError, match="unknown chunk codec"):
        st.ChunkStore(tmp_path, codec="lz4")
    with pytest.raises(st.ChunkNotFound) as info:
        store.get(b"\0" * 32)
    assert isinstance(info.value, KeyError) and "rebuild_index" in str(info.value)
    w.abort()
