"""How one chunk is kept in a container: compressed (zstd when `zstandard` is importable,
else zlib level 1, or as it is when compression does not help), then, in an encrypted pool,
sealed with AES-256-GCM (`cryptography`, imported only when a key is given), in a record
(RECORD_HEADER) whose crc32 covers the stored bytes. See plugins/storage/dedup/store.py for
the container and record layout."""

import hashlib
import hmac
import os
import struct
import threading
import zlib

from app.errors import ValidationError
from app.formats.tarfmt import crc32 as _crc32  # zlib's CRC-32, from isal where present
from plugins.storage.dedup.errors import CodecUnavailable, EncryptionUnavailable

try:
    import zstandard as _zstd
except ImportError:  # zlib is always there; zstd is only faster and smaller
    _zstd = None

FINGERPRINT_SIZE = 32

CODEC_NONE = 0  # compression did not help; kept as is
CODEC_ZLIB = 1
CODEC_ZSTD = 2
CODEC_NAMES = {CODEC_NONE: "none", CODEC_ZLIB: "zlib", CODEC_ZSTD: "zstd"}
CODECS = {name: code for code, name in CODEC_NAMES.items()}
CODEC_ENCRYPTED = 0x80  # flag on the codec byte: the stored bytes are nonce + AES-GCM output
RECORD_MAGIC = b"CHK1"
RECORD_HEADER = struct.Struct(">4s32sBIII")  # magic, fp, codec, raw len, stored len, crc32
ZSTD_LEVEL = 1
MAX_CHUNK_SIZE = 0xFFFFFFFF
KEY_SIZE = 32
NONCE_SIZE = 12
KEY_CHECK_LABEL = b"cairn pool key check"


def generate_key():
    """A new random key for an encrypted store (32 raw bytes)."""
    return os.urandom(KEY_SIZE)


def key_check_value(key):
    """What pool.json records to recognise the key: HMAC-SHA256(key, label), as hex."""
    return hmac.new(key, KEY_CHECK_LABEL, hashlib.sha256).hexdigest()


def _check_fingerprint(fp):
    if not isinstance(fp, (bytes, bytearray, memoryview)) or len(fp) != FINGERPRINT_SIZE:
        raise ValidationError(
            f"a chunk fingerprint must be {FINGERPRINT_SIZE} bytes, not {fp!r:.80}",
            hint="Pass the raw SHA-256 digest (hashlib.sha256(data).digest()), not its hex.")
    return bytes(fp)


_local = threading.local()


def _zstd_compressor(level=None):
    # One compressor per thread and level: making one per chunk costs as much as a small
    # chunk's compression, and a compressor must not be shared between threads.
    level = level or ZSTD_LEVEL
    kept = getattr(_local, "zstd", None)
    if kept is None:
        kept = _local.zstd = {}
    c = kept.get(level)
    if c is None:
        c = kept[level] = _zstd.ZstdCompressor(level=level)
    return c


def _compress(codec, data, level=None):
    if codec == CODEC_ZSTD:
        return _zstd_compressor(level).compress(data)
    if codec == CODEC_ZLIB:
        return zlib.compress(data, min(level or 1, 9))
    return data


def client_codec(accepted=None):
    """The codec a client compresses the chunks it sends with: zstd where this host has
    zstandard and the storage side accepts it, else zlib (every Python has it)."""
    if _zstd is not None and (accepted is None or "zstd" in accepted):
        return CODEC_ZSTD
    return CODEC_ZLIB


def compress_chunk(codec, data, level):
    """(codec, bytes) of a chunk a client sends compressed: the compressed form where it is
    smaller, else the data as it is (codec none)."""
    return _smaller(codec, data, _compress(codec, data, level))


# Threads a client compresses one batch of chunks with (zstd's own, outside the GIL).
CLIENT_THREADS = min(4, os.cpu_count() or 1)


def compress_chunks(codec, datas, level):
    """compress_chunk of each of a batch of chunks: with zstd, all in one call on a few
    threads where python-zstandard can (its C backend), one by one otherwise."""
    if codec == CODEC_ZSTD and len(datas) > 1:
        batch = getattr(_zstd_compressor(level), "multi_compress_to_buffer", None)
        try:
            frames = batch and batch(list(datas), threads=CLIENT_THREADS)
        except NotImplementedError:  # the CFFI backend lacks it
            frames = None
        if frames:
            return [_smaller(codec, d, f.tobytes()) for d, f in zip(datas, frames)]
    return [compress_chunk(codec, d, level) for d in datas]


