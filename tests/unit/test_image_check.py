"""Reading an AdvancedDisk image back (plugins/storage/advanced_disk/image_check.py): an intact
image of every kind of entry checks clean with either checksum; a damaged data byte, a damaged
tar header, a damaged sparse member, damaged metadata and a cut-short image are each found and
named, and nothing else is."""

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from treegen import make_tree  # noqa: E402

from plugins.storage.advanced_disk import image_check  # noqa: E402
from app.agent.archiver import backup_to  # noqa: E402
from app.formats import entry, tarfmt  # noqa: E402

META = {"image_id": "check-1", "client": "unit", "policy": "p"}


@pytest.fixture(scope="module", params=["crc32", "sha256"])
def imaged(tmp_path_factory, request):
    base = tmp_path_factory.mktemp("check")
    src = base / "src"
    info = make_tree(str(src))
    image = base / "image.tar"
    rows = []

    def emit(event, payload):
        if event == "rows":
            rows.extend(payload["rows"])
    with open(image, "wb") as f:
        backup_to(f, [str(src)], emit=emit, is_cancelled=lambda: False, image_meta=META,
                  checksum=request.param)
    return {"base": base, "src": src, "info": info, "image": image, "rows": rows,
            "checksum": request.param}


def spec(imaged, path=None, whole=True):
    return {"path": str(path or imaged["image"]), "checksum": imaged["checksum"],
            "whole": whole,
            "members": [[r[entry.OFFSET], r[entry.LENGTH], r[entry.KIND], r[entry.CHECKSUM],
                         r[entry.PATH]] for r in imaged["rows"] if r[entry.LENGTH] > 0]}


def damaged_copy(imaged, tmp_path, *at):
    """A copy of the image with one byte changed at each offset."""
    copy = tmp_path / "copy.tar"
    shutil.copyfile(imaged["image"], copy)
    with open(copy, "r+b") as f:
        for off in at:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0x5A]))
    return copy


def header_bytes(image, offset):
    with open(image, "rb") as f:
        f.seek(offset)
        return tarfmt.read_member_header(lambda n: f.read(n)).header_bytes


def row_of(imaged, rel):
    path = os.path.join(str(imaged["src"]), rel)
    return next(r for r in imaged["rows"] if r[entry.PATH] == path)


def test_an_intact_image_checks_clean(imaged):
    r = image_check.check_file(spec(imaged))
    assert r["error"] is None and r["damage"] == [] and r["structure"] == [], r
    assert r["members"] == len(spec(imaged)["members"]) > 20
    assert r["bytes"] == os.path.getsize(imaged["image"])


def test_one_data_byte_and_one_header_name_exactly_their_files(imaged, tmp_path):
    files = [r for r in imaged["rows"] if r[entry.KIND] == "f" and r[entry.SIZE] > 1000
             and "sparse" not in r[entry.PATH]]
    a, b = files[0], files[-1]
    data_at = a[entry.OFFSET] + header_bytes(imaged["image"], a[entry.OFFSET]) + 700
    # a byte of the name in the ustar block (the last header block of the member)
    head_at = b[entry.OFFSET] + header_bytes(imaged["image"], b[entry.OFFSET]) - 512 + 3
    copy = damaged_copy(imaged, tmp_path, data_at, head_at)
    r = image_check.check_file(spec(imaged, copy))
    found = {d["path"]: d["reason"] for d in r["damage"]}
    assert found == {a[entry.PATH]: image_check.DATA_MISMATCH,
                     b[entry.PATH]: found[b[entry.PATH]]}, r["damage"]
    assert "tar header is damaged" in found[b[entry.PATH]]
    assert r["structure"] == [] and r["error"] is None


def test_a_damaged_sparse_member_and_a_damaged_metadata_header(imaged, tmp_path):
    sparse = row_of(imaged, imaged["info"]["sparse"])
    # the last byte of the member's data (its second segment, at the file's end)
    end = sparse[entry.OFFSET] + sparse[entry.LENGTH] - 1
    with open(imaged["image"], "rb") as f:
        f.seek(sparse[entry.OFFSET])
        m = tarfmt.read_member_header(lambda n: f.read(n))
    data_end = sparse[entry.OFFSET] + m.header_bytes + m.size - 1
    assert data_end <= end
    copy = damaged_copy(imaged, tmp_path, data_end, 3)  # and .cairn/image.json's header
    r = image_check.check_file(spec(imaged, copy))
    assert [(d["path"], d["reason"]) for d in r["damage"]] == [
        (sparse[entry.PATH], image_check.DATA_MISMATCH)]
    assert len(r["structure"]) == 1 and r["structure"][0]["offset"] == 0
    assert "metadata is damaged" in r["structure"][0]["reason"]
    # read as part of a chain (not whole), the metadata is not this file's business
    r = image_check.check_file(spec(imaged, copy, whole=False))
    assert r["structure"] == [] and len(r["damage"]) == 1


def test_a_cut_short_image_names_what_it_lost(imaged, tmp_path):
    copy = tmp_path / "short.tar"
    members = spec(imaged)["members"]
    cut = members[len(members) // 2][0] + 100  # inside the middle member's header
    with open(imaged["image"], "rb") as f, open(copy, "wb") as g:
        g.write(f.read(cut))
    r = image_check.check_file(spec(imaged, copy))
    lost = {d["path"] for d in r["damage"]}
    assert lost == {m[4] for m in members[len(members) // 2:]}
    assert all("cut short" in d["reason"] for d in r["damage"])
    assert r["structure"] and "cut short" in r["structure"][-1]["reason"]


def test_a_missing_file_and_a_link_in_its_place_are_errors_not_failures(imaged, tmp_path):
    r = image_check.check_file(spec(imaged, tmp_path / "gone.tar"))
    assert "cannot be opened" in r["error"] and r["damage"] == []
    link = tmp_path / "link.tar"
    os.symlink(imaged["image"], link)
    r = image_check.check_file(spec(imaged, link))
    assert "symbolic link" in r["error"]


def test_an_image_open_to_others_is_made_private(imaged, tmp_path):
    copy = tmp_path / "open.tar"
    shutil.copyfile(imaged["image"], copy)
    os.chmod(copy, 0o644)
    r = image_check.check_file(spec(imaged, copy))
    assert r["modes"] == [{"path": str(copy), "mode": "0644", "error": None}]
    assert os.stat(copy).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("members", [[[0, 512, "f", ""]], [["0", 512, "f", "", "/x"]],
                                     [[0, 0, "f", "", "/x"]], [[0, 512, "f", "", "x"]], "x"])
def test_a_malformed_request_is_refused_clearly(imaged, members):
    from app.errors import ValidationError
    with pytest.raises(ValidationError, match=r"\[offset, length, kind, checksum, path\]"):
        image_check.check_file(dict(spec(imaged), members=members))
