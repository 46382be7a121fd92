"""Content-defined chunking of the dedup pool: shared vectors on both implementations,
parameter checks, streaming with any buffer split, shift resistance and fingerprints."""

import hashlib
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "dedup_vectors"))

from plugins.storage.dedup import chunker as cdc  # noqa: E402
from app.errors import ValidationError  # noqa: E402
from vectorgen import PARAMS, generate, load  # noqa: E402

ACCEL_MISSING = ("pyfastcdc (the optional Cython accelerator) is not installed; the test "
                 "environment should have it: pip install 'pyfastcdc>=0.3.1,<0.4'")

IMPLS = [
    "reference",
    pytest.param("pyfastcdc", marks=pytest.mark.skipif(cdc.ACCELERATOR is None,
                                                       reason=ACCEL_MISSING)),
]

VECTORS = load()["vectors"]
_inputs = {}


def vector_input(v):
    key = v["name"]
    if key not in _inputs:
        data = generate(v["input"])
        # The generator itself is part of the contract: a drift here would make every
        # vector meaningless.
        assert len(data) == v["input_length"]
        assert hashlib.sha256(data).hexdigest() == v["input_sha256"], key
        _inputs[key] = data
    return _inputs[key]


def expected(v):
    return [tuple(c) for c in v["chunks"]]


def fingerprinted(data, chunk_list):
    return [(c.offset, c.length, hashlib.sha256(data[c.offset:c.offset + c.length]).hexdigest())
            for c in chunk_list]


