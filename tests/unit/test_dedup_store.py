"""Chunk store of the dedup pool on real files: round trips per codec, deduplication,
concurrent writers in two processes, abort and crashed writers, index rebuild, damage
detection and torn container ends."""

import hashlib
import json
import multiprocessing
import os
import random
import struct
import zlib

import pytest

from app.errors import ValidationError
from plugins.storage.dedup import chunk_index, containers, encoding, reclaim
from plugins.storage.dedup import store as st

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
    monkeypatch.setattr(encoding._local, "zstd", OneByOne(), raising=False)
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


# ---------------------------------------------------------------------- sessions and reclaim

def pool(tmp_path, n=40, **kw):
    """A store of several small containers (about five 1500-byte chunks each)."""
    store = st.ChunkStore(tmp_path, container_size=8192, **kw)
    chunks = fill(store, range(n), size=1500, compressible=False)
    return store, chunks


def by_container(store, fps):
    out = {}
    for fp in fps:
        out.setdefault(store.locate(fp).container, []).append(fp)
    return out


def assert_readable(store, chunks):
    for fp, data in chunks.items():
        assert store.get(fp) == data


def test_session_keeps_reclaim_out_in_one_process(tmp_path):
    store, chunks = pool(tmp_path, n=5)
    s1 = store.session()
    with pytest.raises(st.PoolBusy, match="1 backup/restore is using") as info:
        store.reclaim(lambda: set())
    assert "try again when they are done" in str(info.value) and info.value.hint
    assert info.value.sessions == 1 and info.value.pids == [os.getpid()]
    with st.ChunkStore(tmp_path).session() as s2:  # sessions coexist, also across instances
        assert not s2.closed
        with pytest.raises(st.PoolBusy, match="2 backups/restores are using"):
            store.reclaim(lambda: set())
    assert s2.closed
    s1.close()
    s1.close()  # closing twice is harmless
    assert store.reclaim(lambda: set(chunks))["removed_chunks"] == 0
    assert_readable(store, chunks)


def test_session_waits_for_a_running_reclaim_then_gives_up(tmp_path):
    import threading
    store, chunks = pool(tmp_path, n=5)
    inside, release = threading.Event(), threading.Event()
    results = []

    def live():
        inside.set()
        assert release.wait(30)
        return set(chunks)

    t = threading.Thread(target=lambda: results.append(store.reclaim(live)))
    t.start()
    try:
        assert inside.wait(30)
        with pytest.raises(st.PoolBusy, match="space reclaim is running") as info:
            store.session(timeout=0)
        assert f"process {os.getpid()}" in str(info.value) and info.value.hint
        now = [0.0]

        def tick(seconds):
            now[0] += seconds

        with pytest.raises(st.PoolBusy, match="waited 1 s"):
            store.session(timeout=1, poll=0.25, clock=lambda: now[0], sleep=tick)
        assert now[0] == 1.0  # four polls, then it gave up instead of blocking

        sleeps = []

        def sleep_then_finish(seconds):
            sleeps.append(seconds)
            if len(sleeps) == 3:
                release.set()  # the reclaim ends while the session polls
                t.join(30)

        with store.session(timeout=60, sleep=sleep_then_finish) as s:
            assert not s.closed and len(sleeps) == 3
    finally:
        release.set()
        t.join(30)
    assert results and results[0]["live_chunks"] == 5


def _session_holder(root, conn):
    s = st.ChunkStore(root).session()
    conn.send("open")
    conn.recv()
    s.close()
    conn.send("closed")
    conn.recv()
    os._exit(0)


def _reclaimer(root, conn):
    store = st.ChunkStore(root)

    def live():
        conn.send("reclaiming")
        conn.recv()
        return set()

    conn.send(store.reclaim(live)["containers_deleted"])
    os._exit(0)


