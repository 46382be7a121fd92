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

from app.errors import ValidationError
from plugins.storage.dedup import chunk_index, encoding
from plugins.storage.dedup import store as st

from dedup_chunks import chunk, files, fill, record_codecs

ZSTD_MISSING = "the optional zstandard module is not installed"


@pytest.mark.parametrize("codec", [
    "zlib", "none",
    pytest.param("zstd", marks=pytest.mark.skipif(encoding._zstd is None, reason=ZSTD_MISSING)),
])
def test_round_trip_per_codec(tmp_path, codec):
    store = st.ChunkStore(tmp_path, codec=codec)
    chunks = fill(store, range(30))
    chunks.update(fill(store, range(100, 103), compressible=False))
    reopened = st.ChunkStore(tmp_path)  # the default codec reads whatever was recorded
    for fp, data in chunks.items():
        assert reopened.has(fp)
        assert reopened.get(fp) == data and type(reopened.get(fp)) is bytes
    assert len(reopened) == len(chunks)
    codes = record_codecs(store)
    assert codes.count(st.CODECS[codec]) >= 30
    # random data does not compress: kept as is instead of growing
    assert codes.count(st.CODEC_NONE) >= 3
    assert list(reopened.verify()) == []


@pytest.mark.parametrize("codec", [
    "zlib",
    pytest.param("zstd", marks=pytest.mark.skipif(encoding._zstd is None, reason=ZSTD_MISSING)),
    pytest.param("zstd-encrypted",
                 marks=pytest.mark.skipif(encoding._zstd is None, reason=ZSTD_MISSING)),
])
def test_records_encoded_together_are_those_encoded_one_by_one(tmp_path, codec):
    # the storing side encodes a task's chunks in one call; the records must not change
    key = st.generate_key() if codec.endswith("encrypted") else None
    store = st.ChunkStore(tmp_path, codec=codec.split("-")[0], key=key)
    rnd = random.Random(5)
    datas = [b"", b"x", bytes(70_000), rnd.randbytes(70_000), b"abc" * 30_000,
             memoryview(bytearray(rnd.randbytes(10) * 4000))[7:39_000]]
    fps = [hashlib.sha256(d).digest() for d in datas]
    together = store.encode_records(fps, datas)
    assert len(together) == len(datas)
    for fp, data, (header, stored) in zip(fps, datas, together):
        one_header, one_stored = store.encode_record(fp, data)
        if key is None:
            assert (header, bytes(stored)) == (one_header, bytes(one_stored))
        else:  # a fresh nonce each time: compare what decodes
            assert len(header) == len(one_header)
    with store.writer() as w:
        for fp, data, record in zip(fps, datas, together):
            w.add_encoded(fp, len(data), record)
    reopened = st.ChunkStore(tmp_path, key=key)
    for fp, data in zip(fps, datas):
        assert reopened.get(fp) == bytes(data)
    if codec == "zstd":
        assert record_codecs(store).count(st.CODEC_ZSTD) == 3  # all but the short and random
    assert list(reopened.verify()) == []


@pytest.mark.skipif(encoding._zstd is None, reason=ZSTD_MISSING)
def test_records_are_encoded_one_by_one_where_zstandard_cannot_batch(tmp_path, monkeypatch):
    # python-zstandard's CFFI backend has no multi_compress_to_buffer
    class OneByOne:
        def __init__(self):
            self._c = encoding._zstd.ZstdCompressor(level=st.ZSTD_LEVEL)

        def compress(self, data):
            return self._c.compress(data)

        def multi_compress_to_buffer(self, data, threads=0):
            raise NotImplementedError

    store = st.ChunkStore(tmp_path, codec="zstd")
    datas = [b"abc" * 1000, random.Random(1).randbytes(5000)]
    fps = [hashlib.sha256(d).digest() for d in datas]
    want = [store.encode_record(fp, d) for fp, d in zip(fps, datas)]
    monkeypatch.setattr(encoding._local, "zstd", {st.ZSTD_LEVEL: OneByOne()}, raising=False)
    assert store.encode_records(fps, datas) == want


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
    monkeypatch.setattr(encoding, "_zstd", None)
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
    size = os.path.getsize(store.index_path) - st.INDEX_HEADER.size
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


