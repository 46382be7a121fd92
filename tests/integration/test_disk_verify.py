"""Verify of AdvancedDisk pools: `cairn images verify` and `cairn disk-pool verify` read real
images back; an intact pool verifies with status 0, one damaged data byte and one damaged tar
header are reported as exactly the two files they hit (with why) and the job ends non-zero;
an incremental's verify also reads what it takes from its full."""

import os

import pytest

from app import status
from plugins.storage.advanced_disk import image_check
from app.formats import tarfmt
from app.master import Master
from clihelp import cairn_json
from treegen import make_tree


@pytest.fixture
def backed_up(tmp_path):
    home, vol, src = tmp_path / "home", tmp_path / "vol", tmp_path / "src"
    vol.mkdir()
    make_tree(str(src))
    m = Master(str(home))
    m.config.add_host("me", local=True)
    m.create_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_schedule("p1", "full", type="full", retention="2w")
    m.config.add_schedule("p1", "incr", type="differential", retention="2w")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    yield m, home, src
    m.close()


def backup(m, schedule="full"):
    [jid] = m.start_backup("p1", schedule=schedule)
    [job] = m.wait_for([jid])
    assert job["status"] == status.OK, [x["message"] for x in m.jobs.logs(jid)]
    return m.image(job["image_id"])


def verify(m, **what):
    [job] = m.wait_for([m.start_verify(**what)])
    return job, "\n".join(x["message"] for x in m.jobs.logs(job["id"]))


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def member_start(image_path, offset):
    """Where the member's data starts and where its ustar header block starts."""
    with open(image_path, "rb") as f:
        f.seek(offset)
        n = tarfmt.read_member_header(lambda k: f.read(k)).header_bytes
    return offset + n, offset + n - tarfmt.BLOCK


def regular_files(m, img):
    with m.open_index(img) as index:
        return [e for e in index.walk("/") if e.kind == "f" and e.size > 4096
                and e.src == 0 and "sparse" not in e.path]


def test_intact_then_one_data_byte_and_one_header(backed_up):
    m, home, src = backed_up
    img = backup(m)
    job, log = verify(m, image=img["id"])
    assert job["status"] == status.OK, log
    assert job["files"] > 20 and job["bytes"] >= os.path.getsize(img["path"]) - 2 * 512
    job, log = verify(m, pool="dp1")
    assert job["status"] == status.OK and job["result"]["images"] == [], log

    files = regular_files(m, img)
    a, b = files[0], files[-1]
    data_a, _ = member_start(img["path"], a.offset)
    _, head_b = member_start(img["path"], b.offset)
    flip(img["path"], data_a + 10)
    flip(img["path"], head_b + 1)  # the name field of b's ustar header

    for what in ({"image": img["id"]}, {"pool": "dp1"}):
        job, log = verify(m, **what)
        assert job["status"] == status.IMAGE_DAMAGED, log
        [hit] = job["result"]["images"]
        assert hit["image"] == img["id"] and sorted(hit["files"]) == sorted([a.path, b.path])
        why = {d["path"]: d["reason"] for d in hit["damage"]}
        assert why[a.path] == image_check.DATA_MISMATCH
        assert "tar header is damaged" in why[b.path]
        assert a.path in log and b.path in log and "tar header" in log

    # the CLI forms of the contract, with their exit status
    doc, p = cairn_json(home, "images", "verify", img["id"], "--wait", check=False)
    assert p.returncode == status.IMAGE_DAMAGED and doc["status"] == status.IMAGE_DAMAGED, doc
    doc, p = cairn_json(home, "disk-pool", "verify", "dp1", "--wait", check=False)
    assert p.returncode == status.IMAGE_DAMAGED, (p.stdout, p.stderr)


def test_only_data_damage_is_a_checksum_mismatch_and_an_incremental_reads_its_full(backed_up):
    m, home, src = backed_up
    full = backup(m)
    with open(os.path.join(src, "new-file"), "wb") as f:
        f.write(b"new" * 5000)
    incr = backup(m, "incr")
    assert incr["sources"] == [full["id"]]
    job, log = verify(m, image=incr["id"])
    assert job["status"] == status.OK, log

    a = regular_files(m, full)[0]
    data_a, _ = member_start(full["path"], a.offset)
    flip(full["path"], data_a)
    job, log = verify(m, image=incr["id"])  # a's unchanged copy is in the full
    assert job["status"] == status.CHECKSUM_MISMATCH, log
    [hit] = job["result"]["images"]
    assert hit["image"] == incr["id"] and hit["files"] == [a.path]
    assert hit["damage"][0]["image_file"] == full["path"]
    # the pool's verify reads each image once: the damage belongs to the full
    job, log = verify(m, pool="dp1")
    assert job["status"] == status.CHECKSUM_MISMATCH
    assert [(h["image"], h["files"]) for h in job["result"]["images"]] == [(full["id"], [a.path])]


def test_a_missing_image_file_is_reported(backed_up):
    m, home, src = backed_up
    img = backup(m)
    os.unlink(img["path"])
    job, log = verify(m, pool="dp1")
    assert job["status"] == status.IMAGE_DAMAGED
    [hit] = job["result"]["images"]
    assert "cannot be opened" in hit["error"] and img["path"] in log