def test_session_and_reclaim_exclude_each_other_across_processes(tmp_path):
    store, chunks = pool(tmp_path, n=5)
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    p = ctx.Process(target=_session_holder, args=(str(tmp_path), theirs))
    p.start()
    try:
        assert ours.poll(60) and ours.recv() == "open"
        with pytest.raises(st.PoolBusy, match="1 backup/restore is using") as info:
            store.reclaim(lambda: set())
        assert info.value.pids == [p.pid]
        ours.send("close")
        assert ours.poll(60) and ours.recv() == "closed"
        assert store.reclaim(lambda: set(chunks))["containers_deleted"] == 0
        ours.send("exit")
        p.join(60)
        assert p.exitcode == 0

        p = ctx.Process(target=_reclaimer, args=(str(tmp_path), theirs))
        p.start()
        assert ours.poll(60) and ours.recv() == "reclaiming"
        with pytest.raises(st.PoolBusy, match=f"space reclaim is running .*process {p.pid}"):
            store.session(timeout=0)
        ours.send("go")
        assert ours.poll(60) and ours.recv() == 1  # nothing was live: the container went
        p.join(60)
        assert p.exitcode == 0
    finally:
        if p.is_alive():
            p.kill()
    with store.session(timeout=0):
        assert len(store) == 0 and not store.has(next(iter(chunks)))


def test_reclaim_deletes_dead_containers_and_compacts_sparse_ones(tmp_path):
    store, chunks = pool(tmp_path)
    groups = by_container(store, chunks)
    numbers = sorted(groups)
    assert len(numbers) >= 6
    dead_whole = numbers[0]  # nothing live: deleted
    sparse = numbers[1]  # one live chunk of about five: compacted
    live = {fp for n in numbers[2:] for fp in groups[n]} | {groups[sparse][0]}
    dead = set(chunks) - live
    before = store.stats()
    other = st.ChunkStore(tmp_path)  # another process's view, read before the reclaim
    assert len(other) == len(chunks)

    seen = []
    result = store.reclaim(lambda: live, progress=lambda done, total: seen.append((done, total)))
    assert result["live_chunks"] == len(live)
    assert result["removed_chunks"] == len(dead)
    assert result["containers_deleted"] == 1 and result["containers_compacted"] == 1
    assert result["containers_written"] == 1 and result["cancelled"] is False
    assert seen == [(1, 2), (2, 2)]
    after = store.stats()
    assert after["container_bytes"] == before["container_bytes"] - result["freed_bytes"]
    assert result["freed_bytes"] > 0
    assert after["chunks"] == len(live) and not after["encrypted"]
    assert not os.path.exists(store.container_path(dead_whole))
    assert not os.path.exists(store.container_path(sparse))
    moved = store.locate(groups[sparse][0]).container
    assert moved > max(numbers)  # copied to a new container
    for fp in dead:
        assert not store.has(fp)
    assert_readable(store, {fp: chunks[fp] for fp in live})
    assert list(store.verify()) == []
    # the other instance still holds the old locations: it notices the rewritten index
    with pytest.raises(st.ChunkNotFound, match="rewritten without it"):
        other.get(groups[dead_whole][0])
    assert_readable(other, {fp: chunks[fp] for fp in live})
    with other.session():  # a session starts from the current index
        assert not any(other.has(fp) for fp in dead)
    # a rebuilt index agrees with the rewritten one
    kept = store.fingerprints()
    assert store.rebuild_index()["chunks"] == len(live)
    assert store.fingerprints() == kept
    # nothing left to do
    again = store.reclaim(lambda: live)
    assert again["freed_bytes"] == 0 and again["containers_written"] == 0


