"""A hostile image (as a compromised client could produce) restored through the real restore
job: nothing is written outside the target, each bad entry is refused and logged, and the
good entries still restore."""

from app.formats import tarfmt
import io
import json
import os
import tarfile

from app import status
from app.catalog_index import build_index
from app.master import Master


def add_member(tar, rows, name, data=None, kind="f", link="", row_path=None):
    ti = tarfile.TarInfo(name)
    ti.mtime = 1_700_000_000
    if kind == "l":
        ti.type, ti.linkname = tarfile.SYMTYPE, link
    elif kind == "d":
        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
    elif kind == "h":
        ti.type, ti.linkname = tarfile.LNKTYPE, link.lstrip("/")
    else:
        ti.size = len(data)
    start = tar.offset
    tar.addfile(ti, io.BytesIO(data) if data is not None else None)
    checksum = tarfmt.tree_digest(data) if kind == "f" else ""
    path = row_path or "/" + name
    rows.append([path, kind, 0o644 if kind != "d" else 0o755, 0, 0, len(data or b""),
                 ti.mtime * 10**9, start, tar.offset - start, checksum, link])


def test_hostile_entries_are_refused_and_logged(tmp_path):
    vol = tmp_path / "vol"
    (vol / "cairn-images" / "me").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "target"
    image = vol / "cairn-images" / "me" / "me_1.tar"
    rows = []
    with tarfile.open(image, "w", format=tarfile.PAX_FORMAT) as tar:
        add_member(tar, rows, "data", kind="d")
        add_member(tar, rows, "data/good.txt", b"good data")
        # a name climbing out of the target
        add_member(tar, rows, f"data/../../{outside.name}/escaped.txt", b"evil",
                   row_path=f"/data/../../{outside.name}/escaped.txt")
        # a symlink to the outside, then a file "through" it
        add_member(tar, rows, "data/link", kind="l", link=str(outside))
        add_member(tar, rows, "data/link/through.txt", b"evil")
        # a hard link to a file outside
        add_member(tar, rows, "data/hard", kind="h", link="/../../etc/passwd")
        add_member(tar, rows, "data/last.txt", b"still restored")
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1")
    build_index(m.home.index_path("me_1"), rows)
    with m.db.tx() as c:
        c.execute("INSERT INTO images(id, client, policy, schedule, schedule_type, created, "
                  "bytes, files, storage_unit, pool, storage_host, path, image_bytes, "
                  "selections, checksum) VALUES ('me_1','me','p','full','full',"
                  "'2026-01-01T00:00:00Z',0,0,'stu1','dp1','me',?,?,?,'crc32')", (str(image), image.stat().st_size,
                                                   json.dumps(["/data"])))
    jid = m.start_restore("me_1", ["/data"], str(target))
    [job] = m.wait_for([jid])
    log = "\n".join(x["message"] for x in m.jobs.logs(jid))
    assert job["status"] == status.PARTIAL, log
    assert os.listdir(outside) == [], "something was written outside the target"
    assert (target / "data" / "good.txt").read_bytes() == b"good data"
    assert (target / "data" / "last.txt").read_bytes() == b"still restored"
    assert not (target / "data" / "hard").exists()
    assert os.path.islink(target / "data" / "link")
    for bad in ("escaped.txt", "hard"):
        assert bad in log, f"{bad} was not reported:\n{log}"
    # A member below a symlink is not a directory entry of the image at all: the catalog
    # never offers it, so it never reaches the agent (whose own refusal of symlinked parents
    # is tested in tests/unit/test_extract_hostile.py).
    assert "through.txt" not in str(m.browse("me_1", "/data"))
    assert not any("through.txt" in f for _, _, fs in os.walk(tmp_path) for f in fs)
    m.close()
