"""Differential and cumulative incrementals on the embedded default, for every storage type:
each image restores exactly the tree of its point in time (files added, changed, renamed,
deleted, chmod-only, content changed behind a restored modification time), sends only what
changed, and the point-in-time lookups find the right image."""

import os
import shutil
import subprocess
import time

import pytest

from app import status as st
from app.master import Master
from clihelp import cairn, cairn_json
from storage_sites import cli_pool, make_pool
from treegen import assert_trees_equal, make_tree


def snapshot(src, dst):
    # cp -a keeps hard links, times, modes and extended attributes: the expected tree.
    subprocess.run(["cp", "-a", src, dst], check=True)


def backup(m, schedule):
    [job] = m.wait_for(m.start_backup("p1", schedule=schedule))
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    img = m.image(job["image_id"])
    return job, img


def log_text(m, job):
    return "\n".join(x["message"] for x in m.jobs.logs(job["id"]))


@pytest.fixture(scope="module")
def chain(tmp_path_factory, module_storage_type):
    base = tmp_path_factory.mktemp("chain")
    src, vol, home = str(base / "src"), base / "vol", str(base / "home")
    make_tree(src)
    m = Master(home)
    m.config.add_host("me", local=True)
    make_pool(m, module_storage_type, vol)
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", src)
    m.config.add_schedule("p1", "weekly", type="full")
    m.config.add_schedule("p1", "daily", type="differential")
    m.config.add_schedule("p1", "cum", type="cumulative")

    steps = []

    def record(name, schedule):
        job, img = backup(m, schedule)
        exp = str(base / f"expected-{name}")
        snapshot(src, exp)
        steps.append({"name": name, "job": job, "image": img, "expected": exp})

    # A differential with nothing before it is taken as a full.
    record("full", "daily")

    with open(os.path.join(src, "new-file.txt"), "w") as f:
        f.write("added after the full\n")
    os.rename(os.path.join(src, "small.txt"), os.path.join(src, "renamed.txt"))
    os.unlink(os.path.join(src, "dir", "sub", "deeper", "file.txt"))
    os.chmod(os.path.join(src, "dir", "top.txt"), 0o600)         # metadata only
    p = os.path.join(src, "private", "secret")
    st0 = os.stat(p)
    with open(p, "r+b") as f:                                     # same size, same mtime
        data = f.read()
        f.seek(0)
        f.write(bytes(reversed(data)))
    os.utime(p, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    record("diff1", "daily")

    os.makedirs(os.path.join(src, "later", "deeper"))
    with open(os.path.join(src, "later", "deeper", "x.bin"), "wb") as f:
        f.write(os.urandom(300_000))
    shutil.rmtree(os.path.join(src, "dir", "sub"))  # takes a hard link of hard/c with it
    os.symlink("renamed.txt", os.path.join(src, "link-to-renamed"))
    record("diff2", "daily")

    with open(os.path.join(src, "renamed.txt"), "a") as f:
        f.write("grown\n")
    record("cum1", "cum")

    record("diff3", "daily")  # nothing changed since the cumulative
    yield m, steps, src, base, home
    m.close()


def test_each_image_restores_its_point_in_time(chain, tmp_path):
    m, steps, src, _, _ = chain
    for step in steps:
        dst = str(tmp_path / step["name"])
        [job] = m.wait_for([m.start_restore(step["image"]["id"], [src], dst)])
        assert job["status"] == st.OK, (step["name"], m.jobs.logs(job["id"]))
        assert_trees_equal(step["expected"], dst + src, check_owner=False)


def test_levels_bases_and_what_was_sent(chain):
    m, steps, src, _, _ = chain
    by = {s["name"]: s for s in steps}
    full, d1, d2, c1, d3 = (by[n]["image"] for n in ("full", "diff1", "diff2", "cum1", "diff3"))
    assert full["schedule_type"] == "full" and full["base_image"] is None
    assert "taken as a full backup" in log_text(m, by["full"]["job"])
    assert (d1["schedule_type"], d1["base_image"]) == ("differential", full["id"])
    assert (d2["schedule_type"], d2["base_image"]) == ("differential", d1["id"])
    assert (c1["schedule_type"], c1["base_image"]) == ("cumulative", full["id"])
    assert (d3["schedule_type"], d3["base_image"]) == ("differential", c1["id"])
    # diff1 sent the new, renamed, chmod-ed and rewritten files, nothing else
    assert d1["files"] == 4, log_text(m, by["diff1"]["job"])
    assert d1["bytes"] < full["bytes"] / 2
    log = log_text(m, by["diff1"]["job"])
    assert "2 deleted since" in log, log
    # the cumulative sends everything changed since the full again
    assert c1["files"] > d2["files"]
    assert d3["files"] == 0 and d3["bytes"] == 0
    assert set(d3["sources"]) >= {c1["id"]}
    # every image an incremental reads from is recorded as a dependency
    deps = {(r[0], r[1]) for r in m.db.all("SELECT image_id, depends_on FROM image_deps")}
    assert (d1["id"], full["id"]) in deps and (d3["id"], c1["id"]) in deps


def test_point_in_time_browse_shows_deletions_and_renames(chain):
    m, steps, src, _, home = chain
    by = {s["name"]: s for s in steps}
    full, d1 = by["full"]["image"], by["diff1"]["image"]
    names_full = {e["name"] for e in m.browse(full["id"], src)["entries"]}
    names_d1 = {e["name"] for e in m.browse(d1["id"], src)["entries"]}
    assert "small.txt" in names_full and "renamed.txt" not in names_full
    assert "small.txt" not in names_d1 and {"renamed.txt", "new-file.txt"} <= names_d1
    assert m.browse(d1["id"], src + "/dir/sub/deeper")["entries"] == []
    assert [e["name"] for e in m.browse(full["id"], src + "/dir/sub/deeper")["entries"]] == [
        "file.txt"]
    assert m.image_at("me", at=d1["created"])["id"] in (d1["id"], by["diff2"]["image"]["id"],
                                                        by["cum1"]["image"]["id"],
                                                        by["diff3"]["image"]["id"])
    doc, _ = cairn_json(home, "browse", "--client", "me", "--policy", "p1", src)
    assert {e["name"] for e in doc["entries"]} == set(os.listdir(src))


@pytest.mark.ssh
def test_incremental_over_ssh_and_point_in_time_restore_to_another_host(tmp_path, sshd,
                                                                        sshd_as_localhost,
                                                                        storage_type):
    """The client is reached over SSH and its image goes over the data plane; a cumulative
    after a change restores (to another SSH host, `--at`) exactly the tree of its time."""
    home, vol, src = tmp_path / "home", tmp_path / "vol", str(tmp_path / "src")
    make_tree(src)
    cairn(home, "host", "add", "me", "--local")
    for name, addr in (("client1", sshd.host), ("other", "localhost")):
        cairn(home, "host", "add", name, "--address", addr, "--port", sshd.port, "--user",
              sshd.user, "--key", sshd.key_file, "--trust-host-key")
    cli_pool(cairn, home, storage_type, vol)
    cairn(home, "storage-unit", "create", "stu1", "--pool", "dp1")
    cairn(home, "policy", "create", "p1", "--storage-unit", "stu1")
    cairn(home, "policy", "add-client", "p1", "client1")
    cairn(home, "policy", "add-selection", "p1", src)
    cairn(home, "policy", "add-schedule", "p1", "full", "--type", "full")
    cairn(home, "policy", "add-schedule", "p1", "cum", "--type", "cumulative")
    doc, _ = cairn_json(home, "backup", "p1", "--schedule", "full", "--wait")
    assert doc["status"] == 0
    before = str(tmp_path / "before")
    snapshot(src, before)
    with open(os.path.join(src, "added.txt"), "w") as f:
        f.write("over ssh\n")
    os.unlink(os.path.join(src, "big.bin"))
    time.sleep(1.1)  # image times have whole seconds: --at must tell the two apart
    doc, _ = cairn_json(home, "backup", "p1", "--schedule", "cum", "--wait")
    assert doc["status"] == 0
    job = doc["jobs"][0]
    log = cairn(home, "jobs", "log", str(job["id"])).stdout
    assert "cumulative incremental: compared with image" in log and "data plane" in log
    img, _ = cairn_json(home, "images", "list")
    cum, full = img["images"]
    assert (cum["schedule_type"], cum["base_image"], cum["files"]) == ("cumulative",
                                                                      full["id"], 1)
    # the full's point in time, by --at, restored to another SSH host
    dst = str(tmp_path / "dst")
    doc, _ = cairn_json(home, "restore", "--client", "client1", "--policy", "p1", "--at",
                        full["created"], "--path", src, "--to", dst, "--to-host", "other",
                        "--wait")
    assert doc["status"] == 0
    assert_trees_equal(before, dst + src, check_owner=False)
    dst2 = str(tmp_path / "dst2")
    doc, _ = cairn_json(home, "restore", cum["id"], "--path", src, "--to", dst2, "--to-host",
                        "other", "--wait")
    assert doc["status"] == 0
    assert_trees_equal(src, dst2 + src, check_owner=False)


def test_damaged_base_index_gives_a_full_and_a_missing_source_a_clear_restore_error(
        tmp_path, storage_type):
    src, vol = str(tmp_path / "src"), tmp_path / "vol"
    make_tree(src)
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        make_pool(m, storage_type, vol)
        m.config.add_storage_unit("stu1", pool="dp1")
        m.config.add_policy("p1", storage_unit="stu1")
        m.config.add_policy_client("p1", "me")
        m.config.add_policy_selection("p1", src)
        m.config.add_schedule("p1", "daily", type="differential")
        job1, full = backup(m, "daily")
        with open(m.home.index_path(full["id"]), "r+b") as f:
            f.truncate(100)
        job2, img2 = backup(m, "daily")
        assert img2["schedule_type"] == "full" and img2["base_image"] is None
        assert "taken as a full backup: the index of image" in log_text(m, job2)
        # a differential on top of the good second full, then its source file goes missing
        job3, img3 = backup(m, "daily")
        assert img3["base_image"] == img2["id"]
        os.unlink(img2["path"])
        dst = str(tmp_path / "dst")
        [r] = m.wait_for([m.start_restore(img3["id"], [src], dst)])
        assert r["status"] == st.IMAGE_DAMAGED, m.jobs.logs(r["id"])
        assert img2["path"] in log_text(m, r) and not os.path.exists(dst + src)
    finally:
        m.close()
