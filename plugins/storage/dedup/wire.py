"""An image going into a deduplication pool over the data plane.

Client-side deduplication: the client cuts its image stream into chunks and fingerprints them
(as the storage side would), asks the storage side which chunks the pool lacks, and sends only
those. Server-side deduplication: the client sends the stream itself.

Messages, one data-plane frame each (app/agent/dataplane.py):
    client -> storage  b"S" + the next bytes of the stream                   (server-side)
    client -> storage  b"Q" + n x (fingerprint 32 bytes, length u32)   which of these are new?
    storage -> client  b"A" + n flag bytes (1: send it)
    client -> storage  b"D" + the asked-for chunks' data, in query order
    client -> storage  b"Z" + per asked-for chunk, in query order: codec u8, length u32,
                       sent length u32, the chunk compressed (compression on the client)
    client -> storage  b"X" + the next bytes of the stream as one zstd stream  (server-side,
                       compression on the client: in transit)
    client -> storage  b"R" + source u16, offset u64, length u64           (both, files cache)
    client -> storage  b"K"       the chunk being cut ends here (server-side; Ingest.cut)
    client -> storage  b"E" + n x (fingerprint, start u32, length u32)   a copy's recipe entries
    storage -> client  b"A" + n flag bytes (1: send that chunk)
    client -> storage  b"C" + one asked-for chunk's whole data, one message per chunk
and the stream's usual end (a zero frame, answered by the storage side's confirmation).

E and C: a copy of an image from another pool that keeps chunks (app/agent/duplicate.py):
the recipe goes over as it is, and only the chunks this pool lacks follow it.

R: the next bytes of the stream are bytes of a base image the storage side has (a full with a
files cache, plugins/storage/dedup/ingest.py); the client has cut and queried everything
before them.

Z instead of D: the policy compresses on the client and the storage side said which codecs
it decodes (its listening event; the master passes them on in the client's spec), so a client
never sends Z to a storage side that did not ask for it. The storage side decodes each chunk
and checks it against its fingerprint before it stores the bytes as they came.

Queries go in batches of a few MiB of stream: one round trip per batch, and while the storage
side stores a batch the client already cuts and hashes the next."""

import hashlib
import struct

from plugins.storage.dedup import encoding
from plugins.storage.dedup.chunker import ACCELERATOR, Params
from plugins.storage.dedup.segmenter import Segmenter
from app.errors import CairnError, Canceled

ENTRY = struct.Struct(">32sI")
COPY_ENTRY = struct.Struct(">32sII")
REF = struct.Struct(">HQQ")
SENT = struct.Struct(">BII")  # a Z message's chunk: codec, length, sent length
BATCH_BYTES = 16 << 20
BATCH_CHUNKS = 1024


class ProtocolError(CairnError):
    pass


def decode_entries(msg):
    body = memoryview(msg)[1:]
    if len(body) % COPY_ENTRY.size:
        raise ProtocolError("malformed recipe entries arrived on the data connection")
    return [COPY_ENTRY.unpack_from(body, i) for i in range(0, len(body), COPY_ENTRY.size)]


def encode_query(entries):
    return b"Q" + b"".join(ENTRY.pack(fp, n) for fp, n in entries)


def decode_query(msg):
    body = memoryview(msg)[1:]
    if len(body) % ENTRY.size:
        raise ProtocolError("a malformed chunk query arrived on the data connection")
    return [ENTRY.unpack_from(body, i) for i in range(0, len(body), ENTRY.size)]


class ClientSink:
    """What the archiver writes to for client-side deduplication: a file-like sink over a
    data-plane channel. finish() ends the stream and waits for the storage side."""

    def __init__(self, chan, params=None, compression=None):
        self.chan = chan
        self._seg = Segmenter(Params(**(params or {})))
        # {"level": N, "codecs": [what the storage side decodes]}: new chunks go compressed
        self.compression = None
        if compression:
            self.compression = {"at": "client", "level": compression.get("level") or 1,
                                "codec": encoding.client_codec(compression.get("codecs"))}
        self._batch = []  # (fp, length, data)
        self._batch_bytes = 0
        self.bytes = 0
        self.chunks = 0
        self.sent_chunks = 0
        self.sent_bytes = 0

    def write(self, data):
        pieces = self._seg.feed(data)
        if pieces:
            self._take(pieces)

    def _take(self, pieces):
        sha256 = hashlib.sha256
        for p in pieces:
            self._batch.append((sha256(p.data).digest(), p.length, p.data))
            self._batch_bytes += p.length
        if self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_CHUNKS:
            self._flush()

    def _flush(self):
        if not self._batch:
            return
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        self.chan.send_message(encode_query((fp, n) for fp, n, _ in batch))
        answer = self.chan.recv_message()
        if answer is None or answer[:1] != b"A" or len(answer) != len(batch) + 1:
            raise ProtocolError("the storage server gave no valid answer to a chunk query")
        wanted = [d for (_, _, d), flag in zip(batch, answer[1:]) if flag]
        self.bytes += sum(n for _, n, _ in batch)
        self.chunks += len(batch)
        if wanted and self.compression:
            self._send_compressed(wanted)
        elif wanted:
            self.chan.send_message(b"D" + b"".join(wanted))
            self.sent_chunks += len(wanted)
            self.sent_bytes += sum(len(d) for d in wanted)

    def _send_compressed(self, wanted):
        codec, level = self.compression["codec"], self.compression["level"]
        parts = [b"Z"]
        for data, (code, sent) in zip(wanted, encoding.compress_chunks(codec, wanted, level)):
            parts.append(SENT.pack(code, len(data), len(sent)))
            parts.append(sent)
            self.sent_bytes += len(sent)
        self.chan.send_message(b"".join(parts))
        self.sent_chunks += len(wanted)

    def reference(self, source, offset, length):
        # a reference ends the cutting before it, as a cut does
        self.cut()
        self._flush()
        self.chan.send_message(b"R" + REF.pack(source, offset, length))
        self.bytes += length

    def cut(self):
        """The chunk being cut ends here (Ingest.cut): the client cuts, so nothing is sent."""
        tail = self._seg.finish()
        if tail:
            self._take(tail)
        self._seg = Segmenter(self._seg.params)

    def finish(self):
        tail = self._seg.finish()
        if tail:
            self._take(tail)
        self._flush()
        self.chan.finish()

    def close(self):
        self.chan.close()

    def report(self):
        out = {"mode": "client", "bytes": self.bytes, "chunks": self.chunks,
               "sent_chunks": self.sent_chunks, "sent_bytes": self.sent_bytes}
        if self.compression:
            out["compression"] = dict(self.compression,
                                      codec=encoding.CODEC_NAMES[self.compression["codec"]])
        return out


