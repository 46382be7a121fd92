"""What an incremental backup compares with: the state of every entry of the image it builds
on, as a short digest per path, shipped from the master to the client's agent.

An entry is unchanged when its kind, permission bits, owner, group, size, modification time,
change time, inode and link target are all the same. The change time catches what a
modification time set back by a tool would hide (chmod, chown, rename and link count all
change it); the inode catches a file replaced by another one of the same size and times.

The state travels as one zlib-compressed byte string (base64 in the request), one record per
directory:

    u32 directory path length, u32 entries, u32 name heap length,
    directory path (raw bytes), names joined by NUL (raw bytes), 8-byte digest per entry

The agent keeps the records as they are and splits one only when the walk enters that
directory, so a tree of millions of entries costs no Python work per entry up front.

A full backup into a deduplication pool uses the same state as a files cache, with a second
text of the same shape (references): per entry where its member lies in the base image's
stream, u16 source (0: the base image, k: the base's k-th source image), u64 offset, u64
length (0: nothing to refer to), and in the heap the entries' file checksums joined by NUL.
An unchanged regular file is then sent as a reference to that member, not read again.

Standard library only: this runs on client hosts. The master compresses with ISA-L where it
has it (isal, the same zlib format, a quarter of the time).
"""

import base64
import hashlib
import os
import struct
import zlib

_deflate = None

_HEAD = struct.Struct("<III")
DIGEST_SIZE = 8
_REF = struct.Struct("<HQQ")


# The fields of a state, packed: permission bits, owner, group, size, modification and
# change times, inode. Packing them costs half of formatting them as text, once per entry
# of every incremental and files cache, on the master and on the client.
STATE_FIELDS = struct.Struct("<QQQQqqQ")
_FILE = b"f"


def state_digest(kind, mode, uid, gid, size, mtime_ns, ctime_ns, ino, link):
    """The 8-byte digest of one entry's state. `link` is bytes or str (surrogate escapes)."""
    if isinstance(link, str):
        link = os.fsencode(link)
    try:
        fields = STATE_FIELDS.pack(mode, uid, gid, size, mtime_ns, ctime_ns, ino)
    except struct.error:
        # a value out of range (a time set centuries away): its text stands in
        fields = b"%d %d %d %d %d %d %d " % (mode, uid, gid, size, mtime_ns, ctime_ns, ino)
    return hashlib.blake2b(fields + kind.encode("ascii") + link,
                           digest_size=DIGEST_SIZE).digest()


def file_digest(mode, uid, gid, size, mtime_ns, ctime_ns, ino):
    """state_digest of a regular file (kind "f", no link): the walk's most frequent entry."""
    try:
        fields = STATE_FIELDS.pack(mode, uid, gid, size, mtime_ns, ctime_ns, ino)
    except struct.error:
        return state_digest(_FILE.decode(), mode, uid, gid, size, mtime_ns, ctime_ns, ino, b"")
    return hashlib.blake2b(fields + _FILE, digest_size=DIGEST_SIZE).digest()


def _deflater():
    """ISA-L's zlib where it is installed (the master), else zlib: the same format in a
    quarter of the time, and read by zlib on any host."""
    global _deflate
    if _deflate is None:
        try:
            # here, not at the top: agents only decode, and need not load it
            from isal import isal_zlib as found
        except ImportError:
            found = zlib
        _deflate = found
    return _deflate


class StateEncoder:
    """Builds a state text directory by directory: add(path, [(name bytes, digest), ...])."""

    def __init__(self):
        self._comp = _deflater().compressobj(1)
        self._parts = []

    def _record(self, path, n, heap, fixed):
        self._parts.append(self._comp.compress(_HEAD.pack(len(path), n, len(heap)) + path
                                               + heap + fixed))

    def add(self, path, entries):
        if entries:
            self._record(path, len(entries), b"\0".join(n for n, _ in entries),
                         b"".join(d for _, d in entries))

    def compressed(self):
        """The state as its compressed bytes (text() is their base64)."""
        self._parts.append(self._comp.flush())
        return b"".join(self._parts)

    def text(self):
        return base64.b64encode(self.compressed()).decode("ascii")


