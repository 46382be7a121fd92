"""An ordinary user on the storage host tries to read what Cairn wrote: the containers,
recipes and index of a deduplicating pool, an AdvancedDisk pool's image folders, and the
catalog and file indexes in CAIRN_HOME, after real backups through the `cairn` command. It
must read and list nothing. Everything runs under umask 0, so that no mode comes from the
umask. Then the modes are loosened by hand: verify names each path and ends with its own
status, the next use of the pool makes them private again, and a verify names what that
use found.

The attacker is a throwaway user the fixture creates and removes (useradd/userdel); its
actions run in a process of its own uid and gid."""

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from app import status
from app.master import Master
from clihelp import cairn, cairn_json

USER = "cairnmodes"
# The system's python: the test's own interpreter may live where the user cannot go.
PYTHON = "/usr/bin/python3"

ATTACK = r"""
import json, os, sys
got = []
for path in json.loads(sys.argv[1]):
    try:
        if os.path.isdir(path):
            got.append([path, "listed: " + ", ".join(sorted(os.listdir(path))[:5])])
        else:
            with open(path, "rb") as f:
                got.append([path, "read %d bytes" % len(f.read(64))])
    except OSError:
        pass
print(json.dumps(got))
"""


@pytest.fixture(scope="module")
def attacker():
    if os.geteuid() != 0:
        pytest.fail("the attack tests create a local user and need root", pytrace=False)
    subprocess.run(["userdel", USER], capture_output=True)
    subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", USER], check=True)
    uid = int(subprocess.run(["id", "-u", USER], capture_output=True, text=True).stdout)
    gid = int(subprocess.run(["id", "-g", USER], capture_output=True, text=True).stdout)
    yield uid, gid
    subprocess.run(["userdel", USER], capture_output=True)


