"""Deduplicating pools end to end, with clients reached over the loopback sshd: server-side
and client-side deduplication, byte-for-byte restores, the deduplication rate of an unchanged
second full, expiry then space reclaim, verify finding a corrupted container, a storage agent
killed in the middle of a backup, concurrent jobs, and encryption at rest."""

import os
import threading
import time

import pytest

from app import status
from app.agent.restore_io import suits_target
from app.master import Master
from clihelp import cairn, cairn_json
from treegen import assert_trees_equal

MB = 1 << 20


def write_tree(root, seed, nfiles=12, size=600 * 1024, shared=None):
    """Files of pseudo-random, partly compressible bytes; `shared` (bytes) is written into
    every tree alike so that two clients' data overlaps."""
    import random
    rnd = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    for i in range(nfiles):
        d = os.path.join(root, f"d{i % 3}")
        os.makedirs(d, exist_ok=True)
        words = b" ".join(rnd.choice([b"alpha", b"beta", b"gamma", b"delta", b"omega"])
                          for _ in range(size // 12))
        data = rnd.randbytes(size // 2) + words[:size - size // 2]
        with open(os.path.join(d, f"f{i}.bin"), "wb") as f:
            f.write(data)
    if shared is not None:
        with open(os.path.join(root, "shared.bin"), "wb") as f:
            f.write(shared)
    with open(os.path.join(root, "small.txt"), "w") as f:
        f.write("a small file\n")


def pool_bytes(root):
    total = 0
    for d, _, files in os.walk(root):
        for f in files:
            total += os.path.getsize(os.path.join(d, f))
    return total


def add_ssh_host(m, name, server, address=None):
    m.add_host(name, address=address or server.host, port=server.port, user=server.user,
               key_file=server.key_file, trust_host_key=True)


def configure(m, pool_root, *, storage_host="me", encrypted=False, dedup="server",
              max_jobs=1):
    opts = {"encrypted": True} if encrypted else None
    srv = m.create_storage_server("dd", type="dedup", host=storage_host, path=pool_root,
                                  options=opts)
    m.create_disk_pool("ddp", server="dd", volumes=[])
    m.config.add_storage_unit("dstu", pool="ddp", max_concurrent_jobs=max_jobs)
    m.config.add_policy("dp", storage_unit="dstu", dedup=dedup)
    m.config.add_schedule("dp", "full", type="full", retention="2w")
    return srv


def backup(m, policy="dp", client=None):
    [jid] = m.start_backup(policy, client=client)
    [job] = m.wait_for([jid])
    assert job["status"] == status.OK, [x["message"] for x in m.jobs.logs(jid)]
    return job


def restore(m, image_id, path, to, to_host="me"):
    jid = m.start_restore(image_id, [path], to, to_host=to_host)
    [job] = m.wait_for([jid])
    assert job["status"] == status.OK, [x["message"] for x in m.jobs.logs(jid)]
    return job


@pytest.fixture
def master(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    yield m
    m.close()


@pytest.mark.ssh
@pytest.mark.parametrize("mode", ["server", "client"])
def test_dedup_backup_over_ssh_restores_byte_for_byte_and_repeats_at_99_percent(
        tmp_path, master, sshd, mode):
    m = master
    src, pool = str(tmp_path / "src"), str(tmp_path / "pool")
    write_tree(src, seed=1)
    add_ssh_host(m, "client1", sshd)
    configure(m, pool, dedup=mode)
    m.config.add_policy_client("dp", "client1")
    m.config.add_policy_selection("dp", src)
    if mode == "client":
        # The agent runs the host's python3; the chunking accelerator comes the way an admin
        # would add it there: this test environment's packages on the agent's PYTHONPATH.
        import sysconfig
        m.update_object("host", "client1",
                        agent_env=f"PYTHONPATH={sysconfig.get_paths()['purelib']}")

    first = backup(m)
    log = "\n".join(x["message"] for x in m.jobs.logs(first["id"]))
    assert ("client-side deduplication" if mode == "client" else
            "server-side deduplication") in log, log
    assert first["dedup_ratio"] is not None and first["dedup_ratio"] < 50
    img1 = m.image(first["image_id"])
    assert img1["dedup"]["mode"] == mode and img1["dedup"]["new_chunks"] > 0
    assert img1["path"].endswith(".recipe") and os.path.isfile(img1["path"])
    size1 = pool_bytes(pool)

    second = backup(m)
    assert second["dedup_ratio"] >= 99.0, second
    grown = pool_bytes(pool) - size1
    assert grown < 0.01 * second["bytes"], (grown, second["bytes"])
    img2 = m.image(second["image_id"])
    if mode == "client":
        # only new chunks crossed the network
        assert img2["dedup"]["sent_bytes"] < 0.01 * second["bytes"], img2["dedup"]

    # browse through the catalog index, then restore to another location byte for byte
    listing = m.browse(img2["id"], src)
    assert {e["name"] for e in listing["entries"]} >= {"d0", "small.txt"}
    dst = str(tmp_path / "dst")
    rj = restore(m, img2["id"], src, dst, to_host="client1")
    assert_trees_equal(src, dst + src)
    # the 600 KiB files went past the page cache where the target's file system allows it
    direct = [x["message"] for x in m.jobs.logs(rj["id"]) if "O_DIRECT" in x["message"]]
    assert bool(direct) == suits_target(dst), direct

    # the second full took the unchanged files from the first image without reading them
    log2 = "\n".join(x["message"] for x in m.jobs.logs(second["id"]))
    assert "files cache: 13 unchanged files (" in log2, log2
    assert f"taken from image {img1['id']} without reading them" in log2, log2
    assert img2["base_image"] is None and not img2.get("image_deps")

    # changes the files cache must see: content rewritten in place at the same size and
    # mtime (the change time differs), a file touched only, one grown, one gone, one new
    victim = os.path.join(src, "d0", "f0.bin")
    st0 = os.stat(victim)
    with open(victim, "r+b") as f:
        f.seek(1000)
        f.write(b"CHANGED IN PLACE")
    os.utime(victim, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    os.utime(os.path.join(src, "d1", "f1.bin"))
    with open(os.path.join(src, "small.txt"), "a") as f:
        f.write("one more line\n")
    os.remove(os.path.join(src, "d2", "f2.bin"))
    with open(os.path.join(src, "d2", "new.bin"), "wb") as f:
        f.write(os.urandom(70_000))
    third = backup(m)
    log3 = "\n".join(x["message"] for x in m.jobs.logs(third["id"]))
    assert "9 unchanged files" in log3, log3
    dst3 = str(tmp_path / "dst3")
    restore(m, third["image_id"], src, dst3, to_host="client1")
    assert_trees_equal(src, dst3 + src)

    # without the files cache every file is read, and chunking alone finds them in the pool
    [jid] = m.start_backup("dp", files_cache=False)
    [fourth] = m.wait_for([jid])
    assert fourth["status"] == status.OK
    log4 = "\n".join(x["message"] for x in m.jobs.logs(jid))
    assert "asked to read every file" in log4 and "without reading" not in log4, log4
    assert fourth["dedup_ratio"] >= 99.0, fourth

    if mode == "client":
        # without the accelerator the client sends its stream whole, and says so
        m.update_object("host", "client1", agent_env="")
        fifth = backup(m)
        log5 = "\n".join(x["message"] for x in m.jobs.logs(fifth["id"]))
        assert "needs the pyfastcdc package on this host, which it lacks" in log5, log5
        img5 = m.image(fifth["image_id"])
        assert img5["dedup"]["mode"] == "server" and fifth["dedup_ratio"] >= 99.0
        dst5 = str(tmp_path / "dst5")
        restore(m, img5["id"], src, dst5, to_host="client1")
        assert_trees_equal(src, dst5 + src)


@pytest.mark.ssh
@pytest.mark.ssh
def test_files_cache_with_a_lost_base_image_reads_every_file(tmp_path, master, sshd):
    m = master
    src, pool = str(tmp_path / "src"), str(tmp_path / "pool")
    write_tree(src, seed=3, nfiles=4)
    add_ssh_host(m, "client1", sshd)
    configure(m, pool)
    m.config.add_policy_client("dp", "client1")
    m.config.add_policy_selection("dp", src)
    first = backup(m)
    os.remove(m.image(first["image_id"])["path"])  # the base image's recipe is gone
    second = backup(m)
    log = "\n".join(x["message"] for x in m.jobs.logs(second["id"]))
    assert "files cache not used, every file is read" in log and "is missing" in log, log
    assert "without reading them" not in log and second["dedup_ratio"] >= 99.0, log
    dst = str(tmp_path / "dst")
    restore(m, second["image_id"], src, dst, to_host="client1")
    assert_trees_equal(src, dst + src)


def test_cli_contract_dedup_type_and_ratio_in_job_json(tmp_path, sshd):
    home, src, pool = tmp_path / "home", str(tmp_path / "src"), str(tmp_path / "pool")
    write_tree(src, seed=2, nfiles=4)
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "storage-server", "create", "dd", "--type", "dedup", "--host", "me",
          "--path", pool, "--avg-chunk", "256K")
    servers, _ = cairn_json(home, "storage-server", "list")
    assert servers["storage_servers"][0]["options"]["avg_size"] == 256 * 1024
    cairn(home, "disk-pool", "create", "ddp", "--server", "dd", "--compact-below", "40")
    doc, _ = cairn_json(home, "disk-pool", "set", "ddp", "compact_below", "30")
    assert doc["compact_below"] == 30
    p = cairn(home, "disk-pool", "set", "ddp", "compact_below", "101", check=False)
    assert p.returncode == status.INVALID_REQUEST and "compaction threshold" in p.stderr
    cairn(home, "storage-unit", "create", "dstu", "--pool", "ddp")
    cairn(home, "policy", "create", "dp", "--storage-unit", "dstu", "--dedup", "client")
    cairn(home, "policy", "add-schedule", "dp", "full", "--type", "full")
    cairn(home, "policy", "add-client", "dp", "me")
    cairn(home, "policy", "add-selection", "dp", src)
    for _ in range(2):
        doc, _ = cairn_json(home, "backup", "dp", "--wait")
        assert doc["status"] == 0, doc
    assert doc["jobs"][0]["dedup_ratio"] >= 99.0
    jobs, _ = cairn_json(home, "jobs", "list")
    assert all("dedup_ratio" in j for j in jobs["jobs"])
    usage, _ = cairn_json(home, "disk-pool", "usage", "ddp")
    assert usage["chunks"] > 0 and usage["stored_bytes"] > 0
    # a second pool on the same dedup server is refused, clearly
    p = cairn(home, "disk-pool", "create", "other", "--server", "dd", check=False)
    assert p.returncode == status.INVALID_REQUEST and "already has its disk pool" in p.stderr


def backed_up_tree(m, tmp_path, seed, **tree):
    """A tree written with write_tree(**tree), a dedup pool, policy "dp" of this host backing
    the tree up, and its first full. Returns (src, pool, job)."""
    src, pool = str(tmp_path / "src"), str(tmp_path / "pool")
    write_tree(src, seed=seed, **tree)
    configure(m, pool)
    m.config.add_policy_client("dp", "me")
    m.config.add_policy_selection("dp", src)
    return src, pool, backup(m)


def restarted_params(master, job_id):
    """The parameters a restart gives a restore job that failed (the restart is canceled)."""
    master.jobs.claim(job_id, "test")
    master.jobs.finish(job_id, status.VOLUME_UNAVAILABLE, "the target was not there")
    [again] = master.restart_job(job_id)
    master.jobs.request_cancel(again["id"])
    return again["params"]


def restore_logs(master, img, src, tmp_path, options):
    """Restores src from image img once per entry of options (name -> start_restore keyword
    arguments), each to a directory of its own, checks each tree, and returns each job's log
    as one text by name."""
    logs = {}
    for name, kw in options.items():
        dst = str(tmp_path / f"dst-{name}")
        jid = master.start_restore(img, [src], dst, **kw)
        [job] = master.wait_for([jid])
        assert job["status"] == status.OK, [x["message"] for x in master.jobs.logs(jid)]
        assert_trees_equal(src, dst + src)
        logs[name] = "\n".join(x["message"] for x in master.jobs.logs(jid))
    return logs


def test_a_restore_with_direct_io_off_goes_through_the_page_cache(tmp_path, master):
    """The restore's direct I/O choice: "off" writes every file through the page cache,
    "auto" the large ones past it where the target's file system suits it; both give the
    files back byte for byte, an unknown choice is refused, a restart keeps the choice."""
    from app.errors import ValidationError
    src, pool, first = backed_up_tree(master, tmp_path, seed=7)
    img = first["image_id"]
    with pytest.raises(ValidationError, match="direct I/O choice"):
        master.start_restore(img, [src], str(tmp_path / "x"), direct_io="never")
    failed = master.start_restore(img, [src], str(tmp_path / "x"), direct_io="off")
    assert restarted_params(master, failed)["direct_io"] == "off"
    logs = restore_logs(master, img, src, tmp_path,
                        {choice: {"direct_io": choice} for choice in ("off", "auto")})
    assert "direct I/O off" in logs["off"] and "O_DIRECT" not in logs["off"], logs["off"]
    assert "direct I/O off" not in logs["auto"]
    assert ("O_DIRECT" in logs["auto"]) == suits_target(str(tmp_path)), logs["auto"]


def test_a_restore_in_parallel_streams_through_the_master(tmp_path, monkeypatch):
    """A host whose agent is told to restore in two streams (CAIRN_RESTORE_STREAMS): the job
    says so in its log and the tree comes back byte for byte."""
    monkeypatch.setenv("CAIRN_RESTORE_STREAMS", "2")
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        src, pool, first = backed_up_tree(m, tmp_path, seed=11)
        dst = str(tmp_path / "dst")
        job = restore(m, first["image_id"], src, dst)
        assert_trees_equal(src, dst + src)
        log = "\n".join(x["message"] for x in m.jobs.logs(job["id"]))
        assert "restored in 2 parallel streams" in log, log
        assert job["files"] == sum(len(f) for _, _, f in os.walk(src)), job
    finally:
        m.close()


def test_the_number_of_restore_streams_chosen_per_restore(tmp_path, master, monkeypatch):
    """--streams / start_restore(streams=N) sets the number of processes of one restore,
    whatever its size and the host's default: the log says it was asked for and how many
    ran, a restart keeps it, a number out of range is refused."""
    from app.errors import ValidationError
    monkeypatch.delenv("CAIRN_RESTORE_STREAMS", raising=False)
    src, pool, first = backed_up_tree(master, tmp_path, seed=12)
    img = first["image_id"]
    for bad in (0, 17, "2", True):
        with pytest.raises(ValidationError, match="parallel restore streams"):
            master.start_restore(img, [src], str(tmp_path / "x"), streams=bad)
    failed = master.start_restore(img, [src], str(tmp_path / "x"), streams=3)
    assert restarted_params(master, failed)["parallel_streams"] == 3
    logs = restore_logs(master, img, src, tmp_path, {n: {"streams": n} for n in (2, 1)})
    # a tree far below the 64 MiB the host asks for before it cuts a restore by itself
    assert "parallel streams asked for: 2" in logs[2]
    assert "restored in 2 parallel streams" in logs[2], logs[2]
    assert "parallel streams" not in logs[1].replace("parallel streams asked for: 1", "")


def test_cli_restore_streams(tmp_path, master):
    home = master.home.root
    src, pool, first = backed_up_tree(master, tmp_path, seed=13)
    img = first["image_id"]
    for bad, says in (("many", "neither auto nor a number"), ("0", "from 1 to 16")):
        p = cairn(home, "restore", img, "--path", src, "--to", str(tmp_path / "x"),
                  "--streams", bad, check=False)
        assert p.returncode == status.INVALID_REQUEST and says in p.stderr, p.stderr
    dst = str(tmp_path / "dst")
    doc, _ = cairn_json(home, "restore", img, "--path", src, "--to", dst, "--streams", "2",
                        "--wait")
    job = doc["jobs"][0]
    assert doc["status"] == 0 and job["params"]["parallel_streams"] == 2, doc
    assert "restored in 2 parallel streams" in cairn(home, "jobs", "log", str(job["id"])).stdout
    assert_trees_equal(src, dst + src)


def flip_a_byte_of_the_first_container(pool):
    """Rots one byte in the middle of the pool's first container; returns its file name."""
    containers = os.path.join(pool, "containers")
    name = sorted(n for n in os.listdir(containers) if n.endswith(".ctr"))[0]
    path = os.path.join(containers, name)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    return name


def two_fulls_sharing_one_file(m, tmp_path, seed):
    """Two fulls of a tree of six files, five of them replaced in between: the second image
    shares one file with the first, so once the first goes most of its container is dead
    (compaction takes containers less than half alive by default). Returns (src, first
    job, second job)."""
    src, pool, first = backed_up_tree(m, tmp_path, seed, nfiles=6)
    for i in range(5):
        with open(os.path.join(src, f"d{i % 3}", f"f{i}.bin"), "wb") as f:
            f.write(os.urandom(600 * 1024))
    return src, first, backup(m)


def test_expiry_then_reclaim_frees_what_only_the_expired_image_used(tmp_path, master):
    m = master
    src, first, second = two_fulls_sharing_one_file(m, tmp_path, seed=3)
    assert 5 < second["dedup_ratio"] < 50, second
    before = m.pool_usage("ddp")

    m.expire_image(first["image_id"])
    # expiring a dedup image queues the pool's space reclaim
    jobs = [j for j in m.jobs.list() if j["type"] == "reclaim"]
    assert jobs, "no reclaim queued after the expiry"
    [rj] = m.wait_for([jobs[0]["id"]])
    assert rj["status"] == status.OK, [x["message"] for x in m.jobs.logs(rj["id"])]
    after = m.pool_usage("ddp")
    assert after["chunks"] < before["chunks"]
    # five files of 300 KiB random bytes each (and some text) were only in the first image
    assert after["container_bytes"] < before["container_bytes"] - 1400 * 1024
    assert rj["result"]["removed_chunks"] > 0

    # everything the remaining image needs is still there
    dst = str(tmp_path / "dst")
    restore(m, second["image_id"], src, dst)
    assert_trees_equal(src, dst + src)
    [vj] = m.wait_for([m.start_verify(pool="ddp")])
    assert vj["status"] == status.OK, [x["message"] for x in m.jobs.logs(vj["id"])]


def test_a_schedule_that_reads_every_file_bypasses_the_files_cache(tmp_path):
    home, src, pool = tmp_path / "home", str(tmp_path / "src"), str(tmp_path / "pool")
    write_tree(src, seed=8, nfiles=4)
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "storage-server", "create", "dd", "--type", "dedup", "--host", "me",
          "--path", pool)
    cairn(home, "disk-pool", "create", "ddp", "--server", "dd")
    cairn(home, "storage-unit", "create", "dstu", "--pool", "ddp")
    cairn(home, "policy", "create", "dp", "--storage-unit", "dstu")
    cairn(home, "policy", "add-schedule", "dp", "nightly", "--type", "full")
    cairn(home, "policy", "add-schedule", "dp", "monthly", "--type", "full",
          "--read-every-file")
    p = cairn(home, "policy", "add-schedule", "dp", "diff", "--type", "differential",
              "--read-every-file", check=False)
    assert p.returncode == status.INVALID_REQUEST and "only a full schedule" in p.stderr
    cairn(home, "policy", "add-client", "dp", "me")
    cairn(home, "policy", "add-selection", "dp", src)
    doc, _ = cairn_json(home, "policy", "show", "dp")
    assert [(x["name"], x["read_all"]) for x in doc["schedules"]] == [("nightly", False),
                                                                        ("monthly", True)]
    logs = {}
    for sched in ("nightly", "nightly", "monthly"):
        doc, _ = cairn_json(home, "backup", "dp", "--schedule", sched, "--wait")
        [job] = doc["jobs"]
        assert job["status"] == 0, doc
        out, _ = cairn_json(home, "jobs", "show", str(job["id"]))
        logs[sched] = "\n".join(x["message"] for x in out["log"])
    assert "unchanged files are taken from the pool" in logs["nightly"]
    assert "every file is read" in logs["monthly"]
    assert job["dedup_ratio"] >= 99.0  # read again, stored nothing new


def test_the_pool_compaction_threshold_decides_what_reclaim_compacts(tmp_path, master):
    m = master
    src, first, second = two_fulls_sharing_one_file(m, tmp_path, seed=7)
    m.update_object("disk-pool", "ddp", compact_below=0)
    m.expire_image(first["image_id"])
    [rj] = m.wait_for([j["id"] for j in m.jobs.list() if j["type"] == "reclaim"])
    assert rj["status"] == status.OK, [x["message"] for x in m.jobs.logs(rj["id"])]
    assert rj["result"]["containers_compacted"] == 0 and rj["result"]["removed_chunks"] == 0
    assert "below 0% of their size" in "\n".join(x["message"] for x in m.jobs.logs(rj["id"]))
    kept = m.pool_usage("ddp")["container_bytes"]

    m.update_object("disk-pool", "ddp", compact_below=90)
    [rj] = m.wait_for([m.start_reclaim("ddp")])
    assert rj["status"] == status.OK
    assert rj["result"]["containers_compacted"] >= 1 and rj["result"]["removed_chunks"] > 0
    assert m.pool_usage("ddp")["container_bytes"] < kept - 1400 * 1024
    dst = str(tmp_path / "dst")
    restore(m, second["image_id"], src, dst)
    assert_trees_equal(src, dst + src)


def test_verify_names_the_files_of_a_corrupted_container(tmp_path, master):
    m = master
    src, pool, job = backed_up_tree(m, tmp_path, seed=4, nfiles=3, size=3 * MB)
    [ok] = m.wait_for([m.start_verify(image=job["image_id"])])
    assert ok["status"] == status.OK
    name = flip_a_byte_of_the_first_container(pool)

    [bad] = m.wait_for([m.start_verify(image=job["image_id"])])
    assert bad["status"] == status.CHECKSUM_MISMATCH, bad
    hit = bad["result"]["images"][0]
    assert hit["image"] == job["image_id"] and hit["files"], hit
    assert all(f.startswith(src + "/") for f in hit["files"])
    log = "\n".join(x["message"] for x in m.jobs.logs(bad["id"]))
    assert job["image_id"] in log and hit["files"][0] in log

    [whole] = m.wait_for([m.start_verify(pool="ddp")])
    assert whole["status"] == status.CHECKSUM_MISMATCH
    assert name in "\n".join(x["message"] for x in m.jobs.logs(whole["id"]))
    assert whole["result"]["images"][0]["files"] == hit["files"]


def test_the_next_backup_heals_what_a_verify_found_damaged(tmp_path, master):
    """The damaged chunks are set aside; the next full (whose files cache would otherwise
    refer to them again) stores them anew, and the older image restores byte for byte."""
    m = master
    src, pool, first = backed_up_tree(m, tmp_path, seed=6, nfiles=3, size=3 * MB)
    flip_a_byte_of_the_first_container(pool)

    [bad] = m.wait_for([m.start_verify(image=first["image_id"])])
    assert bad["status"] == status.CHECKSUM_MISMATCH and bad["result"]["set_aside"] >= 1
    log = "\n".join(x["message"] for x in m.jobs.logs(bad["id"]))
    assert "set aside" in log and "next backup" in log
    broken = str(tmp_path / "broken")
    [rj] = m.wait_for([m.start_restore(first["image_id"], [src], broken)])
    assert rj["status"] != status.OK
    assert "set aside" in "\n".join(x["message"] for x in m.jobs.logs(rj["id"]))

    second = backup(m)
    log = "\n".join(x["message"] for x in m.jobs.logs(second["id"]))
    assert "not in the pool" in log, log  # the files cache was not trusted
    [good] = m.wait_for([m.start_verify(image=first["image_id"])])
    assert good["status"] == status.OK, [x["message"] for x in m.jobs.logs(good["id"])]
    dst = str(tmp_path / "dst")
    restore(m, first["image_id"], src, dst)
    assert_trees_equal(src, dst + src)
    [whole] = m.wait_for([m.start_verify(pool="ddp")])
    # the damaged record stays in its container until reclaim compacts it; no image uses it
    assert whole["status"] == status.CHECKSUM_MISMATCH and whole["result"]["images"] == []
    assert whole["result"]["container_damage"], whole["result"]
    assert "used by no image" in "\n".join(x["message"] for x in m.jobs.logs(whole["id"]))


@pytest.mark.ssh
def test_killed_storage_agent_leaves_a_usable_pool(tmp_path, master, sshd):
    """kill -9 of the storage server's agent while it stores chunks: no image is committed,
    the next backup works, nothing committed refers to a missing chunk, the index can be
    rebuilt from the containers alone."""
    m = master
    src, pool = str(tmp_path / "src"), str(tmp_path / "pool")
    write_tree(src, seed=5, nfiles=8, size=24 * MB)
    add_ssh_host(m, "stor", sshd)
    configure(m, pool, storage_host="stor")
    m.config.add_policy_client("dp", "me")
    m.config.add_policy_selection("dp", src)

    [jid] = m.start_backup("dp")
    runner = threading.Thread(target=m.wait_for, args=([jid],), daemon=True)
    runner.start()
    deadline = time.time() + 120
    while time.time() < deadline:
        j = m.jobs.get(jid)
        assert j["state"] != "done", (j, [x["message"] for x in m.jobs.logs(jid)])
        if j["state"] == "active" and j["bytes"] > 20 * MB:
            break
        time.sleep(0.02)
    pid = m.hosts._conns["stor"].info["pid"]
    os.kill(pid, 9)
    runner.join(120)
    job = m.jobs.get(jid)
    assert job["state"] == "done" and job["status"] != status.OK, job
    assert m.images() == []

    good = backup(m)
    [vj] = m.wait_for([m.start_verify(pool="ddp")])
    assert vj["status"] == status.OK, [x["message"] for x in m.jobs.logs(vj["id"])]
    rebuilt = m.rebuild_pool_index("ddp")
    assert rebuilt["chunks"] >= m.image(good["image_id"])["dedup"]["new_chunks"]
    dst = str(tmp_path / "dst")
    restore(m, good["image_id"], src, dst)
    assert_trees_equal(src, dst + src)


@pytest.mark.ssh
def test_concurrent_backups_into_one_pool(tmp_path, master, sshd, sshd_as_localhost):
    m = master
    pool = str(tmp_path / "pool")
    shared = os.urandom(4 * MB)
    srcs = {}
    add_ssh_host(m, "c1", sshd)
    add_ssh_host(m, "c2", sshd_as_localhost, address="localhost")
    configure(m, pool, max_jobs=3)
    for n, host in enumerate(("me", "c1", "c2")):
        srcs[host] = str(tmp_path / f"src-{host}")
        write_tree(srcs[host], seed=10 + n, nfiles=6, size=3 * MB, shared=shared)
        m.config.add_policy_client("dp", host)
        m.config.add_policy_selection("dp", srcs[host])
    # one policy, three clients, each backing up all three trees: much data in common
    ids = m.start_backup("dp")
    jobs = m.wait_for(ids)
    assert all(j["status"] == status.OK for j in jobs), [
        [x["message"] for x in m.jobs.logs(j["id"])] for j in jobs]
    started = sorted(j["started"] for j in jobs)
    ended = sorted(j["ended"] for j in jobs)
    assert started[-1] <= ended[0], "the jobs did not run at the same time"
    # the same data, backed up three times at once, is stored about once: the containers
    # hold little beyond the records the index names
    from plugins.storage.dedup.encoding import RECORD_HEADER
    from plugins.storage.dedup.store import ChunkStore
    store = ChunkStore(pool)
    indexed = sum(loc.stored_length + RECORD_HEADER.size
                  for loc in store.fingerprints().values())
    held = sum(os.path.getsize(store.container_path(n)) for n in store.committed_containers())
    assert held <= 1.05 * indexed, (held, indexed)
    [vj] = m.wait_for([m.start_verify(pool="ddp")])
    assert vj["status"] == status.OK
    for j in jobs:
        dst = str(tmp_path / f"dst-{j['id']}")
        src = srcs["me"]
        restore(m, j["image_id"], src, dst)
        assert_trees_equal(src, dst + src)


def test_encrypted_pool_round_trip_and_missing_key(tmp_path, master):
    m = master
    src, pool = str(tmp_path / "src"), str(tmp_path / "pool")
    write_tree(src, seed=6, nfiles=3)
    marker = b"CAIRN-PLAINTEXT-MARKER-" * 4000
    with open(os.path.join(src, "marker.txt"), "wb") as f:
        f.write(marker)
    srv = configure(m, pool, encrypted=True)
    assert srv["options"]["encrypted"]
    key_file = m.home.key_path("dd")
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    m.config.add_policy_client("dp", "me")
    m.config.add_policy_selection("dp", src)
    job = backup(m)
    for d, _, files in os.walk(os.path.join(pool, "containers")):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                assert b"CAIRN-PLAINTEXT-MARKER" not in fh.read()
    dst = str(tmp_path / "dst")
    restore(m, job["image_id"], src, dst)
    assert_trees_equal(src, dst + src)

    os.rename(key_file, key_file + ".away")
    jid = m.start_restore(job["image_id"], [src], str(tmp_path / "dst2"), to_host="me")
    [failed] = m.wait_for([jid])
    assert failed["status"] != status.OK
    log = "\n".join(x["message"] for x in m.jobs.logs(jid))
    assert "encryption key" in log and "missing" in log, log


def test_files_cache_counts_what_was_read_and_a_sparse_file_by_its_data(tmp_path, master):
    """A full that takes unchanged files from the files cache counts a sparse file by its
    data, as a full that reads it does; its dedup rate is over the whole backup, and the job
    says how much was read beside it."""
    m = master
    src = str(tmp_path / "src")
    write_tree(src, seed=7, nfiles=6, size=300 * 1024)
    with open(os.path.join(src, "sparse.img"), "wb") as f:
        f.truncate(64 * MB)
        f.seek(32 * MB)
        f.write(b"two")
    configure(m, str(tmp_path / "pool"))
    m.config.add_policy_client("dp", "me")
    m.config.add_policy_selection("dp", src)
    first = backup(m)
    assert first["bytes"] < 4 * MB, first  # the sparse file's holes are not data
    with open(os.path.join(src, "d0", "f0.bin"), "ab") as f:
        f.write(b"changed")
    second = m.job(backup(m)["id"])
    assert abs(second["bytes"] - first["bytes"]) < 64 * 1024, (first["bytes"], second["bytes"])
    r = second["result"]
    assert r["files_cache_files"] == 7, r  # all but the changed file
    changed = os.path.getsize(os.path.join(src, "d0", "f0.bin"))
    assert changed <= r["read_bytes"] < changed + 4096, r
    assert r["read_bytes"] + r["files_cache_bytes"] == second["bytes"], r
    # the pool held all but what changed in one file: the rate is over the whole backup
    assert second["dedup_ratio"] > 100 * (1 - 400 * 1024 / second["bytes"]), second
    log = "\n".join(x["message"] for x in m.jobs.logs(second["id"]))
    assert "read, " in log and "taken from the files cache) was in the pool" in log, log


def test_an_unchanged_full_stores_no_more_than_what_it_says_of_itself(tmp_path, master):
    """The image's first member (its id and times) and its summary change at every backup;
    what lies between them and its index's rows, when nothing changed, do not. The changing
    parts are chunks of their own, so an unchanged full stores a few KiB and takes the rest,
    its index too, from the pool."""
    m = master
    src = tmp_path / "src"
    for d in range(40):
        os.makedirs(src / f"d{d:02d}")
        for i in range(100):
            (src / f"d{d:02d}" / f"file-with-a-longish-name-{i:03d}").write_bytes(
                b"%d-%d\n" % (d, i) * 20)
    configure(m, str(tmp_path / "pool"))
    m.config.add_policy_client("dp", "me")
    m.config.add_policy_selection("dp", str(src))
    backup(m)
    # the first full from the files cache cuts its directories' members where its first
    # reference begins, which the full before it did not: one more chunk, stored once
    backup(m)
    third = m.image(backup(m)["image_id"])
    # 4,040 rows: an index member of some 700 KB; the new chunks are the first member and
    # the summary with the index member's header (which the pool may cut apart)
    assert third["dedup"]["chunks"] > 100 and third["dedup"]["new_chunks"] <= 3, third["dedup"]
    assert third["dedup"]["new_bytes"] < 8192, third["dedup"]
