"""The frames of a compressed advanced-disk image (plugins/storage/advanced_disk/zframes.py):
written from buffers of any size, read back at any offset across frames, one stream for
zstd, and damage found where it is: a frame that does not decode (named, or read as zeros
and noted by a tolerant reader), a seek table cut off or lying about its frames (named, and
the frames found from their own headers)."""

import os
import random
import shutil
import subprocess

import pytest

from app.errors import CairnError
from plugins.storage.advanced_disk import zframes

FRAME = 64 << 10  # small frames: many of them in little data


def stream(n, seed=1):
    rnd = random.Random(seed)
    words = [b"alpha ", b"beta ", b"gamma ", b"delta\n", bytes(rnd.randbytes(40))]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(words)
    return bytes(out[:n])


def write_image(path, data, pieces, frame=FRAME):
    with open(path, "wb") as f:
        w = zframes.FrameWriter(f.write, 3, frame_bytes=frame)
        at = 0
        for n in pieces:
            w.write(memoryview(data)[at:at + n])
            at += n
        w.write(data[at:])
        w.finish()
    return w.report()


def test_any_write_sizes_read_back_at_any_offset(tmp_path):
    data = stream(10 * FRAME + 1234)
    path = str(tmp_path / "img.tar")
    # a piece smaller than a frame, one of several frames, one across a boundary
    rep = write_image(path, data, [100, 3 * FRAME + 7, FRAME - 107, 5])
    assert rep["frames"] == 11 and rep["tar_bytes"] == len(data)
    assert rep["stored_bytes"] == os.path.getsize(path) < len(data)
    assert zframes.describe(path) == {"codec": "zstd", "frames": 11,
                                      "tar_bytes": len(data),
                                      "stored_bytes": os.path.getsize(path)}
    z = zframes.ZstdImage(path)
    try:
        assert z.size == len(data)
        for pos, n in ((0, 10), (FRAME - 3, 10), (2 * FRAME, 3 * FRAME + 9),
                       (len(data) - 5, 100), (len(data), 10)):
            buf = bytearray(n)
            got = z.preadinto(buf, pos)
            assert bytes(buf[:got]) == data[pos:pos + n]
        buf = bytearray(FRAME)
        assert z.preadinto_frame(buf, FRAME - 10) == 10  # no further than its frame
    finally:
        z.close()
    if shutil.which("zstd"):  # frames and the skippable seek table: one stream to zstd
        out = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout
        assert out == data


def test_an_empty_stream_and_a_plain_file(tmp_path):
    path = str(tmp_path / "empty.tar")
    assert write_image(path, b"", [])["frames"] == 0
    z = zframes.ZstdImage(path)
    assert z.size == 0 and z.preadinto(bytearray(10), 0) == 0
    z.close()
    plain = tmp_path / "plain.tar"
    plain.write_bytes(b"x" * 1024)
    assert zframes.open_source(str(plain)) is None and zframes.describe(str(plain)) is None


def test_a_damaged_frame_is_named_or_read_as_zeros(tmp_path):
    data = stream(4 * FRAME)
    path = str(tmp_path / "img.tar")
    write_image(path, data, [])
    z = zframes.ZstdImage(path)
    c0, c1 = z._coffs[2], z._coffs[3]
    z.close()
    with open(path, "r+b") as f:
        f.seek((c0 + c1) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x55]))
    z = zframes.ZstdImage(path)
    buf = bytearray(FRAME)
    assert z.preadinto(buf, FRAME) == FRAME and bytes(buf) == data[FRAME:2 * FRAME]
    with pytest.raises(CairnError) as e:
        z.preadinto(buf, 2 * FRAME + 5)
    assert f"frame 2 of {path} (bytes {2 * FRAME}..{3 * FRAME}" in e.value.message
    assert "does not decode" in e.value.message
    z.close()
    t = zframes.ZstdImage(path, tolerant=True)
    whole = bytearray(len(data))
    assert t.preadinto(whole, 0) == len(data)
    assert whole[2 * FRAME:3 * FRAME] == bytes(FRAME)
    assert whole[:2 * FRAME] == data[:2 * FRAME] and whole[3 * FRAME:] == data[3 * FRAME:]
    [(pos, n, what)] = t.damage
    assert (pos, n) == (2 * FRAME, FRAME) and "frame 2" in what
    t.close()


def test_a_cut_short_or_lying_seek_table_is_named_and_the_frames_read_without_it(tmp_path):
    data = stream(3 * FRAME)
    path = str(tmp_path / "img.tar")
    write_image(path, data, [])
    whole = open(path, "rb").read()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole[:-20])
    lying = bytearray(whole)
    lying[-9] += 1  # one frame more than there are
    (tmp_path / "lying.tar").write_bytes(bytes(lying))
    for p, why in ((cut, "does not end with it"), (tmp_path / "lying.tar", "does not match its footer")):
        with open(p, "rb") as f:
            with pytest.raises(CairnError, match="frame table at the end of compressed image "
                                                 "file .* is damaged: .*" + why):
                zframes.read_table(f.fileno(), os.path.getsize(p), str(p))
        # the frames themselves are sound: read through them, the table's damage noted
        z = zframes.ZstdImage(str(p))
        assert why in z.table_damage and _read_all(z) == data
        z.close()