class ReferenceEncoder(StateEncoder):
    """Builds a files cache's references: add(path, [(source, offset, length, checksum str),
    ...]) with the entries in the order the state got them."""

    def add(self, path, refs):
        if refs:
            self._record(path, len(refs), b"\0".join(c.encode("ascii") for _, _, _, c in refs),
                         b"".join(_REF.pack(s, o, n) for s, o, n, _ in refs))


def encode_state(directories):
    """directories: iterable of (directory path bytes, [(name bytes, digest), ...]).
    Returns the base64 text of the compressed state."""
    enc = StateEncoder()
    for path, entries in directories:
        enc.add(path, entries)
    return enc.text()


def _records(text, item_size, what):
    """{directory path: (heap position, entries, heap length)} and the raw bytes."""
    try:
        raw = zlib.decompress(base64.b64decode(text))
    except (ValueError, zlib.error) as e:
        raise ValueError("the previous backup's %s is damaged: %s" % (what, e))
    dirs = {}
    pos, end = 0, len(raw)
    mv = memoryview(raw)
    while pos < end:
        if pos + _HEAD.size > end:
            raise ValueError("the previous backup's %s is truncated" % what)
        plen, n, hlen = _HEAD.unpack_from(raw, pos)
        pos += _HEAD.size
        stop = pos + plen + hlen + item_size * n
        if stop > end:
            raise ValueError("the previous backup's %s is truncated" % what)
        dirs[bytes(mv[pos:pos + plen])] = (pos + plen, n, hlen)
        pos = stop
    return dirs, raw


class PreviousState:
    """The decoded state: for each directory the digests of its entries by name, and with
    references (a files cache) where each entry's member lies in the base image."""

    def __init__(self, text, references=None):
        self._dirs, self._raw = _records(text, DIGEST_SIZE, "state")
        self.entries = sum(n for _, n, _ in self._dirs.values())
        self._refs = None
        if references:
            self._refs, self._refs_raw = _records(references, _REF.size, "files cache")

    @property
    def has_references(self):
        return self._refs is not None

    def references(self, path):
        """[(source, offset, length, checksum str)] of one directory's entries in state
        order, or None."""
        where = self._refs.get(path) if self._refs is not None else None
        if where is None:
            return None
        pos, n, hlen = where
        raw = self._refs_raw
        sums = raw[pos:pos + hlen].split(b"\0")
        if len(sums) != n:
            raise ValueError("the previous backup's files cache is damaged")
        return [(s, o, ln, c.decode("ascii"))
                for (s, o, ln), c in zip(_REF.iter_unpack(raw[pos + hlen:pos + hlen
                                                              + _REF.size * n]), sums)]

    def directory_with_references(self, path):
        """{name bytes: (digest, reference or None)} of one directory, or None."""
        names = self.directory(path)
        if names is None:
            return None
        refs = self.references(path)
        if refs is None or len(refs) != len(names):
            return {k: (d, None) for k, d in names.items()}
        return {k: (d, r if r[2] else None) for (k, d), r in zip(names.items(), refs)}

    def directory(self, path):
        """{name bytes: digest} of one directory (path bytes), or None if it had no entries."""
        where = self._dirs.get(path)
        if where is None:
            return None
        pos, n, hlen = where
        raw = self._raw
        names = raw[pos:pos + hlen].split(b"\0")
        d = pos + hlen
        if len(names) != n:
            raise ValueError("the previous backup's state is damaged")
        return dict(zip(names, (raw[i:i + DIGEST_SIZE]
                                for i in range(d, d + DIGEST_SIZE * n, DIGEST_SIZE))))
