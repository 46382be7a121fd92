"""The file checksum recorded at backup and checked at restore (tarfmt.TreeHash)."""

import hashlib
import os

import pytest

from app.agent import tarfmt

P = tarfmt.PIECE


def test_definition_pinned():
    # SHA-256 over the SHA-256 digests of 1 MiB pieces; this must never change silently,
    # or restores of older images would report mismatches.
    assert tarfmt.tree_digest(b"abc") == hashlib.sha256(hashlib.sha256(b"abc").digest()).hexdigest()
    assert tarfmt.tree_digest(b"") == hashlib.sha256(hashlib.sha256(b"").digest()).hexdigest()
    data = b"x" * (P + 1)
    expected = hashlib.sha256(hashlib.sha256(data[:P]).digest()
                              + hashlib.sha256(data[P:]).digest()).hexdigest()
    assert tarfmt.tree_digest(data) == expected


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_worker_pieces_in_any_order_give_the_same_digest(threads):
    sizes = [0, 1, P - 1, P, P + 1, 3 * P + 5]
    blobs = [os.urandom(n) for n in sizes]
    w = tarfmt.HashWorker(nbuf=2, bufsize=1 << 16, threads=threads)
    results = {}
    try:
        for i, blob in enumerate(blobs):
            h = tarfmt.TreeHash()
            mv = memoryview(blob)
            # uneven slices, as reads into a ring buffer come
            step = 1 + (i * 7919) % (1 << 20)
            for off in range(0, len(mv), step):
                w.put(h.jobs(mv[off:off + step]))
            w.put(h.close(lambda d, i=i: results.__setitem__(i, d)))
        w.wait()
    finally:
        w.close()
    for i, blob in enumerate(blobs):
        assert results[i] == tarfmt.tree_digest(blob), sizes[i]


def test_a_flipped_byte_changes_the_digest():
    data = bytearray(os.urandom(2 * P))
    before = tarfmt.tree_digest(bytes(data))
    data[P + 17] ^= 1
    assert tarfmt.tree_digest(bytes(data)) != before