def test_frames_end_where_members_begin(tmp_path):
    """Small members are never cut: each frame begins with a member's first header (its pax
    header, when it has one), except inside a member larger than a frame, after its header."""
    import io
    import tarfile
    rnd = random.Random(5)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(120):
            n = 300 * 1024 if i == 40 else rnd.randrange(0, 20 * 1024)
            ti = tarfile.TarInfo(f"d/f{i:03d}" + ("-é" * (i % 3)))  # some need pax headers
            ti.size = n
            if i % 4 == 0:
                ti.pax_headers = {"SCHILY.xattr.user.k": "v" * rnd.randrange(1, 900)}
            tf.addfile(ti, io.BytesIO(stream(n, seed=i)))
    data = raw.getvalue()
    path = str(tmp_path / "img.tar")
    write_image(path, data, [rnd.randrange(1, 5000) for _ in range(40)])
    raw.seek(0)
    with tarfile.open(fileobj=raw, mode="r") as tf:
        members = tf.getmembers()
    starts = {m.offset for m in members}
    big = next(m for m in members if m.size == 300 * 1024)
    z = zframes.ZstdImage(path)
    try:
        spans = [z.frame_span(i) for i in range(z.frames)]
        back = bytearray(z.size)
        assert z.preadinto(back, 0) == len(data) and bytes(back) == data
    finally:
        z.close()
    inside = 0
    for at, n in spans:
        if at in starts or at == 0:
            continue
        assert big.offset_data < at < big.offset_data + big.size, at
        inside += 1
    assert inside >= 2, (spans, big.offset, big.offset_data)  # cut in its data
    assert all(n >= FRAME // 4 for _, n in spans[:-1]), spans


def test_a_host_without_zstandard_says_so_and_still_describes_the_image(tmp_path,
                                                                        monkeypatch):
    from app import status
    path = str(tmp_path / "img.tar")
    write_image(path, stream(2 * FRAME), [])
    monkeypatch.setattr(zframes, "_zstd", None)
    assert not zframes.available()
    with pytest.raises(CairnError) as e:
        zframes.ZstdImage(path)
    assert e.value.status == status.AGENT_FAILED
    assert f"image file {path} is compressed (zstd)" in e.value.message
    assert "lacks the zstandard module" in e.value.message and "pip install" in e.value.hint
    assert zframes.describe(path)["frames"] == 2  # the seek table needs no zstandard
    with pytest.raises(CairnError, match="needs the zstandard module"):
        zframes.FrameWriter(lambda b: None, 1)


def _read_all(z):
    whole = bytearray(z.size + FRAME)  # a table that lies may say fewer bytes than there are
    n = z.preadinto(whole, 0)
    assert n == z.size
    return bytes(whole[:n])


def test_a_tolerant_reader_finds_the_frames_without_their_seek_table(tmp_path):
    data = stream(5 * FRAME + 321)
    path = str(tmp_path / "img.tar")
    write_image(path, data, [])
    whole = open(path, "rb").read()
    z = zframes.ZstdImage(path)
    table_at = z._coffs[-1]
    spans = [z.frame_span(i) for i in range(z.frames)]
    z.close()
    count = bytearray(whole)
    count[-9] ^= 0x01                  # the number of frames, in the footer
    sizes = bytearray(whole)
    sizes[table_at + 8 + 4] ^= 0x40    # frame 0's tar bytes: seen only when it is read
    cut = whole[:table_at]             # no table at all: the file ends with the last frame
    for name, damaged in (("count", bytes(count)), ("sizes", bytes(sizes)), ("cut", cut)):
        p = str(tmp_path / f"{name}.tar")
        with open(p, "wb") as f:
            f.write(damaged)
        for tolerant in (False, True):
            t = zframes.ZstdImage(p, tolerant=tolerant)
            try:
                got = _read_all(t)
                assert f"frame table at the end of compressed image file {p}" in \
                    t.table_damage
                assert [t.frame_span(i) for i in range(t.frames)] == spans
                assert got == data and t.damage == [], name
            finally:
                t.close()
    sound = zframes.ZstdImage(path, tolerant=True)
    assert sound.table_damage is None and _read_all(sound) == data
    sound.close()


def test_past_a_frame_that_cannot_be_followed_the_reader_reads_zeros_and_says_why(tmp_path):
    data = stream(4 * FRAME)
    path = str(tmp_path / "img.tar")
    write_image(path, data, [])
    z = zframes.ZstdImage(path)
    c2 = z._coffs[2]
    z.close()
    raw = bytearray(open(path, "rb").read())
    raw[c2:c2 + 4] = b"\0\0\0\0"       # frame 2's magic
    raw[-1] ^= 0xFF                    # and the table's
    with open(path, "wb") as f:
        f.write(raw)
    z = zframes.ZstdImage(path)
    with pytest.raises(CairnError, match="frames cannot be followed past byte %d" % (2 * FRAME)):
        z.preadinto(bytearray(10), 2 * FRAME + 5)
    z.close()
    t = zframes.ZstdImage(path, tolerant=True)
    try:
        assert t.frames == 2 and t.size == 2 * FRAME
        whole = bytearray(len(data))
        assert t.preadinto(whole, 0) == len(data)
        assert whole[:2 * FRAME] == data[:2 * FRAME] and whole[2 * FRAME:] == bytes(2 * FRAME)
        [(pos, _, what)] = t.damage
        assert pos == 2 * FRAME and f"frame 2 at byte {c2} of the file" in what
        assert "no zstd frame begins there" in what
    finally:
        t.close()
