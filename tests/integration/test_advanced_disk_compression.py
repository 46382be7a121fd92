"""Compressed advanced-disk images (a policy's compression: server, client or off), end to end
with a real catalog, the local storage agent and a client over the loopback sshd: each choice
restores whole and file by file, byte for byte; a compressed image is a zstd tar that the
real `tar -I zstd` lists and extracts; a damaged frame costs the files in it, each named, and
verify names them too; a damaged frame table costs a restore nothing, and verify names it;
`policy set` changes later backups while older images still restore; rebuild-index and an
import read compressed images; a lifecycle's copy is made from the tar stream and compressed
as its source is."""

import os
import shutil
import subprocess
import sysconfig

import pytest

from app import status
from app.master import Master
from clihelp import cairn
from plugins.storage.advanced_disk import zframes
from treegen import assert_trees_equal

KiB = 1 << 10
MiB = 1 << 20
HAVE_TAR_ZSTD = bool(shutil.which("tar") and shutil.which("zstd"))


def text_tree(root, nfiles=12, size=700 * KiB):
    """Files of words, each different: compressible, and more than one frame in all."""
    for i in range(nfiles):
        d = os.path.join(root, f"d{i % 3}")
        os.makedirs(d, exist_ok=True)
        line = f"file {i}: the quick brown fox jumps over the lazy dog {i * 7}\n".encode()
        with open(os.path.join(d, f"f{i:02d}.txt"), "wb") as f:
            f.write((line * (size // len(line) + 1))[:size])
    with open(os.path.join(root, "random.bin"), "wb") as f:
        f.write(os.urandom(300 * KiB))


def logs(m, jid):
    return "\n".join(x["message"] for x in m.jobs.logs(jid))


@pytest.fixture
def master(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    vol = tmp_path / "vol"
    vol.mkdir()
    m.create_storage_server("ad", type="advanced-disk", host="me")
    m.create_disk_pool("adp", server="ad", volumes=[str(vol)], high_water=100, low_water=99)
    m.config.add_storage_unit("adstu", pool="adp")
    yield m
    m.close()


def policy(m, name, src, client="me", **kw):
    m.create_policy(name, storage_unit="adstu", **kw)
    m.config.add_policy_client(name, client)
    m.config.add_policy_selection(name, src)


def backup(m, name, schedule=None):
    [job] = m.wait_for(m.start_backup(name, schedule=schedule))
    log = logs(m, job["id"])
    assert job["status"] == status.OK, log
    return m.image(job["image_id"]), log


def restore(m, image, paths, dst, **kw):
    jid = m.start_restore(image["id"], paths, str(dst), **kw)
    [job] = m.wait_for([jid])
    return job, logs(m, jid)


def tar_listing(path):
    return subprocess.run(["tar", "-I", "zstd", "-tf", path], capture_output=True,
                          check=True).stdout.decode("utf-8", "replace")


@pytest.mark.ssh
def test_server_client_and_off_restore_byte_for_byte(master, tmp_path, sshd,
                                                     sshd_as_localhost):
    m = master
    src = str(tmp_path / "src")
    text_tree(src)
    m.add_host("client1", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    m.update_object("host", "client1",  # zstandard for the client's python3
                    agent_env=f"PYTHONPATH={sysconfig.get_paths()['purelib']}")
    imgs, texts = {}, {}
    for at, client in (("off", "me"), ("server", "me"), ("client", "client1"),
                       ("server-far", "client1")):
        policy(m, at, src, client, compression=at.split("-")[0], compression_level=3)
        imgs[at], texts[at] = backup(m, at)

    # a client whose python3 lacks zstandard sends its stream plain: the storage host
    # compresses it, and the job log says why
    far = sshd_as_localhost
    m.add_host("client2", address=far.host, port=far.port, user=far.user,
               key_file=far.key_file, trust_host_key=True)
    policy(m, "client-plain", src, "client2", compression="client", compression_level=3)
    img, text = backup(m, "client-plain")
    assert img["compression"]["at"] == "server", img["compression"]
    assert "the client's Python lacks the zstandard module" in text, text

    # off: a plain tar file, as before
    assert imgs["off"]["compression"] is None
    assert not zframes.is_compressed(imgs["off"]["path"])
    for at in ("server", "client", "server-far"):
        img = imgs[at]
        c = img["compression"]
        assert zframes.is_compressed(img["path"]), at
        assert c["codec"] == "zstd" and c["level"] == 3 and c["frames"] >= 2, c
        # the stored size and the data size, both in the catalog
        assert img["image_bytes"] == os.path.getsize(img["path"]) == c["stored_bytes"]
        assert c["stored_bytes"] < 0.5 * c["tar_bytes"], c
        assert c["tar_bytes"] == os.path.getsize(imgs["off"]["path"])
        assert img["bytes"] == imgs["off"]["bytes"]
    assert imgs["server"]["compression"]["at"] == "server"
    assert imgs["server-far"]["compression"]["at"] == "server"
    assert imgs["client"]["compression"]["at"] == "client"
    assert "compression: on the client (zstd level 3) before the stream crosses" \
        in texts["client"], texts["client"]
    assert "compressing it here (zstd level 3)" in texts["server"], texts["server"]
    assert "compression: on the storage server (zstd level 3)" in texts["server-far"]

    # whole, and one file of each to another host, byte for byte
    for at, img in imgs.items():
        job, log = restore(m, img, [src], tmp_path / f"whole-{at}")
        assert job["status"] == status.OK, log
        assert_trees_equal(src, str(tmp_path / f"whole-{at}") + src)
        one = os.path.join(src, "d1", "f07.txt")
        job, log = restore(m, img, [one], tmp_path / f"one-{at}", to_host="client1")
        assert job["status"] == status.OK and job["files"] == 1, log
        with open(one, "rb") as a, open(str(tmp_path / f"one-{at}") + one, "rb") as b:
            assert a.read() == b.read()
        job, log = restore(m, img, [os.path.join(src, "d2")], tmp_path / f"dir-{at}")
        assert job["status"] == status.OK and job["files"] == 4, log

    # the real tools read a compressed image whole (scripts/setup.sh --test installs them)
    assert HAVE_TAR_ZSTD, "tar and zstd are needed: run scripts/setup.sh --test"
    for at in ("server", "client"):
        listing = tar_listing(imgs[at]["path"])
        assert ".cairn/image.json" in listing and ".cairn/index.jsonl" in listing
        assert src.lstrip("/") + "/d1/f07.txt" in listing
    out = tmp_path / "by-tar"
    out.mkdir()
    subprocess.run(["tar", "-I", "zstd", "-xf", imgs["client"]["path"], "-C", str(out)],
                   check=True)
    with open(os.path.join(src, "random.bin"), "rb") as a, \
            open(str(out) + src + "/random.bin", "rb") as b:
        assert a.read() == b.read()


def frame_holding(img, m, path):
    """(frame index, its (tar offset, length)) of the frame that holds a file's data."""
    parent, name = os.path.split(path)
    e = next(x for x in m.browse(img["id"], parent)["entries"] if x["name"] == name)
    z = zframes.ZstdImage(img["path"])
    try:
        i = z.frame_of(e["offset"] + e["length"] // 2)
        return i, z.frame_span(i), z._coffs[i], z._coffs[i + 1]
    finally:
        z.close()


def test_a_damaged_frame_costs_the_files_in_it_each_named(master, tmp_path):
    m = master
    src = str(tmp_path / "src")
    text_tree(src)
    policy(m, "p", src, compression="server")
    img, _ = backup(m, "p")
    victim = os.path.join(src, "d1", "f04.txt")
    i, (t0, tlen), c0, c1 = frame_holding(img, m, victim)
    with open(img["path"], "r+b") as f:
        f.seek((c0 + c1) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    # the files whose members lie in that frame, from the catalog index
    lost = set()
    for d in ("d0", "d1", "d2"):
        for e in m.browse(img["id"], os.path.join(src, d))["entries"]:
            if e["offset"] < t0 + tlen and t0 < e["offset"] + e["length"]:
                lost.add(os.path.join(src, d, e["name"]))
    assert victim in lost and len(lost) < 12

    job, log = restore(m, img, [src], tmp_path / "out")
    assert job["status"] == status.CHECKSUM_MISMATCH, log
    assert f"frame {i} of {img['path']}" in log and "does not decode" in log, log
    for p in lost:
        assert f"{p}: " in log, p
        assert not os.path.exists(str(tmp_path / "out") + p)
    for d, _, names in os.walk(src):
        for n in names:
            p = os.path.join(d, n)
            if p not in lost:
                with open(p, "rb") as a, open(str(tmp_path / "out") + p, "rb") as b:
                    assert a.read() == b.read(), p

    [vj] = m.wait_for([m.start_verify(image=img["id"])])
    vlog = logs(m, vj["id"])
    assert vj["status"] != status.OK, vlog
    [hit] = vj["result"]["images"]
    assert set(hit["files"]) == lost, hit
    assert "does not decode" in vlog, vlog


def test_a_damaged_frame_table_loses_nothing_in_a_restore_and_verify_names_it(master,
                                                                              tmp_path):
    m = master
    src = str(tmp_path / "src")
    text_tree(src)
    policy(m, "p", src, compression="server")
    img, _ = backup(m, "p")
    with open(img["path"], "r+b") as f:
        f.seek(-1, os.SEEK_END)       # the seek table's last byte: its magic number
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xFF]))
    job, log = restore(m, img, [src], tmp_path / "out")
    assert job["status"] == status.OK, log
    assert_trees_equal(src, str(tmp_path / "out") + src)

    [vj] = m.wait_for([m.start_verify(image=img["id"])])
    vlog = logs(m, vj["id"])
    assert vj["status"] != status.OK, vlog
    assert "frame table at the end of compressed image file" in vlog, vlog


def test_policy_set_changes_later_backups_and_older_images_still_restore(master, tmp_path):
    m = master
    src = str(tmp_path / "src")
    text_tree(src, nfiles=3, size=200 * KiB)
    policy(m, "p", src)
    assert m.policy("p")["compression"] == "off"  # the default on advanced-disk
    plain, _ = backup(m, "p")
    m.update_object("policy", "p", compression="server", compression_level="9")
    packed, log = backup(m, "p")
    assert "compression: on the storage server (zstd level 9)" in log, log
    m.update_object("policy", "p", compression="off")
    plain2, _ = backup(m, "p")
    assert plain["compression"] is None and plain2["compression"] is None
    assert packed["compression"]["level"] == 9 and zframes.is_compressed(packed["path"])
    # an incremental, compressed, whose unchanged files are in the plain full before it
    m.config.add_schedule("p", "incr", type="differential", retention="2w")
    m.update_object("policy", "p", compression="client")
    with open(os.path.join(src, "d0", "new.txt"), "wb") as f:
        f.write(b"new and changed\n" * 5000)
    incr, _ = backup(m, "p", schedule="incr")
    assert incr["sources"] == [plain2["id"]] and incr["compression"]["at"] == "server"
    for img in (plain, packed, plain2, incr):
        job, log = restore(m, img, [src], tmp_path / img["id"])
        assert job["status"] == status.OK, log
        if img is incr:
            assert_trees_equal(src, str(tmp_path / img["id"]) + src)
        else:  # made before new.txt: the same files, byte for byte
            out = str(tmp_path / img["id"]) + src
            assert job["files"] == 4, log
            for d, _, names in os.walk(out):
                for n in names:
                    with open(os.path.join(d, n), "rb") as a, \
                            open(os.path.join(src, os.path.relpath(d, out), n), "rb") as b:
                        assert a.read() == b.read(), n

    # rebuild-index reads the compressed image's members
    [rj] = m.wait_for([m.start_rebuild_index(packed["id"])])
    assert rj["status"] == status.OK, logs(m, rj["id"])
    # a copy in another pool is made from its tar stream
    vol2 = tmp_path / "vol2"
    vol2.mkdir()
    m.create_disk_pool("adp2", server="ad", volumes=[str(vol2)], high_water=100,
                       low_water=99)
    m.config.add_storage_unit("adstu2", pool="adp2")
    m.create_lifecycle("lc", ["backup:adstu:1w", "duplicate:adstu2:2w"])
    m.create_policy("lcp", lifecycle="lc", compression="client", compression_level=2)
    m.config.add_policy_client("lcp", "me")
    m.config.add_policy_selection("lcp", src)
    img, _ = backup(m, "lcp")
    assert img["compression"]["at"] == "server"  # the client is the storage host
    [dup] = m.wait_for([d["id"] for d in m.duplicate_jobs([img["job_id"]])])
    assert dup["status"] == status.OK, logs(m, dup["id"])
    copies = m.image_copies(img["id"])["copies"]
    assert len(copies) == 2 and all(c["state"] == "ok" for c in copies), copies
    # the copy is compressed as its source is, on the target's storage host
    second = copies[1]
    assert second["compression"]["at"] == "server" and second["compression"]["level"] == 2
    assert zframes.is_compressed(second["path"])
    assert second["image_bytes"] == os.path.getsize(second["path"])
    job, log = restore(m, img, [src], tmp_path / "copy2", copy=2)
    assert job["status"] == status.OK, log
    assert_trees_equal(src, str(tmp_path / "copy2") + src)

    # a damaged frame in the primary: verify finds it, the repair writes the primary again
    # from copy 2, compressed as it was
    with open(img["path"], "r+b") as f:
        f.seek(os.path.getsize(img["path"]) // 3)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    [v] = m.wait_for([m.start_verify(image=img["id"])])
    assert v["status"] != status.OK, logs(m, v["id"])
    reps = [r["job"] for r in (m.job(v["id"])["result"] or {}).get("repairs") or []]
    assert reps, logs(m, v["id"])
    [rep] = m.wait_for(reps)
    assert rep["status"] == status.OK, logs(m, rep["id"])
    again = m.image(img["id"])
    assert again["compression"]["level"] == 2 and zframes.is_compressed(again["path"])
    assert again["image_bytes"] == os.path.getsize(again["path"])
    job, log = restore(m, img, [src], tmp_path / "repaired")
    assert job["status"] == status.OK, log
    assert_trees_equal(src, str(tmp_path / "repaired") + src)


def test_an_import_records_compressed_images(master, tmp_path):
    m = master
    src = str(tmp_path / "src")
    text_tree(src, nfiles=3, size=200 * KiB)
    policy(m, "p", src, compression="server")
    img, _ = backup(m, "p")
    m.close()
    listed = cairn(str(tmp_path / "home"), "images", "list").stdout
    assert "IMAGE_BYTES" in listed and f"{img['bytes']}  {img['image_bytes']}" in listed, listed
    shown = cairn(str(tmp_path / "home"), "images", "show", img["id"]).stdout
    assert "compression      zstd level 1 on the storage server: " in shown, shown
    assert f"({img['compression']['frames']} frames)" in shown, shown
    m2 = Master(str(tmp_path / "home2"))
    try:
        m2.config.add_host("me", local=True)
        m2.create_storage_server("ad", type="advanced-disk", host="me")
        m2.create_disk_pool("adp", server="ad", volumes=[str(tmp_path / "vol")])
        [job] = m2.wait_for([m2.start_import("adp")])
        assert job["status"] == status.OK, logs(m2, job["id"])
        got = m2.image(img["id"])
        assert got["compression"]["frames"] == img["compression"]["frames"]
        assert got["image_bytes"] == img["image_bytes"] and got["bytes"] == img["bytes"]
        job, log = restore(m2, got, [src], tmp_path / "out")
        assert job["status"] == status.OK, log
        assert_trees_equal(src, str(tmp_path / "out") + src)
    finally:
        m2.close()


def test_a_compressed_image_copies_into_a_deduplicating_pool(master, tmp_path):
    """The dedup pool is sent the image's tar stream, never its frames."""
    m = master
    src = str(tmp_path / "src")
    text_tree(src, nfiles=3, size=200 * KiB)
    m.create_storage_server("dd", type="dedup", host="me", path=str(tmp_path / "dd"))
    m.create_disk_pool("ddp", server="dd", volumes=[])
    m.config.add_storage_unit("dstu", pool="ddp")
    m.create_lifecycle("lc", ["backup:adstu:1w", "duplicate:dstu:2w"])
    m.create_policy("p", lifecycle="lc", compression="server")
    m.config.add_policy_client("p", "me")
    m.config.add_policy_selection("p", src)
    img, _ = backup(m, "p")
    assert zframes.is_compressed(img["path"])
    [dup] = m.wait_for([d["id"] for d in m.duplicate_jobs([img["job_id"]])])
    assert dup["status"] == status.OK, logs(m, dup["id"])
    copy = m.image_copies(img["id"])["copies"][1]
    assert copy["pool"] == "ddp" and copy["dedup"]["bytes"] == img["compression"]["tar_bytes"]
    job, log = restore(m, img, [src], tmp_path / "out", copy=2)
    assert job["status"] == status.OK, log
    assert_trees_equal(src, str(tmp_path / "out") + src)
