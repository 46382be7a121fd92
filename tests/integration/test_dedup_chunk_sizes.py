"""Chunk sizes of a deduplicating storage server changed for new data (`cairn storage-server
set NAME avg_chunk 256K`): the next backups cut with the new sizes, server-side and on a
client reached over the loopback sshd, the job log says which sizes; images stored before
keep restoring byte for byte; bad values are refused with a clear message and change
nothing."""

import json
import os
import random
import sysconfig

import pytest

from app import status
from app.master import Master
from app.cli import main as cli_main
from plugins.storage import registry
from plugins.storage.dedup.recipe import read_recipe
from treegen import assert_trees_equal

KiB, MiB = 1 << 10, 1 << 20


def write_tree(root, seed, nfiles=3, size=2 * MiB):
    """Few large files of random bytes: their chunks are cut by content, not by file ends."""
    rnd = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    for i in range(nfiles):
        with open(os.path.join(root, f"f{i}.bin"), "wb") as f:
            f.write(rnd.randbytes(size))


def backup(m, files_cache=True):
    [jid] = m.start_backup("dp", files_cache=files_cache)
    [job] = m.wait_for([jid])
    log = "\n".join(x["message"] for x in m.jobs.logs(jid))
    assert job["status"] == status.OK, log
    return m.image(job["image_id"]), log


def restore(m, image, src, to):
    jid = m.start_restore(image["id"], [src], str(to), to_host="me")
    [job] = m.wait_for([jid])
    assert job["status"] == status.OK, [x["message"] for x in m.jobs.logs(jid)]
    return str(to) + src


def restored(m, image, src, to):
    """The image restores the tree as it is now, byte for byte (and its metadata)."""
    assert_trees_equal(src, restore(m, image, src, to))


def mean_chunk(image):
    """The image's average chunk, from what its recipe lists (every chunk it references)."""
    r = read_recipe(image["path"])
    return r.size / len(r)