def client_sink(chan, mode, params=None, accelerated=None, compression=None):
    """The sink a client's agent writes its image to, and a note when it cannot do what was
    asked. Client-side deduplication cuts the stream on the client; without the chunking
    accelerator the client's Python would cut at a few MB/s, so the stream goes whole and the
    storage side deduplicates it (its serve() takes either)."""
    if mode != "client":
        sink = ServerSink(chan, compression)
        return sink, sink.note
    if accelerated is None:
        accelerated = ACCELERATOR is not None
    if not accelerated:
        sink = ServerSink(chan, compression)
        return sink, "; ".join(filter(None, [
            "client-side deduplication needs the pyfastcdc package on this host, which it "
            "lacks: the stream is sent whole and deduplicated on the storage server instead",
            sink.note]))
    return ClientSink(chan, params, compression), None


class ServerSink:
    """What the archiver writes to for server-side deduplication: the plain stream in S
    messages, so that a files cache's references can go between them. With compression
    ({"level", "codecs"}: the policy compresses on the client, and the storage side decodes
    zstd) the stream goes as one zstd stream in X messages instead, flushed before each
    reference; the storage side decodes it and cuts, compresses and stores as ever."""

    def __init__(self, chan, compression=None):
        self.chan = chan
        self._z = None
        self.compression = None
        self.bytes = self.sent_bytes = 0
        self.note = None  # why the stream goes uncompressed though asked otherwise
        if compression and encoding._zstd is None:
            self.note = ("compression on the client needs the zstandard package on this "
                         "host, which it lacks: the stream is sent as it is and the storage "
                         "server compresses the chunks it stores")
        elif compression and "zstd" in (compression.get("codecs") or ()):
            level = compression.get("level") or 1
            self._z = encoding._zstd.ZstdCompressor(level=level).compressobj()
            self.compression = {"at": "client", "codec": "zstd", "level": level,
                                "in_transit": True}

    def write(self, data):
        if self._z is None:
            self.chan.send_tagged(b"S", data)
            return
        self.bytes += len(data)
        self._send_compressed(self._z.compress(data))

    def _send_compressed(self, out):
        if out:
            self.chan.send_tagged(b"X", out)
            self.sent_bytes += len(out)

    def _flush(self, mode):
        if self._z is not None:
            self._send_compressed(self._z.flush(mode))

    def reference(self, source, offset, length):
        # every stream byte before the reference must reach the storage side first
        self._flush(encoding._zstd.COMPRESSOBJ_FLUSH_BLOCK if self._z else None)
        self.chan.send_message(b"R" + REF.pack(source, offset, length))

    def cut(self):
        """The chunk being cut ends here (Ingest.cut), after every stream byte before it."""
        self._flush(encoding._zstd.COMPRESSOBJ_FLUSH_BLOCK if self._z else None)
        self.chan.send_message(b"K")

    def report(self):
        """What the stream cost the network when it went compressed, else None."""
        if self.compression is None:
            return None
        return {"bytes": self.bytes, "sent_bytes": self.sent_bytes,
                "compression": self.compression}

    def copy_entries(self, entries, chunk_of):
        """A copy from another pool that keeps chunks: sends a batch of its recipe entries,
        then the data of each chunk the storage side asks for (chunk_of(fingerprint)).
        Returns (chunks sent, bytes sent)."""
        self.chan.send_message(b"E" + b"".join(COPY_ENTRY.pack(*e) for e in entries))
        answer = self.chan.recv_message()
        if answer is None or answer[:1] != b"A" or len(answer) != len(entries) + 1:
            raise ProtocolError("the storage server gave no valid answer to a copy's entries")
        n = nbytes = 0
        for (fp, _, _), flag in zip(entries, answer[1:]):
            if flag:
                data = chunk_of(fp)
                self.chan.send_tagged(b"C", data)
                n += 1
                nbytes += len(data) + 5
        return n, nbytes + 1 + len(entries) * COPY_ENTRY.size + 4

    def finish(self):
        if self._z is not None:
            self._flush(encoding._zstd.COMPRESSOBJ_FLUSH_FINISH)
            self._z = None
        self.chan.finish()

    def close(self):
        self.chan.close()


