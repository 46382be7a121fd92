"""check_index: what is wrong with a catalog index file, for `catalog check` and
`images rebuild-index`; and a reader that meets a damaged, cut-short or foreign file answers
with IndexCorrupt (a clear message), never with another exception."""

import os
import random

import pytest

from app.catalog_index import IndexCorrupt, IndexReader, build_index, check_index


def rows():
    out = [["/data", "d", 0o755, 0, 0, 0, 1, 0, 512, "", ""]]
    for i in range(40):
        d = f"/data/d{i}"
        out.append([d, "d", 0o755, 0, 0, 0, i, 512 * i, 512, "", ""])
    for i in range(40):
        for j in range(30):
            out.append([f"/data/d{i}/f{j}", "f", 0o644, 1000, 100, j, j, 1024 * j, 1024,
                        f"{i:02x}" * 32, ""])
        out.append([f"/data/d{i}/l", "l", 0o777, 0, 0, 0, 0, 0, 512, "", "f1"])
    return out


@pytest.fixture
def index(tmp_path):
    path = str(tmp_path / "x.cidx")
    build_index(path, rows())
    return path


def test_a_sound_index_has_no_problem(index):
    assert check_index(index) == []


def test_problems_are_named(index, tmp_path):
    data = open(index, "rb").read()
    cases = {
        "missing": (None, "is missing"),
        "cut": (data[:len(data) - 10], "truncated"),
        "garbage": (os.urandom(len(data)), "not a Cairn catalog index"),
        "empty": (b"", "too short"),
        "middle": (data[:len(data) // 2] + bytes(64) + data[len(data) // 2 + 64:],
                   "checksum mismatch"),
    }
    for name, (content, words) in cases.items():
        path = str(tmp_path / f"{name}.cidx")
        if content is not None:
            with open(path, "wb") as f:
                f.write(content)
        problems = check_index(path)
        assert problems and words in problems[0], (name, problems)
        if content is not None and name != "middle":
            with pytest.raises(IndexCorrupt) as e:
                IndexReader(path)
            assert "corrupt or unreadable" in str(e.value)


def test_every_damage_gives_index_corrupt_and_nothing_else(index, tmp_path):
    """Seeded: overwritten stretches, cut-short files and garbage, read every way a browser,
    a restore and a search read an index."""
    original = open(index, "rb").read()
    with IndexReader(index) as r:
        paths = [e.path for e in r.walk("/")]
    dirs = sorted({os.path.dirname(p) for p in paths} | {"/"})
    rnd = random.Random(24)
    path = str(tmp_path / "damaged.cidx")
    for _ in range(200):
        data = bytearray(original)
        how = rnd.random()
        if how < 0.2:
            data = data[:rnd.randrange(len(data))]
        elif how < 0.3:
            data = bytearray(rnd.randbytes(rnd.randrange(4000)))
        else:
            at, n = rnd.randrange(len(data)), rnd.randint(1, 64)
            data[at:at + n] = rnd.randbytes(n) if how < 0.8 else bytes(n)
            del data[len(original):]
        with open(path, "wb") as f:
            f.write(data)
        assert isinstance(check_index(path), list)
        try:
            r = IndexReader(path)
        except IndexCorrupt:
            continue
        with r:
            for d in dirs:
                try:
                    r.list_dir(d)
                except (IndexCorrupt, KeyError):
                    pass
            for p in paths[::7]:
                try:
                    r.lookup(p)
                    r.is_dir(p)
                except IndexCorrupt:
                    pass
            for walk in (lambda: list(r.walk("/")), lambda: list(r.directories()),
                         lambda: list(r.directory_names())):
                try:
                    walk()
                except IndexCorrupt:
                    pass
