"""A restore goes past damage in the image: one bad bit in one tar header, one bad byte in a
chunk of a deduplicating pool that three files share, an image cut short. Only the files
whose data is damaged are lost, each is named in the log with the reason, every other file
comes back byte for byte, and the job ends with the damage status (61), never 0."""

import os
import random

import pytest

from app import status
from plugins.storage.dedup.ingest import open_store
from plugins.storage.dedup.recipe import read_recipe
from plugins.storage.dedup.store import RECORD_HEADER
from app.master import Master

KiB = 1 << 10
MiB = 1 << 20


def small_tree(src, nfiles, seed=1):
    rnd = random.Random(seed)
    for i in range(nfiles):
        d = src / f"d{i % 20:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}").write_bytes(rnd.randbytes(rnd.randrange(200, 3 * KiB)))


def files_of(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def logs(m, jid):
    return "\n".join(x["message"] for x in m.jobs.logs(jid))


def entry_of(m, image, path):
    parent, name = os.path.split(path)
    return next(e for e in m.browse(image["id"], parent)["entries"] if e["name"] == name)


def restored(m, image, src, out, **kw):
    jid = m.start_restore(image["id"], [str(src)], str(out), **kw)
    [job] = m.wait_for([jid])
    return job, logs(m, jid), files_of(out / str(src).lstrip("/"))


@pytest.fixture
def master(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    yield m
    m.close()


def advanced_disk(m, tmp_path, src):
    vol = tmp_path / "vol"
    vol.mkdir()
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)], high_water=100, low_water=99)
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    [jid] = m.start_backup("p1")
    [job] = m.wait_for([jid])
    assert job["status"] == status.OK, logs(m, jid)
    return m.image(job["image_id"])


@pytest.mark.parametrize("streams", [1, 2])
def test_one_bad_bit_in_a_tar_header_costs_one_file(master, tmp_path, streams):
    m = master
    src = tmp_path / "src"
    small_tree(src, 2000)
    image = advanced_disk(m, tmp_path, src)
    victim = src / "d07" / "f01007"
    e = entry_of(m, image, str(victim))
    with open(image["path"], "r+b") as f:
        f.seek(e["offset"] + 130)  # in the header's mode and owner fields
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x04]))
    job, log, got = restored(m, image, src, tmp_path / "out", streams=streams)
    want = files_of(src)
    lost = os.path.relpath(victim, src)
    assert job["status"] == status.CHECKSUM_MISMATCH, log
    assert job["files"] == len(want) - 1, log
    assert f"{victim}: not restored: its header in the image is damaged" in log, log
    assert "1 item(s) not restored because their data in the image is damaged" in log
    assert set(got) == set(want) - {lost}
    assert all(got[k] == want[k] for k in got)


def test_an_image_cut_short_restores_what_it_still_holds(master, tmp_path):
    m = master
    src = tmp_path / "src"
    small_tree(src, 400)
    image = advanced_disk(m, tmp_path, src)
    cut = entry_of(m, image, str(src / "d10" / "f00210"))["offset"] + 700
    with open(image["path"], "r+b") as f:
        f.truncate(cut)
    job, log, got = restored(m, image, src, tmp_path / "out")
    want = files_of(src)
    assert job["status"] == status.CHECKSUM_MISMATCH, log
    assert got and len(got) < len(want)
    assert all(got[k] == want[k] for k in got)
    # every file lost is named, with the reason
    for k in set(want) - set(got):
        assert f"{src / k}: " in log, k
    assert "is cut short" in log


def dedup_pool(m, tmp_path, src, to_host="me"):
    pool = tmp_path / "pool"
    m.create_storage_server("dd", type="dedup", host="me", path=str(pool))
    m.create_disk_pool("ddp", server="dd", volumes=[])
    m.config.add_storage_unit("dstu", pool="ddp")
    m.config.add_policy("dp", storage_unit="dstu")
    m.config.add_policy_client("dp", "me")
    m.config.add_policy_selection("dp", str(src))
    [jid] = m.start_backup("dp")
    [job] = m.wait_for([jid])
    assert job["status"] == status.OK, logs(m, jid)
    return pool, m.image(job["image_id"])


def flip_the_chunk_at(pool, image, offset):
    """Rots one byte of the stored chunk that holds stream byte `offset` of the image;
    returns its fingerprint."""
    recipe = read_recipe(image["path"])
    fp = recipe.entry(recipe.index_at(offset)).fp
    store = open_store(str(pool))
    loc = store.locate(fp)
    path = store.container_path(loc.container)
    with open(path, "r+b") as f:
        f.seek(loc.offset + RECORD_HEADER.size + loc.stored_length // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    return recipe, fp


@pytest.mark.ssh
@pytest.mark.parametrize("to", ["same-host", "over-ssh"])
def test_one_bad_byte_in_a_shared_chunk_costs_the_files_that_use_it(master, tmp_path, sshd,
                                                                    to):
    m = master
    src = tmp_path / "src"
    small_tree(src, 300)
    same = random.Random(7).randbytes(6 * MiB)
    for name in ("a.bin", "b.bin", "c.bin"):  # one content three times: shared chunks
        (src / name).write_bytes(same)
    pool, image = dedup_pool(m, tmp_path, src)
    a = entry_of(m, image, str(src / "a.bin"))
    recipe, fp = flip_the_chunk_at(pool, image, a["offset"] + a["length"] // 2)
    users = [n for n in ("a.bin", "b.bin", "c.bin")
             if any(recipe.entry(recipe.index_at(x)).fp == fp
                    for e in [entry_of(m, image, str(src / n))]
                    for x in range(e["offset"], e["offset"] + e["length"], 64 * KiB))]
    assert users == ["a.bin", "b.bin", "c.bin"], "the chunk is not shared by the three"
    kw = {}
    if to == "over-ssh":
        m.add_host("far", address=sshd.host, port=sshd.port, user=sshd.user,
                   key_file=sshd.key_file, trust_host_key=True)
        kw["to_host"] = "far"
    job, log, got = restored(m, image, src, tmp_path / "out", **kw)
    want = files_of(src)
    assert job["status"] == status.CHECKSUM_MISMATCH, log
    assert set(got) == set(want) - set(users), sorted(set(want) - set(got))
    assert all(got[k] == want[k] for k in got)
    for n in users:
        assert f"{src / n}: checksum mismatch: the file was not restored" in log, log
    assert f"chunk {fp.hex()}" in log and "damaged" in log, log