# The most bytes one write of a compressed stream (X) hands the ingest: however much a
# message expands, the storage side holds no more than this of it at once.
STREAM_WRITE = 1 << 20


def _stream_decoder(ingest):
    """The storage side's decoder of a compressed stream: writes what it decodes to the
    ingest, at most STREAM_WRITE bytes at a time."""
    if encoding._zstd is None:
        raise ProtocolError("the client sent a compressed stream, and this storage server "
                            "cannot decode zstd")
    ingest.in_transit = True
    return encoding._zstd.ZstdDecompressor().stream_writer(
        ingest, write_size=STREAM_WRITE, write_return_read=True)


def _reference(ingest, msg):
    if len(msg) != 1 + REF.size:
        raise ProtocolError("a malformed reference arrived on the data connection")
    ingest.reference(*REF.unpack_from(msg, 1))


def _compressed(ingest, pending, msg):
    """A Z message: the asked-for chunks, each compressed by the client."""
    view = memoryview(msg)
    pos = 1
    for fp, _ in pending:
        if pos + SENT.size > len(view):
            raise ProtocolError("the client sent fewer chunks than it was asked for")
        codec, length, sent = SENT.unpack_from(view, pos)
        pos += SENT.size
        if pos + sent > len(view):
            raise ProtocolError("the client sent fewer bytes than the chunks it was asked for")
        ingest.put_compressed(fp, codec, length, view[pos:pos + sent])
        pos += sent
    if pos != len(view):
        raise ProtocolError("the client sent more bytes than the chunks it was asked for")


def serve(chan, ingest, is_cancelled):
    """The storage side: takes the stream (server-side) or answers queries and stores what
    comes (client-side), until the client ends the stream."""
    pending = None  # lengths of the chunks the last answer asked for
    copying = []  # a copy: the chunks the last answer to its entries asked for, in order
    decoder = None  # a compressed stream's (X)
    while True:
        if is_cancelled():
            raise Canceled()
        msg = chan.recv_message()
        if msg is None:
            if pending or copying:
                raise ProtocolError("the client ended the stream before sending the chunks "
                                    "it was asked for")
            return
        kind = msg[:1]
        if kind == b"S":
            ingest.write(memoryview(msg)[1:])
        elif kind == b"X":
            decoder = decoder or _stream_decoder(ingest)
            try:
                decoder.write(memoryview(msg)[1:])
            except encoding._zstd.ZstdError as e:
                raise ProtocolError(f"the client's compressed stream does not decode: {e}") \
                    from None
        elif kind == b"R":
            if pending:
                raise ProtocolError("the client referred to a base image before sending the "
                                    "chunks it was asked for")
            _reference(ingest, msg)
        elif kind == b"K":
            if pending or len(msg) != 1:
                raise ProtocolError("a malformed cut arrived on the data connection")
            ingest.cut()
        elif kind == b"Q":
            if pending:
                raise ProtocolError("the client asked again before sending the chunks it was "
                                    "asked for")
            entries = decode_query(msg)
            flags = ingest.query(entries)
            chan.send_message(b"A" + flags)
            pending = [(fp, n) for (fp, n), f in zip(entries, flags) if f] or None
        elif kind == b"D":
            if not pending:
                raise ProtocolError("the client sent chunk data nobody asked for")
            view = memoryview(msg)
            pos = 1
            for fp, n in pending:
                if pos + n > len(view):
                    raise ProtocolError("the client sent fewer bytes than the chunks it was "
                                        "asked for")
                ingest.put(fp, view[pos:pos + n])
                pos += n
            if pos != len(view):
                raise ProtocolError("the client sent more bytes than the chunks it was asked "
                                    "for")
            pending = None
        elif kind == b"Z":
            if not pending:
                raise ProtocolError("the client sent chunk data nobody asked for")
            _compressed(ingest, pending, msg)
            pending = None
        elif kind == b"E":
            if pending or copying:
                raise ProtocolError("the client sent entries before the chunks it was asked for")
            entries = decode_entries(msg)
            flags = ingest.query_entries(entries)
            chan.send_message(b"A" + flags)
            copying = [fp for (fp, _, _), f in zip(entries, flags) if f][::-1]
        elif kind == b"C":
            if not copying:
                raise ProtocolError("the client sent a chunk nobody asked for")
            ingest.put_chunk(copying.pop(), memoryview(msg)[1:])
        else:
            raise ProtocolError(f"an unknown message {bytes(kind)!r} arrived on the data "
                                "connection")