# ---------------------------------------------------------------------------------------------
# vectors


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("v", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector_whole_input(v, impl):
    data = vector_input(v)
    got = cdc.chunks(data, **v["params"], implementation=impl)
    assert fingerprinted(data, got) == expected(v)


@pytest.mark.parametrize("impl", IMPLS)
def test_vectors_streamed_with_random_splits(impl):
    rnd = random.Random(7)
    for v in VECTORS:
        data = vector_input(v)
        ch = cdc.Chunker(**v["params"], implementation=impl, data=True)
        got = []
        pos = 0
        while pos < len(data):
            n = rnd.choice((1, 2, 3, 511, 4096, 65537, rnd.randint(1, 300_000)))
            got += ch.feed(data[pos:pos + n])
            pos += n
        got += ch.finish()
        assert [(c.offset, c.length, hashlib.sha256(c.data).hexdigest()) for c in got] \
            == expected(v), v["name"]


def test_vectors_cover_the_edge_cases():
    names = {v["name"].split("/")[1] for v in VECTORS}
    assert {"empty", "shorter-than-min", "exactly-max", "zeros", "zeros-exactly-max"} <= names
    for v in VECTORS:
        if v["name"].endswith("/zeros"):
            lengths = [c[1] for c in v["chunks"]]
            assert set(lengths[:-1]) == {v["params"]["max_size"]}
        if v["name"].endswith("/zeros-exactly-max"):
            assert [c[1] for c in v["chunks"]] == [v["params"]["max_size"]]
        if v["name"].endswith("/empty"):
            assert v["chunks"] == []
    assert set(tuple(sorted(v["params"].items())) for v in VECTORS) == \
        set(tuple(sorted(p.items())) for p in PARAMS.values())


@pytest.mark.skipif(cdc.ACCELERATOR is None, reason=ACCEL_MISSING)
def test_accelerator_is_the_default_when_installed():
    assert cdc.Chunker(2048, 8192, 32768).implementation == "pyfastcdc"


# ---------------------------------------------------------------------------------------------
# streaming


@pytest.mark.parametrize("impl", IMPLS)
def test_split_at_every_position_around_a_boundary(impl):
    v = next(v for v in VECTORS if v["name"] == "small-nc2/random")
    data = vector_input(v)[:120_000]
    p = v["params"]
    whole = cdc.chunks(data, **p, implementation=impl)
    assert len(whole) > 4
    b = whole[3].offset
    # Around the boundary itself, and around max_size before it, where the chunker switches
    # from holding the bytes back to cutting them.
    splits = list(range(b - 4, b + 5)) + list(range(b - p["max_size"] - 3,
                                                    b - p["max_size"] + 4))
    for s in splits:
        ch = cdc.Chunker(**p, implementation=impl)
        got = ch.feed(data[:s]) + ch.feed(data[s:]) + ch.finish()
        assert got == whole, s
        ch = cdc.Chunker(**p, implementation=impl)
        got = ch.feed(data[:s]) + ch.feed(data[s:s + 1]) + ch.feed(data[s + 1:]) + ch.finish()
        assert got == whole, s


@pytest.mark.parametrize("impl", IMPLS)
def test_one_byte_feeds(impl):
    data = generate({"kind": "random", "seed": "bytewise", "length": 40_000})
    whole = cdc.chunks(data, 1024, 4096, 16384, 1, implementation=impl)
    ch = cdc.Chunker(1024, 4096, 16384, 1, implementation=impl)
    got = []
    for i in range(len(data)):
        got += ch.feed(data[i:i + 1])
        assert ch.held < 16384
    assert got + ch.finish() == whole


@pytest.mark.skipif(cdc.ACCELERATOR is None, reason=ACCEL_MISSING)
def test_streaming_large_buffers_default_sizes():
    # Default sizes, buffers from 1 byte to 8 MiB; memory stays below max_size + one buffer.
    rnd = random.Random(11)
    data = rnd.randbytes(24 * cdc.MiB)
    whole = cdc.chunks(data)
    assert cdc.Chunker().implementation == "pyfastcdc"
    ch = cdc.Chunker()
    got = []
    pos = 0
    while pos < len(data):
        n = rnd.choice((1, 100, 65536, 1 << 20, 8 << 20, rnd.randint(1, 8 << 20)))
        got += ch.feed(memoryview(data)[pos:pos + n])
        assert ch.held < cdc.DEFAULT_MAX_SIZE
        pos += n
    got += ch.finish()
    assert got == whole
    assert sum(c.length for c in got) == len(data)


def test_feed_accepts_bytearray_and_does_not_keep_it():
    data = bytearray(generate({"kind": "random", "seed": "ba", "length": 50_000}))
    whole = cdc.chunks(bytes(data), 1024, 4096, 16384, implementation="reference")
    ch = cdc.Chunker(1024, 4096, 16384, implementation="reference", data=True)
    first = ch.feed(data)
    saved = [bytes(c.data) for c in first]
    data[:] = bytes(len(data))  # the caller reuses its buffer
    rest = ch.finish()
    assert [c.data for c in first] == saved
    assert [(c.offset, c.length) for c in first + rest] == whole


def test_feed_after_finish_is_refused():
    ch = cdc.Chunker(1024, 4096, 16384)
    ch.feed(b"x" * 100)
    assert ch.finish() == [cdc.Chunk(0, 100)]
    assert ch.finish() == []
    with pytest.raises(RuntimeError):
        ch.feed(b"more")


# ---------------------------------------------------------------------------------------------
# dedup behaviour and fingerprints


@pytest.mark.parametrize("impl", IMPLS)
def test_insert_near_start_keeps_later_chunks(impl):
    data = generate({"kind": "random", "seed": "shift", "length": 400_000})
    edited = data[:5000] + b"inserted bytes!" + data[5000:]
    p = (2048, 8192, 32768, 2)
    before = {f for _, _, f in fingerprinted(data, cdc.chunks(data, *p, implementation=impl))}
    after = fingerprinted(edited, cdc.chunks(edited, *p, implementation=impl))
    kept = sum(1 for _, _, f in after if f in before)
    assert len(after) > 30
    # Only the chunk holding the insertion (and at most its neighbour) may change.
    assert kept >= len(after) - 2


def test_fingerprint_is_sha256_of_the_chunk(tmp_path):
    data = generate({"kind": "random", "seed": "file", "length": 300_000})
    path = tmp_path / "f"
    path.write_bytes(data)
    got = list(cdc.chunk_file(path, 2048, 8192, 32768, read_size=10_000))
    assert [(c.offset, c.length) for c in got] == cdc.chunks(data, 2048, 8192, 32768)
    for c in got:
        piece = data[c.offset:c.offset + c.length]
        assert c.fingerprint == hashlib.sha256(piece).digest() == cdc.fingerprint(piece)
        assert len(c.fingerprint) == cdc.FINGERPRINT_SIZE
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert list(cdc.chunk_file(empty)) == []


# ---------------------------------------------------------------------------------------------
# parameters


@pytest.mark.parametrize("args, words", [
    ((4096, 4096, 16384), "min < avg < max"),
    ((1024, 16384, 16384), "min < avg < max"),
    ((8192, 4096, 16384), "min < avg < max"),
    ((1024, 6000, 16384), "not a power of two"),
    ((1023, 4096, 16384), "odd"),
    ((32, 4096, 16384), "min_size 32 is outside 64..1048576"),
    ((1024, 128, 16384), "avg_size 128 is outside"),
    ((1024, 8 << 20, 32 << 20), "avg_size 8388608 is outside"),
    ((1024, 4096, 32 << 20), "max_size 33554432 is outside"),
    ((2 << 20, 4 << 20, 8 << 20), "min_size 2097152 is outside"),
    ((1024.0, 4096, 16384), "must be an integer"),
    ((1024, True, 16384), "must be an integer"),
    ((1024, 4096, 16384, 4), "normalization level 4"),
    ((1024, 4096, 16384, -1), "normalization level -1"),
])
def test_bad_parameters_are_refused_with_a_reason(args, words):
    with pytest.raises(ValueError) as e:
        cdc.Chunker(*args)
    assert words in str(e.value)
    assert isinstance(e.value, ValidationError)
    assert "avg a power of two" in e.value.hint


def test_good_parameters_and_defaults():
    for args in [(64, 256, 1024), (1000, 4096, 10001), (1 << 20, 4 << 20, 16 << 20),
                 (cdc.DEFAULT_MIN_SIZE, cdc.DEFAULT_AVG_SIZE, cdc.DEFAULT_MAX_SIZE)]:
        cdc.validate_sizes(*args)
        for n in (0, 3):
            assert cdc.chunks(b"x" * 5000, *args, n, implementation="reference")
    p = cdc.Params()
    assert (p.min_size, p.avg_size, p.max_size) == (
        cdc.DEFAULT_MIN_SIZE, cdc.DEFAULT_AVG_SIZE, cdc.DEFAULT_MAX_SIZE)


def test_unknown_implementation_is_refused():
    with pytest.raises(ValidationError, match="unknown chunker implementation"):
        cdc.Chunker(implementation="numpy")
