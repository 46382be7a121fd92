"""Reclaim of the dedup pool's chunk store on real files: sessions and reclaims excluding each
other in one process and across processes, dead and sparse containers, batches, crashes at each
step, damaged records."""

import multiprocessing
import os

import pytest

from app.errors import ValidationError
from plugins.storage.dedup import reclaim
from plugins.storage.dedup import store as st

from dedup_chunks import assert_readable, by_container, chunk, files, fill, pool

ZSTD_MISSING = "the optional zstandard module is not installed"


# ---------------------------------------------------------------------- sessions and reclaim


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
