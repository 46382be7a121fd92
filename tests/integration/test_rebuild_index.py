"""`cairn images rebuild-index IMAGE`: a damaged catalog index (64 bytes overwritten in its
middle, cut short, garbage, missing) makes browse and restore fail with a clear message whose
hint names the command; the command rebuilds the index from the image itself, on both pool
types and through a storage host reached over the real sshd, and the rebuilt index equals the
original row for row: a full of every kind of entry, incrementals, a multi-stream set, a full
of a deduplication pool that took files from its files cache. What the image cannot give back
is refused or named, never written wrong."""

import os
import shutil

import pytest

from app import status as st
from app.catalog_index import IndexReader, check_index
from app.errors import CairnError
from app.master import Master
from clihelp import cairn, cairn_json
from treegen import assert_trees_equal, make_tree


# ---- helpers ---------------------------------------------------------------------------------

def index_rows(path):
    """Every entry of an index file, in walk order (what browse and restore see)."""
    with IndexReader(str(path)) as r:
        rows = list(r.walk("/"))
        assert len(rows) == r.count()
        return rows


def listing(m, image_id):
    """The whole tree as browse lists it: {directory: entries}."""
    out, todo = {}, ["/"]
    while todo:
        d = todo.pop()
        out[d] = m.browse(image_id, d)["entries"]
        todo.extend(e["path"] for e in out[d] if e["kind"] == "d")
    return out