def test_reclaim_keeps_dead_chunks_of_full_enough_containers(tmp_path):
    store, chunks = pool(tmp_path, n=10)
    groups = by_container(store, chunks)
    first = sorted(groups)[0]
    live = set(chunks) - {groups[first][0]}  # one dead chunk of about five
    result = store.reclaim(lambda: live)
    assert result["containers_compacted"] == result["removed_chunks"] == 0
    assert store.has(groups[first][0])  # still stored, so still found by later backups
    result = store.reclaim(lambda: live, compact_below=1.0)
    assert result["containers_compacted"] == 1 and result["removed_chunks"] == 1
    assert not store.has(groups[first][0])
    assert_readable(store, {fp: chunks[fp] for fp in live})
    # compact_below=0: only empty containers go
    result = store.reclaim(lambda: set(list(live)[:1]), compact_below=0)
    assert result["containers_compacted"] == 0 and result["containers_deleted"] >= 1


def test_reclaim_cancelled_between_containers_keeps_the_work_done(tmp_path):
    store, chunks = pool(tmp_path)
    groups = by_container(store, chunks)
    live = {fps[0] for fps in groups.values()}  # every container sparse
    asked = []
    result = store.reclaim(lambda: live, is_cancelled=lambda: asked.append(1) or len(asked) > 2)
    assert result["cancelled"] is True and result["containers_compacted"] == 2
    assert_readable(store, {fp: chunks[fp] for fp in live})
    assert list(store.verify()) == []
    result = store.reclaim(lambda: live)
    assert result["containers_compacted"] == len(groups) - 2
    assert_readable(store, {fp: chunks[fp] for fp in live})
    assert store.stats()["chunks"] == len(live)


def test_reclaim_commits_in_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(reclaim, "RECLAIM_BATCH_CONTAINERS", 1)
    store, chunks = pool(tmp_path, n=60)
    groups = by_container(store, chunks)
    live = {fp for fps in groups.values() for fp in fps[:2]}  # two of about five
    steps = []
    result = store.reclaim(lambda: live, compact_below=0.6, _checkpoint=steps.append)
    assert result["containers_compacted"] == len(groups)
    assert steps.count("indexed") > 2  # a nearly full pool gets space back along the way
    assert_readable(store, {fp: chunks[fp] for fp in live})


def _crashing_reclaim(root, live, step):
    store = st.ChunkStore(root, container_size=8192)
    calls = []

    def checkpoint(at):
        if at == step:
            os._exit(9)

    def cancelled():  # "copying": dies between two containers, a new one still open
        calls.append(1)
        if step == "copying" and len(calls) == 3:
            os._exit(9)
        return False

    store.reclaim(lambda: live, _checkpoint=checkpoint, is_cancelled=cancelled)
    os._exit(0)


@pytest.mark.parametrize("step", ["copying", "sealed", "indexed"])
def test_crash_during_reclaim_keeps_every_live_chunk(tmp_path, step):
    store, chunks = pool(tmp_path)
    groups = by_container(store, chunks)
    live = {fp for fps in groups.values() for fp in fps[:1]}
    before = store.stats()["container_bytes"]
    p = multiprocessing.get_context("fork").Process(
        target=_crashing_reclaim, args=(str(tmp_path), live, step))
    p.start()
    p.join(60)
    assert p.exitcode == 9
    wanted = {fp: chunks[fp] for fp in live}
    assert_readable(store, wanted)  # the instance opened before the crash
    assert_readable(st.ChunkStore(tmp_path), wanted)
    counts = st.ChunkStore(tmp_path).rebuild_index()
    assert counts["damaged"] == 0
    assert_readable(st.ChunkStore(tmp_path), wanted)
    # the next reclaim removes what the crashed one left behind
    fresh = st.ChunkStore(tmp_path, container_size=8192)
    fresh.reclaim(lambda: live)
    stats = fresh.stats()
    assert stats["chunks"] == len(live) and files(fresh, ".partial") == []
    assert stats["container_bytes"] < before / 2
    assert_readable(fresh, wanted)
    assert list(fresh.verify()) == []


