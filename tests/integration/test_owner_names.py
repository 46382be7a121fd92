"""File owners are shown by the names the client had for them when it was backed up: a real
local user owns some of the files, root others, and an id without a name the rest. The names
come back through the master API and `cairn browse` (text shows names, --json keeps the
numbers beside them), for a client on this machine (the local transport) and one reached over
a real sshd, for an incremental's unchanged entries (no member written for them), after the
user is removed from the system, for a multi-stream backup's set image, and for the images a
lost catalog gets back from the pool."""

import grp
import os
import pwd
import shutil
import sys
from pathlib import Path

import pytest

from app import status as st
from app.master import Master
from clihelp import cairn, cairn_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))

from localuser import LocalUser, unnamed_id  # noqa: E402


@pytest.fixture
def owner():
    u = LocalUser("cairnowner").create()
    u.group = grp.getgrgid(u.gid).gr_name
    yield u
    u.remove()


def make_files(src, owner, nobody):
    os.makedirs(src)
    for name, uid, gid in (("mine.txt", owner.uid, owner.gid), ("roots.txt", 0, 0),
                           ("orphan.txt", nobody, nobody), ("mixed.txt", owner.uid, 0)):
        p = os.path.join(src, name)
        with open(p, "w") as f:
            f.write(name + "\n")
        os.chown(p, uid, gid)


def backup(m, policy, schedule):
    [job] = m.wait_for(m.start_backup(policy, schedule=schedule))
    assert job["status"] == st.OK, "\n".join(x["message"] for x in m.jobs.logs(job["id"]))
    return job["image_id"]


def owners_of(m, image, src):
    return {e["name"]: (e["uid"], e["gid"], e["user"], e["group"])
            for e in m.browse(image, src)["entries"]}


def expected(owner, nobody):
    return {"mine.txt": (owner.uid, owner.gid, owner.name, owner.group),
            "roots.txt": (0, 0, "root", grp.getgrgid(0).gr_name),
            "orphan.txt": (nobody, nobody, None, None),
            "mixed.txt": (owner.uid, 0, owner.name, grp.getgrgid(0).gr_name)}


def test_owner_names_recorded_at_backup_time(tmp_path, sshd, owner):
    nobody = unnamed_id()
    src = str(tmp_path / "src")
    make_files(src, owner, nobody)
    vol = tmp_path / "vol"
    vol.mkdir()
    home = tmp_path / "home"
    m = Master(str(home))
    try:
        m.config.add_host("me", local=True)
        m.add_host("remote", address=sshd.host, port=sshd.port, user=sshd.user,
                   key_file=sshd.key_file, trust_host_key=True)
        m.create_storage_server("ad", type="advanced-disk", host="me")
        m.create_disk_pool("adp", server="ad", volumes=[str(vol)])
        m.create_storage_unit("stu", pool="adp")
        for policy, client in (("local", "me"), ("overssh", "remote")):
            m.config.add_policy(policy, storage_unit="stu")
            m.config.add_policy_client(policy, client)
            m.config.add_policy_selection(policy, src)
            m.config.add_schedule(policy, "full", type="full")
            m.config.add_schedule(policy, "diff", type="differential")
        want = expected(owner, nobody)

        full = backup(m, "local", "full")
        assert owners_of(m, full, src) == want
        users, groups = m.owner_names(full)
        assert users[owner.uid] == owner.name and nobody not in users
        # the image list stays small: names come with the listings that show them
        assert "owners" not in m.image(full)

        # nothing changed: the incremental writes no member for these files, and still
        # names their owners
        diff = backup(m, "local", "diff")
        assert m.image(diff)["schedule_type"] == "differential"
        assert owners_of(m, diff, src) == want

        over_ssh = backup(m, "overssh", "full")
        assert owners_of(m, over_ssh, src) == want

        # a multi-stream backup: the set image that is browsed has its streams' names
        other = str(tmp_path / "other")
        make_files(other, owner, nobody)
        m.config.add_policy("streams", storage_unit="stu", multiple_streams=True)
        m.config.add_policy_client("streams", "me")
        for s in (src, other):
            m.config.add_policy_selection("streams", s)
        m.config.add_schedule("streams", "full", type="full")
        set_id = backup(m, "streams", "full")
        assert len([i for i in m.images(include_parts=True) if i["part_of"] == set_id]) == 2
        assert owners_of(m, set_id, src) == want and owners_of(m, set_id, other) == want
    finally:
        m.close()

    # The user is gone from the system; the image still says who owned the files.
    owner.remove()
    with pytest.raises(KeyError):
        pwd.getpwnam(owner.name)
    doc, _ = cairn_json(home, "browse", full, src)
    rows = {e["name"]: e for e in doc["entries"]}
    assert (rows["mine.txt"]["uid"], rows["mine.txt"]["user"]) == (owner.uid, owner.name)
    assert (rows["orphan.txt"]["uid"], rows["orphan.txt"]["user"]) == (nobody, None)
    text = cairn(home, "browse", full, src).stdout
    lines = {line.rsplit(" ", 1)[1]: line.split() for line in text.splitlines()[1:]}
    assert lines["mine.txt"][2:4] == [owner.name, owner.group], text
    assert lines["orphan.txt"][2:4] == [str(nobody), str(nobody)], text
    assert lines["mixed.txt"][2:4] == [owner.name, grp.getgrgid(0).gr_name], text
    text = cairn(home, "browse", "--client", "remote", src).stdout
    assert owner.name in text and str(owner.uid) not in text.split(), text

    # A lost catalog: the pool's images come back with their owner names.
    shutil.rmtree(home)
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "storage-server", "create", "ad", "--type", "advanced-disk", "--host", "me")
    cairn(home, "disk-pool", "create", "adp", "--server", "ad", "--volume", vol)
    doc, _ = cairn_json(home, "disk-pool", "import", "adp", "--wait")
    assert doc["status"] == st.OK, doc
    m = Master(str(home))
    try:
        assert full in doc["jobs"][0]["result"]["imported"]
        assert owners_of(m, full, src) == expected(owner, nobody)
    finally:
        m.close()
