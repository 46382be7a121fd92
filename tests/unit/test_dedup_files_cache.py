"""A full into a deduplication pool with a files cache: the state and references the agent
gets, and the storage side copying a base image's recipe entries for a reference, in
server-side (stream) and client-side (query/put) mode."""

import hashlib
import os
import random

import pytest

from plugins.storage.dedup.ingest import Ingest, IngestError, commit_recipe, open_store
from plugins.storage.dedup.recipe import RecipeStream, read_recipe
from app.formats.changes import PreviousState, ReferenceEncoder, StateEncoder

PARAMS = {"min_size": 4096, "avg_size": 16384, "max_size": 65536}


def data(seed, n):
    return random.Random(seed).randbytes(n)


def test_state_and_references_round_trip():
    state, refs = StateEncoder(), ReferenceEncoder()
    state.add(b"/a", [(b"x", b"1" * 8), (b"y", b"2" * 8), (b"z", b"3" * 8)])
    refs.add(b"/a", [(0, 512, 2048, "crc32:00ff"), (0, 0, 0, ""), (2, 1 << 40, 99, "s")])
    state.add(b"/b", [(b"\xff\xfe", b"4" * 8)])
    refs.add(b"/b", [(1, 7, 8, "sha256:" + "ab" * 32)])
    state_text, refs_text = state.text(), refs.text()
    prev = PreviousState(state_text, refs_text)
    assert prev.has_references and prev.entries == 4
    assert prev.directory_with_references(b"/a") == {
        b"x": (b"1" * 8, (0, 512, 2048, "crc32:00ff")),
        b"y": (b"2" * 8, None),  # length 0: nothing to refer to, the file is read
        b"z": (b"3" * 8, (2, 1 << 40, 99, "s"))}
    assert prev.directory_with_references(b"/b")[b"\xff\xfe"][1][0] == 1
    assert prev.directory_with_references(b"/c") is None
    # an incremental's state alone has no references
    assert not PreviousState(state_text).has_references
    with pytest.raises(ValueError, match="files cache is damaged"):
        PreviousState(state_text, "bm90IHpsaWI=")


def ingest_image(root, name, feed, bases=None, mode="server"):
    """Runs feed(ingest) into a new image; returns (recipe, stats)."""
    partial = f"{root}/images/c/.{name}.recipe.partial"
    final = f"{root}/images/c/{name}.recipe"
    ing = Ingest(root, partial, params=PARAMS, image_id=name, bases=bases)
    assert ing.bases_problem is None
    feed(ing)
    stats = ing.finish({})
    commit_recipe(root, partial, final)
    return read_recipe(final), stats


def stream_of(root, recipe):
    s = RecipeStream(open_store(root), recipe)
    try:
        return s.read()
    finally:
        s.close()


def client_send(ing, buf):
    """Client-side mode as the wire does it: query fingerprints, put what is asked for."""
    from plugins.storage.dedup.chunker import Params
    from plugins.storage.dedup.segmenter import Segmenter
    seg = Segmenter(Params(**PARAMS))
    pieces = seg.feed(buf) + seg.finish()
    entries = [(hashlib.sha256(p.data).digest(), p.length) for p in pieces]
    for (fp, _), flag, p in zip(entries, ing.query(entries), pieces):
        if flag:
            ing.put(fp, p.data)


@pytest.mark.parametrize("mode", ["server", "client"])
def test_references_copy_the_base_images_bytes(tmp_path, mode):
    root = str(tmp_path / "pool")
    a = data(1, 600_000)
    base, _ = ingest_image(root, "a", lambda ing: ing.write(a))
    assert len(base) > 10  # several chunks, so that references cut through some

    x, y = data(2, 70_000), data(3, 5_000)
    # mid-chunk to mid-chunk, then the base's start, then its very end
    refs = [(12_345, 300_001), (0, 17), (len(a) - 4_000, 4_000)]

    def feed(ing):
        send = ing.write if mode == "server" else (lambda b: client_send(ing, b))
        send(x)
        ing.reference(0, *refs[0])
        ing.reference(0, *refs[1])
        send(y)
        ing.reference(0, *refs[2])
        send(x)

    recipe, stats = ingest_image(root, "b", feed, bases=[base.path], mode=mode)
    want = x + a[12_345:312_346] + a[:17] + y + a[-4_000:] + x
    got = stream_of(root, recipe)
    assert len(got) == len(want) and got == want
    assert stats["reused_bytes"] == 300_001 + 17 + 4_000
    assert stats["bytes"] == len(want)
    # the repeated x and the references add nothing but x's and y's own chunks
    assert stats["new_bytes"] < len(x) + len(y) + 2 * PARAMS["max_size"]
    # the new recipe stands alone: the base's recipe can go
    import os
    os.remove(base.path)
    assert stream_of(root, read_recipe(recipe.path)) == want


