"""Encryption at rest and damage in the dedup pool's chunk store on real files: keys, tampered
ciphertext, keyless upkeep, chunks set aside and stored again, sessions' open containers, index
locations."""

import hashlib
import json
import os
import struct
import zlib

import pytest

from app.errors import ValidationError
from plugins.storage.dedup import chunk_index, containers
from plugins.storage.dedup import store as st

from dedup_chunks import assert_readable, by_container, chunk, fill, pool, record_codecs

ZSTD_MISSING = "the optional zstandard module is not installed"


# ---------------------------------------------------------------------- encryption at rest

MARKER = b"plaintext-marker-7f3a9c "


def marked(seed):
    data = MARKER * 40 + bytes([seed])
    return hashlib.sha256(data).digest(), data


def container_bytes(store):
    return b"".join(open(store.container_path(n), "rb").read()
                    for n in store.committed_containers())


def test_encrypted_round_trip_keeps_plaintext_out_of_the_containers(tmp_path):
    key = st.generate_key()
    assert len(key) == 32 and st.generate_key() != key
    enc = st.ChunkStore(tmp_path / "enc", key=key, codec="none")
    plain = st.ChunkStore(tmp_path / "plain", codec="none")
    chunks = dict(marked(s) for s in range(5))
    for store in (enc, plain):
        with store.writer() as w:
            for fp, data in chunks.items():
                w.add(fp, data)
    assert MARKER in container_bytes(plain)  # the check below can fail
    assert MARKER not in container_bytes(enc)
    reopened = st.ChunkStore(tmp_path / "enc", key=key)
    assert_readable(reopened, chunks)
    assert type(reopened.get(next(iter(chunks)))) is bytes
    assert list(reopened.verify()) == []
    assert reopened.stats()["encrypted"] is True
    assert all(code & st.CODEC_ENCRYPTED for code in record_codecs(enc))
    config = json.loads(open(enc.config_path).read())
    assert config == {"format": 1, "encrypted": True, "cipher": "AES-256-GCM",
                      "key_check": st.key_check_value(key)}
    assert key.hex() not in open(enc.config_path).read()
    # compressible chunks are compressed before they are encrypted
    zenc = st.ChunkStore(tmp_path / "zenc", key=key, codec="zlib")
    fp, data = chunk(1, size=6000)
    with zenc.writer() as w:
        w.add(fp, data)
    assert zenc.locate(fp).stored_length < len(data) / 2
    assert zenc.get(fp) == data


def test_keys_are_checked(tmp_path):
    key = st.generate_key()
    store = st.ChunkStore(tmp_path / "enc", key=key)
    fill(store, range(2))
    with pytest.raises(st.EncryptionKeyRequired, match="encrypted, and no key") as info:
        st.ChunkStore(tmp_path / "enc")
    assert "docs/dedup-pool.md" in info.value.hint
    with pytest.raises(st.WrongEncryptionKey, match="does not open") as info:
        st.ChunkStore(tmp_path / "enc", key=st.generate_key())
    assert "keys/SERVER.key" in info.value.hint
    plain = st.ChunkStore(tmp_path / "plain")
    fill(plain, range(2))
    with pytest.raises(ValidationError, match="not encrypted, but a key was given"):
        st.ChunkStore(tmp_path / "plain", key=key)
    # a store from before pool.json existed is plain, and stays so
    os.unlink(plain.config_path)
    with pytest.raises(ValidationError, match="not encrypted, but a key was given"):
        st.ChunkStore(tmp_path / "plain", key=key)
    assert st.ChunkStore(tmp_path / "plain").encrypted is False
    for bad in (key.hex(), key[:16], "x" * 32):
        with pytest.raises(ValidationError, match="32 raw bytes"):
            st.ChunkStore(tmp_path / "other", key=bad)


