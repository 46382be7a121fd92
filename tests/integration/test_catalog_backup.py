"""Catalog protection end to end: a catalog backup of a master with an encrypted
deduplicating pool and an AdvancedDisk pool, CAIRN_HOME lost entirely, the master recovered
into a new home from the pool alone, and every image restored byte for byte; a wrong
passphrase, a damaged archive, a home that is not empty and a backup that never finished are
refused or skipped, with the home left as it was; the passphrase is written nowhere; a pool
on a host reached over SSH takes its catalog backup over SFTP."""

import json
import os
import shutil
import sqlite3
import stat
import tarfile
import time

import pytest

from app import status as st
from app.catalog_backup import archive
from app.master import Master
from clihelp import cairn, cairn_json
from killhelp import killed, next_master_run
from treegen import assert_trees_equal, make_tree

PASSPHRASE = b"granite-cairn-passphrase-7Qx"


def log_text(m, job_id):
    return "\n".join(x["message"] for x in m.jobs.logs(job_id))


def backup(m, policy, schedule):
    [job] = m.wait_for(m.start_backup(policy, schedule=schedule))
    assert job["status"] == st.OK, log_text(m, job["id"])
    return job["image_id"]


def catalog_backup(m, stu, passphrase=PASSPHRASE):
    [job] = m.wait_for([m.start_catalog_backup(stu, passphrase)])
    assert job["status"] == st.OK, log_text(m, job["id"])
    return job


def passphrase_file(tmp_path, text=PASSPHRASE, name="pass"):
    p = tmp_path / name
    p.write_bytes(text + b"\n")
    return p


def archives(folder):
    return sorted(n for n in os.listdir(folder) if archive.is_complete_name(n))


def setup_master(tmp_path, home):
    """A master with an encrypted dedup pool (a full and a differential of one tree) and an
    AdvancedDisk pool (a full of another). Returns (master, {image id: its source dir})."""
    src_d, src_a = str(tmp_path / "src-d"), str(tmp_path / "src-a")
    make_tree(src_d)
    make_tree(src_a)
    m = Master(str(home))
    m.config.add_host("me", local=True)
    m.create_storage_server("dd", type="dedup", host="me", path=str(tmp_path / "dedup"),
                            options={"encrypted": True})
    m.create_disk_pool("ddp", server="dd", volumes=[])
    m.create_storage_unit("dstu", pool="ddp")
    (tmp_path / "vol").mkdir()
    m.create_storage_server("ad", type="advanced-disk", host="me")
    m.create_disk_pool("adp", server="ad", volumes=[str(tmp_path / "vol")])
    m.create_storage_unit("astu", pool="adp")
    for pol, stu, src in (("pd", "dstu", src_d), ("pa", "astu", src_a)):
        m.config.add_policy(pol, storage_unit=stu)
        m.config.add_policy_client(pol, "me")
        m.config.add_policy_selection(pol, src)
        m.config.add_schedule(pol, "full", type="full", retention="2w")
        m.config.add_schedule(pol, "incr", type="differential", retention="2w")
    trees = {backup(m, "pd", "full"): src_d, backup(m, "pa", "full"): src_a}
    # the incremental of the dedup pool's tree sees a new file
    with open(os.path.join(src_d, "changed-later.txt"), "w") as f:
        f.write("written between the full and the incremental\n")
    trees[backup(m, "pd", "incr")] = src_d
    return m, trees


def all_bytes_under(*tops):
    for top in tops:
        for d, _, files in os.walk(top):
            for f in files:
                p = os.path.join(d, f)
                if os.path.isfile(p) and not os.path.islink(p):
                    with open(p, "rb") as fh:
                        yield p, fh.read()