def damage_middle(path, n=64):
    """Overwrite n bytes in the middle of a file with other bytes."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        old = f.read(n)
        f.seek(size // 2)
        f.write(bytes(b ^ 0xA5 for b in old))


def failing_dirs(m, image_id, dirs):
    out = []
    for d in dirs:
        try:
            m.browse(image_id, d)
        except CairnError as e:
            assert e.status == st.IMAGE_DAMAGED
            assert f"cairn images rebuild-index {image_id}" in e.hint
            out.append(d)
    return out


def log_text(m, job_id):
    return "\n".join(x["message"] for x in m.jobs.logs(job_id))


def rebuild(m, image_id, expect=st.OK):
    [job] = m.wait_for([m.start_rebuild_index(image_id)])
    assert job["status"] == expect, log_text(m, job["id"])
    assert job["type"] == "rebuild-index"
    return job


def backup(m, schedule=None, policy="p1"):
    [job] = m.wait_for(m.start_backup(policy, schedule=schedule))
    assert job["status"] == st.OK, log_text(m, job["id"])
    return m.image(job["image_id"])


def restore(m, image_id, path, to, to_host="me"):
    [job] = m.wait_for([m.start_restore(image_id, [path], to, to_host=to_host)])
    assert job["status"] == st.OK, log_text(m, job["id"])


def advanced_disk(tmp_path, name="m"):
    vol = tmp_path / f"vol-{name}"
    vol.mkdir()
    m = Master(str(tmp_path / f"home-{name}"))
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1", max_concurrent_jobs=4)
    return m


# ---- a full on an advanced-disk pool, through the CLI -----------------------------------------

def test_a_damaged_index_fails_browse_and_restore_clearly_and_is_rebuilt(tmp_path):
    home, vol, src = tmp_path / "home", tmp_path / "vol", str(tmp_path / "src")
    vol.mkdir()
    made = make_tree(src)
    assert made["xattrs"] and made["sparse"] and made["hardlinks"]
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "storage-server", "create", "ss1", "--type", "advanced-disk", "--host", "me")
    cairn(home, "disk-pool", "create", "dp1", "--server", "ss1", "--volume", str(vol))
    cairn(home, "storage-unit", "create", "stu1", "--pool", "dp1")
    cairn(home, "policy", "create", "p1", "--storage-unit", "stu1")
    cairn(home, "policy", "add-client", "p1", "me")
    cairn(home, "policy", "add-selection", "p1", src)
    doc, _ = cairn_json(home, "backup", "p1", "--wait")
    assert doc["status"] == 0
    image = doc["jobs"][0]["image_id"]

    m = Master(str(home))
    try:
        index = m.home.index_path(image)
        shutil.copyfile(index, tmp_path / "original.cidx")
        before = listing(m, image)
        damage_middle(index)
        assert check_index(index)
        failing = failing_dirs(m, image, before)
        assert failing, "the damage hit no listing"
    finally:
        m.close()

    # browse: a clear message whose hint names the command, no traceback
    p = cairn(home, "browse", image, failing[0], check=False)
    assert p.returncode == st.IMAGE_DAMAGED, p.stderr
    assert f"the file index of image {image} is damaged" in p.stderr
    assert f"cairn images rebuild-index {image} --wait" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    doc, p = cairn_json(home, "browse", image, failing[0], check=False)
    assert doc["status"] == st.IMAGE_DAMAGED and "rebuild-index" in doc["hint"]
    # restore: refused at once, or the job fails and its log names the command
    doc, p = cairn_json(home, "restore", image, "--path", src, "--to",
                        str(tmp_path / "early"), "--wait", check=False)
    assert doc["status"] == st.IMAGE_DAMAGED, doc
    text = doc.get("hint") or cairn(home, "jobs", "log", str(doc["jobs"][0]["id"])).stdout
    assert f"cairn images rebuild-index {image}" in text, text

    doc, p = cairn_json(home, "images", "rebuild-index", image, "--wait")
    assert doc["status"] == 0, p.stdout
    [job] = doc["jobs"]
    assert job["type"] == "rebuild-index" and job["files"] == len(index_rows(
        tmp_path / "original.cidx"))
    log = cairn(home, "jobs", "log", str(job["id"])).stdout
    assert "kept as" in log and ".cidx.damaged" in log, log

    # the rebuilt index is the original, the damaged one is kept aside
    assert index_rows(index) == index_rows(tmp_path / "original.cidx")
    assert check_index(index) == []
    assert check_index(index + ".damaged")
    m = Master(str(home))
    try:
        assert listing(m, image) == before
    finally:
        m.close()
    doc, _ = cairn_json(home, "browse", image, failing[0])
    assert doc["entries"] == before[failing[0]]
    doc, _ = cairn_json(home, "restore", image, "--path", src, "--to", str(tmp_path / "dst"),
                        "--wait")
    assert doc["status"] == 0
    assert_trees_equal(src, str(tmp_path / "dst") + src)

    # an unknown image: a clear refusal
    p = cairn(home, "images", "rebuild-index", "no_such_image", "--wait", check=False)
    assert p.returncode == st.INVALID_REQUEST and "no image 'no_such_image'" in p.stderr


def test_a_cut_short_garbage_or_missing_index_gives_the_message_never_a_traceback(tmp_path):
    m = advanced_disk(tmp_path)
    src = str(tmp_path / "src")
    make_tree(src)
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", src)
    img = backup(m)
    home = m.home.root
    index = m.home.index_path(img["id"])
    original = index_rows(index)
    size = os.path.getsize(index)
    m.close()

    def cut(path):
        os.truncate(path, size - 100)

    def garbage(path):
        with open(path, "wb") as f:
            f.write(os.urandom(size))

    for spoil, why in ((cut, "truncated"), (garbage, "not a Cairn catalog index"),
                       (os.unlink, "is missing")):
        spoil(index)
        for args in (("browse", img["id"], src), ("browse", img["id"]),
                     ("restore", img["id"], "--path", src, "--to", str(tmp_path / "x"))):
            p = cairn(home, *args, check=False)
            assert p.returncode == st.IMAGE_DAMAGED, (why, args, p.stderr)
            assert why in p.stderr and "Traceback" not in p.stderr + p.stdout, p.stderr
            assert f"cairn images rebuild-index {img['id']} --wait" in p.stderr
        doc, _ = cairn_json(home, "images", "rebuild-index", img["id"], "--wait")
        assert doc["status"] == 0
        assert index_rows(index) == original
    kept = sorted(n for n in os.listdir(os.path.dirname(index)) if ".cidx." in n)
    assert kept == [f"{img['id']}.cidx.damaged", f"{img['id']}.cidx.damaged.2"]

    # expiry takes the kept copies along with the index
    m = Master(home)
    try:
        m.expire_image(img["id"])
        assert not [n for n in os.listdir(os.path.dirname(index)) if img["id"] in n]
    finally:
        m.close()


def test_damage_in_the_image_itself_is_named_and_the_rest_rebuilt(tmp_path):
    m = advanced_disk(tmp_path)
    try:
        src = str(tmp_path / "src")
        make_tree(src)
        m.config.add_policy("p1", storage_unit="stu1")
        m.config.add_policy_client("p1", "me")
        m.config.add_policy_selection("p1", src)
        img = backup(m)
        index = m.home.index_path(img["id"])
        original = index_rows(index)
        big = next(e for e in original if e.path == f"{src}/big.bin")
        small = next(e for e in original if e.path == f"{src}/small.txt")
        with open(img["path"], "r+b") as f:
            f.seek(big.offset + 100)          # a header
            f.write(os.urandom(64))
            f.seek(small.offset + small.length - 512)   # a file's data
            f.write(b"X" * 13)
        damage_middle(index)
        job = rebuild(m, img["id"], expect=st.IMAGE_DAMAGED)
        log = log_text(m, job["id"])
        assert f"{src}/big.bin" in log and f"{src}/small.txt" in log, log
        assert "a restore names each as lost" in log, log
        # every entry is still listed, as the backup listed it
        assert index_rows(index) == original
        assert job["result"]["lost"][0]["path"] == f"{src}/big.bin"
        assert job["result"]["checksum_mismatch"] == [f"{src}/small.txt"]
    finally:
        m.close()


# ---- incrementals ----------------------------------------------------------------------------

def test_incrementals_are_rebuilt_exactly_or_refused(tmp_path):
    m = advanced_disk(tmp_path)
    try:
        src = str(tmp_path / "src")
        make_tree(src)
        m.config.add_policy("p1", storage_unit="stu1")
        m.config.add_policy_client("p1", "me")
        m.config.add_policy_selection("p1", src)
        m.config.add_schedule("p1", "full", type="full")
        m.config.add_schedule("p1", "daily", type="differential")
        full = backup(m, "full")
        with open(os.path.join(src, "new.txt"), "w") as f:
            f.write("added after the full\n")
        os.unlink(os.path.join(src, "dir", "top.txt"))
        os.chmod(os.path.join(src, "small.txt"), 0o600)
        d1 = backup(m, "daily")
        with open(os.path.join(src, "big.bin"), "r+b") as f:
            f.write(b"changed")
        d2 = backup(m, "daily")
        assert d2["base_image"] == d1["id"] and set(d2["sources"]) == {d1["id"], full["id"]}

        paths = {k: m.home.index_path(v["id"])
                 for k, v in (("full", full), ("d1", d1), ("d2", d2))}
        originals = {k: index_rows(p) for k, p in paths.items()}
        assert any(e.src for e in originals["d2"]), "nothing held by earlier images"

        # the newest incremental: every entry back where it was, sources included
        damage_middle(paths["d2"])
        rebuild(m, d2["id"])
        assert index_rows(paths["d2"]) == originals["d2"]
        dst = str(tmp_path / "dst")
        restore(m, d2["id"], src, dst)
        assert_trees_equal(src, dst + src, check_owner=False)

        # its base's index damaged: refused, naming what to rebuild first
        damage_middle(paths["d1"])
        damage_middle(paths["d2"])
        spoiled = open(paths["d2"], "rb").read()
        job = rebuild(m, d2["id"], expect=st.IMAGE_DAMAGED)
        log = log_text(m, job["id"])
        assert f"cairn images rebuild-index {d1['id']} --wait" in log, log
        assert open(paths["d2"], "rb").read() == spoiled
        rebuild(m, d1["id"])
        rebuild(m, d2["id"])
        assert index_rows(paths["d1"]) == originals["d1"]
        assert index_rows(paths["d2"]) == originals["d2"]

        # the incremental's own index (in the image) damaged: its unchanged entries are
        # listed nowhere else, so nothing is written
        inc = d1["path"]
        data = open(inc, "rb").read()
        at = data.rfind(b".cairn/index.jsonl")
        with open(inc, "r+b") as f:
            f.seek(at + 512 + 700)
            f.write(b"\x00garbage\x00" * 8)
        damage_middle(paths["d1"])
        spoiled = open(paths["d1"], "rb").read()
        job = rebuild(m, d1["id"], expect=st.IMAGE_DAMAGED)
        log = log_text(m, job["id"])
        assert "is an incremental" in log and ".cairn/index.jsonl" in log, log
        assert "the old index is left as it was" in log, log
        assert open(paths["d1"], "rb").read() == spoiled
        assert not os.path.exists(paths["d1"] + ".damaged.2")
    finally:
        m.close()


def test_a_multi_stream_set_is_joined_again(tmp_path):
    m = advanced_disk(tmp_path)
    try:
        src = str(tmp_path / "src")
        for part in ("a", "b"):
            make_tree(os.path.join(src, part))
        m.config.add_policy("p1", storage_unit="stu1", multiple_streams=True)
        m.config.add_policy_client("p1", "me")
        for part in ("a", "b"):
            m.config.add_policy_selection("p1", os.path.join(src, part))
        m.config.add_schedule("p1", "full", type="full")
        [job] = m.wait_for(m.start_backup("p1"))
        assert job["status"] == st.OK
        s = m.image(job["image_id"])
        assert s["path"] == "" and len(s["sources"]) == 2
        index = m.home.index_path(s["id"])
        original = index_rows(index)
        damage_middle(index)
        job = rebuild(m, s["id"])
        assert "joined again" in log_text(m, job["id"])
        assert index_rows(index) == original
        dst = str(tmp_path / "dst")
        restore(m, s["id"], src, dst)
        assert_trees_equal(src, dst + src)
        # a stream image's index damaged: the set waits for it
        part = m.home.index_path(s["sources"][0])
        damage_middle(part)
        job = rebuild(m, s["id"], expect=st.IMAGE_DAMAGED)
        assert f"cairn images rebuild-index {s['sources'][0]}" in log_text(m, job["id"])
        rebuild(m, s["sources"][0])
        rebuild(m, s["id"])
        assert index_rows(index) == original
    finally:
        m.close()


# ---- a deduplication pool on a storage host reached over SSH ---------------------------------

@pytest.mark.ssh
def test_dedup_pool_over_ssh(tmp_path, sshd):
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        m.add_host("stor", address=sshd.host, port=sshd.port, user=sshd.user,
                   key_file=sshd.key_file, trust_host_key=True)
        pool, src = str(tmp_path / "pool"), str(tmp_path / "src")
        made = make_tree(src)
        m.create_storage_server("dd", type="dedup", host="stor", path=pool)
        m.create_disk_pool("ddp", server="dd", volumes=[])
        m.config.add_storage_unit("dstu", pool="ddp")
        m.config.add_policy("p1", storage_unit="dstu")
        m.config.add_policy_client("p1", "me")
        m.config.add_policy_selection("p1", src)
        m.config.add_schedule("p1", "full", type="full")
        first = backup(m)
        with open(os.path.join(src, "new.txt"), "w") as f:
            f.write("new in the second full\n")
        second = backup(m)   # takes unchanged files from the first through its files cache
        assert "without reading them" in log_text(m, second["job_id"])
        assert second["path"].endswith(".recipe") and second["storage_host"] == "stor"
        index = m.home.index_path(second["id"])
        original = index_rows(index)
        before = listing(m, second["id"])
        damage_middle(index)
        assert failing_dirs(m, second["id"], before)

        job = rebuild(m, second["id"])
        assert "on stor" in log_text(m, job["id"])
        assert job["files"] == len(original)
        assert index_rows(index) == original
        assert listing(m, second["id"]) == before
        dst = str(tmp_path / "dst")
        restore(m, second["id"], src, dst)
        assert_trees_equal(src, dst + src, check_owner=made["owners"])

        # a damaged chunk: the files it holds are named, the rest rebuilt
        first_index = m.home.index_path(first["id"])
        first_rows = index_rows(first_index)
        store = os.path.join(pool, "containers")
        containers = sorted(os.path.join(d, f) for d, _, fs in os.walk(store) for f in fs)
        big = max(containers, key=os.path.getsize)
        with open(big, "r+b") as f:
            f.seek(os.path.getsize(big) // 2)
            f.write(os.urandom(64))
        damage_middle(first_index)
        job = rebuild(m, first["id"], expect=st.IMAGE_DAMAGED)
        lost = {x["path"] for x in job["result"]["lost"]}
        assert lost and job["result"]["damage"], job["result"]
        assert all(f"{x}" in log_text(m, job["id"]) for x in list(lost)[:5])
        got = {e.path: e._replace(ctime_ns=0, ino=0) for e in index_rows(first_index)}
        for e in first_rows:
            assert e.path in lost or got[e.path] == e._replace(ctime_ns=0, ino=0), e.path
    finally:
        m.close()
