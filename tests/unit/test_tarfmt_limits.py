"""The image format at its limits: header values ustar cannot hold, and the hash worker that keeps
each file's pieces in order."""

import hashlib
import io
import os
import random
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


def test_the_common_members_headers_are_the_general_ones_byte_for_byte(monkeypatch):
    """member_header writes the common member in one step: its bytes must be exactly those
    of the general path, at and around every limit of that step."""
    general = tarfmt._member_header
    took_general = [0]

    def counted(*a):
        took_general[0] += 1
        return general(*a)

    monkeypatch.setattr(tarfmt, "_member_header", counted)
    rnd = random.Random(30)

    def pick(common, edges):
        # mostly values of the common member, each limit often enough
        return rnd.choice(common) if rnd.random() < 0.85 else rnd.choice(edges)

    big = tarfmt._MAX_OCTAL_11 * 10**9
    for _ in range(4000):
        args = (pick([b"a", b"d/f", b"x" * 100], [b"x" * 101, "caf\u00e9".encode(),
                                                  b"a" * 99 + b"\xff"]),
                rnd.choice([tarfmt.REGTYPE, tarfmt.DIRTYPE]),
                rnd.choice([0o644, 0o7777, 0o755]),
                pick([0, 1000, tarfmt._MAX_OCTAL_7], [tarfmt._MAX_OCTAL_7 + 1, -1]),
                pick([0, 1000, tarfmt._MAX_OCTAL_7], [tarfmt._MAX_OCTAL_7 + 1, -1]),
                pick([0, 1, 4096, tarfmt._MAX_OCTAL_11], [tarfmt._MAX_OCTAL_11 + 1]),
                pick([0, 10**9, 1_700_000_000_123_456_789, 999, big + 999_999_999],
                     [-1, -(10**9) - 5, big + 10**9, 10**30]))
        owners = ([b"", b"root", b"u" * 31], [b"u" * 32, "j\u00f6rg".encode()])
        kw = dict(uname=pick(*owners), gname=pick(*owners))
        if rnd.random() < 0.1:
            kw["xattrs"] = [(b"user.k", b"v")]
        if rnd.random() < 0.1:
            kw["linkname"] = b"target"
        got = tarfmt.member_header(*args, **kw)
        want = general(*args, kw.get("linkname", b""), kw["uname"], kw["gname"], 0, 0,
                       kw.get("xattrs"), None, None)
        assert got == want, (args, kw)
    assert 500 < 4000 - took_general[0] < 3500  # both paths were taken, often
