"""One backup: the state of a backup as it runs, its events, and backup_to, the data mover's
entry point."""

import os
import tempfile
import time
from collections import deque

from app.agent.archiver.common import CHUNK, NBUF, PROGRESS_EVERY, ROW_SEND
from app.agent.archiver.filedata import FileData
from app.agent.archiver.index import IndexRows
from app.agent.archiver.members import Members
from app.agent.archiver.metadata import Metadata
from app.agent.archiver.output import Output
from app.agent.archiver.totals import Counted, Totals
from app.agent.archiver.walk import NamePatterns, Walk
from app.errors import Canceled, ValidationError
from app.formats import imagemeta, tarfmt
from app.formats.changes import PreviousState

ROWS_EVERY = 1.0


class _Backup(Walk, Members, FileData, Metadata, IndexRows):
    """The state of one backup. Its parts are mixins, one module each, so that the per-file
    and per-byte paths call each other's methods directly on self, as one class would, with
    no layer of delegation in between."""

    def __init__(self, out, emit, is_cancelled, checksum, excludes=None, previous=None,
                 read_from=None, listing=None, unchanged_before_ns=None, references=None,
                 skip_nodump=False, exclude_names=None, emit_encoded=None):
        self.checksum = checksum
        # Leave out what is marked nodump (chattr +d), as dump does.
        self.skip_nodump = skip_nodump
        self.nodump = 0
        # Selections read from elsewhere (a snapshot) but recorded under their own paths:
        # [(selection bytes, directory read instead)], longest first.
        self.read_from = sorted(((os.fsencode(k), os.fsencode(v))
                                 for k, v in (read_from or {}).items()),
                                key=lambda kv: -len(kv[0]))
        # A file list made beforehand (the Storage Scale policy engine, app/agent/filelist.py):
        # directories it covers are not read again, and in an incremental a file it shows
        # unchanged since the previous backup's scan (change time) is not looked at again.
        self.listing = listing
        self.unchanged_before_ns = unchanged_before_ns
        # An incremental: entries whose state matches the previous image's are listed, not
        # sent again (see app/formats/changes.py).
        try:
            self.previous = PreviousState(previous, references) if previous else None
        except ValueError as e:
            raise ValidationError(str(e))
        # A full with a files cache: an unchanged regular file becomes a reference to its
        # member in the base image (the sink must take references); other entries are sent.
        self.files_cache = self.previous is not None and self.previous.has_references
        if self.files_cache and not hasattr(out, "reference"):
            raise ValidationError("a files cache needs a deduplication pool as destination")
        self.prev_names = None
        self.unchanged = 0
        self.unchanged_bytes = 0
        self.reused = 0
        self.reused_bytes = 0
        # absolute path (bytes) -> why it is left out
        self.excludes = {os.fsencode(p.rstrip("/") or "/"): why
                         for p, why in (excludes or {}).items()}
        # globs matched against each entry's name (bytes); what they left out is counted
        # and logged once at the end, not per file
        self.exclude_names = NamePatterns(exclude_names)
        self.emit = emit
        # emit with the data as JSON text: row batches, encoded once for index and master
        self.emit_encoded = emit_encoded
        self.is_cancelled = is_cancelled
        # CRC-32 runs inline: handing each MiB to a hash thread costs more than checking it.
        self.worker = tarfmt.HashWorker(NBUF, CHUNK,
                                        threads=0 if checksum == "crc32" else 2)
        self.out = Output(out, self.worker)
        self.spool = tempfile.TemporaryFile(prefix="cairn-index-")
        self.pending = deque()
        self.rows_sent = 0
        self.links = {}
        self.users = {}
        self.groups = {}
        self.owner_uids = set()
        self.owner_gids = set()
        self.owner_table = None
        self.no_xattr_devs = set()
        self.no_flags_devs = set()
        self.files = 0
        self.dirs = 0
        self.bytes = 0
        self.warnings = 0
        self.totals = None
        self.totals_sent = False
        self.last_progress = 0.0
        self.entries_seen = 0
        self.last_rows = time.monotonic()
        self.current = ""

    def real(self, path):
        """Where a path (bytes) of the backup is read from."""
        for sel, src in self.read_from:
            if path == sel:
                return src
            if path.startswith(sel) and path[len(sel):len(sel) + 1] == b"/":
                return src + path[len(sel):]
        return path

    # -- events

    def warn(self, path, message):
        self.warnings += 1
        self.emit("warning", {"path": os.fsdecode(path) if isinstance(path, bytes) else path,
                              "message": message})

    def log(self, message):
        self.emit("log", {"message": message})

    def tick(self):
        """Between entries: cancel check, throttled progress, totals and row batches."""
        if self.is_cancelled():
            raise Canceled()
        if len(self.pending) >= ROW_SEND:
            self.emit_rows()
            if len(self.pending) >= ROW_SEND and (self.out.fill or self.out.ref is not None):
                # Rows held back only by members still in the buffer, or by the reference
                # not passed on yet: an incremental writes little, and a full from a files
                # cache may be one reference to the whole base image, so the master would
                # index every row only once the walk had ended instead of beside it.
                self.out.flush()
                self.emit_rows()
        now = time.monotonic()
        if now - self.last_progress >= PROGRESS_EVERY:
            self.progress(now, extra=0)
            if self.pending and now - self.last_rows >= ROWS_EVERY:
                self.emit_rows()

    def progress(self, now, extra):
        """Progress, also from inside a large file (extra: its bytes copied so far)."""
        self.last_progress = now
        if not self.totals_sent and self.totals is not None and self.totals.result:
            self.totals_sent = True
            self.emit("totals", dict(self.totals.result))
        self.emit("progress", {"files": self.files, "bytes": self.bytes + extra,
                               "path": self.current})

    # -- the backup

    def run(self, selections, image_meta, summary_extra=None):
        roots = self.selected_roots(selections)
        if self.files_cache:
            self.log("files cache: the previous backup's %d entries are known; unchanged "
                     "files are taken from its image, not read again" % self.previous.entries)
        if (self.previous is None or self.files_cache) and self.listing is not None:
            self.totals = Counted(self.listing.totals())
        elif self.previous is None or self.files_cache:
            self.totals = Totals([self.real(r) for r in roots], self.excludes,
                                 self.exclude_names)
            self.totals.start()
        else:
            # What an incremental will send is known only at its end: no percentage.
            self.log("compared with the previous backup's %d entries: only new and changed "
                     "entries are sent" % self.previous.entries)
        meta = imagemeta.meta_text(image_meta)
        now_ns = time.time_ns()
        self.out.put(tarfmt.member_header(imagemeta.META_NAME, tarfmt.REGTYPE, 0o644, 0, 0,
                                          len(meta), now_ns - now_ns % 1000000000,
                                          uname=b"root", gname=b"root"))
        self.out.put(meta)
        self.out.zeros(tarfmt.padding(len(meta)))
        # the first member names this image: a chunk of its own, in a pool that has chunks,
        # so that what follows is cut as in the last image
        self.out.cut()

        self.walk(roots)
        if self.exclude_names.left_out:
            self.log("%d entries not backed up: their names match the excludes %s"
                     % (self.exclude_names.left_out, ", ".join(self.exclude_names.texts)))

        self.out.flush()
        self.worker.wait()
        self.emit_rows(final=True)
        # every row is sent: the master closes the image's index while the rest of the image
        # (its summary and index members) is written and made durable
        self.emit("rows_end", {"rows": self.rows_sent})
        return self.finish_image(now_ns, summary_extra)

    def close(self):
        if self.totals is not None:
            self.totals.stop = True
        try:
            self.worker.close()
        finally:
            self.spool.close()


