"""A recovered master trusts what its catalog backup holds: the hosts it reaches, their host
keys, the pool keys. So a recovery must not take an archive that someone else could have
made. The attacker here is an ordinary local user (created and removed by the test) who
writes a forged catalog backup, newer than the genuine one, into a folder the recovery
reads; the forgery is built around the escrow of a genuine archive (every archive carries
it, and copies of old archives travel), so the administrator's passphrase opens it. The
recovery must refuse it, restore nothing, and say why: the folder or the file is not only
root's, the manifest is not authentic, or an older archive was renamed to look newest."""

import io
import json
import os
import shutil
import sqlite3
import tarfile
import tempfile
from pathlib import Path

import pytest

from app import status as st
from app.catalog_backup import archive, escrow
from app.master import Master
from clihelp import cairn_json
from localuser import LocalUser, shared_dir

PASSPHRASE = b"granite-cairn-passphrase-7Qx"


@pytest.fixture(scope="module")
def attacker():
    u = LocalUser("cairnforge").create()
    yield u
    u.remove()


def _backup(m, stu):
    [job] = m.wait_for([m.start_catalog_backup(stu, PASSPHRASE)])
    assert job["status"] == st.OK, job
    return job


@pytest.fixture
def master(tmp_path):
    """A master with an AdvancedDisk pool whose volume is under a folder only root can write
    (that other users can reach: pytest's own are root's alone), one image and one catalog
    backup."""
    top = Path(shared_dir("cairn-trust-"))
    src, vol = top / "src", top / "vol"
    src.mkdir()
    (src / "a.txt").write_text("the data\n")
    vol.mkdir()
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.create_storage_server("ad", type="advanced-disk", host="me")
    m.create_disk_pool("adp", server="ad", volumes=[str(vol)])
    m.create_storage_unit("astu", pool="adp")
    m.config.add_policy("pa", storage_unit="astu")
    m.config.add_policy_client("pa", "me")
    m.config.add_policy_selection("pa", str(src))
    [job] = m.wait_for(m.start_backup("pa"))
    assert job["status"] == st.OK
    _backup(m, "astu")
    yield m, vol / archive.FOLDER
    m.close()
    shutil.rmtree(top, ignore_errors=True)


def _genuine(folder):
    [name] = sorted(n for n in os.listdir(folder) if archive.is_complete_name(n))
    return folder / name


def _forged(tmp_path, genuine, mac_key=None):
    """(name, bytes) of a catalog backup newer than `genuine`, with a catalog of the
    attacker's making (a host of theirs) and the escrow of the genuine one, and a manifest
    code made with `mac_key` (the attacker does not have the real one)."""
    with tarfile.open(genuine) as tf:
        real = json.loads(tf.extractfile(archive.MANIFEST).read())
    work = tempfile.mkdtemp(dir=tmp_path)
    forged_home = os.path.join(work, "home")
    fm = Master(forged_home)
    fm.config.add_host("evil", address="192.0.2.66", user="root")
    fm.close()
    catalog = os.path.join(forged_home, "catalog.db")
    keys = os.path.join(work, "keys.json")
    with open(keys, "w") as f:
        json.dump({"keys": {}}, f)
    members = [(archive.CATALOG, catalog), (archive.KEYS, keys)]
    created, job_id = real["created_epoch"] + 3600, real["job_id"] + 1
    manifest = dict(real, created_epoch=created, job_id=job_id, keys=[], images=0,
                    indexes=0, members=archive.describe(members))
    out = io.BytesIO()
    archive.write(out, manifest, members,
                  lambda body: escrow.manifest_mac(mac_key or os.urandom(32), body))
    return archive.file_names(created, job_id)[1], out.getvalue()


def _recover(tmp_path, folder, home_name="new"):
    pp = tmp_path / "pass"
    pp.write_bytes(PASSPHRASE + b"\n")
    home = tmp_path / home_name
    doc, p = cairn_json(home, "catalog", "recover", "--from", folder, "--passphrase-file", pp,
                        check=False)
    return doc, p, home


def _nothing_recovered(tmp_path, home):
    return not home.exists() and not [n for n in os.listdir(tmp_path)
                                      if n.startswith(".cairn-recover")]