def fill_in_place(ing, buf, limit=50_000):
    """What the archiver does with a sink that offers its memory: read into space(), then
    advance()."""
    mv = memoryview(buf)
    while mv:
        space = ing.space(limit)
        k = min(len(space), len(mv))
        space[:k] = mv[:k]
        ing.advance(k)
        mv = mv[k:]


def test_bytes_filled_in_place_mix_with_writes_and_references(tmp_path):
    # A reference hands over the part of the block filled so far; the block goes on being
    # filled after it, and what was filled into a space() taken before the reference lands
    # after the reference in the stream.
    root = str(tmp_path / "pool")
    a = data(11, 400_000)
    base, _ = ingest_image(root, "a", lambda ing: fill_in_place(ing, a))
    x, y, z = data(12, 90_000), data(13, 3_000), data(14, 130_000)

    def feed(ing):
        fill_in_place(ing, x)
        space = ing.space(10_000)  # taken before the reference, filled after it
        ing.reference(0, 1_000, 200_000)
        space[:len(y)] = y
        ing.advance(len(y))
        ing.write(z)
        ing.reference(0, 0, 5)
        fill_in_place(ing, x, limit=777)

    recipe, stats = ingest_image(root, "b", feed, bases=[base.path])
    want = x + a[1_000:201_000] + y + z + a[:5] + x
    assert stream_of(root, recipe) == want
    assert stats["bytes"] == len(want) and stats["reused_bytes"] == 200_005


def test_bad_references_are_refused_clearly(tmp_path):
    root = str(tmp_path / "pool")
    a = data(4, 100_000)
    base, _ = ingest_image(root, "a", lambda ing: ing.write(a))
    ing = Ingest(root, f"{root}/images/c/.b.recipe.partial", params=PARAMS, bases=[base.path])
    try:
        with pytest.raises(IngestError, match="which has 100000"):
            ing.reference(0, 99_000, 2_000)
        with pytest.raises(IngestError, match="base image 1"):
            ing.reference(1, 0, 10)
    finally:
        ing.abort()


def test_unusable_bases_are_reported_not_raised(tmp_path):
    root = str(tmp_path / "pool")
    a = data(5, 100_000)
    base, _ = ingest_image(root, "a", lambda ing: ing.write(a))
    missing = str(tmp_path / "pool/images/c/gone.recipe")
    ing = Ingest(root, f"{root}/images/c/.b.recipe.partial", params=PARAMS,
                 bases=[base.path, missing])
    try:
        assert "gone.recipe is missing" in ing.bases_problem
        with pytest.raises(IngestError):
            ing.reference(0, 0, 10)  # nothing is referable once the bases are unusable
    finally:
        ing.abort()
    # a base whose chunks the pool lost (a container removed by hand) is not used either
    import glob
    import os
    for f in glob.glob(f"{root}/containers/*") + [f"{root}/index/chunks.log"]:
        os.remove(f)
    ing = Ingest(root, f"{root}/images/c/.c.recipe.partial", params=PARAMS, bases=[base.path])
    try:
        assert ing.bases_problem and "not in the pool" in ing.bases_problem
    finally:
        ing.abort()


@pytest.mark.parametrize("accelerated, compressed", [(True, False), (False, False),
                                                     (True, True), (False, True)])
