"""Checking an index file whole: every record and block against its CRC, and decoded."""

from __future__ import annotations

import struct
import zlib

from app.catalog_index.block import _decode_block
from app.catalog_index.errors import IndexCorrupt
from app.catalog_index.layout import _HEADER, _fsdecode
from app.catalog_index.reader import IndexReader


def check_index(path, limit: int = 20) -> list:
    """What is wrong with an index file, as sentences; [] when all of it reads back: header,
    trailer, every directory record and every block (checked against their CRCs and
    decoded). Never raises for a damaged, foreign or missing file; stops after `limit`
    problems. Reads the whole file: for `cairn catalog check` and `images rebuild-index`,
    not for browsing."""
    try:
        reader = IndexReader(path)
    except FileNotFoundError:
        return [f"catalog index {path} is missing"]
    except IndexCorrupt as e:
        return [e.reason]
    except OSError as e:
        return [f"catalog index {path} cannot be read: {e.strerror or e}"]
    problems = []
    with reader:
        entries, previous = 0, None
        for i in range(reader._ndirs):
            try:
                key, bo, bl, n, crc = reader._record(i)
                where = repr(_fsdecode(key))
                if previous is not None and key <= previous:
                    raise IndexCorrupt(path, f"directory table is out of order at {where}")
                previous = key
                if bo < _HEADER.size or bo + bl > reader._table_off or n == 0:
                    raise IndexCorrupt(path, f"table record of {where} is out of bounds")
                buf = reader._read(bo, bl)
                if zlib.crc32(buf) != crc:
                    raise IndexCorrupt(path, f"block of {where} checksum mismatch")
                _decode_block(buf, n, where, path, reader._version)
                entries += n
            except IndexCorrupt as e:
                problems.append(e.reason)
            except (ValueError, struct.error, OSError) as e:
                problems.append(f"directory table record {i}: {e}")
            if len(problems) >= limit:
                return problems
        if not problems and entries != reader.count():
            problems.append(f"the blocks hold {entries} entries, the trailer says "
                            f"{reader.count()}")
    return problems
