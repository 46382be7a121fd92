"""Incremental backups on the master's side: which image a differential or cumulative backup
compares with, the state of that image for the client's agent, and the completion of the rows
of entries the agent found unchanged.

Every image lists the whole tree as of its backup. An entry an incremental did not send again
keeps the location of its member in the image that holds the data (a "source"), so browsing
or restoring any image shows exactly its point in time, and an entry deleted since the
previous backup is simply not listed.

A full backup into a deduplication pool uses the newest image as a files cache: the agent
gets its state and where each file's member lies (references), and an unchanged file is taken
from that image's chunks instead of being read. The new image is a complete full all the same
(its recipe lists the chunks itself), so it does not depend on the image it used."""

import base64
import hashlib
import json
import struct
from operator import itemgetter

from app.catalog_index import IndexCorrupt, IndexReader, rebuild_hint
from app.catalog_index.block import _decode_block
from app.formats import entry as E
from app.formats.protocol import Base64Text
from app.formats.changes import (DIGEST_SIZE, STATE_FIELDS, ReferenceEncoder, StateEncoder,
                                 state_digest)

LEVELS = ("full", "differential", "cumulative")
MAX_SOURCES = 0xFFFF  # the index's source column is u16
CTIME_NS = 11  # the agent's row: the 11 fields of app/formats/entry.py, then ctime_ns and inode
SOURCE = 13    # a completed row's source column: 0 the image itself, k its k-th source


def choose_base(db, *, client, policy, pool, level, stream=None):
    """The image an incremental compares with, or (None, why a full is taken instead).
    Differential: the newest image of any level; cumulative: the newest full. Only images in
    the same disk pool (a restore reads one storage server) and of the same stream, and none
    an expire job is removing. Call it in the transaction that holds the image chosen
    (app/jobs/holds.py)."""
    sql = ("SELECT * FROM images WHERE client=? AND policy=? AND pool=? "
           "AND coalesce(stream, '')=? AND expiring IS NULL")
    args = [client, policy, pool, stream or ""]
    if level == "cumulative":
        sql += " AND schedule_type='full'"
    row = db.one(sql + " ORDER BY created DESC, id DESC LIMIT 1", args)
    if row is None:
        what = "full backup" if level == "cumulative" else "backup"
        return None, (f"no earlier {what} of {client} under policy {policy} in disk pool "
                      f"{pool}")
    return dict(row), None


def scan_started(base):
    """When the base image's scan started on the client (epoch seconds, the client's clock),
    or None for images that did not record it."""
    try:
        scan = base.get("scan")
        if isinstance(scan, str):
            scan = json.loads(scan)
        return float(scan["started"]) if scan and scan.get("started") else None
    except (ValueError, TypeError, KeyError):
        return None


def open_base_index(master, base):
    """The base image's catalog index, open for the whole backup."""
    path = master.home.index_path(base["id"])
    try:
        return IndexReader(path)
    except FileNotFoundError:
        raise ValueError(f"{path} is missing") from None


# The appendix of an image's catalog index that holds its state (NextState): this, the count
# of entries that are not directories and the length of the compressed state (u64 each), the
# compressed state, then the compressed references of a files cache (ReferenceEncoder).
STATE_APPENDIX = b"CAIRNST2"
_COUNTS = struct.Struct("<QQ")
_NO_REFERENCE = (0, 0, 0, "")


class NextState:
    """The state the next backup based on an image compares with, and a files cache's
    references into it, kept in the appendix of the image's catalog index
    (app/catalog_index/layout.py). The index writer hands it each directory's rows as it
    writes their block, during the backup, while the agent walks: the next backup then reads
    them instead of working them out from the whole index before its agent can start (about
    1.8 s for 1,000,000 files). The references are kept as if every source image is there;
    a backup that finds one missing works them out again."""

    def __init__(self):
        self._state = StateEncoder()
        self._refs = ReferenceEncoder()
        self._count = 0

    def block(self, key, names, rows, block, n):
        """names: the rows' names (bytes), in the rows' order; block: what the index holds
        of them, n entries (sorted, one per name)."""
        if len(names) == n and min(map(len, rows)) > CTIME_NS + 1:
            g = itemgetter
            digests = _digests(names, *(map(g(i), rows) for i in (
                E.KIND, E.MODE, E.UID, E.GID, E.SIZE, E.MTIME_NS, CTIME_NS, CTIME_NS + 1,
                E.LINK)))
            refs = _references(*(map(g(i), rows) for i in (E.KIND, E.OFFSET, E.LENGTH,
                                                             E.CHECKSUM)),
                               (r[SOURCE] if len(r) > SOURCE else 0 for r in rows))
        else:  # a name twice in the run, or rows without change time and inode
            cols = _decode_block(block, n, repr(key), "the index being written")
            digests = _digests([c.encode("utf-8", "surrogateescape") for c in cols[0]],
                               *(cols[i] for i in (1, 2, 3, 4, 5, 6, 11, 12, 10)))
            refs = _references(*(cols[i] for i in (1, 7, 8, 9, 13)))
        self._count += len(digests)
        self._state.add(key, digests)
        self._refs.add(key, refs)

    def finish(self):
        state = self._state.compressed()
        return (STATE_APPENDIX + _COUNTS.pack(self._count, len(state)) + state
                + self._refs.compressed())


