"""Writing an index: the rows of an image, in image order, into blocks as each directory's
run ends, then the directory table, the key heap and the trailer; moved into place only when
complete."""

from __future__ import annotations

import os
import struct
import zlib
from itertools import repeat
from typing import Iterable

from app.catalog_index.block import _check_row, _decode_block, _encode_block
from app.catalog_index.layout import APPENDIX_MAGIC, FORMAT_VERSION, MAGIC, TRAILER_MAGIC, \
    _APPENDIX_END, _FS_ENC, _FS_ERR, _HEADER, _RECORD, _RECORD_BODY, _ROOT_KEY, _ROOT_ROW_KEY, \
    _TRAILER, _fsdecode, _fsencode
from app.formats import private
from app.formats.durable import sync_dir

_SYNTH_DIR_MODE = 0o755


class IndexWriter:
    """Writes one image's index to `path + ".tmp"` and moves it into place on close(), so an
    interrupted indexing never leaves a partial index under the real name.

    After an error in add_rows() the writer refuses further rows; abort() it (the context
    manager does).

    appendix: an object that sees each directory's block as it is written, block(key, names,
    rows, block, entries) (names and rows as received), and whose finish() returns the bytes to keep in the index's appendix (or None);
    see layout.py."""

    def __init__(self, path: str, appendix=None):
        self.path = os.fspath(path)
        self.tmp_path = self.path + ".tmp"
        parent = os.path.dirname(os.path.abspath(self.path))
        os.close(private.makedirs(parent))
        # private, like the state directory it lives in: it lists every file of a client
        self._f = os.fdopen(private.create(self.tmp_path, os.O_RDWR | os.O_TRUNC), "w+b",
                            buffering=1 << 20)
        self._f.write(_HEADER.pack(MAGIC, FORMAT_VERSION, 0, 0))
        self._pos = _HEADER.size
        # key -> [[offset, length, entries, crc, directory entries, synthesized], ...], one
        # block per run
        self._table: dict[bytes, list] = {}
        self._dirs_seen: set[bytes] = set()
        self._head = None          # raw parent bytes of the current run (b"" for "/")
        self._names: list = []
        self._run: list = []
        self._root_row = None
        self._rows = 0
        self._appendix = appendix
        self._state = "open"       # open | failed | closed | aborted

    # -- rows --------------------------------------------------------------------------------

    def add_rows(self, rows: Iterable[list]) -> None:
        if self._state != "open":
            raise ValueError(f"index writer for {self.path} is {self._state}; "
                             f"it accepts no more rows")
        enc, err = _FS_ENC, _FS_ERR
        head_now, names, run = self._head, self._names, self._run
        row = None
        try:
            for row in rows:
                head, sep, name = row[0].encode(enc, err).rpartition(b"/")
                if head != head_now or not name or not sep:
                    if not sep or (not name and head):
                        raise ValueError(f"row path {row[0]!r} is not a canonical absolute "
                                         f"path")
                    if not name:
                        self._root_row = row
                        self._rows += 1
                        continue
                    if head and (head[:1] != b"/" or head[-1:] == b"/" or b"//" in head):
                        raise ValueError(f"row path {row[0]!r} is not a canonical absolute "
                                         f"path")
                    self._end_run()
                    head_now = self._head = head
                    names = self._names = []
                    run = self._run = []
                names.append(name)
                run.append(row)
        except (AttributeError, TypeError, IndexError, UnicodeEncodeError) as e:
            self._state = "failed"
            raise ValueError(f"cannot index row {row!r:.200}: {e}") from None
        except BaseException:
            self._state = "failed"
            raise

    def _end_run(self):
        run = self._run
        if not run:
            return
        key = self._head or _ROOT_KEY
        try:
            self._write_block(key, self._names, run)
        except (TypeError, ValueError, OverflowError, IndexError) as e:
            reason, culprit = str(e), None
            for row in run:
                why = _check_row(row)
                if why:
                    reason, culprit = why, row
                    break
            where = f" (row {culprit[0]!r})" if culprit is not None and isinstance(
                culprit[0], str) else ""
            raise ValueError(f"cannot index the children of {_fsdecode(key)!r}{where}: "
                             f"{reason}") from None
        self._rows += len(run)
        self._names = []
        self._run = []

    def _write_block(self, key: bytes, names: list, rows: list, synthesized=False):
        block, n, ndirs, dir_names = _encode_block(names, rows)
        if dir_names:
            prefix = key + b"/" if key != _ROOT_KEY else b"/"
            self._dirs_seen.update(prefix + nm for nm in dir_names)
        self._f.write(block)
        if self._appendix is not None and key != _ROOT_ROW_KEY:
            if key in self._table:
                # a directory in several blocks (split runs, or a parent synthesized beside
                # its real children): merged at the end, and no appendix is kept
                self._appendix = None
            elif not synthesized:
                self._appendix.block(key, names, rows, block, n)
        self._table.setdefault(key, []).append(
            [self._pos, len(block), n, zlib.crc32(block), ndirs, synthesized])
        self._pos += len(block)

    # -- finishing ---------------------------------------------------------------------------

    def _add_missing_parents(self):
        """Synthesize rows for directories that have children but no row of their own."""
        missing: dict[bytes, list] = {}
        seen = self._dirs_seen
        for key in list(self._table):
            k = key
            while k != _ROOT_KEY and k not in seen:
                seen.add(k)
                parent, _, name = k.rpartition(b"/")
                missing.setdefault(parent or _ROOT_KEY, []).append(name)
                k = parent or _ROOT_KEY
        for parent, names in missing.items():
            rows = [["", "d", _SYNTH_DIR_MODE, 0, 0, 0, 0, 0, 0, "", "", 0, 0, 0]
                    for _ in names]
            self._write_block(parent, names, rows, synthesized=True)

    def _merge_split_dirs(self):
        split = [k for k, blocks in self._table.items() if len(blocks) > 1]
        if not split:
            return
        self._f.flush()
        fd = self._f.fileno()
        for key in split:
            names, rows = [], []
            # Synthesized parent rows go first so that a real row of the same name wins.
            blocks = sorted(self._table.pop(key), key=lambda b: not b[5])
            for off, length, n, crc, _, _ in blocks:
                buf = os.pread(fd, length, off)
                cols = _decode_block(buf, n, repr(_fsdecode(key)), self.tmp_path)
                names.extend(_fsencode(nm) for nm in cols[0])
                rows.extend(zip(repeat(""), *cols[1:]))
            self._write_block(key, names, rows)

    def _write_appendix(self):
        extra = self._appendix.finish() if self._appendix is not None else None
        if extra is None:
            return
        self._f.write(extra)
        self._f.write(_APPENDIX_END.pack(len(extra), zlib.crc32(extra), APPENDIX_MAGIC))
        self._pos += len(extra) + _APPENDIX_END.size

    def close(self) -> dict:
        """Finish the file and move it into place. Returns {"files": entries, "dirs":
        directory entries, "bytes": file size, "rows": rows received}."""
        if self._state != "open":
            raise ValueError(f"index writer for {self.path} is {self._state}")
        try:
            self._end_run()
            self._add_missing_parents()
            if self._root_row is not None:
                self._write_block(_ROOT_ROW_KEY, [b""], [self._root_row])
            self._merge_split_dirs()
            self._write_appendix()

            keys = sorted(self._table)
            heap_len, records = 0, []
            entries = ndirs = 0
            for key in keys:
                off, length, n, crc, nd, _ = self._table[key][0]
                rec = _RECORD.pack(heap_len, len(key), off, length, n, crc, 0)
                rec = rec[:_RECORD_BODY] + struct.pack(
                    "<I", zlib.crc32(key, zlib.crc32(rec[:_RECORD_BODY])))
                records.append(rec)
                heap_len += len(key)
                entries += n
                ndirs += nd
            table = b"".join(records)
            heap = b"".join(keys)
            table_off = self._pos
            keys_off = table_off + len(table)
            file_size = keys_off + len(heap) + _TRAILER.size
            trailer = _TRAILER.pack(TRAILER_MAGIC, table_off, len(keys), keys_off, len(heap),
                                    entries, self._rows, file_size, 0, 0)
            trailer = trailer[:-4] + struct.pack("<I", zlib.crc32(trailer[:-4]))
            self._f.write(table)
            self._f.write(heap)
            self._f.write(trailer)
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            os.replace(self.tmp_path, self.path)
            _fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except BaseException:
            self._state = "failed"
            self.abort()
            raise
        self._state = "closed"
        self._table = {}
        self._dirs_seen = set()
        return {"files": entries, "dirs": ndirs, "bytes": file_size, "rows": self._rows}

    @property
    def rows_received(self) -> int:
        """The rows add_rows() took so far (the current directory's not yet written)."""
        return self._rows + len(self._run)

    def abort(self) -> None:
        """Drop the unfinished index. Safe to call more than once."""
        if self._state == "closed":
            return
        self._state = "aborted"
        try:
            self._f.close()
        except OSError:
            pass
        try:
            os.unlink(self.tmp_path)
        except FileNotFoundError:
            pass
        self._table = {}
        self._names = self._run = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def _fsync_dir(path: str):
    sync_dir(path, ignore_errors=True)


def build_index(path, rows_iterable) -> dict:
    """Index all rows into `path`; returns what IndexWriter.close() returns."""
    w = IndexWriter(path)
    try:
        w.add_rows(rows_iterable)
    except BaseException:
        w.abort()
        raise
    return w.close()
