"""Appending with O_DIRECT through an aligned staging buffer: the file holds exactly the
bytes given, whether they went past the page cache or, where direct I/O is off or refused,
through the ordinary descriptor."""

import os
import random

import pytest

from app.formats import directio


def direct_supported(path):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError:
        return False
    os.close(fd)
    os.unlink(path)
    return True


def pieces(seed, total):
    rnd = random.Random(seed)
    out, left = [], total
    while left:
        n = min(left, rnd.choice([1, 17, 4095, 4096, 4097, 70000, 1 << 20]))
        out.append(rnd.randbytes(n))
        left -= n
    return out


def append(path, head, batches):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, head)
        a = directio.Appender(path, fd, head)
        direct = a.direct
        for batch in batches:
            a.write(list(batch))
        a.finish()
        os.fsync(fd)
    finally:
        os.close(fd)
    return direct


@pytest.mark.parametrize("total", [0, 100, 4096 - 16, 4096, 9 << 20])
def test_the_file_holds_the_bytes_given(tmp_path, total):
    path = str(tmp_path / "c")
    head = b"H" * 16
    data = pieces(total, total)
    # in uneven batches, as a writer flushes about every 4 MiB
    batches = [data[i:i + 7] for i in range(0, len(data), 7)]
    direct = append(path, head, batches)
    assert direct == direct_supported(str(tmp_path / "probe"))
    with open(path, "rb") as f:
        assert f.read() == head + b"".join(data)


def test_a_batch_larger_than_the_staging_buffer(tmp_path):
    path = str(tmp_path / "c")
    big = [os.urandom(directio.STAGE + 12345), os.urandom(5)]
    append(path, b"xy", [big, [b"tail"]])
    assert open(path, "rb").read() == b"xy" + b"".join(big) + b"tail"


def test_switched_off_it_writes_through_the_page_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CAIRN_DIRECT_IO", "0")
    path = str(tmp_path / "c")
    data = pieces(3, 3 << 20)
    assert append(path, b"head", [data]) is False
    assert open(path, "rb").read() == b"head" + b"".join(data)


def test_a_refused_direct_write_goes_on_through_the_ordinary_descriptor(tmp_path,
                                                                          monkeypatch):
    path = str(tmp_path / "c")
    real = os.pwrite
    state = {"direct_fd": None}

    def pwrite(fd, data, offset):
        if fd == state["direct_fd"]:
            raise OSError(22, "Invalid argument")  # as a file system without direct writes
        return real(fd, data, offset)

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"head")
    a = directio.Appender(path, fd, b"head")
    if not a.direct:
        pytest.skip("this file system refuses O_DIRECT at open already")
    state["direct_fd"] = a.dfd
    monkeypatch.setattr(os, "pwrite", pwrite)
    data = pieces(4, 2 << 20)
    a.write(data[:3])
    a.write(data[3:])
    assert a.direct is False
    a.finish()
    os.close(fd)
    assert open(path, "rb").read() == b"head" + b"".join(data)


def test_direct_writes_come_in_whole_blocks_of_a_large_block_file_system(tmp_path,
                                                                          monkeypatch):
    """As on Storage Scale, whose st_blksize is its block size: every direct write starts
    and ends on a block boundary, only the tail goes through the ordinary descriptor."""
    path = str(tmp_path / "c")
    if not direct_supported(str(tmp_path / "probe")):
        pytest.skip("this file system refuses O_DIRECT")
    block = 256 << 10
    real_fstat, real_pwrite = os.fstat, os.pwrite
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    class Stat:
        def __init__(self, st):
            self.st = st

        def __getattr__(self, name):
            return block if name == "st_blksize" else getattr(self.st, name)

    monkeypatch.setattr(os, "fstat", lambda f: Stat(real_fstat(f)) if f == fd
                        else real_fstat(f))
    writes = []

    def pwrite(f, data, offset):
        writes.append((f, offset, len(data)))
        return real_pwrite(f, data, offset)
    monkeypatch.setattr(os, "pwrite", pwrite)
    os.write(fd, b"head")
    a = directio.Appender(path, fd, b"head")
    assert a.direct and a.unit == block
    data = pieces(5, 3 * block + 1000)
    for i in range(0, len(data), 3):
        a.write(data[i:i + 3])
    direct = [(off, n) for f, off, n in writes if f == a.dfd]
    a.finish()
    os.close(fd)
    assert direct and all(off % block == 0 and n % block == 0 for off, n in direct), direct
    tail = [(off, n) for f, off, n in writes if f == fd]
    assert tail == [(3 * block, 4 + 1000)]
    assert open(path, "rb").read() == b"head" + b"".join(data)
