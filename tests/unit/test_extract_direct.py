"""Restores that write large files with O_DIRECT give back exactly the files a buffered
restore gives: aligned pieces go past the page cache, the rest (file ends, pieces that sit
unaligned in the stream's buffer, sparse segments) through it, on the same descriptor."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_archive import Recorder, backup, never, plan_of  # noqa: E402
from treegen import assert_trees_equal, make_tree  # noqa: E402

from app.agent.extents import ExtentReader  # noqa: E402
from app.agent.extract import restore_from  # noqa: E402
from app.agent.restore_io import DIRECT_ALIGN, DIRECT_MIN, suits_target  # noqa: E402
from app.formats import entry  # noqa: E402

MiB = 1 << 20


def direct_ok(path):
    """Whether this file system takes O_DIRECT writes of DIRECT_ALIGN bytes."""
    import mmap
    probe = os.path.join(path, ".direct-probe")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, 4096)
        os.pwrite(fd, memoryview(buf)[:DIRECT_ALIGN], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        os.unlink(probe)


def sizes_tree(root):
    """Files around every edge the direct path has: below and at DIRECT_MIN, whole and
    partial blocks, and files that cross the restore's 1 MiB buffers."""
    os.makedirs(root)
    sizes = [0, 1, DIRECT_ALIGN - 1, DIRECT_ALIGN, DIRECT_MIN - 1, DIRECT_MIN,
             DIRECT_MIN + 1, 100 * 1024, MiB - 512, MiB, MiB + 7, 3 * MiB + 513, 5 * MiB]
    rnd = os.urandom(6 * MiB)
    for k, n in enumerate(sizes):
        with open(os.path.join(root, f"f{k:02d}-{n}"), "wb") as f:
            f.write(rnd[k * 4099:k * 4099 + n] if k * 4099 + n <= len(rnd) else rnd[:n])
    return sizes


class ShortReads:
    """A source whose reads stop at odd lengths, as a network stream's do."""

    def __init__(self, reader, step):
        self.reader = reader
        self.step = step
        self.k = 0

    def _n(self, most):
        self.k += 1
        return min(most, self.step + (self.k * 37) % 500)

    def readinto(self, buf):
        return self.reader.readinto(memoryview(buf)[:self._n(len(buf))])


class OddReads(ShortReads):
    """The same through read() alone, which the restore takes as it comes. Every other read
    ends the stream at a multiple of DIRECT_ALIGN: the buffer after it holds aligned pieces,
    the one after an odd read unaligned ones."""

    readinto = None
    pos = 0

    def read(self, n):
        want = self._n(n)
        if not self.k % 2:
            want = want // DIRECT_ALIGN * DIRECT_ALIGN + (-self.pos) % DIRECT_ALIGN
        buf = bytearray(min(n, want))
        got = self.reader.readinto(buf)
        self.pos += got
        return bytes(buf[:got])


def restore(image, rows, target, *, direct, wrap=None, direct_for=None):
    rec = Recorder()
    with ExtentReader(str(image), [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]) as rd:
        src = wrap(rd) if wrap else rd
        result = restore_from(src, str(target), plan_of(rows), overwrite="skip", emit=rec,
                              is_cancelled=never, direct=direct, direct_for=direct_for)
    return result, rec


@pytest.fixture(scope="module")
def imaged(tmp_path_factory):
    base = tmp_path_factory.mktemp("direct")
    src = base / "src"
    sizes = sizes_tree(str(src))
    image = base / "image.tar"
    _, rec = backup(image, [src])
    return {"base": base, "src": src, "image": image, "rows": rec.rows, "sizes": sizes}


def test_direct_restore_is_byte_for_byte_and_goes_past_the_cache(imaged, tmp_path):
    target = tmp_path / "t"
    result, rec = restore(imaged["image"], imaged["rows"], target, direct=True)
    assert result["errors"] == 0 and not rec.of("warning")
    assert_trees_equal(str(imaged["src"]), str(target) + str(imaged["src"]))
    large = sum(n for n in imaged["sizes"] if n >= DIRECT_MIN)
    if not direct_ok(str(tmp_path)):
        assert result["direct_bytes"] == 0
        pytest.skip("this file system refuses O_DIRECT: only the fallback was exercised")
    # every large file but its last partial block goes past the page cache, except pieces
    # that a buffer boundary leaves unaligned
    assert large * 0.8 < result["direct_bytes"] <= large


def test_buffered_restore_writes_nothing_directly(imaged, tmp_path):
    result, _ = restore(imaged["image"], imaged["rows"], tmp_path / "t", direct=False)
    assert result["direct_bytes"] == 0
    assert_trees_equal(str(imaged["src"]), str(tmp_path / "t") + str(imaged["src"]))