def _kept(index):
    """(state text, references text, entries) an index's appendix keeps, or None."""
    kept = index.appendix()
    if kept is None or kept[:len(STATE_APPENDIX)] != STATE_APPENDIX:
        return None
    at = len(STATE_APPENDIX) + _COUNTS.size
    count, n = _COUNTS.unpack_from(kept, len(STATE_APPENDIX))
    return (_text(kept[at:at + n]), _text(kept[at + n:]), count)


def _text(compressed):
    """A state's or references' text for the agent (see app/formats/changes.py)."""
    return Base64Text(base64.b64encode(compressed).decode("ascii"))


def previous_state(index):
    """(state text for the agent, entries that are not directories) of an image's index:
    the one its backup kept (NextState), else worked out from the index."""
    kept = _kept(index)
    if kept is not None:
        return kept[0], kept[2]
    state, _, count = _state(index, None)
    return state, count


def _references(kinds, offsets, lengths, checksums, sources, usable=None):
    """A files cache's references of a directory's entries that are not directories, in the
    state's order; usable: the source numbers whose images can be read (None: all)."""
    kind_dir, kind_file = E.KIND_DIR, E.KIND_FILE
    return [(src, offset, length, checksum)
            if kind == kind_file and offset >= 0 and length > 0 and checksum
            and (usable is None or src in usable) else _NO_REFERENCE
            for kind, offset, length, checksum, src in zip(kinds, offsets, lengths, checksums,
                                                           sources)
            if kind != kind_dir]


def _digests(names, kinds, modes, uids, gids, sizes, mtimes, ctimes, inodes, links):
    """[(name bytes, state digest)] of a directory's entries that are not directories, from
    its columns."""
    # Every entry of an image passes here once: a regular file's digest is file_digest's,
    # inline.
    kind_dir, kind_file = E.KIND_DIR, E.KIND_FILE
    blake2b, pack, file_suffix = hashlib.blake2b, STATE_FIELDS.pack, kind_file.encode()
    out = []
    for name, kind, mode, uid, gid, size, mtime_ns, ctime_ns, ino, link in zip(
            names, kinds, modes, uids, gids, sizes, mtimes, ctimes, inodes, links):
        if kind == kind_dir:
            continue
        if kind == kind_file:
            try:
                digest = blake2b(pack(mode, uid, gid, size, mtime_ns, ctime_ns, ino)
                                 + file_suffix, digest_size=DIGEST_SIZE).digest()
            except struct.error:
                digest = state_digest(kind, mode, uid, gid, size, mtime_ns, ctime_ns, ino,
                                      link)
        else:
            digest = state_digest(kind, mode, uid, gid, size, mtime_ns, ctime_ns, ino, link)
        out.append((name, digest))
    return out


def _entry_digests(entries):
    """_digests of a directory's entries as the index reader gives them (Entry tuples)."""
    if not entries:
        return []
    cols = list(zip(*entries))
    return _digests([n.encode("utf-8", "surrogateescape") for n in cols[1]],
                    *(cols[i] for i in (2, 3, 4, 5, 6, 7, 12, 13, 11)))


def _state(index, usable_sources):
    """(state, references or None, entries). usable_sources: for a files cache, the set of
    source numbers (0: the image itself) whose images the storage side can read."""
    state = StateEncoder()
    refs = ReferenceEncoder() if usable_sources is not None else None
    count = 0
    for key, entries in index.directories():
        digests = _entry_digests(entries)
        count += len(digests)
        state.add(key, digests)
        if refs is not None and entries:
            cols = list(zip(*entries))
            refs.add(key, _references(*(cols[i] for i in (2, 8, 9, 10, 14)),
                                      usable=usable_sources))
    return (_text(state.compressed()), _text(refs.compressed()) if refs is not None else None,
            count)


def reads_of(base):
    """The images a backup reads from when it uses `base`: the image and its sources."""
    sources = base.get("sources") or []
    sources = json.loads(sources) if isinstance(sources, str) else sources
    return [base["id"], *sources]


def cache_state(index, usable, sources):
    """(state, references, entries) of a files cache on an image with `sources` source
    images, of which those numbered in `usable` can be read (0: the image itself): the ones
    its backup kept when all of them can, else worked out from the index."""
    kept = _kept(index) if len(usable) == sources + 1 else None
    return kept if kept is not None else _state(index, usable)


