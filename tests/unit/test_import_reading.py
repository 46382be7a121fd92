"""What an import reads of an image (app/agent/pool_import.py) and what it believes of it
(app/formats/imagemeta.py): the metadata member, the summary and the trailing index are found
without reading the file data; the trailing index's rows come back as the backup sent them,
and rows that are out of place or name `..` are refused; image metadata that is hostile or of
the wrong kind is refused with what is wrong; a version 1 recipe still reads."""

import hashlib
import json
import os
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.agent import pool_import  # noqa: E402
from app.agent.archiver import backup_to  # noqa: E402
from app.agent.reindex import FileImage  # noqa: E402
from app.formats import entry, imagemeta  # noqa: E402
from plugins.storage.dedup import recipe  # noqa: E402

META = {"format": "cairn-image", "format_version": 2, "image_id": "me_1_1", "client": "me",
        "policy": "p", "schedule": "full", "schedule_type": "full", "base_image": None,
        "created": "2026-01-01T00:00:00Z", "expires": None, "retention_s": None,
        "selections": ["/data"], "job_id": 1, "checksum": "crc32", "storage_unit": "stu",
        "pool": "dp", "stream": None, "set": None}


class Counting(FileImage):
    """An image file that counts the bytes read from it."""
    read_bytes = 0

    def read(self, pos, n):
        data = super().read(pos, n)
        self.read_bytes += len(data)
        return data


def make_image(tmp_path, meta=META, big=24 << 20):
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(big))
    for k in range(20):
        (src / f"small-{k}.txt").write_text(f"file {k}\n")
    events = []
    path = tmp_path / "image.tar"
    with open(path, "wb") as f:
        result = backup_to(f, [str(src)], emit=lambda e, d: events.append((e, d)),
                           is_cancelled=lambda: False, image_meta=meta,
                           summary_extra={"snapshots": [], "scan": {"method": "walk"}})
    return path, result, [r for e, d in events if e == "rows" for r in d["rows"]]


class Req:
    def __init__(self):
        self.events = []

    def emit(self, event, data):
        self.events.append((event, data))

    def is_cancelled(self):
        return False


def test_the_metadata_is_found_without_reading_the_file_data(tmp_path):
    path, result, rows = make_image(tmp_path)
    image = Counting(str(path))
    try:
        d = pool_import.describe_image(image)
    finally:
        image.close()
    assert d["meta"] == META
    assert d["index"]["at"] == result["index_offset"]
    assert d["summary"]["files"] == result["files"] == 21
    assert d["summary"]["bytes"] == result["bytes"] and d["summary"]["scan"] == {"method": "walk"}
    # the first member: its header and the metadata, padded (imagemeta.META_STEP)
    assert d["data_end"] < d["index"]["at"] and d["data_start"] == 512 + imagemeta.META_STEP
    # the image's end and its first member: a small part of the image
    assert image.read_bytes < os.path.getsize(path) / 8, (image.read_bytes, d)


def rows_read(path, d):
    req = Req()
    out = pool_import.image_rows(req, {"type": "advanced-disk"}, str(path), d["index"],
                                 d["data_start"], d["data_end"])
    return out, [r for e, x in req.events if e == "rows" for r in x["rows"]]


def test_the_rows_of_the_trailing_index_come_back_as_the_backup_sent_them(tmp_path):
    path, result, rows = make_image(tmp_path, big=1 << 20)
    image = FileImage(str(path))
    d = pool_import.describe_image(image)
    image.close()
    out, got = rows_read(path, d)
    assert got == rows and out["bad_lines"] == 0 and out["rows"] == len(rows)
    assert out["files"] == result["files"] and out["bytes"] == result["bytes"]


def _rewrite_index(path, d, change):
    """The trailing index with its rows changed, written back in the same space."""
    with open(path, "r+b") as f:
        f.seek(d["index"]["offset"])
        text = f.read(d["index"]["length"])
        lines = [json.loads(x) for x in text.splitlines()]
        change(lines)
        new = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in lines)
        assert len(new) <= len(text)
        f.seek(d["index"]["offset"])
        f.write(new[:-1] + b" " * (len(text) - len(new)) + b"\n")


def test_rows_out_of_place_or_naming_dot_dot_are_refused(tmp_path):
    path, _result, rows = make_image(tmp_path, big=1 << 20)
    image = FileImage(str(path))
    d = pool_import.describe_image(image)
    image.close()

    def hostile(lines):
        lines[3][entry.PATH] = lines[3][entry.PATH].rsplit("/", 1)[0] + "/../../etc/x"
        lines[5][entry.OFFSET] = lines[4][entry.OFFSET]   # overlaps the member before it
        lines[-1][entry.OFFSET] = d["index"]["at"]        # the index is no entry's
    _rewrite_index(path, d, hostile)
    out, _got = rows_read(path, d)
    assert out["bad_lines"] == 3, out
    assert any("'..'" in p or "no backup writes" in p for p in out["problems"])
    assert sum("in order" in p for p in out["problems"]) == 2


def test_hostile_or_malformed_image_metadata_is_refused():
    def why(**change):
        return imagemeta.meta_problem(dict(META, **change), file_id="me_1_1", client_dir="me")
    assert why() is None
    assert "not an image id" in why(image_id="../x")
    assert "holds image" in why(image_id="me_1_2")
    assert "invalid client" in why(client="../me")
    assert "folder of client" in why(client="other")
    assert "invalid base_image" in why(base_image="../../y")
    assert "invalid base_image" in why(base_image="me_1_1")      # itself
    assert "invalid selections" in why(selections=["relative/path"])
    assert "invalid selections" in why(selections=[])
    assert "invalid set" in why(set={"id": "../s", "streams": 2, "selections": []})
    assert "invalid checksum" in why(checksum="md5")
    assert "format version" in why(format_version=4)
    assert "not Cairn's image metadata" in why(format="other")
    assert imagemeta.meta_problem([], file_id="x", client_dir="me")
    assert imagemeta.summary_problem({"files": -1}) is not None
    assert imagemeta.row_problem(["/a/./b"] + [0] * 12) is not None
    assert imagemeta.row_problem(["/a/b"] + [0] * 12) is None


def test_a_version_1_recipe_still_reads_and_says_so(tmp_path):
    path = tmp_path / "old.recipe"
    w = recipe.RecipeWriter(path)
    w.add(b"\x11" * 32, 4096)
    w.finish({"image_id": "me_1_1"})
    data = bytearray(path.read_bytes())
    # as version 1 wrote it: the version in the header, the digest over it
    data[8:12] = struct.pack(">I", 1)
    head = len(data) - recipe.TRAILER.size + recipe.TRAILER_HEAD.size
    data[head:head + 32] = hashlib.sha256(bytes(data[:head])).digest()
    path.write_bytes(bytes(data))
    r = recipe.read_recipe(path)
    assert r.meta == {"image_id": "me_1_1"} and r.size == 4096
    info = recipe.read_meta(path)
    assert info["version"] == 1 and info["meta"] == {"image_id": "me_1_1"}
    assert info["chunks"] == 1 and info["stream_bytes"] == 4096
    assert info["bytes"] == len(data)
