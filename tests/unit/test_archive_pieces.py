"""Each file's checksum in a backup is its TreeHash: a file of one piece that fits the image
buffer is checked inline, in one read, larger ones by pieces on the hash worker. Whichever
way, the row holds the same checksum, and a restore checks the data against it."""

import os
import random

import pytest

from app.agent.archiver import backup_to
from app.agent.extents import ExtentReader
from app.agent.extract import restore_from
from app.formats import entry, tarfmt

SIZES = [0, 1, 4096, tarfmt.PIECE - 1, tarfmt.PIECE, tarfmt.PIECE + 1, 3 * tarfmt.PIECE]


def _events():
    events = []
    return events, lambda event, data: events.append((event, data))


@pytest.mark.parametrize("checksum", ["crc32", "sha256"])
def test_checksums_of_files_around_one_piece_are_tree_digests(tmp_path, checksum):
    d = tmp_path / "sizes"
    d.mkdir()
    rnd = random.Random(7)
    expected = {}
    for i, size in enumerate(SIZES * 3):  # several, so that some start late in a buffer
        data = rnd.randbytes(size)
        (d / f"f{i:02d}").write_bytes(data)
        expected[f"f{i:02d}"] = data
    events, emit = _events()
    image = tmp_path / "sizes.tar"
    with open(image, "wb") as f:
        backup_to(f, [str(d)], emit=emit, is_cancelled=lambda: False,
                  image_meta={"image_id": "t"}, checksum=checksum)
    rows = [r for e, p in events if e == "rows" for r in p["rows"]]
    by_name = {os.path.basename(r[entry.PATH]): r for r in rows}
    for name, data in expected.items():
        assert by_name[name][entry.CHECKSUM] == tarfmt.tree_digest(data, checksum), name

    target = tmp_path / "restored"
    plan = [{"path": r[entry.PATH], "kind": r[entry.KIND], "checksum": r[entry.CHECKSUM],
             "link": r[entry.LINK], "member": entry.member_name(r[entry.PATH])} for r in rows]
    restored, emit = _events()
    with ExtentReader(str(image), [[r[entry.OFFSET], r[entry.LENGTH]] for r in rows]) as rd:
        result = restore_from(rd, str(target), plan, overwrite="skip", emit=emit,
                              is_cancelled=lambda: False, checksum=checksum)
    assert result["errors"] == 0, restored
    for name, data in expected.items():
        assert (target / str(d / name).lstrip("/")).read_bytes() == data