def test_reclaim_rebuilds_an_index_that_lost_live_chunks(tmp_path):
    store, chunks = pool(tmp_path, n=10)
    live = set(list(chunks)[:3])
    os.unlink(store.index_path)  # the live chunks are only in the containers now
    result = st.ChunkStore(tmp_path).reclaim(lambda: live)
    assert result["index_rebuilt"] is True and result["missing_chunks"] == 0
    assert result["live_chunks"] == 3
    assert_readable(st.ChunkStore(tmp_path), {fp: chunks[fp] for fp in live})
    result = store.reclaim(lambda: live | {b"\x07" * 32})  # referenced, stored nowhere
    assert result["missing_chunks"] == 1


def test_reclaim_does_not_copy_a_damaged_record(tmp_path):
    store, chunks = pool(tmp_path, n=10)
    groups = by_container(store, chunks)
    first = groups[sorted(groups)[0]]
    victim, keeper = first[0], first[1]
    loc = store.locate(victim)
    with open(store.container_path(loc.container), "r+b") as f:
        f.seek(loc.offset + st.RECORD_HEADER.size + 5)
        f.write(b"\xff\x00\xff")
    result = store.reclaim(lambda: {victim, keeper})
    assert result["damaged_chunks"] == 1 and result["live_chunks"] == 1
    assert not store.has(victim)  # so the next backup that meets it stores it again
    assert store.get(keeper) == chunks[keeper]
    assert list(store.verify()) == []


def test_stats_and_bad_reclaim_input(tmp_path):
    store = st.ChunkStore(tmp_path)
    assert store.stats() == {"chunks": 0, "stored_bytes": 0, "containers": 0,
                             "container_bytes": 0, "encrypted": False}
    chunks = fill(store, range(4))
    stats = store.stats()
    assert stats["chunks"] == 4 and stats["containers"] == 1
    assert stats["stored_bytes"] == sum(store.locate(fp).stored_length for fp in chunks)
    assert stats["container_bytes"] == os.path.getsize(store.container_path(1))
    for bad in (-0.1, 1.5, "half", True):
        with pytest.raises(ValidationError, match="compact_below"):
            store.reclaim(lambda: set(), compact_below=bad)
    with pytest.raises(ValidationError, match="timeout"):
        store.session(timeout=-1)


def test_foreign_index_file_is_refused_until_rebuilt(tmp_path):
    store = st.ChunkStore(tmp_path)
    chunks = fill(store, range(3))
    with open(store.index_path, "wb") as f:
        f.write(b"NOTANIDX" + b"\0" * 60)
    with pytest.raises(st.StoreDamaged, match="rebuild_index"):
        chunks.update(fill(store, [50]))
    # the container was sealed before its index append failed: the rebuild finds its chunk
    assert store.rebuild_index()["chunks"] == 4
    chunks[chunk(50)[0]] = chunk(50)[1]
    assert_readable(store, chunks)


# ---------------------------------------------------------------------- encryption at rest

MARKER = b"plaintext-marker-7f3a9c "


def marked(seed):
    data = MARKER * 40 + bytes([seed])
    return hashlib.sha256(data).digest(), data


def container_bytes(store):
    return b"".join(open(store.container_path(n), "rb").read()
                    for n in store.committed_containers())


def test_encrypted_round_trip_keeps_plaintext_out_of_the_containers(tmp_path):
    key = st.generate_key()
    assert len(key) == 32 and st.generate_key() != key
    enc = st.ChunkStore(tmp_path / "enc", key=key, codec="none")
    plain = st.ChunkStore(tmp_path / "plain", codec="none")
    chunks = dict(marked(s) for s in range(5))
    for store in (enc, plain):
        with store.writer() as w:
            for fp, data in chunks.items():
                w.add(fp, data)
    assert MARKER in container_bytes(plain)  # the check below can fail
    assert MARKER not in container_bytes(enc)
    reopened = st.ChunkStore(tmp_path / "enc", key=key)
    assert_readable(reopened, chunks)
    assert type(reopened.get(next(iter(chunks)))) is bytes
    assert list(reopened.verify()) == []
    assert reopened.stats()["encrypted"] is True
    assert all(code & st.CODEC_ENCRYPTED for code in record_codecs(enc))
    config = json.loads(open(enc.config_path).read())
    assert config == {"format": 1, "encrypted": True, "cipher": "AES-256-GCM",
                      "key_check": st.key_check_value(key)}
    assert key.hex() not in open(enc.config_path).read()
    # compressible chunks are compressed before they are encrypted
    zenc = st.ChunkStore(tmp_path / "zenc", key=key, codec="zlib")
    fp, data = chunk(1, size=6000)
    with zenc.writer() as w:
        w.add(fp, data)
    assert zenc.locate(fp).stored_length < len(data) / 2
    assert zenc.get(fp) == data