@pytest.fixture
def master(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    yield m
    m.close()


def configure(m, pool, src, client="me", dedup="server"):
    m.create_storage_server("dd", type="dedup", host="me", path=pool)
    m.create_disk_pool("ddp", server="dd", volumes=[])
    m.config.add_storage_unit("dstu", pool="ddp")
    m.config.add_policy("dp", storage_unit="dstu", dedup=dedup)
    m.config.add_schedule("dp", "full", type="full", retention="2w")
    m.config.add_policy_client("dp", client)
    m.config.add_policy_selection("dp", src)


def test_new_chunk_sizes_cut_the_next_backup_and_old_images_still_restore(tmp_path, master):
    m = master
    src = str(tmp_path / "src")
    write_tree(src, seed=1)
    configure(m, str(tmp_path / "pool"), src)
    first, log1 = backup(m)
    assert "chunks of 512 KiB on average (128 KiB to 2 MiB)" in log1, log1
    assert 256 * KiB < mean_chunk(first) < 1 * MiB

    server = m.update_object("storage-server", "dd", min_chunk="16K", avg_chunk="64K",
                             max_chunk=256 * KiB)
    assert {k: server["options"][k] for k in ("min_size", "avg_size", "max_size")} == \
        {"min_size": 16 * KiB, "avg_size": 64 * KiB, "max_size": 256 * KiB}

    # new data is cut with the new sizes; the files cache keeps the unchanged files' chunks
    write_tree(os.path.join(src, "new"), seed=9, nfiles=1)
    second, log2 = backup(m)
    assert "chunks of 64 KiB on average (16 KiB to 256 KiB)" in log2, log2
    s = second["dedup"]
    assert s["read_bytes"] < 3 * MiB and s["dedup_ratio"] > 60, s
    assert 32 * KiB < s["new_bytes"] / s["new_chunks"] < 128 * KiB, s

    # the same data read again: all of it cut with the new sizes, so little of what was
    # cut with the old ones matches
    third, _ = backup(m, files_cache=False)
    assert 32 * KiB < mean_chunk(third) < 128 * KiB
    assert third["dedup"]["chunks"] > 4 * first["dedup"]["chunks"], (first, third)
    assert third["dedup"]["dedup_ratio"] < 50, third["dedup"]
    assert read_recipe(third["path"]).meta["chunker"]["avg_size"] == 64 * KiB
    assert read_recipe(first["path"]).meta["chunker"]["avg_size"] == 512 * KiB
    # and a full after it, cut the same way, finds all of it in the pool
    fourth, _ = backup(m, files_cache=False)
    assert fourth["dedup"]["dedup_ratio"] > 99, fourth["dedup"]

    old = restore(m, first, src, tmp_path / "r1")
    assert sorted(os.listdir(old)) == ["f0.bin", "f1.bin", "f2.bin"]
    for name in os.listdir(old):
        with open(os.path.join(old, name), "rb") as a, \
                open(os.path.join(src, name), "rb") as b:
            assert a.read() == b.read(), name
    restored(m, second, src, tmp_path / "r2")
    restored(m, third, src, tmp_path / "r3")


@pytest.mark.ssh
@pytest.mark.parametrize("mode", ["server", "client"])
def test_a_client_over_ssh_is_cut_with_the_new_sizes(tmp_path, master, sshd, mode):
    """server: the client sends a plain stream, the storage host cuts it; client: the client
    cuts it and sends the chunks the pool lacks."""
    m = master
    src = str(tmp_path / "src")
    write_tree(src, seed=2, nfiles=2)
    m.add_host("client1", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    if mode == "client":
        # the chunking accelerator reaches the agent's python3 as an admin would add it
        m.update_object("host", "client1",
                        agent_env=f"PYTHONPATH={sysconfig.get_paths()['purelib']}")
    configure(m, str(tmp_path / "pool"), src, client="client1", dedup=mode)
    first, _ = backup(m)
    m.update_object("storage-server", "dd", avg_chunk="256K")
    second, log = backup(m, files_cache=False)
    assert f"{mode}-side deduplication" in log and second["dedup"]["mode"] == mode, log
    assert "chunks of 256 KiB on average (128 KiB to 2 MiB)" in log, log
    assert mean_chunk(second) < 0.75 * mean_chunk(first), (mean_chunk(first),
                                                           mean_chunk(second))
    assert read_recipe(second["path"]).meta["chunker"]["avg_size"] == 256 * KiB
    restored(m, first, src, tmp_path / "r1")
    restored(m, second, src, tmp_path / "r2")


def run_cli(capsys, home, *args):
    """The `cairn` command, run in this process (the same parser and master)."""
    capsys.readouterr()
    code = cli_main(["--home", str(home), *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def servers(capsys, home):
    code, out, _ = run_cli(capsys, home, "storage-server", "list", "--json")
    assert code == 0
    return {s["name"]: s for s in json.loads(out)["storage_servers"]}


def test_bad_chunk_sizes_are_refused_and_change_nothing(tmp_path, capsys):
    home = tmp_path / "home"
    for args in (("host", "add", "me", "--local"),
                 ("storage-server", "create", "dd", "--type", "dedup", "--host", "me",
                  "--path", tmp_path / "pool"),
                 ("storage-server", "create", "ad", "--type", "advanced-disk", "--host", "me",
                  "--path", tmp_path / "disk")):
        assert run_cli(capsys, home, *args)[0] == 0
    before = servers(capsys, home)
    for args, said in (
            (("dd", "avg_chunk", "64K"), "avg_chunk 64 KiB must be larger than min_chunk, "
                                         "128 KiB on the server now"),
            (("dd", "avg_chunk", "300K"), "avg_chunk 300 KiB is not a power of two"),
            (("dd", "max_chunk", "32M"), "max_chunk 32 MiB is outside 1 KiB to 16 MiB"),
            (("dd", "min_chunk", "1001"), "min_chunk 1001 bytes is odd"),
            (("dd", "avg_chunk", "lots"), "avg_chunk 'lots' is not a size"),
            # the first pair is good, the second is not: neither is kept
            (("dd", "min_chunk", "32K", "max_chunk", "256K"),
             "max_chunk 256 KiB must be larger than avg_chunk, 512 KiB on the server now"),
            (("dd", "avg_chunk", "1M", "max_chunk"), "setting 'max_chunk' has no value"),
            (("dd", "compression", "9"), "min_chunk, avg_chunk, max_chunk, comment"),
            (("ad", "avg_chunk", "256K"), "'avg_chunk' is a setting of dedup and cloud storage "
                                          "servers; storage server 'ad' is advanced-disk"),
            (("nothere", "avg_chunk", "256K"), "no storage server named 'nothere'")):
        code, out, err = run_cli(capsys, home, "storage-server", "set", *args)
        assert code != 0 and said in err and out == "", (args, err)
    assert servers(capsys, home) == before

    code, out, _ = run_cli(capsys, home, "storage-server", "set", "dd", "min_chunk", "64K",
                           "avg_chunk", "256K", "max_chunk", "1M", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["name"] == "dd" and doc["options"]["avg_size"] == 256 * KiB
    code, out, _ = run_cli(capsys, home, "storage-server", "set", "dd", "avg_chunk", "128K")
    assert code == 0 and "chunks of 128 KiB on average (64 KiB to 1 MiB)" in out, out
    dd = servers(capsys, home)["dd"]["options"]
    assert (dd["min_size"], dd["avg_size"], dd["max_size"]) == (64 * KiB, 128 * KiB, 1 * MiB)
    # a new master reads the change from the catalog file
    m = Master(str(home))
    try:
        assert m.storage_server("dd")["options"]["avg_size"] == 128 * KiB
    finally:
        m.close()


def test_a_cloud_server_changes_its_chunk_sizes_and_keeps_its_bucket():
    cloud = registry.get("cloud")
    options = cloud.check_options({"endpoint": "http://127.0.0.1:9000", "bucket": "bucket1",
                                   "prefix": "site1", "encrypted": True})
    changed = cloud.change_options({"name": "cs", "options": json.loads(json.dumps(options))},
                                   {"avg_chunk": "1M", "max_chunk": "4M"})
    assert changed == dict(options, avg_size=1 * MiB, max_size=4 * MiB)
    assert cloud.check_options(changed) == changed
