"""Rebuilding a lost catalog from the pools alone (`cairn disk-pool import`), with no catalog
backup: an AdvancedDisk pool and an encrypted deduplicating pool on a storage host reached over
SSH, imported into a new home (the deduplicating pool's key given with --key-file), every point
in time of their incremental chains restored byte for byte, to another host since the client
is not configured again; a second import records nothing. On a pool of a single machine: a
damaged image metadata member and a hostile one (an image id `../x`) are refused per image
while the rest imports, an image of the older format 1 is recorded with what it lacks, partial
files and an image whose commit is in progress are left alone, and a multi-stream backup gets
its set image again."""

import json
import os
import shutil
import subprocess
import tarfile
import time

import pytest

from app import status as st
from app.master import Master
from clihelp import cairn, cairn_json
from treegen import assert_trees_equal, make_tree


def log_text(m, job_id):
    return "\n".join(x["message"] for x in m.jobs.logs(job_id))


def snapshot(src, dst):
    subprocess.run(["cp", "-a", src, dst], check=True)


def backup(m, policy, schedule=None):
    ids = m.start_backup(policy, schedule=schedule)
    [job] = m.wait_for(ids)
    assert job["status"] == st.OK, log_text(m, job["id"])
    return job["image_id"]


def chain_of(m, policy, src, base, tag):
    """A full, a differential and a cumulative of `src`, each after a change: {image id:
    the tree as it was}."""
    out = {}
    for k, schedule in enumerate(("full", "diff", "cum")):
        with open(os.path.join(src, f"{tag}-{k}.txt"), "w") as f:
            f.write(f"{tag}: written before backup {k}\n" * (100 * k + 1))
        if k == 2:
            os.unlink(os.path.join(src, f"{tag}-1.txt"))
        iid = backup(m, policy, schedule)
        out[iid] = str(base / f"expected-{iid}")
        snapshot(src, out[iid])
    return out


def add_policy(m, name, stu, selections, streams=False):
    m.config.add_policy(name, storage_unit=stu, multiple_streams=streams)
    m.config.add_policy_client(name, "me")
    for s in selections:
        m.config.add_policy_selection(name, s)
    m.config.add_schedule(name, "full", type="full", retention="2w")
    m.config.add_schedule(name, "diff", type="differential", retention="1w")
    m.config.add_schedule(name, "cum", type="cumulative", retention="3w")


def restore_and_compare(m, image_id, src, expected, dst, to_host):
    [job] = m.wait_for([m.start_restore(image_id, [src], str(dst), to_host=to_host)])
    assert job["status"] == st.OK, log_text(m, job["id"])
    assert_trees_equal(expected, str(dst) + src, check_owner=False)


@pytest.mark.ssh
def test_lose_the_home_and_import_both_pools_over_ssh(tmp_path, sshd):
    src_a, src_d = str(tmp_path / "src-a"), str(tmp_path / "src-d")
    make_tree(src_a)
    make_tree(src_d)
    vol, root = str(tmp_path / "vol"), str(tmp_path / "dedup")
    os.makedirs(vol)
    ssh = ("--address", sshd.host, "--port", sshd.port, "--user", sshd.user,
           "--key", sshd.key_file, "--trust-host-key")

    def storage(home):
        cairn(home, "host", "add", "stor", *ssh)
        cairn(home, "storage-server", "create", "ad", "--type", "advanced-disk",
              "--host", "stor")
        cairn(home, "disk-pool", "create", "adp", "--server", "ad", "--volume", vol)
        cairn(home, "storage-server", "create", "dd", "--type", "dedup", "--host", "stor",
              "--path", root, "--encrypt")
        cairn(home, "disk-pool", "create", "ddp", "--server", "dd")

    home = tmp_path / "home"
    cairn(home, "host", "add", "me", "--local")
    storage(home)
    m = Master(str(home))
    m.create_storage_unit("astu", pool="adp")
    m.create_storage_unit("dstu", pool="ddp")
    add_policy(m, "pa", "astu", [src_a])
    add_policy(m, "pd", "dstu", [src_d])
    trees = {**{i: (src_a, e) for i, e in chain_of(m, "pa", src_a, tmp_path, "a").items()},
             **{i: (src_d, e) for i, e in chain_of(m, "pd", src_d, tmp_path, "d").items()}}
    before = {i["id"]: i for i in m.images()}
    m.close()
    (tmp_path / "pool.key").write_bytes((home / "keys" / "dd.key").read_bytes())
    shutil.rmtree(home)  # no catalog backup was ever taken

    home = tmp_path / "home2"
    cairn(home, "host", "add", "here", "--local")  # not the client's name: it is not added
    storage(home)
    # the pool's key is not the one the master made for the new storage server
    doc, p = cairn_json(home, "disk-pool", "import", "ddp", "--wait", check=False)
    assert doc["status"] == st.INVALID_REQUEST, doc
    job = doc["jobs"][0]
    log = cairn(home, "jobs", "log", str(job["id"])).stdout
    assert "cannot be read" in log and "key" in log, log

    for pool, extra in (("adp", ()), ("ddp", ("--key-file", tmp_path / "pool.key"))):
        doc, _ = cairn_json(home, "disk-pool", "import", pool, *extra, "--wait")
        assert doc["status"] == st.OK, doc
        r = doc["jobs"][0]["result"]
        assert len(r["imported"]) == 3 and r["incomplete"] == [] and r["errors"] == []
        assert r["missing"]["hosts"] == ["me"]
        assert all("not a configured host" in n["note"] for n in r["notes"]
                   if "host" in n["note"])
    assert "kept as" in r["key"] and (home / "keys" / "dd.key").read_bytes() == \
        (tmp_path / "pool.key").read_bytes()

    m = Master(str(home))
    try:
        after = {i["id"]: i for i in m.images()}
        assert set(after) == set(before)
        for iid, img in before.items():
            for k in ("client", "policy", "schedule", "schedule_type", "created", "expires",
                      "bytes", "files", "base_image", "sources", "selections", "checksum"):
                assert after[iid][k] == img[k], (iid, k)
        with pytest.raises(Exception) as e:  # the client is no host of this master
            m.start_restore(next(iter(before)), [src_a], str(tmp_path / "x"))
        assert "--to-host" in e.value.hint
        for iid, (src, expected) in trees.items():
            restore_and_compare(m, iid, src, expected, tmp_path / f"r-{iid}", "here")
    finally:
        m.close()
    for pool in ("adp", "ddp"):
        doc, _ = cairn_json(home, "disk-pool", "import", pool, "--wait")
        r = doc["jobs"][0]["result"]
        assert doc["status"] == st.OK and r["imported"] == [] and r["already_known"] == 3