def test_keys_are_checked(tmp_path):
    key = st.generate_key()
    store = st.ChunkStore(tmp_path / "enc", key=key)
    fill(store, range(2))
    with pytest.raises(st.EncryptionKeyRequired, match="encrypted, and no key") as info:
        st.ChunkStore(tmp_path / "enc")
    assert "docs/dedup-pool.md" in info.value.hint
    with pytest.raises(st.WrongEncryptionKey, match="does not open") as info:
        st.ChunkStore(tmp_path / "enc", key=st.generate_key())
    assert "keys/SERVER.key" in info.value.hint
    plain = st.ChunkStore(tmp_path / "plain")
    fill(plain, range(2))
    with pytest.raises(ValidationError, match="not encrypted, but a key was given"):
        st.ChunkStore(tmp_path / "plain", key=key)
    # a store from before pool.json existed is plain, and stays so
    os.unlink(plain.config_path)
    with pytest.raises(ValidationError, match="not encrypted, but a key was given"):
        st.ChunkStore(tmp_path / "plain", key=key)
    assert st.ChunkStore(tmp_path / "plain").encrypted is False
    for bad in (key.hex(), key[:16], "x" * 32):
        with pytest.raises(ValidationError, match="32 raw bytes"):
            st.ChunkStore(tmp_path / "other", key=bad)


def test_tampered_ciphertext_is_detected(tmp_path):
    key = st.generate_key()
    store = st.ChunkStore(tmp_path, key=key)
    chunks = dict(marked(s) for s in range(3))
    with store.writer() as w:
        for fp, data in chunks.items():
            w.add(fp, data)
    victim, other = list(chunks)[:2]
    loc = store.locate(victim)
    path = store.container_path(loc.container)
    raw = bytearray(open(path, "rb").read())
    start = loc.offset + st.RECORD_HEADER.size
    raw[start + st.NONCE_SIZE + 3] ^= 1
    # a matching crc, as a deliberate change would have: only the cipher's tag notices
    struct.pack_into(">I", raw, start - 4, zlib.crc32(bytes(raw[start:start + loc.stored_length])))
    open(path, "wb").write(bytes(raw))
    with pytest.raises(st.ChunkDamaged, match="decryption failed"):
        store.get(victim)
    assert [d.fingerprint for d in store.verify()] == [victim]
    assert store.get(other) == chunks[other]
    # a record moved under another fingerprint fails too: the fingerprint is authenticated
    loc2 = store.locate(other)
    raw = bytearray(open(path, "rb").read())
    raw[loc2.offset + 4:loc2.offset + 36] = b"\x01" * 32
    open(path, "wb").write(bytes(raw))
    assert any(d.fingerprint == b"\x01" * 32 and "decryption failed" in d.reason
               for d in store.verify())