def files_cache(master, base, *, checksum):
    """For a full backup into a deduplication pool: {"base", "state", "references", "paths",
    "entries"} of the image to take unchanged files from (the newest, chosen and held by the
    caller with choose_base), or (None, why not)."""
    if base["checksum"] != checksum:
        return None, (f"image {base['id']} has {base['checksum']} file checksums, this backup "
                      f"makes {checksum}")
    sources = base.get("sources") or []
    sources = json.loads(sources) if isinstance(sources, str) else sources
    paths = [base["path"]]
    usable = {0}
    for k, image_id in enumerate(sources, 1):
        row = master.db.one("SELECT path FROM images WHERE id=?", (image_id,))
        paths.append(row["path"] if row else None)
        if row:
            usable.add(k)
    try:
        index = open_base_index(master, base)
    except ValueError as e:
        return None, (f"the index of image {base['id']} cannot be read ({e}); "
                      + rebuild_hint(base["id"]))
    try:
        state, refs, count = cache_state(index, usable, len(sources))
    except (IndexCorrupt, ValueError) as e:
        return None, (f"the index of image {base['id']} cannot be read ({e}); "
                      + rebuild_hint(base["id"]))
    finally:
        index.close()
    # A missing source image cannot be read: its files are read again instead.
    return {"base": base, "state": state, "references": refs, "entries": count,
            "paths": [p or "" for p in paths]}, None


class Completer:
    """Fills in the rows of unchanged entries (offset -1) from the base image's index and
    gives every row its source column; counts what was new, changed and deleted."""

    def __init__(self, base, base_index: IndexReader, base_entries: int):
        self.base = base
        self.index = base_index
        sources = base.get("sources") or []
        self.base_sources = json.loads(sources) if isinstance(sources, str) else sources
        self.sources = []          # this image's sources, in order (source k = sources[k-1])
        self._src_of = {}
        self._holders = {}         # base entry's source number -> this image's
        self._dir = None
        self._listing = {}
        self.base_entries = base_entries
        self.seen_in_base = 0
        self.unchanged = 0
        self.new = 0

    def _source(self, image_id):
        k = self._src_of.get(image_id)
        if k is None:
            if len(self.sources) >= MAX_SOURCES:
                raise ValueError("too many images in one incremental chain")
            self.sources.append(image_id)
            k = self._src_of[image_id] = len(self.sources)
        return k

    def _base_entry(self, path):
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        if parent != self._dir:
            self._dir = parent
            try:
                self._listing = {e.name: e for e in self.index.list_dir(parent)}
            except KeyError:
                self._listing = {}
        return self._listing.get(name)

    def _holder(self, src):
        """This image's source number of the image holding a base entry's member."""
        k = self._holders.get(src)
        if k is None:
            holder = self.base["id"] if src == 0 else self.base_sources[src - 1]
            k = self._holders[src] = self._source(holder)
        return k

    def _not_held(self, row):
        return IndexCorrupt(self.index.path,
                            f"{row[E.PATH]} was reported unchanged but the index of image "
                            f"{self.base['id']} does not hold it as it is")

    def complete(self, rows):
        kind_dir, short, unchanged = E.KIND_DIR, E.SHORT_ROW, E.UNCHANGED
        for row in rows:
            if len(row) == short:
                # an unchanged entry's short row: every field is the base's
                path = row[E.PATH]
                e = self._base_entry(path) if type(path) is str else None
                if e is None or e.kind == kind_dir or row[1] != unchanged:
                    raise self._not_held(row)
                self.seen_in_base += 1
                self.unchanged += 1
                row[1:] = e[2:14]  # kind ... inode (app/catalog_index/reader.py Entry)
                row.append(self._holder(e.src))
                continue
            if len(row) < 13:
                row.extend([0] * (13 - len(row)))
            if row[E.KIND] == kind_dir:
                row.append(0)
                continue
            e = self._base_entry(row[E.PATH])
            if e is not None and e.kind != kind_dir:
                self.seen_in_base += 1
            if row[E.OFFSET] != -1:
                if e is None:
                    self.new += 1
                row.append(0)
                continue
            if e is None or e.kind != row[E.KIND] or e.size != row[E.SIZE]:
                raise self._not_held(row)
            # A file list from the policy engine gives times in microseconds: keep the
            # exact ones the base recorded.
            for col, exact in ((E.MTIME_NS, e.mtime_ns), (CTIME_NS, e.ctime_ns)):
                v = row[col]
                if v != exact and v % 1000 == 0 and v == exact - exact % 1000:
                    row[col] = exact
            row[E.OFFSET] = e.offset
            row[E.LENGTH] = e.length
            row[E.CHECKSUM] = e.checksum
            row.append(self._holder(e.src))
            self.unchanged += 1
        return rows

    @property
    def deleted(self):
        return max(0, self.base_entries - self.seen_in_base)