# ---- one machine: what is refused, skipped, or recorded with what it lacks ---------------------

def _members(path):
    with tarfile.open(path) as t:
        return {m.name: m for m in t.getmembers() if m.name.startswith(".cairn/")}


def rewrite_meta(path, change, raw=None):
    """Changes an image file's .cairn/image.json in place, keeping its length (the offsets of
    every member stay as they are)."""
    meta_member = _members(path)[".cairn/image.json"]
    with open(path, "r+b") as f:
        f.seek(meta_member.offset_data)
        old = f.read(meta_member.size)
        new = raw if raw is not None else json.dumps(change(json.loads(old))).encode()
        assert len(new) <= len(old)
        f.seek(meta_member.offset_data)
        f.write(new + b" " * (len(old) - len(new)))


def to_format_1(path):
    """The image as a Cairn of image format 1 wrote it: no summary member, and an image.json
    without what format 2 added."""
    def older(meta):
        for k in ("expires", "retention_s", "storage_unit", "pool", "stream", "set"):
            meta.pop(k, None)
        meta["format_version"] = 1
        return meta
    rewrite_meta(path, older)
    ms = _members(path)
    summary, index = ms[".cairn/summary.json"], ms[".cairn/index.jsonl"]
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:summary.offset] + data[index.offset:])