def test_lose_the_home_and_recover_every_image_from_a_catalog_backup(tmp_path):
    home = tmp_path / "home"
    m, trees = setup_master(tmp_path, home)
    full_d = next(i for i in trees if m.image(i)["policy"] == "pd")
    # the first image restored now, before anything is lost: what every later restore of it
    # must give again (the source tree has changed since)
    [job] = m.wait_for([m.start_restore(full_d, [trees[full_d]], str(tmp_path / "before"))])
    assert job["status"] == st.OK, log_text(m, job["id"])
    key_before = (home / "keys" / "dd.key").read_bytes()
    ids = sorted(i["id"] for i in m.images())
    m.close()

    pp = passphrase_file(tmp_path)
    doc, _ = cairn_json(home, "catalog", "backup", "--storage-unit", "dstu",
                        "--passphrase-file", pp, "--wait")
    assert doc["status"] == st.OK, doc
    [job] = doc["jobs"]
    assert job["type"] == "catalog-backup" and job["status"] == st.OK
    m = Master(str(home))
    catalog_backup(m, "astu")  # a second catalog backup, to the AdvancedDisk pool
    m.close()

    folder = tmp_path / "dedup" / "catalog-backups"
    [name] = archives(folder)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(folder / name).st_mode) == 0o600
    assert archives(tmp_path / "vol" / "catalog-backups")
    with tarfile.open(folder / name) as tf:
        names = tf.getnames()
        manifest = json.loads(tf.extractfile("manifest.json").read())
    assert names[0] == "manifest.json" and "catalog.db" in names and "keys.json" in names
    assert manifest["format"] == archive.FORMAT and manifest["images"] == len(ids)
    assert manifest["keys"] == ["dd"]
    assert names[1] == "manifest.mac"
    assert {m_["name"] for m_ in manifest["members"]} == set(names[2:])

    # the passphrase is in no file of the home, of the pools or of the catalog backups, and
    # the pool key travels only sealed
    for path, data in all_bytes_under(home, tmp_path / "dedup", tmp_path / "vol"):
        assert PASSPHRASE not in data, path
        if "catalog-backups" in path:
            assert key_before.strip() not in data, path

    shutil.rmtree(home)  # the master's disk is lost
    new_home = tmp_path / "new-home"
    doc, _ = cairn_json(new_home, "catalog", "recover", "--from", tmp_path / "dedup",
                        "--passphrase-file", pp)
    assert doc["status"] == st.OK
    assert doc["backup"] == str(folder / name)
    assert doc["images"] == len(ids) and doc["keys_restored"] == ["dd"]
    assert doc["age_s"] is not None and doc["age_s"] < 600 and doc["created"]
    assert (new_home / "keys" / "dd.key").read_bytes() == key_before
    assert stat.S_IMODE(os.stat(new_home / "keys" / "dd.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(new_home).st_mode) == 0o700

    m = Master(str(new_home))
    try:
        assert sorted(i["id"] for i in m.images()) == ids
        for image_id, src in trees.items():
            out = tmp_path / f"restored-{image_id}"
            [job] = m.wait_for([m.start_restore(image_id, [src], str(out))])
            assert job["status"] == st.OK, log_text(m, job["id"])
            if image_id == full_d:
                assert_trees_equal(str(tmp_path / "before") + src, str(out) + src)
            else:
                assert_trees_equal(src, str(out) + src)  # the newest image of its tree
        # the recovered master backs up again, into the encrypted pool, with the old key
        backup(m, "pd", "full")
    finally:
        m.close()


@pytest.fixture
def small_master(tmp_path):
    """A master with one AdvancedDisk pool, one image and one catalog backup."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("the data\n")
    (tmp_path / "vol").mkdir()
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.create_storage_server("ad", type="advanced-disk", host="me")
    m.create_disk_pool("adp", server="ad", volumes=[str(tmp_path / "vol")])
    m.create_storage_unit("astu", pool="adp")
    m.config.add_policy("pa", storage_unit="astu")
    m.config.add_policy_client("pa", "me")
    m.config.add_policy_selection("pa", str(src))
    backup(m, "pa", None)
    catalog_backup(m, "astu")
    yield m
    m.close()


def _recover(tmp_path, home, passphrase=PASSPHRASE, check=False):
    pp = passphrase_file(tmp_path, passphrase, name="pass-" + os.path.basename(str(home)))
    return cairn_json(home, "catalog", "recover", "--from", tmp_path / "vol",
                      "--passphrase-file", pp, check=check)


def _nothing_beside(home):
    """No staging folder of a recovery is left beside the home."""
    return not [n for n in os.listdir(os.path.dirname(home)) if n.startswith(".cairn-recover")]


def test_a_wrong_passphrase_is_refused_when_queued_and_when_recovering(tmp_path, small_master):
    with pytest.raises(Exception) as e:
        small_master.start_catalog_backup("astu", b"not the passphrase")
    assert e.value.status == st.AUTH_FAILED
    doc, p = cairn_json(tmp_path / "home", "catalog", "backup", "--storage-unit", "astu",
                        "--passphrase-file", passphrase_file(tmp_path, b"another-one", "w"),
                        "--wait", check=False)
    assert p.returncode == st.AUTH_FAILED and "passphrase" in doc["error"]
    home = tmp_path / "new"
    doc, p = _recover(tmp_path, home, b"wrong passphrase!")
    assert p.returncode == st.AUTH_FAILED and doc["kind"] == "WrongPassphrase"
    assert not home.exists() and _nothing_beside(str(home))


def test_a_home_that_is_not_empty_is_refused(tmp_path, small_master):
    home = tmp_path / "busy"
    home.mkdir()
    (home / "catalog.db").write_bytes(b"someone's catalog")
    doc, p = _recover(tmp_path, home)
    assert p.returncode == st.INVALID_REQUEST and "catalog.db" in doc["error"]
    assert doc["hint"] and "empty" in doc["hint"]
    assert os.listdir(home) == ["catalog.db"]
    assert (home / "catalog.db").read_bytes() == b"someone's catalog"
    # an empty folder is a home to recover into
    empty = tmp_path / "empty"
    empty.mkdir()
    doc, p = _recover(tmp_path, empty)
    assert p.returncode == 0 and doc["images"] == 1, doc


@pytest.mark.parametrize("damage", ["truncated", "altered"])
def test_a_damaged_catalog_backup_is_refused_and_nothing_is_written(tmp_path, small_master,
                                                                    damage):
    folder = tmp_path / "vol" / "catalog-backups"
    [name] = archives(folder)
    path = folder / name
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:len(data) // 2]
    else:
        with tarfile.open(path) as tf:
            ti = tf.getmember("catalog.db")
        data[ti.offset_data + ti.size // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    home = tmp_path / "new"
    doc, p = _recover(tmp_path, home)
    assert p.returncode == st.IMAGE_DAMAGED, doc
    assert "damaged" in doc["error"] and name in doc["error"]
    assert not home.exists() and _nothing_beside(str(home))


def test_a_catalog_backup_that_never_finished_is_skipped(tmp_path, small_master):
    folder = tmp_path / "vol" / "catalog-backups"
    [name] = archives(folder)
    # what a writer killed half-way leaves: a newer file under its partial name
    good = (folder / name).read_bytes()
    partial = folder / ".cairn-catalog-20991231T235959Z-999.tar.partial"
    partial.write_bytes(good[:len(good) // 3])
    doc, p = _recover(tmp_path, tmp_path / "new")
    assert p.returncode == 0 and doc["backup"] == str(folder / name), doc


def test_a_catalog_backup_runs_beside_a_backup(tmp_path, small_master):
    """Queued together, the two jobs run at once; the catalog copy is consistent (sqlite's
    integrity check on recovery) whatever the backup wrote meanwhile."""
    m = small_master
    src = tmp_path / "big"
    make_tree(str(src))
    m.config.add_policy_selection("pa", str(src))
    [b] = m.start_backup("pa")
    c = m.start_catalog_backup("astu", PASSPHRASE)
    jobs = m.wait_for([b, c])
    assert [j["status"] for j in jobs] == [st.OK, st.OK], [log_text(m, j["id"]) for j in jobs]
    started = {j["id"]: j["started"] for j in jobs}
    ended = {j["id"]: j["ended"] for j in jobs}
    assert started[c] <= ended[b], "the catalog backup waited for the backup to end"
    doc, p = _recover(tmp_path, tmp_path / "new")
    assert p.returncode == 0 and doc["backup"].endswith(f"-{c}.tar"), doc
    assert doc["images"] in (1, 2)


def test_a_catalog_backup_killed_before_its_commit_leaves_nothing_that_looks_complete(
        tmp_path, small_master):
    """kill -9 of the master right before the host's agent commits the archive: its whole
    content is written, under the partial name only; recover takes the older, complete one,
    and the next catalog backup is not hindered."""
    small_master.close()
    home = str(tmp_path / "home")
    folder = tmp_path / "vol" / "catalog-backups"
    [older] = archives(folder)
    jid = killed(home, "commit_file", "before", "catalog", "backup", "--storage-unit", "astu",
                 "--passphrase-file", passphrase_file(tmp_path), "--wait")
    assert archives(folder) == [older]
    [partial] = [n for n in os.listdir(folder) if n.endswith(".partial")]
    assert partial.startswith(".") and stat.S_IMODE(os.stat(folder / partial).st_mode) == 0o600
    doc, p = _recover(tmp_path, tmp_path / "new")
    assert p.returncode == 0 and doc["backup"] == str(folder / older), doc
    next_master_run(home)
    m = Master(home)
    try:
        assert m.job(jid)["state"] == "done" and m.job(jid)["status"] != st.OK
        # restarted, it needs no passphrase: the escrow in the catalog seals the keys
        [again] = m.restart_job(jid)
        [job] = m.wait_for([again["id"]])
        assert job["status"] == st.OK, log_text(m, job["id"])
    finally:
        m.close()
    assert len(archives(folder)) == 2
    # in the archive's catalog, its own job has ended well and no dispatcher holds the lease
    # (the one that ran it did, while the copy was taken)
    with tarfile.open(folder / archives(folder)[-1]) as tf:
        (tmp_path / "copy.db").write_bytes(tf.extractfile("catalog.db").read())
    with sqlite3.connect(tmp_path / "copy.db") as db:
        assert db.execute("SELECT count(*) FROM leases").fetchone()[0] == 0
        assert db.execute("SELECT state, status FROM jobs WHERE id=?",
                          (again["id"],)).fetchone() == ("done", st.OK)


def test_a_catalog_backup_to_a_pool_on_an_ssh_host(tmp_path, sshd):
    """The pool's host is reached over SSH: the archive goes over SFTP and its host's agent
    commits it; it is recovered from the pool's folder (the loopback host's disk is this
    machine's)."""
    src = tmp_path / "src"
    make_tree(str(src))
    vol = tmp_path / "remote-vol"
    vol.mkdir()
    home = tmp_path / "home"
    m = Master(str(home))
    try:
        m.config.add_host("me", local=True)
        m.add_host("far", address=sshd.host, port=sshd.port, user=sshd.user,
                   key_file=sshd.key_file, trust_host_key=True)
        m.create_storage_server("ad", type="advanced-disk", host="far")
        m.create_disk_pool("adp", server="ad", volumes=[str(vol)])
        m.create_storage_unit("astu", pool="adp")
        m.config.add_policy("pa", storage_unit="astu")
        m.config.add_policy_client("pa", "me")
        m.config.add_policy_selection("pa", str(src))
        image_id = backup(m, "pa", None)
        job = catalog_backup(m, "astu")
        assert job["result"]["host"] == "far"
    finally:
        m.close()
    [name] = archives(vol / "catalog-backups")
    assert stat.S_IMODE(os.stat(vol / "catalog-backups" / name).st_mode) == 0o600
    assert not [n for n in os.listdir(vol / "catalog-backups") if n.endswith(".partial")]
    shutil.rmtree(home)
    doc, _ = cairn_json(tmp_path / "new", "catalog", "recover", "--from", vol,
                        "--passphrase-file", passphrase_file(tmp_path))
    assert doc["known_hosts"] is True and doc["images"] == 1

    # the same, read from the storage host over SSH (--host): the host key is checked as
    # for any host (unknown: refused with its fingerprint until trusted)
    target = f"{sshd.user}@{sshd.host}:{sshd.port}"
    far_home = tmp_path / "from-far"
    doc, p = cairn_json(far_home, "catalog", "recover", "--from", vol, "--host", target,
                        "--key", sshd.key_file, "--passphrase-file",
                        passphrase_file(tmp_path), check=False)
    assert p.returncode == st.HOST_KEY_UNKNOWN, doc
    assert sshd.host_key_fingerprint in doc["error"] + (doc.get("hint") or "")
    assert not far_home.exists() and not [n for n in os.listdir(tmp_path)
                                          if n.startswith(".cairn-recover")]
    doc, _ = cairn_json(far_home, "catalog", "recover", "--from", vol, "--host", target,
                        "--key", sshd.key_file, "--trust-host-key", "--passphrase-file",
                        passphrase_file(tmp_path))
    assert doc["backup"] == f"{sshd.host}:{vol / 'catalog-backups' / name}"
    assert doc["host_key_fingerprint"] == sshd.host_key_fingerprint and doc["images"] == 1
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".cairn-recover")]
    assert sorted(os.listdir(far_home)) == sorted(os.listdir(tmp_path / "new"))
    m = Master(str(tmp_path / "new"))
    try:
        out = tmp_path / "out"
        [job] = m.wait_for([m.start_restore(image_id, [str(src)], str(out))])
        assert job["status"] == st.OK, log_text(m, job["id"])
        assert_trees_equal(str(src), str(out) + str(src))
    finally:
        m.close()