def test_keyless_upkeep_of_an_encrypted_store(tmp_path):
    key = st.generate_key()
    store = st.ChunkStore(tmp_path, key=key, container_size=8192)
    chunks = fill(store, range(30), size=1500, compressible=False)
    groups = by_container(store, chunks)
    live = {fps[0] for fps in groups.values()}
    keyless = st.ChunkStore(tmp_path, keyless=True, container_size=8192)
    with pytest.raises(st.EncryptionKeyRequired, match="without its key"):
        keyless.get(next(iter(chunks)))
    with pytest.raises(st.EncryptionKeyRequired):
        keyless.writer()
    assert list(keyless.verify()) == []
    # reclaim copies records as stored, so it needs no key
    result = keyless.reclaim(lambda: live)
    assert result["containers_compacted"] == len(groups)
    assert_readable(store, {fp: chunks[fp] for fp in live})
    assert list(store.verify()) == []
    # bit rot is found by the crc32 alone
    loc = keyless.locate(next(iter(live)))
    with open(keyless.container_path(loc.container), "r+b") as f:
        f.seek(loc.offset + st.RECORD_HEADER.size + 20)
        f.write(b"\x00\x01")
    assert [d.reason for d in keyless.verify()] == ["crc32 of the stored bytes does not match"]


def test_plain_record_in_an_encrypted_store_is_refused(tmp_path):
    key = st.generate_key()
    enc = st.ChunkStore(tmp_path / "enc", key=key, codec="none")
    plain = st.ChunkStore(tmp_path / "plain", codec="none")
    fp, data = marked(1)
    for store in (enc, plain):
        with store.writer() as w:
            w.add(fp, data)
    # swap the containers: each store now holds the other kind of record
    a, b = enc.container_path(1), plain.container_path(1)
    a_bytes, b_bytes = open(a, "rb").read(), open(b, "rb").read()
    open(a, "wb").write(b_bytes)
    open(b, "wb").write(a_bytes)
    enc.rebuild_index()
    plain.rebuild_index()
    with pytest.raises(st.ChunkDamaged, match="not encrypted, but the store is"):
        enc.get(fp)
    with pytest.raises(st.ChunkDamaged, match="encrypted, but the store is not"):
        plain.get(fp)


def test_session_drops_what_a_reclaim_elsewhere_removed(tmp_path):
    store, chunks = pool(tmp_path, n=10)
    live = set(list(chunks)[:2])
    other = st.ChunkStore(tmp_path)
    assert all(other.has(fp) for fp in chunks)  # known from its own read of the index
    store.reclaim(lambda: live, compact_below=1.0)
    with other.session():
        # a backup in this session must not count on a reclaimed chunk being stored
        assert {fp for fp in chunks if other.has(fp)} == live


def test_rewritten_index_is_noticed_even_on_the_same_inode(tmp_path):
    store, chunks = pool(tmp_path, n=10)
    live = set(list(chunks)[:2])
    other = st.ChunkStore(tmp_path)
    assert len(other) == 10
    old_inode = tmp_path / "old-log"
    os.link(store.index_path, old_inode)  # keeps the old inode, to reuse it below
    store.reclaim(lambda: live, compact_below=1.0)
    rewritten = open(store.index_path, "rb").read()
    with open(old_inode, "r+b") as f:  # the new log's bytes in the old log's inode
        f.truncate(0)
        f.write(rewritten)
    os.replace(old_inode, store.index_path)
    assert os.stat(store.index_path).st_ino == other._index_id[0]
    assert other.fingerprints() == store.fingerprints()
    assert_readable(other, {fp: chunks[fp] for fp in live})


def damage_record(store, fp, at=5):
    """Flips bytes inside the stored data of fp's record (its crc32 then fails)."""
    loc = store.locate(fp)
    with open(store.container_path(loc.container), "r+b") as f:
        f.seek(loc.offset + st.RECORD_HEADER.size + at)
        b = f.read(3)
        f.seek(loc.offset + st.RECORD_HEADER.size + at)
        f.write(bytes(x ^ 0x5A for x in b))
    return loc


