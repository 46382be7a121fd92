"""The file checksum recorded at backup and checked at restore (tarfmt.TreeHash)."""

import hashlib
import os
import zlib

import pytest

from app.formats import tarfmt

P = tarfmt.PIECE


def crc(b):
    return zlib.crc32(b).to_bytes(4, "big")


def sha(b):
    return hashlib.sha256(b).digest()


@pytest.mark.parametrize("algorithm,piece", [("sha256", sha), ("crc32", crc)])
def test_definition_pinned(algorithm, piece):
    # SHA-256 over the piece digests of 1 MiB pieces; this must never change silently, or
    # restores of older images would report mismatches.
    def tree(parts):
        return hashlib.sha256(b"".join(piece(x) for x in parts)).hexdigest()
    assert tarfmt.tree_digest(b"abc", algorithm) == tree([b"abc"])
    assert tarfmt.tree_digest(b"", algorithm) == tree([b""])
    data = b"x" * (P + 1)
    assert tarfmt.tree_digest(data, algorithm) == tree([data[:P], data[P:]])


def test_crc32_vector():
    # a fixed vector, independent of this module's own helpers
    assert tarfmt.tree_digest(b"123456789", "crc32") == hashlib.sha256(
        bytes.fromhex("cbf43926")).hexdigest()


def test_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="unknown checksum"):
        tarfmt.TreeHash("md4")


@pytest.mark.parametrize("algorithm", ["crc32", "sha256"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_worker_pieces_in_any_order_give_the_same_digest(threads, algorithm):
    sizes = [0, 1, P - 1, P, P + 1, 3 * P + 5]
    blobs = [os.urandom(n) for n in sizes]
    w = tarfmt.HashWorker(nbuf=2, bufsize=1 << 16, threads=threads)
    results = {}
    try:
        for i, blob in enumerate(blobs):
            h = tarfmt.TreeHash(algorithm)
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
        assert results[i] == tarfmt.tree_digest(blob, algorithm), sizes[i]


@pytest.mark.parametrize("algorithm", ["crc32", "sha256"])
def test_a_flipped_byte_changes_the_digest(algorithm):
    data = bytearray(os.urandom(2 * P))
    before = tarfmt.tree_digest(bytes(data), algorithm)
    data[P + 17] ^= 1
    assert tarfmt.tree_digest(bytes(data), algorithm) != before


def test_accelerated_and_standard_crc32_agree():
    """Shared vectors: a host with the accelerator and one without record and check the
    same checksums, whatever the piece boundaries."""
    from isal import isal_zlib  # a dependency of the project: scripts/setup.sh installs it
    import random
    rng = random.Random(7)
    for n in (0, 1, 5 * 1024, P - 1, P, 3 * P + 11):
        data = rng.randbytes(n)
        assert isal_zlib.crc32(data) == zlib.crc32(data), n
        mid = n // 3
        assert isal_zlib.crc32(data[mid:], zlib.crc32(data[:mid])) == zlib.crc32(data), n
    assert tarfmt.CRC32_ACCELERATOR == "isal"


def test_a_host_without_the_accelerator_gives_the_same_checksums():
    """The agent on a host with only the standard library (isal blocked) computes the same
    tree digests as this one."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['isal'] = None; sys.modules['isal.isal_zlib'] = None\n"
            "from app.formats import tarfmt\n"
            "import random\n"
            "assert tarfmt.CRC32_ACCELERATOR is None\n"
            "rng = random.Random(11)\n"
            "print(','.join(tarfmt.tree_digest(rng.randbytes(n), 'crc32') "
            "for n in (0, 3, %d, %d)))" % (P, 2 * P + 5))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, check=True).stdout.strip().split(",")
    import random
    rng = random.Random(11)
    here = [tarfmt.tree_digest(rng.randbytes(n), "crc32") for n in (0, 3, P, 2 * P + 5)]
    assert out == here


def test_objects_queued_in_pairs_spread_over_both_threads():
    """A restore queues each file's writer beside its checksum; the writers (the heavy part)
    must not all land on one thread."""
    import threading

    class Recorder:
        def __init__(self, seen):
            self.seen = seen

        def update(self, _):
            self.seen.add(threading.current_thread().name)

    class Writer(Recorder):
        pass

    class Check(Recorder):
        pass

    writers, checks = set(), set()
    w = tarfmt.HashWorker(nbuf=2, bufsize=1 << 12, threads=2)
    try:
        for _ in range(6):
            a, b = Writer(writers), Check(checks)
            w.put([(a, b"x", None), (b, b"x", None), (a, None, lambda h: None),
                   (b, None, lambda h: None)])
        w.wait()
    finally:
        w.close()
    assert len(writers) == 2 and len(checks) == 2, (writers, checks)