def test_a_pool_key_no_catalog_backup_holds_is_named_until_one_does(tmp_path):
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        m.create_storage_server("dd", type="dedup", host="me", path=str(tmp_path / "dedup"),
                                options={"encrypted": True})
        m.create_disk_pool("ddp", server="dd", volumes=[])
        m.create_storage_unit("dstu", pool="ddp")
        state = m.catalog_backup_state()
        assert state["keys_not_escrowed"] == ["dd"] and state["last"] is None
        catalog_backup(m, "dstu")
        assert m.catalog_backup_state()["keys_not_escrowed"] == []
        # a second encrypted pool made since: its key is in no catalog backup yet
        m.create_storage_server("d2", type="dedup", host="me", path=str(tmp_path / "d2"),
                                options={"encrypted": True})
        assert m.catalog_backup_state()["keys_not_escrowed"] == ["d2"]
    finally:
        m.close()


def test_a_catalog_schedule_runs_by_itself_and_keeps_its_retention(tmp_path, small_master):
    """A catalog schedule with a window open now queues a catalog backup at the scheduler's
    tick; once written, the archives in its folder older than the schedule's retention are
    removed (the newest always stays), and partial files older than a day; a partial file of
    today (a backup perhaps still writing) and files that are not catalog backups stay."""
    from datetime import timezone

    from app.scheduler import Scheduler
    m = small_master
    folder = tmp_path / "vol" / "catalog-backups"
    [genuine] = archives(folder)
    data = (folder / genuine).read_bytes()
    old = ["cairn-catalog-20260901T000000Z-900.tar", "cairn-catalog-20261001T120000Z-901.tar"]
    for name in old:
        (folder / name).write_bytes(data)
    old_partial = ".cairn-catalog-20261001T000000Z-902.tar.partial"
    young_partial = archive.file_names(time.time(), 903)[0]
    for name in (old_partial, young_partial, "notes.txt"):
        (folder / name).write_bytes(b"x")
    m.config.add_policy("cat", storage_unit="astu")
    m.add_schedule("cat", "daily", type="catalog", retention="1w",
                   windows=[{"day": d, "start": "00:00", "hours": 24} for d in range(7)])
    [jid] = Scheduler(m, tz=timezone.utc).tick()
    [job] = m.wait_for([jid])
    assert job["status"] == st.OK and job["schedule"] == "daily", log_text(m, jid)
    left = sorted(os.listdir(folder))
    new = [n for n in archives(folder) if n != genuine]
    assert len(new) == 1
    assert left == sorted([genuine, new[0], young_partial, "notes.txt"])
    assert sorted(job["result"]["removed"]) == sorted(old + [old_partial])
    assert "removed 3 older catalog backup file(s)" in log_text(m, jid)
    assert Scheduler(m, tz=timezone.utc).tick() == []     # not again within its frequency