def test_a_chunk_set_aside_is_stored_again_by_the_next_writer(tmp_path, monkeypatch):
    monkeypatch.setattr(chunk_index, "HAS_REFRESH", 0.0)  # the next lookup reads what changed
    store, chunks = pool(tmp_path, n=6)
    victim = list(chunks)[3]
    damage_record(store, victim)
    [damage] = list(store.verify())
    assert damage.fingerprint == victim
    other = st.ChunkStore(tmp_path)  # another process's view, read before the set-aside
    assert other.has(victim)
    assert store.set_aside([damage]) == [victim]
    assert not store.has(victim)
    with pytest.raises(st.ChunkNotFound, match="found damaged .* set aside") as info:
        store.get(victim)
    assert damage.reason in str(info.value) and "next backup" in info.value.hint
    # the other view sees the rewritten index at its next refresh, and stores the chunk anew
    with other.writer() as w:
        assert w.add(victim, chunks[victim]) is True
    assert store.get(victim) == chunks[victim]
    assert_readable(st.ChunkStore(tmp_path), chunks)
    # a rebuild does not bring back the damaged record, even though it is the first copy
    counts = store.rebuild_index()
    assert counts["damaged"] == 1 and counts["chunks"] == 6
    assert store.get(victim) == chunks[victim]


def test_only_the_damaged_place_is_set_aside(tmp_path):
    store, chunks = pool(tmp_path, n=4)
    victim = list(chunks)[1]
    loc = store.locate(victim)
    elsewhere = st.Damage(victim, store.container_path(loc.container), loc.offset + 1, "x")
    assert store.set_aside([elsewhere, st.Damage(None, "c", 0, "torn")]) == []
    assert store.get(victim) == chunks[victim] and store.damage_notes() == {}


def test_a_record_with_a_valid_crc_set_aside_stays_out_of_a_rebuild(tmp_path):
    # damage found by decoding or SHA-256 (the crc32 was taken over bad bytes) must not come
    # back through the rebuild, which checks crc32s only
    store, chunks = pool(tmp_path, n=3)
    victim = list(chunks)[0]
    loc = store.locate(victim)
    damage = st.Damage(victim, store.container_path(loc.container), loc.offset,
                       "sha256 of the data does not match the fingerprint")
    assert store.set_aside([damage]) == [victim]
    counts = store.rebuild_index()
    assert counts["damaged"] == 1 and not store.has(victim)


def test_reclaim_needs_no_rebuild_for_chunks_set_aside_and_forgets_healed_notes(tmp_path):
    store, chunks = pool(tmp_path, n=12)
    fps = list(chunks)
    victim = fps[4]
    damage_record(store, victim)
    [damage] = list(store.verify())
    assert store.set_aside([damage]) == [victim]
    result = store.reclaim(lambda: set(fps))
    assert result["index_rebuilt"] is False and result["missing_chunks"] == 1
    assert victim in store.damage_notes()  # still referenced, still stored nowhere
    with store.writer() as w:
        w.add(victim, chunks[victim])
    result = store.reclaim(lambda: set(fps))
    assert result["missing_chunks"] == 0 and store.damage_notes() == {}
    assert not os.path.exists(store.damaged_path)
    assert_readable(store, chunks)


def test_reclaim_notes_the_damaged_records_it_drops(tmp_path):
    store, chunks = pool(tmp_path, n=10)
    first = by_container(store, chunks)[1]
    victim = first[0]
    damage_record(store, victim)
    result = store.reclaim(lambda: {victim, first[1]})
    assert result["damaged_chunks"] == 1
    assert "reclaim" in store.damage_notes()[victim]["reason"]
    again = store.reclaim(lambda: {victim, first[1]})
    assert again["index_rebuilt"] is False and again["missing_chunks"] == 1


