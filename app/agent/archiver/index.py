"""The file index a backup image carries: a row per entry (app/formats/entry.py) queued once
its member is written, sent to the master in batches once `out` has accepted the member and
its checksum is known, spooled to a temporary file, and written at the end as the
`.cairn/index.jsonl` member before the end-of-archive marker, after the `.cairn/summary.json`
member that says what the backup found (app/formats/imagemeta.py)."""

import json
import os
import time
from operator import itemgetter

from app.agent.archiver.common import ROW_BATCH
from app.errors import StorageError
from app.formats import entry, imagemeta, owners, tarfmt

_UID = itemgetter(entry.UID)
_GID = itemgetter(entry.GID)


def _row_encoder():
    """row -> its JSON text, compact and ASCII, as json.dumps(row, separators=(",", ":"))
    writes it: through the C encoder made once, since json.dumps makes one per call, which
    was most of the cost of a row (a backup of many unchanged files writes little else)."""
    try:
        from json.encoder import c_make_encoder, encode_basestring_ascii
        if c_make_encoder is None:
            raise ImportError
        encode = c_make_encoder(None, None, encode_basestring_ascii, None, ":", ",", False,
                                False, True)
    except ImportError:  # a Python without the C accelerator
        return lambda row: json.dumps(row, separators=(",", ":"))
    return lambda row: "".join(encode(row, 0))


_encode_row = _row_encoder()


class IndexRows:
    """Part of a backup (app/agent/archiver/backup.py): its rows and the index member."""

    def add_row(self, row):
        self.pending.append((self.out.pos, row))

    def emit_rows(self, final=False):
        """Send the rows whose members `out` has accepted and whose checksum is known. An
        unchanged entry's short row is queued as its JSON text already (members.py), with its
        owner counted."""
        pending = self.pending
        written = self.out.written
        while pending:
            batch = []
            while pending and len(batch) < ROW_BATCH:
                end, row = pending[0]
                if not final and (end > written or (row.__class__ is not str
                                                    and row[entry.CHECKSUM] is None)):
                    break
                pending.popleft()
                batch.append(row)
            if not batch:
                break
            rows = [r for r in batch if r.__class__ is not str]
            # every row's ids: their names are looked up at the end
            self.owner_uids.update(map(_UID, rows))
            self.owner_gids.update(map(_GID, rows))
            if len(rows) == len(batch):
                texts = list(map(_encode_row, batch))
            else:
                texts = [r if r.__class__ is str else _encode_row(r) for r in batch]
            self.spool.write(("\n".join(texts) + "\n").encode("ascii"))
            self.rows_sent += len(batch)
            if self.emit_encoded is not None:
                self.emit_encoded("rows", '{"rows":[%s]}' % ",".join(texts))
            elif len(rows) == len(batch):
                self.emit("rows", {"rows": batch})
            else:
                self.emit("rows", {"rows": [json.loads(t) if r.__class__ is str else r
                                            for t, r in zip(texts, batch)]})
            if len(batch) < ROW_BATCH:
                break
        self.last_rows = time.monotonic()

    def summary(self):
        """The backup's counters, as the summary member and the backup's result hold them."""
        return {"files": self.files, "dirs": self.dirs, "bytes": self.bytes,
                "warnings": self.warnings, "unchanged": self.unchanged,
                "unchanged_bytes": self.unchanged_bytes, "reused": self.reused,
                "reused_bytes": self.reused_bytes}

    def owner_names(self):
        """The client's names of the owners and groups of every entry (app/formats/owners.py),
        looked up once the rows are all known."""
        if self.owner_table is None:
            self.owner_table = owners.record(self.owner_uids, self.owner_gids, self.uname,
                                             self.gname)
        return self.owner_table

    def put_summary(self, start_ns, extra):
        """The `.cairn/summary.json` member: the counters, the owner names and `extra` (the
        snapshots read from, how the file list was made), so that the image can be recorded
        again from the pool alone."""
        data = json.dumps(dict(extra or {}, owners=self.owner_names(), **self.summary()),
                          indent=1, sort_keys=True).encode("utf-8") + b"\n"
        out = self.out
        # the summary changes at every backup: it begins a chunk of its own (with the index
        # member's header), in a pool that has chunks
        out.cut()
        out.put(tarfmt.member_header(imagemeta.SUMMARY_NAME, tarfmt.REGTYPE, 0o644, 0, 0,
                                     len(data), start_ns - start_ns % 1000000000,
                                     uname=b"root", gname=b"root"))
        out.put(data)
        out.zeros(tarfmt.padding(len(data)))

    def finish_image(self, start_ns, summary_extra=None):
        out = self.out
        self.put_summary(start_ns, summary_extra)
        spool = self.spool
        spool.flush()
        length = spool.seek(0, os.SEEK_END)
        spool.seek(0)
        index_offset = out.pos
        out.put(tarfmt.member_header(imagemeta.INDEX_NAME, tarfmt.REGTYPE, 0o644, 0, 0,
                                     length, start_ns - start_ns % 1000000000,
                                     uname=b"root", gname=b"root"))
        # the rows start a chunk (the header before them holds this backup's time): an
        # unchanged backup's rows are the last one's, and are stored once
        out.cut()
        remaining = length
        while remaining > 0:
            space = out.space()
            n = spool.readinto(space[:min(len(space), remaining)])
            if not n:
                raise StorageError("the spooled file index could not be read back")
            out.fill += n
            out.pos += n
            remaining -= n
        out.zeros(tarfmt.padding(length))
        out.put(tarfmt.EOF_MARKER)
        out.flush()
        if self.nodump:
            self.log("%d file(s) and director(ies) marked nodump were left out, with "
                     "everything below them (the policy skips what is marked nodump)"
                     % self.nodump)
        if not self.totals_sent:
            self.totals_sent = True
            result = self.totals.result if self.totals is not None else None
            self.emit("totals", dict(result) if result else {"files": self.files,
                                                              "bytes": self.bytes})
        self.emit("progress", {"files": self.files, "bytes": self.bytes, "path": ""})
        return dict(self.summary(), owners=self.owner_names(), image_bytes=out.pos,
                    index_offset=index_offset, index_length=out.pos - 1024 - index_offset)