def test_the_passphrase_changes_and_older_archives_keep_the_old_one(tmp_path, small_master):
    m = small_master
    home = tmp_path / "home"
    new_pass = b"a brand new passphrase 42"
    old_file, new_file = passphrase_file(tmp_path), passphrase_file(tmp_path, new_pass, "np")
    doc, p = cairn_json(home, "catalog", "set-passphrase", "--passphrase-file",
                        passphrase_file(tmp_path, b"not the passphrase", "wrong"),
                        "--new-passphrase-file", new_file, check=False)
    assert p.returncode == st.AUTH_FAILED, doc
    doc, _ = cairn_json(home, "catalog", "set-passphrase", "--passphrase-file", old_file,
                        "--new-passphrase-file", new_file)
    assert doc["status"] == 0
    with pytest.raises(Exception) as e:
        m.start_catalog_backup("astu", PASSPHRASE)
    assert e.value.status == st.AUTH_FAILED
    folder = tmp_path / "vol" / "catalog-backups"
    [older] = archives(folder)
    catalog_backup(m, "astu", new_pass)
    # the older archive, kept apart, opens with the old passphrase only
    apart = tmp_path / "apart"
    apart.mkdir(mode=0o700)
    os.replace(folder / older, apart / older)
    doc, p = cairn_json(tmp_path / "a", "catalog", "recover", "--from", apart,
                        "--passphrase-file", new_file, check=False)
    assert p.returncode == st.AUTH_FAILED, doc
    doc, _ = cairn_json(tmp_path / "b", "catalog", "recover", "--from", apart,
                        "--passphrase-file", old_file)
    assert doc["backup"] == str(apart / older)
    doc, _ = cairn_json(tmp_path / "c", "catalog", "recover", "--from", folder,
                        "--passphrase-file", new_file)
    assert doc["status"] == 0 and doc["images"] == 1


