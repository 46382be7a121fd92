"""Chunks a client compressed (wire.py's Z message) into a real pool: kept as they came when
they decode to their fingerprint, refused whole when they do not (a lying client must not put
data under another chunk's fingerprint); compression off and the level on the storage side."""

import hashlib
import random

import pytest

from plugins.storage.dedup import encoding, wire
from plugins.storage.dedup.ingest import Ingest, IngestError
from plugins.storage.dedup.store import ChunkStore, generate_key

PARAMS = {"min_size": 4096, "avg_size": 16384, "max_size": 65536}


class Chan:
    """The storage side's end of a data connection: messages to hand out, answers kept."""

    def __init__(self, messages):
        self.messages = list(messages)
        self.sent = []

    def recv_message(self):
        return self.messages.pop(0) if self.messages else None

    def send_message(self, msg):
        self.sent.append(bytes(msg))

    def send_tagged(self, tag, data):
        self.sent.append(tag + bytes(data))


def text(seed, n):
    rnd = random.Random(seed)
    return b" ".join(rnd.choice([b"alpha", b"beta", b"gamma"]) for _ in range(n))[:n]


def z_message(chunks):
    """b"Z" and, per chunk, (codec, length, bytes sent)."""
    return b"Z" + b"".join(wire.SENT.pack(c, n, len(b)) + b for c, n, b in chunks)


def ingest(tmp_path, key=None, at="client", level=3):
    root = str(tmp_path / "pool")
    ChunkStore(root, key=key)  # made with the key, or plain
    return root, Ingest(root, str(tmp_path / "pool" / "x.recipe.partial"), params=PARAMS,
                        key=key, compression={"at": at, "level": level})


def serve(ing, messages):
    chan = Chan(messages)
    wire.serve(chan, ing, lambda: False)
    return chan


def zstd(data, level=3):
    return encoding._zstd.ZstdCompressor(level=level).compress(data)


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_compressed_chunk_is_checked_then_stored_as_it_came(tmp_path, encrypted):
    key = generate_key() if encrypted else None
    root, ing = ingest(tmp_path, key=key)
    data = text(1, 50_000)
    fp = hashlib.sha256(data).digest()
    sent = zstd(data)
    chan = serve(ing, [wire.encode_query([(fp, len(data))]),
                       z_message([(encoding.CODEC_ZSTD, len(data), sent)])])
    assert chan.sent == [b"A\x01"]
    stats = ing.finish({})
    assert stats["compression"] == {"at": "client", "codec": "zstd", "level": 3}
    assert stats["stored_bytes"] == len(sent) + (28 if encrypted else 0)
    store = ChunkStore(root, key=key)
    assert store.get(fp) == data
    [n] = store.committed_containers()
    [(_, header, error)] = list(store._scan(n, decode=True))
    assert error is None and header[2] & ~encoding.CODEC_ENCRYPTED == encoding.CODEC_ZSTD
    assert bool(header[2] & encoding.CODEC_ENCRYPTED) == encrypted


def test_a_compressed_chunk_that_does_not_match_its_fingerprint_is_refused(tmp_path):
    root, ing = ingest(tmp_path)
    data, other = text(2, 40_000), text(3, 40_000)
    fp = hashlib.sha256(data).digest()
    with pytest.raises(IngestError, match="does not match its fingerprint"):
        serve(ing, [wire.encode_query([(fp, len(data))]),
                    z_message([(encoding.CODEC_ZSTD, len(other), zstd(other))])])
    ing.abort()
    assert not ChunkStore(root).has(fp)


@pytest.mark.parametrize("codec, length, sent, why", [
    (encoding.CODEC_ZSTD, 40_000, b"\x28\xb5\x2f\xfd garbage", "not what it claims"),
    (encoding.CODEC_ZLIB, 40_000, b"not zlib at all", "does not decode"),
    (encoding.CODEC_ZSTD, 39_999, None, "its length 39999 is not the 40000"),
    (encoding.CODEC_NONE, 40_000, b"short", "decodes to 5 bytes"),
    (9, 40_000, b"x", "codec 9 is unknown"),
])
def test_a_compressed_chunk_that_is_not_what_it_claims_is_refused(tmp_path, codec, length,
                                                                   sent, why):
    root, ing = ingest(tmp_path)
    data = text(4, 40_000)
    fp = hashlib.sha256(data).digest()
    with pytest.raises(IngestError, match=why):
        ing.query([(fp, len(data))])
        ing.put_compressed(fp, codec, length, zstd(data) if sent is None else sent)
    ing.abort()
    assert not ChunkStore(root).has(fp)