def test_tampered_ciphertext_is_detected(tmp_path):
    key = st.generate_key()
    store = st.ChunkStore(tmp_path, key=key)
    chunks = dict(marked(s) for s in range(3))
    with store.writer() as w:
        for fp, data in chunks.items():
            w.add(fp, data)
    victim, other = list(chunks)[:2]
    loc = store.locate(victim)
    path = store.container_path(loc.container)
    raw = bytearray(open(path, "rb").read())
    start = loc.offset + st.RECORD_HEADER.size
    raw[start + st.NONCE_SIZE + 3] ^= 1
    # a matching crc, as a deliberate change would have: only the cipher's tag notices
    struct.pack_into(">I", raw, start - 4, zlib.crc32(bytes(raw[start:start + loc.stored_length])))
    open(path, "wb").write(bytes(raw))
    with pytest.raises(st.ChunkDamaged, match="decryption failed"):
        store.get(victim)
    assert [d.fingerprint for d in store.verify()] == [victim]
    assert store.get(other) == chunks[other]
    # a record moved under another fingerprint fails too: the fingerprint is authenticated
    loc2 = store.locate(other)
    raw = bytearray(open(path, "rb").read())
    raw[loc2.offset + 4:loc2.offset + 36] = b"\x01" * 32
    open(path, "wb").write(bytes(raw))
    assert any(d.fingerprint == b"\x01" * 32 and "decryption failed" in d.reason
               for d in store.verify())


def test_keyless_upkeep_of_an_encrypted_store(tmp_path):
    key = st.generate_key()
    store = st.ChunkStore(tmp_path, key=key, container_size=8192)
    chunks = fill(store, range(30), size=1500, compressible=False)
    groups = by_container(store, chunks)
    live = {fps[0] for fps in groups.values()}
    keyless = st.ChunkStore(tmp_path, keyless=True, container_size=8192)
    with pytest.raises(st.EncryptionKeyRequired, match="without its key"):
        keyless.get(next(iter(chunks)))
    with pytest.raises(st.EncryptionKeyRequired):
        keyless.writer()
    assert list(keyless.verify()) == []
    # reclaim copies records as stored, so it needs no key
    result = keyless.reclaim(lambda: live)
    assert result["containers_compacted"] == len(groups)
    assert_readable(store, {fp: chunks[fp] for fp in live})
    assert list(store.verify()) == []
    # bit rot is found by the crc32 alone
    loc = keyless.locate(next(iter(live)))
    with open(keyless.container_path(loc.container), "r+b") as f:
        f.seek(loc.offset + st.RECORD_HEADER.size + 20)
        f.write(b"\x00\x01")
    assert [d.reason for d in keyless.verify()] == ["crc32 of the stored bytes does not match"]


def test_plain_record_in_an_encrypted_store_is_refused(tmp_path):
    key = st.generate_key()
    enc = st.ChunkStore(tmp_path / "enc", key=key, codec="none")
    plain = st.ChunkStore(tmp_path / "plain", codec="none")
    fp, data = marked(1)
    for store in (enc, plain):
        with store.writer() as w:
            w.add(fp, data)
    # swap the containers: each store now holds the other kind of record
    a, b = enc.container_path(1), plain.container_path(1)
    a_bytes, b_bytes = open(a, "rb").read(), open(b, "rb").read()
    open(a, "wb").write(b_bytes)
    open(b, "wb").write(a_bytes)
    enc.rebuild_index()
    plain.rebuild_index()
    with pytest.raises(st.ChunkDamaged, match="not encrypted, but the store is"):
        enc.get(fp)
    with pytest.raises(st.ChunkDamaged, match="encrypted, but the store is not"):
        plain.get(fp)


def test_session_drops_what_a_reclaim_elsewhere_removed(tmp_path):
    store, chunks = pool(tmp_path, n=10)
    live = set(list(chunks)[:2])
    other = st.ChunkStore(tmp_path)
    assert all(other.has(fp) for fp in chunks)  # known from its own read of the index
    store.reclaim(lambda: live, compact_below=1.0)
    with other.session():
        # a backup in this session must not count on a reclaimed chunk being stored
        assert {fp for fp in chunks if other.has(fp)} == live


def test_rewritten_index_is_noticed_even_on_the_same_inode(tmp_path):
    store, chunks = pool(tmp_path, n=10)
    live = set(list(chunks)[:2])
    other = st.ChunkStore(tmp_path)
    assert len(other) == 10
    old_inode = tmp_path / "old-log"
    os.link(store.index_path, old_inode)  # keeps the old inode, to reuse it below
    store.reclaim(lambda: live, compact_below=1.0)
    rewritten = open(store.index_path, "rb").read()
    with open(old_inode, "r+b") as f:  # the new log's bytes in the old log's inode
        f.truncate(0)
        f.write(rewritten)
    os.replace(old_inode, store.index_path)
    assert os.stat(store.index_path).st_ino == other._index_id[0]
    assert other.fingerprints() == store.fingerprints()
    assert_readable(other, {fp: chunks[fp] for fp in live})