def what_the_attacker_gets(attacker, paths):
    """[path, what it got] for each path the user could list or read."""
    uid, gid = attacker

    def become():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    p = subprocess.run([PYTHON, "-c", ATTACK, json.dumps([str(x) for x in paths])],
                       preexec_fn=become, capture_output=True, text=True, cwd="/", timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def open_to_others(*tops):
    """Every folder and file below the tops whose mode lets the group or others in."""
    out = []
    for top in tops:
        for d, dirs, files in os.walk(top):
            for p in [d] + [os.path.join(d, f) for f in files]:
                if os.lstat(p).st_mode & 0o077:
                    out.append(f"{p} {os.lstat(p).st_mode & 0o7777:04o}")
    return out


@pytest.fixture
def site(attacker):
    """A storage host as an admin sets it up: a world-traversable mount holding an
    AdvancedDisk volume, a deduplicating pool's storage path and CAIRN_HOME (made by hand,
    0755, as `mkdir` makes it), and a client's private data, backed up to both pools."""
    base = tempfile.mkdtemp(prefix="cairn-modes-")  # beside pytest's root-only tmp
    os.chmod(base, 0o755)
    home, vol, pool, src = (os.path.join(base, n) for n in ("home", "vol", "dedup", "src"))
    for d in (home, vol):
        os.mkdir(d)
        os.chmod(d, 0o755)
    os.makedirs(os.path.join(src, "private"), mode=0o700)
    secret = os.urandom(4096).hex()
    with open(os.path.join(src, "private", "secret.txt"), "w") as f:
        f.write(secret * 40)
    os.chmod(os.path.join(src, "private", "secret.txt"), 0o600)
    with umask(0):
        m = Master(home)
        m.config.add_host("me", local=True)
        m.create_storage_server("ss1", type="advanced-disk", host="me")
        m.create_disk_pool("dp1", server="ss1", volumes=[vol])
        m.config.add_storage_unit("stu1", pool="dp1")
        m.create_storage_server("dd1", type="dedup", host="me", path=pool)
        m.create_disk_pool("ddp1", server="dd1", volumes=[])
        m.config.add_storage_unit("dstu1", pool="ddp1")
        for policy, unit in (("ad", "stu1"), ("dd", "dstu1")):
            m.config.add_policy(policy, storage_unit=unit)
            m.config.add_schedule(policy, "full", type="full", retention="2w")
            m.config.add_policy_client(policy, "me")
            m.config.add_policy_selection(policy, src)
        m.close()
        for policy in ("ad", "dd"):
            doc, _ = cairn_json(home, "backup", policy, "--wait")
            assert doc["status"] == 0, cairn(home, "jobs", "log", str(doc["jobs"][0]["id"])).stdout
    yield {"base": base, "home": home, "vol": vol, "pool": pool}
    shutil.rmtree(base, ignore_errors=True)


def targets(site):
    home, vol, pool = site["home"], site["vol"], site["pool"]
    images = os.path.join(vol, "cairn-images")
    [image] = [os.path.join(images, "me", n) for n in os.listdir(os.path.join(images, "me"))]
    [recipe] = [os.path.join(pool, "images", "me", n)
                for n in os.listdir(os.path.join(pool, "images", "me"))]
    containers = sorted(os.path.join(pool, "containers", n)
                        for n in os.listdir(os.path.join(pool, "containers")))
    indexes = sorted(os.path.join(home, "indexes", n)
                     for n in os.listdir(os.path.join(home, "indexes")))
    return {"pool": pool, "containers_dir": os.path.join(pool, "containers"),
            "container": containers[0], "images_dir": os.path.join(pool, "images"),
            "client_dir": os.path.join(pool, "images", "me"), "recipe": recipe,
            "index_dir": os.path.join(pool, "index"),
            "chunks": os.path.join(pool, "index", "chunks.log"),
            "pool.json": os.path.join(pool, "pool.json"), "ad_images": images,
            "ad_client": os.path.join(images, "me"), "ad_image": image,
            "home": home, "catalog": os.path.join(home, "catalog.db"),
            "indexes": os.path.join(home, "indexes"), "index": indexes[0]}


def test_another_user_reads_and_lists_nothing_cairn_wrote(site, attacker):
    t = targets(site)
    got = what_the_attacker_gets(attacker, t.values())
    assert got == [], "another user got:\n" + "\n".join(f"{p}: {w}" for p, w in got)
    assert open_to_others(site["pool"], os.path.join(site["vol"], "cairn-images"),
                          site["home"]) == []


def test_another_user_reads_nothing_of_a_compressed_image_or_the_audit_log(site, attacker):
    """A compressed AdvancedDisk image (zstd frames and their seek table) and the audit log's
    head file are as private as what was there before them, whatever the umask."""
    home = site["home"]
    cairn(home, "policy", "set", "ad", "compression", "server")
    with umask(0):
        doc, _ = cairn_json(home, "backup", "ad", "--wait")
    assert doc["status"] == 0
    client = os.path.join(site["vol"], "cairn-images", "me")
    images = [os.path.join(client, n) for n in os.listdir(client)]
    compressed = []
    for path in images:
        with open(path, "rb") as f:
            if f.read(4) == b"\x28\xb5\x2f\xfd":  # a zstd frame's magic number
                compressed.append(path)
    assert compressed, "the backup made no compressed image"
    head = os.path.join(home, "audit.head")
    assert os.path.exists(head), "the audit log wrote no head file"
    got = what_the_attacker_gets(attacker, compressed + [head, client])
    assert got == [], "another user got:\n" + "\n".join(f"{p}: {w}" for p, w in got)
    assert open_to_others(client, home) == []


def test_loosened_modes_are_reported_by_verify_and_tightened_by_the_next_use(site, attacker):
    t, home = targets(site), site["home"]
    # by hand, as a colleague copying the pool might
    for p in (t["containers_dir"], t["client_dir"], t["ad_client"]):
        os.chmod(p, 0o755)
    for p in (t["container"], t["recipe"], t["ad_image"]):
        os.chmod(p, 0o644)
    assert what_the_attacker_gets(attacker, [t["container"], t["ad_image"]]) == [], \
        "still private behind their folders (pool root and image folder)"
    os.chmod(t["pool"], 0o755)
    os.chmod(t["ad_images"], 0o755)
    assert [p for p, _ in what_the_attacker_gets(attacker, [t["container"], t["ad_image"]])] \
        == [t["container"], t["ad_image"]], "the loosened pools are readable"

    with umask(0):
        for pool, loosened in (("ddp1", ("pool", "containers_dir", "client_dir", "container",
                                         "recipe")),
                               ("dp1", ("ad_images", "ad_client", "ad_image"))):
            doc, p = cairn_json(home, "disk-pool", "verify", pool, "--wait", check=False)
            assert p.returncode == status.POOL_EXPOSED, (p.stdout, p.stderr)
            jid = str(doc["jobs"][0]["id"])
            log = cairn(home, "jobs", "log", jid).stdout
            for key in loosened:
                assert f"{t[key]} was open to other users" in log, (key, log)
            found, _ = cairn_json(home, "jobs", "show", jid)
            assert {m["path"] for m in found["result"]["modes"]} == {t[k] for k in loosened}
    assert what_the_attacker_gets(attacker, t.values()) == []
    assert open_to_others(site["pool"], t["ad_images"], home) == []

    # loosened again; a backup uses the pools first (and the master its home): private
    # again at once, and the pool's next verify still names what was open meanwhile
    for p in (t["pool"], t["containers_dir"], t["ad_images"], t["home"]):
        os.chmod(p, 0o755)
    os.chmod(t["catalog"], 0o644)
    with umask(0):
        jobs = {}
        for policy in ("ad", "dd"):
            doc, _ = cairn_json(home, "backup", policy, "--wait")
            assert doc["status"] == 0
            jobs[policy] = str(doc["jobs"][0]["id"])
        backup_log = cairn(home, "jobs", "log", jobs["ad"]).stdout
        assert f"{t['ad_images']} was open to other users (mode 0755)" in backup_log
        assert what_the_attacker_gets(attacker, t.values()) == []
        doc, p = cairn_json(home, "disk-pool", "verify", "ddp1", "--wait", check=False)
        assert p.returncode == status.POOL_EXPOSED
        found, _ = cairn_json(home, "jobs", "show", str(doc["jobs"][0]["id"]))
        assert {m["path"] for m in found["result"]["modes"]} == {t["pool"],
                                                                 t["containers_dir"]}
        doc, p = cairn_json(home, "disk-pool", "verify", "ddp1", "--wait", check=False)
        assert p.returncode == 0, "reported once"


def test_another_user_reads_nothing_of_a_cloud_pools_cache(attacker, s3_server, s3_bucket):
    """A cloud pool's cache under umask 0: its containers, their notes, recipes, the queued
    recipes and the master's copy of the bucket's keys stay private."""
    base = tempfile.mkdtemp(prefix="cairn-cloud-modes-", dir="/var/tmp")
    os.chmod(base, 0o755)
    home, cache, src = (os.path.join(base, n) for n in ("home", "cache", "src"))
    try:
        with umask(0):
            os.makedirs(src)
            with open(os.path.join(src, "private.txt"), "wb") as f:
                f.write(os.urandom(100_000))
            m = Master(home)
            try:
                m.config.add_host("me", local=True)
                m.create_storage_server(
                    "cs", type="cloud", host="me", path=cache,
                    options={"endpoint": s3_server.endpoint, "bucket": s3_bucket,
                             "commit_at": "cache"},
                    credentials={"access_key": s3_server.access_key,
                                 "secret_key": s3_server.secret_key})
                m.create_disk_pool("cp", server="cs", volumes=[])
                m.create_storage_unit("cu", pool="cp")
                m.config.add_policy("p", storage_unit="cu")
                m.config.add_policy_client("p", "me")
                m.config.add_policy_selection("p", src)
                [job] = m.wait_for(m.start_backup("p"))
                assert job["status"] == status.OK
                for _ in range(300):  # its queued uploads, which write the notes
                    if not m.pool_usage("cp")["cloud"]["waiting_recipes"]:
                        break
                    time.sleep(0.1)
            finally:
                m.close()
        paths = [os.path.join(d, f) for top in (cache, os.path.join(home, "keys"))
                 for d, dirs, files in os.walk(top) for f in dirs + files]
        assert any(p.endswith(".cloud") for p in paths)
        assert os.path.isdir(os.path.join(cache, "cloud-pending"))
        got = what_the_attacker_gets(attacker, [cache] + paths)
        assert got == [], "another user got:\n" + "\n".join(f"{p}: {w}" for p, w in got)
        assert open_to_others(cache, os.path.join(home, "keys")) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)
