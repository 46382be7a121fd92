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

Standard library only: this runs on client hosts.
"""

import base64
import hashlib
import os
import struct
import zlib

_HEAD = struct.Struct("<III")
DIGEST_SIZE = 8


def state_digest(kind, mode, uid, gid, size, mtime_ns, ctime_ns, ino, link):
    """The 8-byte digest of one entry's state. `link` is bytes or str (surrogate escapes)."""
    if isinstance(link, str):
        link = os.fsencode(link)
    return hashlib.blake2b(
        b"%s %d %d %d %d %d %d %d " % (kind.encode("ascii"), mode, uid, gid, size, mtime_ns,
                                       ctime_ns, ino) + link,
        digest_size=DIGEST_SIZE).digest()


def encode_state(directories):
    """directories: iterable of (directory path bytes, [(name bytes, digest), ...]).
    Returns the base64 text of the compressed state."""
    comp = zlib.compressobj(1)
    parts = []
    for path, entries in directories:
        if not entries:
            continue
        heap = b"\0".join(n for n, _ in entries)
        parts.append(comp.compress(_HEAD.pack(len(path), len(entries), len(heap)) + path + heap
                                   + b"".join(d for _, d in entries)))
    parts.append(comp.flush())
    return base64.b64encode(b"".join(parts)).decode("ascii")


class PreviousState:
    """The decoded state: for each directory the digests of its entries by name."""

    def __init__(self, text):
        try:
            raw = zlib.decompress(base64.b64decode(text))
        except (ValueError, zlib.error) as e:
            raise ValueError("the previous backup's state is damaged: %s" % e)
        self._dirs = {}
        self.entries = 0
        pos, end = 0, len(raw)
        mv = memoryview(raw)
        while pos < end:
            if pos + _HEAD.size > end:
                raise ValueError("the previous backup's state is truncated")
            plen, n, hlen = _HEAD.unpack_from(raw, pos)
            pos += _HEAD.size
            stop = pos + plen + hlen + DIGEST_SIZE * n
            if stop > end:
                raise ValueError("the previous backup's state is truncated")
            self._dirs[bytes(mv[pos:pos + plen])] = (pos + plen, n, hlen)
            self.entries += n
            pos = stop
        self._raw = raw

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