def damage_record(store, fp, at=5):
    """Flips bytes inside the stored data of fp's record (its crc32 then fails)."""
    loc = store.locate(fp)
    with open(store.container_path(loc.container), "r+b") as f:
        f.seek(loc.offset + st.RECORD_HEADER.size + at)
        b = f.read(3)
        f.seek(loc.offset + st.RECORD_HEADER.size + at)
        f.write(bytes(x ^ 0x5A for x in b))
    return loc


def test_a_chunk_set_aside_is_stored_again_by_the_next_writer(tmp_path, monkeypatch):
    monkeypatch.setattr(chunk_index, "HAS_REFRESH", 0.0)  # the next lookup reads what changed
    store, chunks = pool(tmp_path, n=6)
    victim = list(chunks)[3]
    damage_record(store, victim)
    [damage] = list(store.verify())
    assert damage.fingerprint == victim
    other = st.ChunkStore(tmp_path)  # another process's view, read before the set-aside
    assert other.has(victim)
    assert store.set_aside([damage]) == [victim]
    assert not store.has(victim)
    with pytest.raises(st.ChunkNotFound, match="found damaged .* set aside") as info:
        store.get(victim)
    assert damage.reason in str(info.value) and "next backup" in info.value.hint
    # the other view sees the rewritten index at its next refresh, and stores the chunk anew
    with other.writer() as w:
        assert w.add(victim, chunks[victim]) is True
    assert store.get(victim) == chunks[victim]
    assert_readable(st.ChunkStore(tmp_path), chunks)
    # a rebuild does not bring back the damaged record, even though it is the first copy
    counts = store.rebuild_index()
    assert counts["damaged"] == 1 and counts["chunks"] == 6
    assert store.get(victim) == chunks[victim]


def test_only_the_damaged_place_is_set_aside(tmp_path):
    store, chunks = pool(tmp_path, n=4)
    victim = list(chunks)[1]
    loc = store.locate(victim)
    elsewhere = st.Damage(victim, store.container_path(loc.container), loc.offset + 1, "x")
    assert store.set_aside([elsewhere, st.Damage(None, "c", 0, "torn")]) == []
    assert store.get(victim) == chunks[victim] and store.damage_notes() == {}


def test_a_record_with_a_valid_crc_set_aside_stays_out_of_a_rebuild(tmp_path):
    # damage found by decoding or SHA-256 (the crc32 was taken over bad bytes) must not come
    # back through the rebuild, which checks crc32s only
    store, chunks = pool(tmp_path, n=3)
    victim = list(chunks)[0]
    loc = store.locate(victim)
    damage = st.Damage(victim, store.container_path(loc.container), loc.offset,
                       "sha256 of the data does not match the fingerprint")
    assert store.set_aside([damage]) == [victim]
    counts = store.rebuild_index()
    assert counts["damaged"] == 1 and not store.has(victim)


def test_reclaim_needs_no_rebuild_for_chunks_set_aside_and_forgets_healed_notes(tmp_path):
    store, chunks = pool(tmp_path, n=12)
    fps = list(chunks)
    victim = fps[4]
    damage_record(store, victim)
    [damage] = list(store.verify())
    assert store.set_aside([damage]) == [victim]
    result = store.reclaim(lambda: set(fps))
    assert result["index_rebuilt"] is False and result["missing_chunks"] == 1
    assert victim in store.damage_notes()  # still referenced, still stored nowhere
    with store.writer() as w:
        w.add(victim, chunks[victim])
    result = store.reclaim(lambda: set(fps))
    assert result["missing_chunks"] == 0 and store.damage_notes() == {}
    assert not os.path.exists(store.damaged_path)
    assert_readable(store, chunks)


def test_reclaim_notes_the_damaged_records_it_drops(tmp_path):
    store, chunks = pool(tmp_path, n=10)
    first = by_container(store, chunks)[1]
    victim = first[0]
    damage_record(store, victim)
    result = store.reclaim(lambda: {victim, first[1]})
    assert result["damaged_chunks"] == 1
    assert "reclaim" in store.damage_notes()[victim]["reason"]
    again = store.reclaim(lambda: {victim, first[1]})
    assert again["index_rebuilt"] is False and again["missing_chunks"] == 1


