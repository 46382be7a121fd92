"""The image format at its limits: header values ustar cannot hold, and the hash worker that keeps
each file's pieces in order."""

import hashlib
import io
import os
import tarfile

import pytest

from app.formats import tarfmt


# ---------------------------------------------------------------------------------------------
# header encoding limits


def test_header_round_trip_of_values_ustar_cannot_hold():
    name = b"deep/" + b"\xff\xfe" * 120 + b"/caf\xe9"
    link = b"/target/" + b"x" * 300
    xattrs = [(b"user.bin", bytes(range(256)) + b"\n=\n"), (b"trusted.t", b"")]
    hdr = tarfmt.member_header(name, tarfmt.SYMTYPE, 0o7777, 3000000, 4000000, 10 ** 11,
                               -1500000001, link, b"u" * 40, "gröp".encode(), xattrs=xattrs)
    pos = 0

    def read_exact(n):
        nonlocal pos
        pos += n
        return hdr[pos - n:pos]

    m = tarfmt.read_member_header(read_exact)
    assert pos == len(hdr) and len(hdr) % 512 == 0
    assert (m.name, m.linkname, m.mode, m.uid, m.gid, m.size, m.mtime_ns) == \
        (name, link, 0o7777, 3000000, 4000000, 10 ** 11, -1500000001)
    assert (m.uname, m.gname) == (b"u" * 40, "gröp".encode())
    assert m.xattrs == xattrs
    with tarfile.open(fileobj=io.BytesIO(hdr + bytes(1024)), mode="r:") as t:
        ti = t.next()
        assert ti.name == os.fsdecode(name) and ti.linkname == os.fsdecode(link)
        assert (ti.uid, ti.gid, ti.size) == (3000000, 4000000, 10 ** 11)
        assert ti.pax_headers["SCHILY.xattr.user.bin"] is not None


@pytest.mark.parametrize("threads", [1, 2])
def test_hash_worker_keeps_each_file_in_order(threads):
    w = tarfmt.HashWorker(nbuf=2, bufsize=4096, threads=threads)
    try:
        pieces = {i: [] for i in range(7)}
        hashes = {i: hashlib.sha256() for i in range(7)}
        digests = {}
        for round_ in range(40):
            idx = w.acquire()
            buf = w.bufs[idx]
            jobs = []
            for i in range(7):
                chunk = bytes([(round_ * 7 + i) % 251]) * (500 + 3 * i + round_)
                start = i * 580
                buf[start:start + len(chunk)] = chunk
                pieces[i].append(chunk)
                done = None
                if round_ == 39:
                    done = (lambda h, i=i: digests.__setitem__(i, h.hexdigest()))
                jobs.append((hashes[i], w.views[idx][start:start + len(chunk)], done))
            w.put(jobs)
            w.release(idx)
        w.wait()
    finally:
        w.close()
    for i in range(7):
        assert digests[i] == hashlib.sha256(b"".join(pieces[i])).hexdigest()