def test_a_folder_other_users_can_write_is_not_read(tmp_path, master, attacker):
    m, folder = master
    name, data = _forged(tmp_path, _genuine(folder))
    os.chmod(folder, 0o777)  # a careless chmod on the pool
    r = attacker.run("/bin/sh", "-c", 'cat > "$1"; chmod 600 "$1"', "sh", str(folder / name),
                     input=data)
    assert r.returncode == 0, r.stderr
    doc, p, home = _recover(tmp_path, folder)
    assert p.returncode == st.INVALID_REQUEST, doc
    assert "can be written by other users" in doc["error"] and doc["hint"]
    assert _nothing_recovered(tmp_path, home)

    # the folder private again, but the attacker's file is still there: not read either
    os.chmod(folder, 0o700)
    doc, p, home = _recover(tmp_path, folder)
    assert p.returncode == st.INVALID_REQUEST, doc
    assert name in doc["error"] and f"belongs to {attacker.name}" in doc["error"]
    assert _nothing_recovered(tmp_path, home)


def test_a_folder_of_another_user_is_not_read(tmp_path, master, attacker):
    m, folder = master
    theirs = folder.parent.parent / "theirs"
    theirs.mkdir()
    os.chown(theirs, attacker.uid, attacker.gid)
    os.chmod(theirs, 0o700)
    name, data = _forged(tmp_path, _genuine(folder))
    r = attacker.run("/bin/sh", "-c", 'cat > "$1"', "sh", str(theirs / name), input=data)
    assert r.returncode == 0, r.stderr
    doc, p, home = _recover(tmp_path, theirs)
    assert p.returncode == st.INVALID_REQUEST, doc
    assert f"belongs to {attacker.name}" in doc["error"]
    assert _nothing_recovered(tmp_path, home)


def test_a_forged_archive_around_a_genuine_escrow_is_not_authentic(tmp_path, master):
    """Even copied into a folder of root's (as an administrator might do with a file found
    elsewhere), an archive without the passphrase's manifest code restores nothing."""
    m, folder = master
    name, data = _forged(tmp_path, _genuine(folder))
    (folder / name).write_bytes(data)
    os.chmod(folder / name, 0o600)
    doc, p, home = _recover(tmp_path, folder)
    assert p.returncode == st.IMAGE_DAMAGED, doc
    assert "not authentic" in doc["error"] and name in doc["error"]
    assert _nothing_recovered(tmp_path, home)


def test_an_older_archive_renamed_to_look_newest_is_refused(tmp_path, master):
    m, folder = master
    old = _genuine(folder)
    _backup(m, "astu")
    newest = sorted(n for n in os.listdir(folder) if archive.is_complete_name(n))[-1]
    assert newest != old.name
    os.replace(old, folder / newest)  # the newer one gone, the older one under its name
    doc, p, home = _recover(tmp_path, folder)
    assert p.returncode == st.IMAGE_DAMAGED, doc
    assert "renamed" in doc["error"] and old.name in doc["error"]
    assert _nothing_recovered(tmp_path, home)


def test_the_manifest_key_stays_out_of_archives_and_comes_back_with_a_recovery(tmp_path,
                                                                               master):
    m, folder = master
    key = escrow.mac_key(m.db)
    assert key and len(key) == 32
    genuine = _genuine(folder)
    with tarfile.open(genuine) as tf:
        copy = tmp_path / "copy.db"
        copy.write_bytes(tf.extractfile(archive.CATALOG).read())
        assert key.hex().encode() not in genuine.read_bytes()
    conn = sqlite3.connect(copy)
    try:
        assert conn.execute("SELECT count(*) FROM settings WHERE key=?",
                            (escrow.MAC_SETTING,)).fetchone()[0] == 0
    finally:
        conn.close()
    m.close()
    doc, p, home = _recover(tmp_path, folder)
    assert p.returncode == 0 and doc["authenticated"] is True, doc
    again = Master(str(home))
    try:
        assert escrow.mac_key(again.db) == key
        _backup(again, "astu")  # the recovered master makes catalog backups a recovery takes
    finally:
        again.close()
    doc, p, _ = _recover(tmp_path, folder, "newer")
    assert p.returncode == 0 and doc["backup"] != str(genuine), doc