def backup_to(out, selections, *, emit, is_cancelled, image_meta,
              checksum=tarfmt.DEFAULT_CHECKSUM, excludes=None, previous=None,
              read_from=None, listing=None, unchanged_before_ns=None, references=None,
              skip_nodump=False, summary_extra=None, exclude_names=None, emit_encoded=None):
    """Write one image of `selections` (absolute paths, str; surrogate escapes allowed) to
    `out`, which needs only write(buf) that consumes all of buf before returning (the buffer
    is reused afterwards).

    Events via emit(event, payload): "totals" once, "progress" a few times a second, "rows"
    in batches of at most 5000 (each row after its member was written), "rows_end" once
    every row is sent ({"rows": how many}), "warning", "log".
    emit_encoded(event, data as JSON text), when given, sends the row batches instead.
    Problems with single files are warnings; no selection existing raises NothingToBackup;
    a failing `out` raises StorageError; is_cancelled() returning true raises Canceled.

    checksum names the piece algorithm of the file checksums (tarfmt.PIECE_HASHES).
    excludes: {absolute path: reason}; those directories or files and everything below them
    are left out (logged once each). exclude_names: globs (fnmatch, case-sensitive) on
    entry names; a matching file or directory (with all below it) is left out.

    previous: the state of the image an incremental compares with (app/formats/changes.py);
    unchanged entries get rows with offset -1 and no member.
    references: with previous, a files cache for a full (app/formats/changes.py): an unchanged
    regular file is passed to out.reference(source, offset, length) instead of being read,
    and gets a row of this image as usual.

    skip_nodump: leave out files and directories marked nodump (chattr +d), as dump does.
    Every file's and directory's inode flags (append-only, immutable, ...) are kept in its
    member (app/formats/fflags.py).

    read_from: {selection: directory}: read that selection from the directory (a snapshot)
    while recording its own paths.
    listing: a file list made beforehand (app/agent/filelist.py) that replaces reading the
    directories it covers; with previous and unchanged_before_ns, a single-link regular file
    it shows with a change time before that is unchanged without being looked at.

    summary_extra: what the `.cairn/summary.json` member holds beside the counters (the
    snapshots read from and how the file list was made; app/formats/imagemeta.py).

    Returns {"files", "dirs", "bytes", "warnings", "image_bytes", "unchanged",
    "unchanged_bytes", "reused", "reused_bytes", "owners", "index_offset", "index_length"};
    owners: the client's names of the entries' owners and groups (app/formats/owners.py); the
    last two locate the `.cairn/index.jsonl` member in the image.
    """
    try:
        tarfmt.piece_hash(checksum)
    except ValueError as e:
        raise ValidationError(str(e))
    b = _Backup(out, emit, is_cancelled, checksum, excludes, previous, read_from, listing,
                unchanged_before_ns, references, skip_nodump, exclude_names, emit_encoded)
    try:
        return b.run(selections, image_meta, summary_extra)
    finally:
        b.close()
