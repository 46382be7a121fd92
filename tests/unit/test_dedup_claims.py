"""Writers of one chunk store in one process that meet the same chunks store them once: the
first claims them, the others rely on it and, at their commit, wait until the chunks are in
the index; what never gets there (the claimant aborted, or took too long) they store
themselves, so every image stays complete."""

import os
import threading
import time

from plugins.storage.dedup import claims as cl
from plugins.storage.dedup import store as st

from dedup_chunks import chunk, files


def containers_bytes(store):
    return sum(os.path.getsize(store.container_path(n)) for n in store.committed_containers())


def test_a_chunk_another_writer_is_storing_is_not_stored_again(tmp_path):
    store = st.ChunkStore(tmp_path)
    chunks = [chunk(s) for s in range(20)]
    a, b = store.writer(), store.writer()
    assert all(a.add(fp, data) for fp, data in chunks)
    assert not any(b.add(fp, data) for fp, data in chunks)  # claimed by a, not indexed yet
    encoded = [store.encode_record(fp, data) for fp, data in chunks[:5]]
    assert not any(b.add_encoded(fp, len(data), enc)
                   for (fp, data), enc in zip(chunks[:5], encoded))
    a.commit()
    b.commit()  # a's chunks are indexed: nothing left for b to store
    assert files(store, ".ctr") == [st.container_name(1)]
    for fp, data in chunks:
        assert store.get(fp) == data


def test_a_writer_commits_once_the_chunks_it_relies_on_are_indexed(tmp_path):
    store = st.ChunkStore(tmp_path)
    chunks = [chunk(s) for s in range(10)]
    a, b = store.writer(), store.writer()
    for fp, data in chunks:
        a.add(fp, data)
        b.add(fp, data)
    done = threading.Event()
    t = threading.Thread(target=lambda: (b.commit(), done.set()))
    t.start()
    assert not done.wait(0.3)  # b waits for a
    a.commit()
    assert done.wait(10)
    t.join()
    assert len(files(store, ".ctr")) == 1


def test_chunks_of_a_writer_that_aborted_are_stored_by_those_relying_on_them(tmp_path):
    store = st.ChunkStore(tmp_path)
    chunks = [chunk(s) for s in range(10)]
    a, b = store.writer(), store.writer()
    for fp, data in chunks:
        a.add(fp, data)
        b.add(fp, data)
    a.abort()
    b.commit()
    for fp, data in chunks:
        assert store.get(fp) == data
    assert len(files(store, ".ctr")) == 1  # a's container went with its abort


def test_a_claimant_that_keeps_them_too_long_is_not_waited_for(tmp_path, monkeypatch):
    monkeypatch.setattr(cl, "RELY_WAIT", 0.2)
    monkeypatch.setattr(cl.Claims.wait, "__defaults__", (0.2,))
    store = st.ChunkStore(tmp_path)
    chunks = [chunk(s) for s in range(5)]
    a, b = store.writer(), store.writer()
    for fp, data in chunks:
        a.add(fp, data)
        b.add(fp, data)
    started = time.monotonic()
    b.commit()
    assert time.monotonic() - started < 5
    for fp, data in chunks:
        assert store.get(fp) == data
    a.commit()  # its copies are sealed; the index keeps one location per chunk
    assert len(store) == 5


def test_two_writers_relying_on_each_other_both_commit(tmp_path):
    store = st.ChunkStore(tmp_path)
    first = [chunk(s) for s in range(0, 10)]
    second = [chunk(s) for s in range(10, 20)]
    a, b = store.writer(background=True), store.writer(background=True)
    for fp, data in first:
        a.add(fp, data)
    for fp, data in second:
        b.add(fp, data)
    for fp, data in second:
        a.add(fp, data)
    for fp, data in first:
        b.add(fp, data)
    ts = [threading.Thread(target=w.commit) for w in (a, b)]
    started = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert time.monotonic() - started < 10
    assert len(files(store, ".ctr")) == 2
    for fp, data in first + second:
        assert store.get(fp) == data
    # each chunk once: twice the data would be a copy each
    assert containers_bytes(store) < 1.5 * sum(len(d) for _, d in first + second)


def test_two_store_objects_of_one_pool_share_their_claims(tmp_path):
    """Jobs that start together on a new pool each open a store object of their own."""
    one, other = st.ChunkStore(tmp_path), st.ChunkStore(tmp_path)
    chunks = [chunk(s) for s in range(8)]
    a, b = one.writer(), other.writer()
    assert all(a.add(fp, data) for fp, data in chunks)
    assert not any(b.add(fp, data) for fp, data in chunks)
    a.commit()
    b.commit()
    assert len(files(one, ".ctr")) == 1
    for fp, data in chunks:
        assert other.get(fp) == data
