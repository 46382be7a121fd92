"""The storage side's handling of a plain image stream: the blocks it gathers the stream in
are cut in place (pieces are views of them) and filled again only once no piece of them is
in use, whatever the sizes of the writes."""

import os
import random
import threading
import time

import pytest

from app.agent import ops
import plugins.storage.dedup.ingest as ingest_mod
import plugins.storage.dedup.segmenter as sg
from plugins.storage.dedup.ingest import Ingest, _Blocks, _unused, commit_recipe, open_store
from plugins.storage.dedup.recipe import RecipeStream, read_recipe
from plugins.storage.dedup.store import StoreWriteFailed

PARAMS = {"min_size": 1024, "avg_size": 4096, "max_size": 16384}


def test_a_block_is_filled_again_only_when_no_view_of_it_is_left(monkeypatch):
    monkeypatch.setattr(ingest_mod, "BLOCK_BYTES", 4096)
    blocks = _Blocks()
    a = blocks.take()
    assert len(a) == 4096 and _unused(a)
    piece = memoryview(a)[100:200]
    blocks.handed_over(a)
    b = blocks.take()
    assert b is not a  # a piece of `a` is still in use
    assert not _unused(a)
    del piece
    blocks.handed_over(b)
    assert blocks.take() is a
    assert len(a) == 4096  # the check left it as it was


def test_a_stream_of_many_blocks_in_odd_writes_is_stored_whole(tmp_path, monkeypatch):
    # small blocks, so that the stream spans many blocks, writes straddle them, and blocks
    # are reused while the encoders still work. One task in flight bounds the blocks still
    # in use (queue, cutting, two tasks) below the blocks looked at for reuse, so some block
    # is free again however the threads are scheduled.
    small_blocks(monkeypatch)
    monkeypatch.setattr(ingest_mod, "IN_FLIGHT", 1)
    taken = []
    real_take = _Blocks.take

    def take(self):
        block = real_take(self)
        taken.append(id(block))
        return block
    monkeypatch.setattr(_Blocks, "take", take)

    rnd = random.Random(11)
    stream = mixed_stream(rnd, 200)
    ing = new_ingest(tmp_path)
    buf = bytearray(100_000)  # the caller's buffer, reused for every write
    pos = 0
    while pos < len(stream):
        n = min(rnd.choice((1, 511, 4096, 65_536, 70_000, 100_000)), len(stream) - pos)
        buf[:n] = stream[pos:pos + n]
        ing.write(memoryview(buf)[:n])
        buf[:n] = b"\xee" * n  # what the caller does next must not reach the pool
        pos += n
    assert finish_and_read(ing, tmp_path) == stream
    assert len(taken) > len(stream) // (64 * 1024)
    assert len(set(taken)) < len(taken)  # blocks were filled again


def test_a_stream_filled_in_place_over_many_blocks_is_stored_whole(tmp_path, monkeypatch):
    # the archiver's way into a pool on its own host: it reads file data straight into the
    # ingest's blocks (space/advance), in pieces of any size, never a copy of its own
    small_blocks(monkeypatch)
    rnd = random.Random(12)
    stream = mixed_stream(rnd, 150)
    ing = new_ingest(tmp_path)
    pos = 0
    sizes = set()
    while pos < len(stream):
        space = ing.space(rnd.choice((1, 700, 4096, 30_000, 1 << 20)))
        sizes.add(len(space))
        n = min(len(space), len(stream) - pos, rnd.choice((1, 300, 70_000)))
        space[:n] = stream[pos:pos + n]
        ing.advance(n)
        pos += n
    assert finish_and_read(ing, tmp_path) == stream
    assert max(sizes) == 64 * 1024  # never more than the block holds


def small_blocks(monkeypatch):
    """64 KiB blocks, cut in place from that size on."""
    monkeypatch.setattr(ingest_mod, "BLOCK_BYTES", 64 * 1024)
    monkeypatch.setattr(sg, "GATHER", 64 * 1024)
    monkeypatch.setattr(sg, "SETTLE_FIRST", 2048)


def mixed_stream(rnd, stretches):
    """Compressible and random stretches, so that stored records are both kinds."""
    return b"".join(rnd.randbytes(n) if rnd.random() < 0.5 else bytes([rnd.randrange(4)]) * n
                    for n in (rnd.randint(1, 40_000) for _ in range(stretches)))


def new_ingest(tmp_path):
    root = tmp_path / "pool"
    return Ingest(str(root), f"{root}/images/c/.i.recipe.partial", params=PARAMS, image_id="i")


def finish_and_read(ing, tmp_path):
    """Commits the image and reads its stream back from the pool."""
    root = str(tmp_path / "pool")
    partial, final = f"{root}/images/c/.i.recipe.partial", f"{root}/images/c/i.recipe"
    stats = ing.finish({})
    commit_recipe(root, partial, final)
    s = RecipeStream(open_store(root), read_recipe(final))
    try:
        data = s.read()
    finally:
        s.close()
    assert stats["bytes"] == len(data)
    return data


def test_a_stream_into_a_full_file_system_fails_clearly_and_leaves_no_partial(small_tmpfs):
    """The pool on a tmpfs of 2 MiB and a stream of 6 MB that does not compress: the
    container writes (on the writer's own thread) meet the full disk; the error reaches the
    stream's caller as "full", with nothing of the image left behind and the pool usable."""
    small = small_tmpfs("2m")
    stream = random.Random(5).randbytes(6_000_000)
    ing = new_ingest(small)
    with pytest.raises(StoreWriteFailed, match="is full"):
        for at in range(0, len(stream), 100_000):
            ing.write(stream[at:at + 100_000])
        ing.finish({})
    ing.abort()
    root = small / "pool"
    assert not [n for n in os.listdir(root / "containers") if n.endswith(".partial")]
    assert not os.listdir(root / "images" / "c")
    # what fits still goes in: the space the failed image took is free again
    ing = new_ingest(small)
    ing.write(stream[:200_000])
    assert finish_and_read(ing, small) == stream[:200_000]


def test_a_pool_opened_ahead_is_taken_and_opened_once_however_many_ask(tmp_path, monkeypatch):
    """The master asks the storage host's agent to open the pool ahead of a backup (the
    agent's pool_open): the backup's ingest takes that store, and one that comes while it is
    still being opened waits for it instead of reading the chunk index a second time."""
    ing = new_ingest(tmp_path)
    ing.write(random.Random(3).randbytes(300_000))
    finish_and_read(ing, tmp_path)
    root = str(tmp_path / "pool")
    monkeypatch.setattr(ingest_mod, "_stores", {})
    made, real_make = [], ingest_mod.ChunkStore
    gate = threading.Event()

    def slow_store(*args, **kw):
        made.append(threading.current_thread().name)
        gate.wait(10)   # an index that takes long to read
        return real_make(*args, **kw)
    monkeypatch.setattr(ingest_mod, "ChunkStore", slow_store)
    spec = {"type": "dedup", "root": root, "params": PARAMS, "key": None}
    ahead = threading.Thread(target=ops.HANDLERS["pool_open"], args=(None, spec),
                             name="pool_open")
    ahead.start()
    while not made:
        time.sleep(0.01)
    backup_side = []
    taker = threading.Thread(target=lambda: backup_side.append(new_ingest(tmp_path)),
                             name="backup")
    taker.start()
    time.sleep(0.2)
    assert backup_side == []   # waiting for the pool being opened, not opening it again
    gate.set()
    ahead.join(10)
    taker.join(10)
    assert made == ["pool_open"]
    assert backup_side[0].store is open_store(root)
    backup_side[0].abort()
