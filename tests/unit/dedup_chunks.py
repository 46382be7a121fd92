"""What the chunk store's tests share: chunks made from a seed, a store filled with them, a pool
of several small containers."""

import hashlib
import os
import random

from plugins.storage.dedup import store as st


def chunk(seed, size=None, compressible=True):
    rnd = random.Random(seed)
    size = size or rnd.randint(1, 6000)
    if compressible:
        # text-like data, so the codec really compresses and the codec byte is not "none"
        words = [b"alpha", b"beta", b"gamma", b"delta", bytes([rnd.randrange(256)])]
        data = b" ".join(rnd.choice(words) for _ in range(size // 4 + 1))[:size]
    else:
        data = rnd.randbytes(size)
    return hashlib.sha256(data).digest(), data


def fill(store, seeds, **kw):
    chunks = dict(chunk(s, **kw) for s in seeds)
    with store.writer() as w:
        for fp, data in chunks.items():
            known = store.has(fp)
            assert w.add(fp, data) is not known
    return chunks


def files(store, suffix):
    return sorted(n for n in os.listdir(store.containers_dir) if n.endswith(suffix))


def record_codecs(store):
    codecs = []
    for number in store.committed_containers():
        for offset, header, error in store._scan(number, decode=False):
            assert error is None
            codecs.append(header[2])
    return codecs



def pool(tmp_path, n=40, **kw):
    """A store of several small containers (about five 1500-byte chunks each)."""
    store = st.ChunkStore(tmp_path, container_size=8192, **kw)
    chunks = fill(store, range(n), size=1500, compressible=False)
    return store, chunks


def by_container(store, fps):
    out = {}
    for fp in fps:
        out.setdefault(store.locate(fp).container, []).append(fp)
    return out


def assert_readable(store, chunks):
    for fp, data in chunks.items():
        assert store.get(fp) == data