def test_client_without_accelerator_sends_the_stream_whole(tmp_path, accelerated, compressed):
    """Over a real data connection: a client asked for client-side deduplication that lacks
    the chunking accelerator sends the plain stream; the storage side takes either, and
    references between them. Compressed (the policy compresses on the client): chunks in Z
    messages, or the stream as one zstd stream in X messages, flushed before each
    reference."""
    import threading

    from app.agent import dataplane
    from plugins.storage.dedup import wire
    from app.jobs.tlscert import job_identity

    root = str(tmp_path / "pool")
    a = data(6, 300_000)
    base, _ = ingest_image(root, "a", lambda ing: ing.write(a))
    cert, key, token = job_identity(7)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    partial = f"{root}/images/c/.b.recipe.partial"
    result = {}

    def storage_side():
        ing = Ingest(root, partial, params=PARAMS, bases=[base.path])
        try:
            chan = listener.accept(lambda: False, timeout=10)
            wire.serve(chan, ing, lambda: False)
            result["stats"] = ing.finish({})
            chan.ack(True)
            chan.close()
        except Exception as e:  # noqa: BLE001 - reported by the test
            ing.abort()
            result["error"] = e
    t = threading.Thread(target=storage_side, daemon=True)
    t.start()
    chan = dataplane.connect("127.0.0.1", listener.port, cert, token)
    sink, note = wire.client_sink(chan, "client", PARAMS, accelerated=accelerated,
                                  compression={"level": 3, "codecs": ["zlib", "zstd"]}
                                  if compressed else None)
    x = data(8, 90_000)
    y = data(9, 50_000)
    sink.write(x)
    sink.reference(0, 1000, 200_000)
    sink.write(x)
    sink.cut()  # a chunk ends here (before an image's summary and its index)
    sink.write(y)
    sink.finish()
    chan.close()
    t.join(20)
    listener.close()
    assert "error" not in result, result
    if accelerated:
        assert note is None and isinstance(sink, wire.ClientSink)
        assert sink.report()["sent_bytes"] < 2 * len(x)
    else:
        assert isinstance(sink, wire.ServerSink) and "lacks" in note
        report = sink.report()
        if compressed:
            assert report["compression"]["in_transit"] and report["bytes"] == 2 * len(x) + len(y)
            assert 0 < report["sent_bytes"] < report["bytes"]
            assert result["stats"]["compression"]["in_transit"] == "zstd"
        else:
            assert report is None
    final = f"{root}/images/c/b.recipe"
    commit_recipe(root, partial, final)
    recipe = read_recipe(final)
    assert stream_of(root, recipe) == x + a[1000:201_000] + x + y
    assert result["stats"]["reused_bytes"] == 200_000
    assert 2 * len(x) + 200_000 in {e.stream_offset for e in recipe}


@pytest.mark.parametrize("bad", [b"Kx", b"K\x00\x00\x00"])
def test_a_malformed_cut_is_refused_and_nothing_is_kept(tmp_path, bad):
    """A client (or whoever took its agent over) sending a cut with bytes after it: the
    storage side refuses the stream as a protocol error, and its partial recipe goes."""
    import threading

    from app.agent import dataplane
    from app.jobs.tlscert import job_identity
    from plugins.storage.dedup import wire

    root = str(tmp_path / "pool")
    cert, key, token = job_identity(8)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    partial = f"{root}/images/c/.m.recipe.partial"
    result = {}

    def storage_side():
        ing = Ingest(root, partial, params=PARAMS)
        try:
            chan = listener.accept(lambda: False, timeout=10)
            wire.serve(chan, ing, lambda: False)
            result["served"] = True
        except Exception as e:  # noqa: BLE001 - what the test looks at
            result["error"] = e
        finally:
            ing.abort()
    t = threading.Thread(target=storage_side, daemon=True)
    t.start()
    chan = dataplane.connect("127.0.0.1", listener.port, cert, token)
    try:
        chan.send_tagged(b"S", data(3, 10_000))
        chan.send_message(bad)
        t.join(20)
    finally:
        chan.close()
        listener.close()
    assert isinstance(result.get("error"), wire.ProtocolError), result
    assert "malformed cut" in str(result["error"])
    assert not os.path.exists(partial)