def test_a_torn_note_line_is_ignored(tmp_path):
    store, chunks = pool(tmp_path, n=3)
    victim = list(chunks)[2]
    damage_record(store, victim)
    [damage] = list(store.verify())
    store.set_aside([damage])
    with open(store.damaged_path, "ab") as f:
        f.write(b'{"fingerprint": "ab')
    assert list(store.damage_notes()) == [victim]


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_a_session_reads_through_containers_it_keeps_open_and_closes_them(tmp_path,
                                                                         monkeypatch):
    store, chunks = pool(tmp_path, n=30)  # about six containers
    containers = len(store.committed_containers())
    before = open_fds()
    s = store.session()
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(path)
                        or real_open(path, *a, **k))
    for _ in range(2):
        assert_readable(s, chunks)
    containers_opened = [p for p in opened if str(p).endswith(".ctr")]
    assert len(containers_opened) == containers  # each once, not once per chunk
    assert open_fds() == before + 1 + containers  # the pool lock and the containers
    s.close()
    assert open_fds() == before
    with pytest.raises(ValidationError, match="closed"):
        s.get(next(iter(chunks)))


def test_beyond_its_limit_a_session_reads_with_files_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(containers._OpenContainers, "LIMIT", 2)
    store, chunks = pool(tmp_path, n=30)
    before = open_fds()
    with store.session() as s:
        assert_readable(s, chunks)
        assert open_fds() == before + 1 + 2
    assert open_fds() == before


def test_verify_pool_names_chunks_whose_container_is_gone_and_sets_them_aside(tmp_path):
    from plugins.storage.dedup import pool as dpool
    from plugins.storage.dedup.recipe import RecipeWriter
    store, chunks = pool(tmp_path, n=12)
    fps = list(chunks)
    images = tmp_path / dpool.IMAGE_DIR / "c1"
    images.mkdir(parents=True)
    w = RecipeWriter(images / ("img" + dpool.RECIPE_SUFFIX))
    for fp in fps:
        w.add(fp, len(chunks[fp]))
    w.finish({"image_id": "img"})
    gone = store.locate(fps[0]).container
    lost = [fp for fp in fps if store.locate(fp).container == gone]
    os.unlink(store.container_path(gone))
    out = dpool.verify_pool(store, str(tmp_path))
    [img] = out["images"]
    assert out["damaged_chunks"] == len(lost) and out["set_aside"] == len(lost)
    assert {d["fingerprint"] for d in img["damage"]} == {fp.hex() for fp in lost}
    assert all("is missing" in d["reason"] for d in img["damage"])
    assert not any(store.has(fp) for fp in lost)
    assert all(store.get(fp) == chunks[fp] for fp in fps if fp not in lost)


def test_index_locations_pack_and_unpack_at_their_limits(tmp_path):
    for loc in [(1, 16, 1), (99_999_999, (1 << 40) - 1, 0xFFFFFFFF), (1 << 40, 0, 0),
                (7, st.MAX_CONTAINER_SIZE + (1 << 32), 12345)]:
        assert chunk_index._location(chunk_index._pack_location(*loc)) == st.Location(*loc)
    with pytest.raises(ValidationError, match="too large"):
        st.ChunkStore(tmp_path, container_size=st.MAX_CONTAINER_SIZE + 1)


def test_a_process_keeps_its_open_stores_for_the_next_job(tmp_path):
    import shutil
    from plugins.storage.dedup.ingest import open_store
    root = tmp_path / "pool"
    first = open_store(str(root))
    assert open_store(str(root)) is first
    assert open_store(str(root), keyless=True) is first  # a plain pool: one store for both
    # a chunk another process stored is seen by the kept store at its next refresh
    fp, data = chunk(77)
    with st.ChunkStore(root).writer() as w:
        w.add(fp, data)
    assert first.get(fp) == data
    # the pool made anew at the same path is another store
    shutil.rmtree(root)
    again = open_store(str(root))
    assert again is not first and len(again) == 0
    key = st.generate_key()
    enc = tmp_path / "enc"
    locked = open_store(str(enc), key=key.hex())
    assert open_store(str(enc), key=key) is locked
    keyless = open_store(str(enc), keyless=True)
    assert keyless is not locked and keyless.encrypted
    with pytest.raises(st.EncryptionKeyRequired):
        open_store(str(enc))