def test_a_full_volume_fails_the_catalog_backup_cleanly(tmp_path, small_tmpfs):
    """The pool's volume fills up while the archive is written: the job fails with the
    reason, leaves no partial file, and the catalog backup before it stays the newest."""
    vol = small_tmpfs("1m")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("the data\n")
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        m.create_storage_server("ad", type="advanced-disk", host="me")
        m.create_disk_pool("adp", server="ad", volumes=[str(vol)])
        m.create_storage_unit("astu", pool="adp")
        m.config.add_policy("pa", storage_unit="astu")
        m.config.add_policy_client("pa", "me")
        m.config.add_policy_selection("pa", str(src))
        backup(m, "pa", None)
        catalog_backup(m, "astu")
        folder = vol / "catalog-backups"
        [before] = archives(folder)
        size = (folder / before).stat().st_size
        free = os.statvfs(vol).f_bavail * os.statvfs(vol).f_frsize
        (vol / "filler").write_bytes(b"\0" * max(0, free - size // 2))
        [job] = m.wait_for([m.start_catalog_backup("astu", PASSPHRASE)])
        log = log_text(m, job["id"])
        assert job["status"] == st.STORAGE_WRITE_FAILED, log
        assert "no space" in log.lower() or "full" in log.lower(), log
        assert "changed while" not in log
        assert sorted(os.listdir(folder)) == [before]
    finally:
        m.close()


def test_a_recovered_catalog_starts_a_new_segment_of_the_audit_log(tmp_path, small_master):
    """The recovered audit log holds the entries up to the catalog backup and goes on from
    its last one in a new segment, which says so: the chain stays whole and verifiable, and
    what was recorded after the backup is named as missing, not silently gone."""
    m = small_master
    in_backup = m.audit_entries()[-1]["seq"]
    m.set_setting("backup_tries", "3")      # recorded after the catalog backup was made
    assert m.audit_entries()[-1]["seq"] > in_backup
    home = tmp_path / "new"
    doc, p = _recover(tmp_path, home)
    assert p.returncode == 0, doc
    chain_doc, p = cairn_json(home, "audit", "--verify")
    assert p.returncode == 0, p.stderr
    chain = chain_doc["chain"]
    assert chain["ok"] and chain["head"] == "matches"
    entries = chain_doc["entries"]
    last = entries[-1]
    assert [e["seq"] for e in entries] == list(range(1, in_backup + 2))
    assert doc["audit_segment"] == last["seq"] == in_backup + 1
    assert (last["user"], last["role"], last["origin"], last["action"]) == \
        ("recovery", "system", "local", "catalog_recover")
    assert last["details"]["backup"] == doc["backup"]
    assert last["details"]["continues_from"]["seq"] == in_backup
    assert "not in this catalog" in last["details"]["note"]
    assert not [e for e in entries if e["action"] == "set_setting"]
    [seg] = chain["segments"]
    assert (seg["seq"], seg["backup"], seg["continues_from"]) == \
        (last["seq"], doc["backup"], in_backup)
    p = cairn(home, "audit", "--verify")
    assert f"a new segment starts at entry {last['seq']}" in p.stdout
    p = cairn(tmp_path / "again", "catalog", "recover", "--from", tmp_path / "vol",
              "--passphrase-file", passphrase_file(tmp_path, name="pass-again"))
    assert f"the audit log goes on in a new segment from entry {last['seq']}" in p.stdout
    # the master goes on in the new segment, and an edit of its first entry is found
    r = Master(str(home))
    try:
        r.set_setting("backup_tries", "4")
        assert r.audit_verify()["ok"]
    finally:
        r.close()
    conn = sqlite3.connect(home / "catalog.db")
    with conn:
        conn.execute("UPDATE audit_log SET details='{}' WHERE seq=?", (last["seq"],))
    conn.close()
    doc, p = cairn_json(home, "audit", "--verify", check=False)
    assert p.returncode == st.CATALOG_FAILED
    assert [b["seq"] for b in doc["chain"]["broken"]] == [last["seq"]]
