"""The image's first member, `.cairn/image.json` (app/formats/imagemeta.py): padded so that
its length, and the offset of every member after it, stay the same from one backup to the
next although the ids it holds grow a digit now and then. An unchanged full into a
deduplication pool then finds its index's chunks in the pool."""

import json

from app.agent.archiver import backup_to
from app.formats import tarfmt

META = {"image_id": "test-image-1", "client": "unit", "policy": "p"}


def backup(image_path, selections, image_meta):
    with open(image_path, "wb") as f:
        return backup_to(f, [str(s) for s in selections], emit=lambda *a: None,
                         is_cancelled=lambda: False, image_meta=image_meta)


def tar_members(image_path):
    """(name, offset, data) of every member, read with tarfmt from the raw file."""
    with open(image_path, "rb") as f:
        data = f.read()
    out, pos = [], 0

    def read_exact(n):
        nonlocal pos
        pos += n
        return data[pos - n:pos]

    while True:
        start = pos
        m = tarfmt.read_member_header(read_exact)
        if m is None:
            return out
        out.append((m.name, start, data[pos:pos + m.size]))
        pos += tarfmt.padded(m.size)


def test_the_image_metadata_keeps_its_length_when_an_id_grows_a_digit(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x" * 3000)

    def meta_of(job_id, selection):
        return dict(META, job_id=job_id, image_id=f"me_1795826256_{job_id}",
                    selections=[selection])
    # metadata that fills its last 512-byte block with job 99: job 100's would not fit
    selection = "/" + "s" * (511 - len(json.dumps(meta_of(99, "/"), indent=1, sort_keys=True)))
    assert len(json.dumps(meta_of(99, selection), indent=1, sort_keys=True)) == 511
    starts = []
    for job_id in (99, 100, 100000):
        meta = meta_of(job_id, selection)
        backup(tmp_path / f"img{job_id}", [src], image_meta=meta)
        members = tar_members(tmp_path / f"img{job_id}")
        assert members[0][0] == b".cairn/image.json"
        assert json.loads(members[0][2]) == meta
        assert members[0][2].endswith(b"\n") and len(members[0][2]) % 4096 == 0
        starts.append([m[1] for m in members[1:]])
    # every later member (the file, the summary, the index) starts where it did
    assert starts[0] == starts[1] == starts[2]