def decode_sent(codec, stored, raw_length):
    """The data of a chunk a client sent compressed, decoded no further than raw_length
    bytes; ValueError when it does not decode to exactly that many."""
    if codec == CODEC_NONE:
        data = bytes(stored)
    elif codec == CODEC_ZLIB:
        d = zlib.decompressobj()
        try:
            data = d.decompress(stored, raw_length)
        except zlib.error as e:
            raise ValueError(f"it does not decode (zlib): {e}") from None
        if d.unconsumed_tail or not d.eof:
            raise ValueError("it decodes to more or fewer bytes than its length")
    elif codec == CODEC_ZSTD:
        if _zstd is None:
            raise ValueError("it is compressed with zstd, and the zstandard module is not "
                             "installed here")
        try:
            size = _zstd.frame_content_size(stored)
            if size not in (-1, raw_length):
                raise ValueError("its frame gives another length than the chunk's")
            data = _zstd.ZstdDecompressor().decompress(stored, max_output_size=raw_length)
        except _zstd.ZstdError as e:
            raise ValueError(f"it does not decode (zstd): {e}") from None
    else:
        raise ValueError(f"its codec {codec} is unknown")
    if len(data) != raw_length:
        raise ValueError(f"it decodes to {len(data)} bytes, not {raw_length}")
    return data


def _smaller(codec, data, stored):
    """(codec, stored bytes): the compressed form where it is smaller, else the data as is."""
    if len(stored) < len(data):
        return codec, stored
    return CODEC_NONE, data


def _record(fp, codec, raw_length, stored):
    """(record header, stored bytes) as a container holds them."""
    return (RECORD_HEADER.pack(RECORD_MAGIC, fp, codec, raw_length, len(stored),
                               _crc32(stored)), stored)


def _decompress(codec, stored, raw_length, where):
    """Decoded bytes; raises ChunkDamaged (via ValueError) on undecodable input."""
    if codec == CODEC_NONE:
        return bytes(stored)
    if codec == CODEC_ZLIB:
        return zlib.decompress(stored)
    if codec == CODEC_ZSTD:
        if _zstd is None:
            raise CodecUnavailable(
                f"chunk at {where} was stored with zstd, and the zstandard module is not "
                f"installed here",
                hint="Install it on this host (pip install zstandard) to read this store.")
        # One decompressor per thread, as with compression: making one per chunk holds the
        # GIL while its context is set up.
        d = getattr(_local, "unzstd", None)
        if d is None:
            d = _local.unzstd = _zstd.ZstdDecompressor()
        return d.decompress(stored, max_output_size=raw_length)
    raise ValueError(f"unknown codec {codec}")


def _valid_codec_byte(code):
    return (code & ~CODEC_ENCRYPTED) in CODEC_NAMES


class _Cipher:
    """AES-256-GCM of one store's key. `cryptography` is imported here only, so stores
    without a key never need it."""

    def __init__(self, key):
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            raise EncryptionUnavailable(
                "the deduplication pool is encrypted, and the cryptography module is not "
                "installed on this host",
                hint="Install it on the storage host (pip install cryptography, or the "
                     "distribution's python3-cryptography package).") from None
        self._aead = AESGCM(key)
        self._invalid_tag = InvalidTag

    def seal(self, fp, codec_byte, data):
        nonce = os.urandom(NONCE_SIZE)
        return nonce + self._aead.encrypt(nonce, data, fp + bytes((codec_byte,)))

    def open(self, fp, codec_byte, stored):
        if len(stored) < NONCE_SIZE + 16:
            raise ValueError("the encrypted record is shorter than its nonce and tag")
        view = memoryview(stored)
        try:
            return self._aead.decrypt(view[:NONCE_SIZE], view[NONCE_SIZE:],
                                      fp + bytes((codec_byte,)))
        except self._invalid_tag:
            raise ValueError("decryption failed: the record was altered or written with "
                             "another key") from None


def _decode_record(header, stored, where, encrypted=False, cipher=None, check_fingerprint=True):
    """Checks one record; returns (fingerprint, data) or raises ValueError naming the fault.
    For an encrypted store opened without its key (cipher None) only the crc32 can be
    checked, and data is None."""
    magic, fp, codec_byte, raw_length, stored_length, crc = header
    if _crc32(stored) != crc:
        raise ValueError("crc32 of the stored bytes does not match")
    codec = codec_byte & ~CODEC_ENCRYPTED
    if codec_byte & CODEC_ENCRYPTED:
        if not encrypted:
            raise ValueError("the record is encrypted, but the store is not")
        if cipher is None:
            return fp, None
        stored = cipher.open(fp, codec_byte, stored)
    elif encrypted:
        # an encrypted store holds no plaintext record: one here was put there by someone else
        raise ValueError("the record is not encrypted, but the store is")
    try:
        data = _decompress(codec, stored, raw_length, where)
    except (CodecUnavailable, ValueError):
        raise
    except Exception as e:  # zlib.error, zstd.ZstdError: the bytes do not decode
        raise ValueError(f"stored bytes do not decode ({CODEC_NAMES.get(codec, codec)}): {e}")
    if len(data) != raw_length:
        raise ValueError(f"decoded length {len(data)} differs from the recorded {raw_length}")
    if check_fingerprint and hashlib.sha256(data).digest() != fp:
        raise ValueError("sha256 of the data differs from its fingerprint")
    return fp, data
