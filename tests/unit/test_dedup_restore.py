"""A restore from a deduplication pool checks each chunk's record (crc32, length) and each
restored file against its checksum from the catalog, not the SHA-256 of every chunk: a
chunk whose bytes were altered behind a recomputed crc32 still never lands as a file, and
every other file comes back byte for byte."""

import os
import struct
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_archive import Recorder, backup, plan_of  # noqa: E402
from treegen import assert_trees_equal  # noqa: E402

from app.agent import ops  # noqa: E402
from plugins.storage.dedup import store as st  # noqa: E402
from plugins.storage.dedup.agent import RecipeReading  # noqa: E402
from plugins.storage.dedup.ingest import Ingest, commit_recipe, open_store  # noqa: E402
from app.formats import entry  # noqa: E402

PARAMS = {"min_size": 4096, "avg_size": 16384, "max_size": 65536}


class Req:
    def __init__(self):
        self.emit = Recorder()

    @staticmethod
    def is_cancelled():
        return False


def pooled_image(tmp_path):
    """A tree of incompressible files, backed up and stored in a pool: (src, rows, root,
    recipe path)."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(6):
        (src / f"f{i}").write_bytes(os.urandom(200_000 + i * 1000))
    image = tmp_path / "image.tar"
    _, rec = backup(image, [src])
    root = str(tmp_path / "pool")
    partial, final = f"{root}/images/c/.i.recipe.partial", f"{root}/images/c/i.recipe"
    ing = Ingest(root, partial, params=PARAMS, image_id="i")
    with open(image, "rb") as f:
        while True:
            data = f.read(1 << 20)
            if not data:
                break
            ing.write(data)
    ing.finish({})
    commit_recipe(root, partial, final)
    return src, rec.rows, root, final


def forge_a_chunk_of(root, rows, name):
    """Alters one byte of a stored (uncompressed) chunk inside file `name`'s data and gives
    its record a matching crc32: only the chunk's SHA-256 or the file's checksum can tell."""
    from plugins.storage.dedup.recipe import read_recipe
    row = next(r for r in rows if r[entry.PATH].endswith("/" + name))
    middle = row[entry.OFFSET] + row[entry.LENGTH] // 2
    recipe = read_recipe(f"{root}/images/c/i.recipe")
    fp = recipe.entry(recipe.index_at(middle)).fp
    store = open_store(root)
    loc = store.locate(fp)
    path = store.container_path(loc.container)
    raw = bytearray(open(path, "rb").read())
    header = st.RECORD_HEADER.unpack_from(raw, loc.offset)
    assert header[2] == st.CODEC_NONE  # random data is kept as it is
    start = loc.offset + st.RECORD_HEADER.size
    raw[start + loc.stored_length // 2] ^= 0x5A
    struct.pack_into(">I", raw, start - 4, zlib.crc32(bytes(raw[start:start + loc.stored_length])))
    with open(path, "wb") as f:
        f.write(bytes(raw))


def run_restore(rows, root, recipe, target):
    req = Req()
    extents = [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]
    result = ops.restore(req, recipe, extents, plan_of(rows), str(target), checksum="crc32",
                         storage={"type": "dedup", "root": root, "key": None})
    return result, req.emit


def test_restore_from_a_pool_is_byte_for_byte(tmp_path):
    src, rows, root, recipe = pooled_image(tmp_path)
    result, rec = run_restore(rows, root, recipe, tmp_path / "t")
    assert result["errors"] == 0 and not rec.of("warning")
    assert_trees_equal(str(src), str(tmp_path / "t") + str(src))


def test_a_chunk_altered_behind_a_valid_crc_never_lands_as_a_file(tmp_path):
    src, rows, root, recipe = pooled_image(tmp_path)
    forge_a_chunk_of(root, rows, "f3")
    target = tmp_path / "t"
    result, rec = run_restore(rows, root, recipe, target)
    assert result["errors"] == 1
    [warning] = rec.of("warning")
    assert warning["path"].endswith("/f3") and "checksum mismatch" in warning["message"]
    restored = Path(str(target) + str(src))
    assert not (restored / "f3").exists()
    assert not [n for n in os.listdir(restored) if n.startswith(".cairn-restore")]
    for i in (0, 1, 2, 4, 5):
        assert (restored / f"f{i}").read_bytes() == (src / f"f{i}").read_bytes()
    # a verify, which does check every chunk's SHA-256, names the chunk
    assert [d.offset for d in open_store(root).verify()]


def test_a_restore_from_a_pool_in_two_streams_is_byte_for_byte(tmp_path, monkeypatch):
    """CAIRN_RESTORE_STREAMS=2: the files are restored by two forked processes, each reading
    the pool through the session of the agent that forked them."""
    monkeypatch.setenv("CAIRN_RESTORE_STREAMS", "2")
    src, rows, root, recipe = pooled_image(tmp_path)
    result, rec = run_restore(rows, root, recipe, tmp_path / "t")
    assert result["streams"] == 2 and result["errors"] == 0 and not rec.of("warning")
    assert_trees_equal(str(src), str(tmp_path / "t") + str(src))
    monkeypatch.setenv("CAIRN_RESTORE_STREAMS", "1")
    result, _ = run_restore(rows, root, recipe, tmp_path / "one")
    assert result["streams"] == 1


def test_a_store_lock_held_by_another_thread_at_the_fork_does_not_stop_a_stream(
        tmp_path, monkeypatch):
    """Another job's thread of the same agent may hold the pool's store lock at the moment
    a restore forks its streams; the lock a forked process inherits would never be released
    there, so the streams make their own."""
    import signal
    import threading
    monkeypatch.setenv("CAIRN_RESTORE_STREAMS", "2")
    src, rows, root, recipe = pooled_image(tmp_path)
    store = open_store(root)
    real_fork = os.fork
    children = []

    def fork_while_the_lock_is_held():
        held, release = threading.Event(), threading.Event()

        def other_job():
            with store._mutex:
                held.set()
                release.wait()

        t = threading.Thread(target=other_job)
        t.start()
        held.wait()
        pid = real_fork()
        if pid:
            children.append(pid)
            release.set()
            t.join()
        return pid

    monkeypatch.setattr(os, "fork", fork_while_the_lock_is_held)
    # a stream stuck on the inherited lock is ended after a minute, failing the test
    watchdog = threading.Timer(60, lambda: [os.kill(p, signal.SIGKILL) for p in children])
    watchdog.start()
    try:
        result, rec = run_restore(rows, root, recipe, tmp_path / "t")
    finally:
        watchdog.cancel()
    assert len(children) == 2 and result["streams"] == 2 and result["errors"] == 0
    assert_trees_equal(str(src), str(tmp_path / "t") + str(src))


def test_parts_as_many_as_the_cores_read_their_chunks_without_read_ahead(tmp_path,
                                                                        monkeypatch):
    """A part of a restore in streams reads ahead only while the parts leave cores free:
    with a part per core, the read-ahead threads' hand-overs cost more than they win."""
    _, rows, root, recipe = pooled_image(tmp_path)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    for parts, reads_ahead in ((2, True), (3, True), (4, False), (8, False)):
        reading = RecipeReading({"type": "dedup", "root": root, "key": None})
        try:
            src = reading.opener()(recipe)
            stream = src.stream
            assert stream._read_ahead
            reading.forked(parts)
            assert stream._read_ahead is reads_ahead
            data = bytearray(300_000)
            assert stream.preadinto(data, 0) == len(data)
            assert bool(stream._ahead) is reads_ahead
            src.close()
        finally:
            reading.close()
