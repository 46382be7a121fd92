"""Inputs of the dedup chunker test vectors, and the script that writes vectors.json.

An input is described, not stored, by a spec (a dict):

  {"kind": "random", "seed": S, "length": N}
      counter-mode SHA-256: sha256(S as UTF-8 + b":" + i as 8 bytes big-endian) for
      i = 0, 1, 2, ... concatenated and cut to N bytes.
  {"kind": "zeros", "length": N}          N zero bytes.
  {"kind": "pattern", "period": P, "length": N}
      byte i is (i * 7) % P: periodic data in which the gear hash may never cut.
  {"kind": "concat", "parts": [spec, ...]} the parts one after the other.

Any implementation (another language included) can rebuild the inputs from this description
and check its boundaries and fingerprints against vectors.json.

Run `python tests/dedup_vectors/vectorgen.py` to rewrite vectors.json from the reference
implementation. Stored chunks depend on these boundaries: a change in the file means every
existing dedup pool stops deduplicating against new backups, so regenerate only on purpose.
"""

import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "vectors.json")


def generate(spec):
    kind = spec["kind"]
    n = spec.get("length", 0)
    if kind == "random":
        seed = spec["seed"].encode() + b":"
        out = bytearray()
        i = 0
        while len(out) < n:
            out += hashlib.sha256(seed + i.to_bytes(8, "big")).digest()
            i += 1
        return bytes(out[:n])
    if kind == "zeros":
        return bytes(n)
    if kind == "pattern":
        period = spec["period"]
        one = bytes((i * 7) % period for i in range(period))
        return (one * (n // period + 1))[:n]
    if kind == "concat":
        return b"".join(generate(part) for part in spec["parts"])
    raise ValueError(f"unknown input kind {kind!r}")


def _random(seed, length):
    return {"kind": "random", "seed": seed, "length": length}


# Parameter sets: small enough that the per-byte reference runs them quickly, and covering
# every normalization level, an odd and a non-power-of-two maximum and a large average.
PARAMS = {
    "small-nc2": {"min_size": 2048, "avg_size": 8192, "max_size": 32768, "normalization": 2},
    "tiny-nc1": {"min_size": 1024, "avg_size": 4096, "max_size": 16384, "normalization": 1},
    "odd-max-nc0": {"min_size": 1000, "avg_size": 4096, "max_size": 10001,
                    "normalization": 0},
    "nc3": {"min_size": 512, "avg_size": 2048, "max_size": 8192, "normalization": 3},
    "large-nc2": {"min_size": 65536, "avg_size": 262144, "max_size": 1048576,
                  "normalization": 2},
}


def cases():
    """(name, params name, input spec) of every vector."""
    out = []
    for pname, p in PARAMS.items():
        mx = p["max_size"]
        mn = p["min_size"]
        big = 2_097_152 if pname == "large-nc2" else 262_144
        out += [
            (f"{pname}/empty", pname, _random("empty", 0)),
            (f"{pname}/shorter-than-min", pname, _random("short", mn - 1)),
            (f"{pname}/exactly-min", pname, _random("min", mn)),
            (f"{pname}/exactly-max", pname, _random("max", mx)),
            (f"{pname}/max-plus-one", pname, _random("max+1", mx + 1)),
            (f"{pname}/zeros-exactly-max", pname, {"kind": "zeros", "length": mx}),
            (f"{pname}/zeros", pname, {"kind": "zeros", "length": 3 * mx + 123}),
            (f"{pname}/random", pname, _random("random", big)),
            (f"{pname}/pattern", pname, {"kind": "pattern", "period": 251,
                                         "length": 3 * mx + 7}),
            (f"{pname}/random-zeros-random", pname, {"kind": "concat", "parts": [
                _random("left", big // 4 + 1), {"kind": "zeros", "length": 2 * mx + 5},
                _random("right", big // 4 + 3)]}),
        ]
    return out


def compute(params, data):
    """[[offset, length, sha256 hex], ...] by the reference implementation."""
    from plugins.storage.dedup.chunker import chunks
    return [[c.offset, c.length, hashlib.sha256(data[c.offset:c.offset + c.length]).hexdigest()]
            for c in chunks(data, **params, implementation="reference")]


def build():
    vectors = []
    for name, pname, spec in cases():
        data = generate(spec)
        vectors.append({"name": name, "params": PARAMS[pname], "input": spec,
                        "input_length": len(data),
                        "input_sha256": hashlib.sha256(data).hexdigest(),
                        "chunks": compute(PARAMS[pname], data)})
    return {"algorithm": "FastCDC 2020 (fastcdc-rs v2020 gear table and masks, two bytes "
                         "per step)",
            "fingerprint": "sha256",
            "generator": "tests/dedup_vectors/vectorgen.py",
            "vectors": vectors}


def load():
    with open(VECTORS) as f:
        return json.load(f)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
    doc = build()
    with open(VECTORS, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {len(doc['vectors'])} vectors to {VECTORS}")