def test_a_process_forked_while_a_thread_holds_the_lock_does_not_keep_it(tmp_path):
    """A restore forks its streams while another job's thread may hold the store lock: the
    child's copy of the locked file would keep the flock, for every process using the pool,
    until the child ended. The child closes its copies at once."""
    import fcntl
    import threading
    store = st.ChunkStore(tmp_path)
    held, release = threading.Event(), threading.Event()

    def other_job():
        with store._locked():
            held.set()
            release.wait()

    t = threading.Thread(target=other_job)
    t.start()
    held.wait()
    r, w = os.pipe()
    up_r, up_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child says it is up, then stays until the parent has tried the lock
        try:
            os.close(w)
            os.write(up_w, b"u")
            os.read(r, 1)
        finally:
            os._exit(0)
    os.close(r)
    os.close(up_w)
    try:
        assert os.read(up_r, 1) == b"u"
        os.close(up_r)
        release.set()
        t.join()
        fd = os.open(os.path.join(str(tmp_path), "index", "lock"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while the child holds it
        finally:
            os.close(fd)
        with store._locked():  # and the store's own lock, in this process, is free too
            pass
    finally:
        os.close(w)
        os.waitpid(pid, 0)


def test_a_forked_child_keeps_a_file_whose_inode_a_removed_lock_file_had(tmp_path, monkeypatch):
    """A lock file once registered may be removed with its pool, and its inode number given to
    another file, a container a restore's stream reads through: the child of a fork keeps that
    file open and closes only what really is a store's lock file."""
    from plugins.storage.dedup import locks
    store = st.ChunkStore(tmp_path / "pool")
    other = tmp_path / "container"
    other.write_bytes(b"data")
    keep = os.open(str(other), os.O_RDONLY)
    lock = os.open(store._lock_path, os.O_RDWR)
    o = os.fstat(keep)
    # the inode of a lock file of a pool removed since, now the container's
    monkeypatch.setitem(locks._lock_files, (o.st_dev, o.st_ino),
                        ("/gone/index/lock", "/gone/index/lock"))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            alive = []
            for fd in (keep, lock):
                try:
                    os.fstat(fd)
                    alive.append(b"1")
                except OSError:
                    alive.append(b"0")
            os.write(w, b"".join(alive))
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 2) == b"10"  # the container open, the store's lock file closed
    finally:
        os.close(r)
        os.waitpid(pid, 0)
        os.close(keep)
        os.close(lock)


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


def writing_threads():
    import threading
    return [t for t in threading.enumerate() if t.name == "dedup-write"]


def test_a_background_writer_stores_and_indexes_what_it_is_given(tmp_path):
    # small containers: many seals queued behind the writes, and the chunks of sealed
    # containers are found by lookups while later ones are still being written
    store = st.ChunkStore(tmp_path, container_size=8192)
    chunks = dict(chunk(s, size=1500, compressible=False) for s in range(60))
    w = store.writer(background=True)
    for fp, data in chunks.items():
        assert w.add(fp, data)
        assert not w.wanted(fp)  # known to the writer before its container is sealed
    assert writing_threads()
    w.commit()
    assert not writing_threads()
    assert files(store, ".partial") == []
    assert len(w.sealed) == len(store.committed_containers()) >= 10
    assert len(store) == len(chunks)
    for fp, data in chunks.items():
        assert store.get(fp) == data


def test_an_aborted_background_writer_keeps_only_what_it_sealed(tmp_path):
    store = st.ChunkStore(tmp_path, container_size=8192)
    chunks = dict(chunk(s, size=1500, compressible=False) for s in range(40))
    w = store.writer(background=True)
    for fp, data in chunks.items():
        w.add(fp, data)
    w.abort()
    assert not writing_threads()
    assert files(store, ".partial") == []
    kept = [fp for fp in chunks if store.has(fp)]
    assert len(kept) < len(chunks)  # the open container (at least) is gone
    for fp in kept:  # what was sealed before the abort is whole
        assert store.get(fp) == chunks[fp]
    assert store.rebuild_index()["chunks"] == len(kept)


def test_a_full_file_system_fails_a_background_writer_clearly(small_tmpfs):
    """The pool on a tmpfs of 1 MiB: the write that meets the full disk fails on the writing
    thread; a later add or the commit says the file system is full, and abort leaves no
    partial container and every sealed chunk readable."""
    store = st.ChunkStore(small_tmpfs("1m"), container_size=256 * 1024)
    chunks = dict(chunk(s, size=60_000, compressible=False) for s in range(40))
    w = store.writer(background=True)
    with pytest.raises(st.StoreWriteFailed, match="is full") as e:
        for fp, data in chunks.items():
            w.add(fp, data)
        w.commit()
    assert "reclaim" in e.value.hint
    w.abort()
    assert not writing_threads()
    assert files(store, ".partial") == []
    kept = [fp for fp in chunks if store.has(fp)]
    assert 0 < len(kept) < len(chunks)
    for fp in kept:
        assert store.get(fp) == chunks[fp]


def test_a_container_that_cannot_be_begun_on_a_full_file_system_is_reported_and_left_out(
        small_tmpfs):
    """The file system is full before the writer begins: making the next container fails,
    is reported as the full file system it is, and leaves neither a partial container nor
    an open descriptor behind; once there is room, writing works again."""
    root = small_tmpfs("1m")
    store = st.ChunkStore(root)
    filler = root / "filler"
    with open(filler, "wb", buffering=0) as f:
        with pytest.raises(OSError):
            while True:
                f.write(b"\0" * 65536)
    fds = len(os.listdir("/proc/self/fd"))
    for background in (False, True):
        w = store.writer(background=background)
        with pytest.raises(st.StoreWriteFailed, match="is full"):
            w.add(*chunk(1))
        w.abort()
    assert files(store, ".partial") == [] and files(store, ".ctr") == []
    assert len(os.listdir("/proc/self/fd")) == fds
    os.unlink(filler)
    kept = fill(store, [1, 2])
    assert all(store.get(fp) == data for fp, data in kept.items())


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
    size = os.path.getsize(store.index_path) - st.INDEX_HEADER.size
    assert size == 4 * st.INDEX_RECORD.size


def test_a_damaged_index_entry_loses_only_its_own_lookup(tmp_path):
    """An entry whose crc does not match is skipped when the index is read; the others are
    read as written, and of two entries for one chunk the first one counts."""
    store = st.ChunkStore(tmp_path)
    fps = list(fill(store, range(4)))
    where = {fp: store.locate(fp) for fp in fps}
    size = st.INDEX_RECORD.size
    with open(store.index_path, "r+b") as f:
        f.seek(st.INDEX_HEADER.size + size + 40)  # the second entry's location
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
        # a later, sound entry for the first chunk that points elsewhere
        f.seek(0, os.SEEK_END)
        entry = chunk_index.INDEX_ENTRY.pack(fps[0], where[fps[0]].container + 7, 0, 1)
        f.write(entry + struct.pack(">I", zlib.crc32(entry)))
    reopened = st.ChunkStore(tmp_path)
    assert len(reopened) == 3
    assert not reopened.has(fps[1])
    for fp in (fps[0], fps[2], fps[3]):
        assert reopened.locate(fp) == where[fp]
        assert reopened.get(fp) == store.get(fp)


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
    # without the hash (a restore, which checks each file instead) only the record is checked
    got = store.get(fp, check_fingerprint=False)
    assert len(got) == len(data) and got != data
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