def test_a_frame_claiming_more_than_the_chunk_is_refused_before_it_is_decoded(tmp_path):
    root, ing = ingest(tmp_path)
    data = text(5, 40_000)
    fp = hashlib.sha256(data).digest()
    bomb = zstd(bytes(10 << 20))  # 10 MiB of zeros, its frame says so
    ing.query([(fp, len(data))])
    with pytest.raises(IngestError, match="another length"):
        ing.put_compressed(fp, encoding.CODEC_ZSTD, len(data), bomb)
    ing.abort()


def test_z_framing_errors_are_protocol_errors(tmp_path):
    _, ing = ingest(tmp_path)
    data = text(6, 30_000)
    fp = hashlib.sha256(data).digest()
    msg = z_message([(encoding.CODEC_ZSTD, len(data), zstd(data))])
    with pytest.raises(wire.ProtocolError, match="nobody asked for"):
        serve(ing, [msg])
    _, ing2 = ingest(tmp_path / "b")
    with pytest.raises(wire.ProtocolError, match="more bytes"):
        serve(ing2, [wire.encode_query([(fp, len(data))]), msg + b"extra"])
    ing.abort()
    ing2.abort()


def test_off_stores_chunks_as_they_are_and_server_compresses_at_the_level(tmp_path):
    data = text(7, 400_000)
    sizes = {}
    for at, level in (("off", 1), ("server", 1), ("server", 19)):
        root, ing = ingest(tmp_path / f"{at}{level}", at=at, level=level)
        ing.write(data)
        stats = ing.finish({})
        sizes[at, level] = stats["stored_bytes"]
        store = ChunkStore(root)
        codecs = {h[2] for n in store.committed_containers()
                  for _, h, _ in store._scan(n, decode=True)}
        assert codecs == ({encoding.CODEC_NONE} if at == "off" else {encoding.CODEC_ZSTD})
    assert sizes["off", 1] == len(data)
    assert sizes["server", 19] < sizes["server", 1] < len(data) // 2


def test_a_compressed_chunk_into_a_pool_that_does_not_compress_on_the_client(tmp_path):
    """A policy that is not `client`: the chunk is decoded, checked and stored the pool's
    way (off: as it is)."""
    root, ing = ingest(tmp_path, at="off")
    data = text(8, 30_000)
    fp = hashlib.sha256(data).digest()
    serve(ing, [wire.encode_query([(fp, len(data))]),
                z_message([(encoding.CODEC_ZSTD, len(data), zstd(data))])])
    assert ing.finish({})["stored_bytes"] == len(data)
    assert ChunkStore(root).get(fp) == data


def test_the_client_sink_sends_z_only_when_offered(tmp_path):
    data = text(9, 300_000)

    class Answering(Chan):
        def recv_message(self):
            q = wire.decode_query(self.sent[-1])
            return b"A" + b"\x01" * len(q)

        def finish(self):
            pass

    for compression, kind in ((None, b"D"), ({"level": 5, "codecs": ["zlib"]}, b"Z"),
                              ({"level": 5, "codecs": ["zlib", "zstd"]}, b"Z")):
        chan = Answering([])
        sink = wire.ClientSink(chan, PARAMS, compression)
        sink.write(data)
        sink.finish()
        assert {m[:1] for m in chan.sent} == {b"Q", kind}
        report = sink.report()
        if kind == b"Z":
            codec = compression["codecs"][-1]
            assert report["compression"] == {"at": "client", "level": 5, "codec": codec}
            assert report["sent_bytes"] < len(data) // 2
            # every chunk sent decodes to the data of the fingerprint it was asked about
            [query, body] = chan.sent
            pos = 1
            for fp, n in wire.decode_query(query):
                code, length, sent = wire.SENT.unpack_from(body, pos)
                pos += wire.SENT.size
                assert code == encoding.CODECS[codec] and length == n
                chunk = encoding.decode_sent(code, body[pos:pos + sent], length)
                assert hashlib.sha256(chunk).digest() == fp
                pos += sent
            assert pos == len(body)
        else:
            assert report["sent_bytes"] == len(data) and "compression" not in report


def test_a_client_without_zstandard_sends_its_stream_as_it_is_and_says_so(monkeypatch):
    chan = Chan([])
    chan.finish = lambda: None
    monkeypatch.setattr(encoding, "_zstd", None)
    sink, note = wire.client_sink(chan, "server", PARAMS,
                                  compression={"level": 3, "codecs": ["zlib", "zstd"]})
    assert "needs the zstandard package on this host" in note
    sink.write(b"plain bytes")
    sink.finish()
    assert chan.sent == [b"Splain bytes"]
    assert sink.report() is None


def test_a_compressed_stream_that_does_not_decode_is_a_protocol_error(tmp_path):
    _, ing = ingest(tmp_path, at="client")
    with pytest.raises(wire.ProtocolError, match="compressed stream does not decode"):
        serve(ing, [b"X" + b"\x28\xb5\x2f\xfd not a zstd stream at all"])
    ing.abort()