@pytest.mark.parametrize("step", [4093, 65536 + 3])
@pytest.mark.parametrize("reads", ["short", "odd"])
def test_reads_of_odd_lengths(imaged, tmp_path, reads, step):
    """Short reads are filled up to aligned pieces, so nearly everything still goes direct;
    reads through read() alone are taken as they come, and files switch between direct and
    buffered pieces."""
    wrap, low, high = (ShortReads, 0.8, 1.0) if reads == "short" else (OddReads, 0.1, 0.9)
    target = tmp_path / "t"
    result, rec = restore(imaged["image"], imaged["rows"], target, direct=True,
                          wrap=lambda rd: wrap(rd, step))
    assert result["errors"] == 0 and not rec.of("warning")
    assert_trees_equal(str(imaged["src"]), str(target) + str(imaged["src"]))
    large = sum(n for n in imaged["sizes"] if n >= DIRECT_MIN)
    if direct_ok(str(tmp_path)):
        assert large * low < result["direct_bytes"] <= large * high
    else:
        assert result["direct_bytes"] == 0


def test_the_whole_test_tree_restores_the_same_with_direct_writes(tmp_path):
    """Sparse files, hard links, odd names, modes and times: all as with buffered writes."""
    src = tmp_path / "src"
    make_tree(str(src))
    image = tmp_path / "image.tar"
    _, rec = backup(image, [src])
    result, rec2 = restore(image, rec.rows, tmp_path / "t", direct=True)
    assert result["errors"] == 0
    assert_trees_equal(str(src), str(tmp_path / "t") + str(src),
                       check_owner=os.geteuid() == 0)


def test_targets_in_memory_or_on_the_network_are_written_buffered(tmp_path, monkeypatch):
    from plugins.filesystems import posix
    fs = posix.filesystem_of(str(tmp_path))
    local = fs["class"] != "network" and fs["type"] not in ("tmpfs", "overlay")
    assert suits_target(str(tmp_path)) == (local and not fs["type"].startswith("fuse"))
    for mnt in ("/dev/shm", "/run"):
        m = posix.filesystem_of(mnt)
        if m and m["type"] == "tmpfs":
            assert not suits_target(mnt)
    monkeypatch.setenv("CAIRN_DIRECT_IO", "0")
    assert not suits_target(str(tmp_path))


def test_a_file_system_mounted_below_the_target_is_asked_about_on_its_own(tmp_path):
    """A tmpfs mounted inside a target that takes direct writes: its files go through the
    page cache (the page cache is a tmpfs file), the target's own files still go direct, and
    the question is asked once for the mount. Its directory sorts first, so a restore that
    tried and was refused there would write nothing directly after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs inside the target needs root")
    if not direct_ok(str(tmp_path)):
        pytest.skip("this file system takes no direct writes: nothing to tell apart")
    src = tmp_path / "src"
    data = os.urandom(2 * MiB)
    for d in ("a-mem", "b-disk"):
        (src / d).mkdir(parents=True)
        (src / d / "big").write_bytes(data)
    image = tmp_path / "image.tar"
    _, rec = backup(image, [src])
    target = tmp_path / "t"
    restored = Path(str(target) + str(src))
    mem = restored / "a-mem"
    mem.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mem)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"cannot mount a tmpfs inside the target: {r.stderr}"
    asked = []

    def direct_for(path):
        asked.append(path)
        return suits_target(path)

    try:
        result, _ = restore(image, rec.rows, target, direct=True, direct_for=direct_for)
        assert result["errors"] == 0
        assert (mem / "big").read_bytes() == data
        assert (restored / "b-disk" / "big").read_bytes() == data
        assert asked == [os.fsencode(str(mem))]
        assert 0 < result["direct_bytes"] <= len(data)
    finally:
        subprocess.run(["umount", str(mem)], capture_output=True)


def test_a_direct_write_the_kernel_refuses_is_written_buffered(tmp_path):
    """A piece said to be aligned whose memory is not: the kernel refuses the direct write
    (EINVAL) as a file system without O_DIRECT support for writes would. The file still gets
    every byte, through the page cache, and the writer says direct writes were refused."""
    import mmap
    from app.agent.restore_io import _O_DIRECT, _Writer
    if not direct_ok(str(tmp_path)):
        pytest.skip("this file system refuses O_DIRECT at open already")
    data = os.urandom(3 * 4096 + 100)
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_DIRECT, 0o600)
    buf = mmap.mmap(-1, 4 * 4096 + 4096)
    buf[1:1 + len(data)] = data
    w = _Writer(fd, direct=True)
    try:
        w.update((0, memoryview(buf)[1:1 + 8192], 0))  # claimed aligned, one byte off
        w.update((8192, memoryview(buf)[1 + 8192:1 + len(data)], 0))
    finally:
        os.close(fd)
    assert w.error is None and w.refused and w.direct_bytes == 0
    assert path.read_bytes() == data