def test_damaged_hostile_partial_old_and_streamed_images(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    srcs = {}
    for name in ("a", "b", "c", "v", "s1", "s2"):
        srcs[name] = str(tmp_path / f"src-{name}")
        os.makedirs(srcs[name])
        for k in range(3):
            with open(os.path.join(srcs[name], f"f{k}.txt"), "w") as f:
                f.write(f"{name} {k}\n" * 50)
    home = tmp_path / "home"
    m = Master(str(home))
    m.config.add_host("me", local=True)
    m.create_storage_server("ad", type="advanced-disk", host="me")
    m.create_disk_pool("adp", server="ad", volumes=[str(vol)])
    m.create_storage_unit("stu", pool="adp")
    for name in ("a", "b", "c", "v"):
        add_policy(m, f"p{name}", "stu", [srcs[name]])
    add_policy(m, "ps", "stu", [srcs["s1"], srcs["s2"]], streams=True)
    a1, a2 = backup(m, "pa", "full"), backup(m, "pa", "diff")
    b1, c1, c2 = backup(m, "pb", "full"), backup(m, "pc", "full"), backup(m, "pc", "full")
    v1 = backup(m, "pv", "full")
    with open(os.path.join(srcs["v"], "f9.txt"), "w") as f:
        f.write("after the full\n")
    v2 = backup(m, "pv", "diff")
    snapshot(srcs["v"], str(tmp_path / "expected-v"))
    set_id = backup(m, "ps", "full")
    streams = [i["id"] for i in m.images(include_parts=True) if i["part_of"] == set_id]
    assert len(streams) == 2
    paths = {i["id"]: i["path"] for i in m.images(include_parts=True)}
    m.close()
    shutil.rmtree(home)

    rewrite_meta(paths[b1], None, raw=b'{"format": "cairn-image", "image_id": ')  # damaged
    rewrite_meta(paths[c1], lambda meta: dict(meta, image_id="../x"))             # hostile
    to_format_1(paths[v1])
    to_format_1(paths[v2])
    client_dir = os.path.dirname(paths[a1])
    with open(os.path.join(client_dir, ".me_1_99.tar.partial"), "wb") as f:
        f.write(b"half a backup")
    with open(os.path.join(client_dir, "notes.txt"), "w") as f:
        f.write("an administrator's notes\n")

    home = tmp_path / "home2"
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "storage-server", "create", "ad", "--type", "advanced-disk", "--host", "me")
    cairn(home, "disk-pool", "create", "adp", "--server", "ad", "--volume", vol)
    m = Master(str(home))
    try:
        # image c2's commit is in progress (its backup runs on): the import leaves it alone
        waiting = m.jobs.create("backup", client="me", policy="pc", schedule="full",
                                not_before=time.time() + 3600)
        with m.db.tx() as c:
            c.execute("INSERT INTO image_commits(image_id, job_id, storage_host, pool, partial, "
                      "final, record, started) VALUES (?,?,?,?,?,?,?,?)",
                      (c2, waiting, "me", "adp", paths[c2] + ".partial", paths[c2], "{}",
                       "2026-01-01T00:00:00Z"))
        [job] = m.wait_for([m.start_import("adp")])
        r = job["result"]
        assert job["status"] == st.IMAGE_DAMAGED, log_text(m, job["id"])
        assert sorted(r["imported"]) == sorted([a1, a2, v1, v2] + streams)
        assert r["sets"] == [set_id]
        errors = {e["image"]: e["error"] for e in r["errors"]}
        assert set(errors) == {b1, c1}
        assert "not valid JSON" in errors[b1]
        assert "'../x'" in errors[c1] and "not an image id" in errors[c1]
        assert [k["id"] for k in r["commits_pending"]] == [c2]
        skipped = {os.path.basename(s["path"]): s["why"] for s in r["skipped"]}
        assert "partial" in skipped[".me_1_99.tar.partial"]
        assert "not the name of an image" in skipped["notes.txt"]
        # nothing of the hostile image was written anywhere
        assert not os.path.exists(home / "x.cidx") and not os.path.exists(tmp_path / "x.cidx")
        assert sorted(os.listdir(home / "indexes")) == sorted(
            f"{i}.cidx" for i in r["imported"] + r["sets"])

        old = m.image(v2)
        assert old["imported"]["format_version"] == 1 and old["base_image"] == v1
        assert "its retention" in old["imported"]["lacks"]
        assert any("backup's summary" in x for x in old["imported"]["lacks"])
        assert old["files"] == 1 and old["expires"] is None
        restore_and_compare(m, v2, srcs["v"], str(tmp_path / "expected-v"), tmp_path / "rv",
                            "me")
        restore_and_compare(m, set_id, srcs["s1"], srcs["s1"], tmp_path / "rs", "me")
        assert sorted(m.image(set_id)["sources"]) == sorted(streams)
        assert {m.image(s)["part_of"] for s in streams} == {set_id}
        assert m.image(a2)["base_image"] == a1

        # the damaged ones stay out, and so does everything on a second run
        [job] = m.wait_for([m.start_import("adp")])
        assert job["result"]["imported"] == [] and job["result"]["sets"] == []
    finally:
        m.close()


def test_images_newer_than_the_catalog_backup_come_back_with_an_import(tmp_path):
    """A catalog recovered from a backup older than the pool's newest images: the import
    records those with the recovered key, chained onto the images the backup has."""
    src = str(tmp_path / "src")
    make_tree(src)
    home = tmp_path / "home"
    m = Master(str(home))
    m.config.add_host("me", local=True)
    m.create_storage_server("dd", type="dedup", host="me", path=str(tmp_path / "dedup"),
                            options={"encrypted": True})
    m.create_disk_pool("ddp", server="dd", volumes=[])
    m.create_storage_unit("dstu", pool="ddp")
    add_policy(m, "pd", "dstu", [src])
    full = backup(m, "pd", "full")
    [job] = m.wait_for([m.start_catalog_backup("dstu", b"a-long-passphrase")])
    assert job["status"] == st.OK, log_text(m, job["id"])
    later = chain_of(m, "pd", src, tmp_path, "later")   # a full, a diff and a cum after it
    m.close()
    shutil.rmtree(home)

    (tmp_path / "pass").write_bytes(b"a-long-passphrase\n")
    doc, _ = cairn_json(home, "catalog", "recover", "--from", tmp_path / "dedup",
                        "--passphrase-file", tmp_path / "pass")
    assert doc["images"] == 1 and doc["keys_restored"] == ["dd"]
    doc, _ = cairn_json(home, "disk-pool", "import", "ddp", "--wait")
    r = doc["jobs"][0]["result"]
    assert doc["status"] == st.OK and sorted(r["imported"]) == sorted(later), r
    assert r["already_known"] == 1 and r["key"] is None and r["missing"]["hosts"] == []
    m = Master(str(home))
    try:
        assert m.image(full)["imported"] is None
        for iid, expected in later.items():
            restore_and_compare(m, iid, src, expected, tmp_path / f"r-{iid}", "me")
    finally:
        m.close()