def test_a_torn_note_line_is_ignored(tmp_path):
    store, chunks = pool(tmp_path, n=3)
    victim = list(chunks)[2]
    damage_record(store, victim)
    [damage] = list(store.verify())
    store.set_aside([damage])
    with open(store.damaged_path, "ab") as f:
        f.write(b'{"fingerprint": "ab')
    assert list(store.damage_notes()) == [victim]


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_a_session_reads_through_containers_it_keeps_open_and_closes_them(tmp_path,
                                                                         monkeypatch):
    store, chunks = pool(tmp_path, n=30)  # about six containers
    containers = len(store.committed_containers())
    before = open_fds()
    s = store.session()
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(path)
                        or real_open(path, *a, **k))
    for _ in range(2):
        assert_readable(s, chunks)
    containers_opened = [p for p in opened if str(p).endswith(".ctr")]
    assert len(containers_opened) == containers  # each once, not once per chunk
    assert open_fds() == before + 1 + containers  # the pool lock and the containers
    s.close()
    assert open_fds() == before
    with pytest.raises(ValidationError, match="closed"):
        s.get(next(iter(chunks)))


def test_beyond_its_limit_a_session_reads_with_files_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(containers._OpenContainers, "LIMIT", 2)
    store, chunks = pool(tmp_path, n=30)
    before = open_fds()
    with store.session() as s:
        assert_readable(s, chunks)
        assert open_fds() == before + 1 + 2
    assert open_fds() == before


def test_verify_pool_names_chunks_whose_container_is_gone_and_sets_them_aside(tmp_path):
    from plugins.storage.dedup import pool as dpool
    from plugins.storage.dedup.recipe import RecipeWriter
    store, chunks = pool(tmp_path, n=12)
    fps = list(chunks)
    images = tmp_path / dpool.IMAGE_DIR / "c1"
    images.mkdir(parents=True)
    w = RecipeWriter(images / ("img" + dpool.RECIPE_SUFFIX))
    for fp in fps:
        w.add(fp, len(chunks[fp]))
    w.finish({"image_id": "img"})
    gone = store.locate(fps[0]).container
    lost = [fp for fp in fps if store.locate(fp).container == gone]
    os.unlink(store.container_path(gone))
    out = dpool.verify_pool(store, str(tmp_path))
    [img] = out["images"]
    assert out["damaged_chunks"] == len(lost) and out["set_aside"] == len(lost)
    assert {d["fingerprint"] for d in img["damage"]} == {fp.hex() for fp in lost}
    assert all("is missing" in d["reason"] for d in img["damage"])
    assert not any(store.has(fp) for fp in lost)
    assert all(store.get(fp) == chunks[fp] for fp in fps if fp not in lost)


def test_index_locations_pack_and_unpack_at_their_limits(tmp_path):
    for loc in [(1, 16, 1), (99_999_999, (1 << 40) - 1, 0xFFFFFFFF), (1 << 40, 0, 0),
                (7, st.MAX_CONTAINER_SIZE + (1 << 32), 12345)]:
        assert chunk_index._location(chunk_index._pack_location(*loc)) == st.Location(*loc)
    with pytest.raises(ValidationError, match="too large"):
        st.ChunkStore(tmp_path, container_size=st.MAX_CONTAINER_SIZE + 1)


def test_a_process_keeps_its_open_stores_for_the_next_job(tmp_path):
    import shutil
    from plugins.storage.dedup.ingest import open_store
    root = tmp_path / "pool"
    first = open_store(str(root))
    assert open_store(str(root)) is first
    assert open_store(str(root), keyless=True) is first  # a plain pool: one store for both
    # a chunk another process stored is seen by the kept store at its next refresh
    fp, data = chunk(77)
    with st.ChunkStore(root).writer() as w:
        w.add(fp, data)
    assert first.get(fp) == data
    # the pool made anew at the same path is another store
    shutil.rmtree(root)
    again = open_store(str(root))
    assert again is not first and len(again) == 0
    key = st.generate_key()
    enc = tmp_path / "enc"
    locked = open_store(str(enc), key=key.hex())
    assert open_store(str(enc), key=key) is locked
    keyless = open_store(str(enc), keyless=True)
    assert keyless is not locked and keyless.encrypted
    with pytest.raises(st.EncryptionKeyRequired):
        open_store(str(enc))
