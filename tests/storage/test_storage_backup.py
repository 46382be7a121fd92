"""From nothing to a verified restore through the CLI, for every storage type: on the embedded
default (one machine, no SSH) and across a real sshd, with every kind of file of the backup
contract; browsing shows the tree, restores give it back byte for byte."""

import os

import pytest

from clihelp import cairn, cairn_json
from storage_sites import cli_pool
from treegen import assert_trees_equal, make_tree


def setup_storage(home, storage_type, where, storage_host="me", checksum="crc32"):
    cli_pool(cairn, home, storage_type, where, host=storage_host)
    cairn(home, "storage-unit", "create", "stu1", "--pool", "dp1")
    cairn(home, "policy", "create", "p1", "--storage-unit", "stu1", "--checksum", checksum)
    cairn(home, "policy", "add-schedule", "p1", "full", "--type", "full", "--retention", "2w")


def backup_and_check(home, client):
    doc, p = cairn_json(home, "backup", "p1", "--client", client, "--wait")
    job = doc["jobs"][0]
    assert doc["status"] == 0, (job, cairn(home, "jobs", "log", str(job["id"])).stdout)
    for field in ("id", "type", "state", "status", "client", "policy", "schedule",
                  "storage_unit", "started", "ended", "bytes", "files", "rate_bytes_per_s"):
        assert field in job
    assert job["state"] == "done" and job["files"] > 0 and job["bytes"] > 3 << 20
    images, _ = cairn_json(home, "images", "list", "--client", client)
    assert len(images["images"]) == 1
    img = images["images"][0]
    for field in ("id", "client", "policy", "schedule", "created", "expires", "bytes", "files",
                  "storage_unit"):
        assert field in img
    # what the image takes in its pool (an AdvancedDisk image: at least its data, see
    # tests/integration/test_advanced_disk.py)
    assert img["image_bytes"] > 0
    assert os.path.isfile(img["path"]) and not os.path.basename(img["path"]).startswith(".")
    return job, img


def test_embedded_default_backup_browse_restore(tmp_path, storage_type):
    home, vol, src, dst = (tmp_path / n for n in ("home", "vol", "src", "dst"))
    make_tree(str(src))
    cairn(home, "host", "add", "me", "--local")
    setup_storage(home, storage_type, str(vol), checksum="sha256")
    cairn(home, "policy", "add-client", "p1", "me")
    cairn(home, "policy", "add-selection", "p1", str(src))
    job, img = backup_and_check(home, "me")
    assert img["checksum"] == "sha256"

    # browsing: the parents of the selection, then the selection's own entries
    top, _ = cairn_json(home, "browse", img["id"])
    assert [e["name"] for e in top["entries"]] == [str(tmp_path).strip("/").split("/")[0]]
    listing, _ = cairn_json(home, "browse", img["id"], str(src))
    names = {os.fsencode(e["name"]) for e in listing["entries"]}
    assert names == set(os.listdir(os.fsencode(str(src))))
    # names that are not UTF-8 come back exactly (JSON carries them as surrogate escapes)
    odd = os.path.join(str(src), "names")
    listing, _ = cairn_json(home, "browse", img["id"], odd)
    assert {os.fsencode(e["name"]) for e in listing["entries"]} == set(
        os.listdir(os.fsencode(odd)))
    assert any(b"\xff" in os.fsencode(e["name"]) for e in listing["entries"])
    human = cairn(home, "browse", img["id"], odd).stdout
    assert "\\377" in human       # a byte that is not UTF-8, escaped as ls -b does
    latest, _ = cairn_json(home, "browse", "--client", "me", str(src))
    assert latest["image"] == img["id"]

    doc, _ = cairn_json(home, "restore", img["id"], "--path", str(src), "--to", str(dst),
                        "--wait")
    assert doc["status"] == 0, cairn(home, "jobs", "log", str(doc["jobs"][0]["id"])).stdout
    # /x restored to /new becomes /new/x
    assert_trees_equal(str(src), str(dst) + str(src))

    # a second restore of the same files: skip leaves them, rename puts copies beside them;
    # this one through the page cache
    doc, _ = cairn_json(home, "restore", img["id"], "--path", str(src), "--to", str(dst),
                        "--overwrite", "rename", "--direct-io", "off", "--wait")
    assert doc["status"] == 0
    log = cairn(home, "jobs", "log", str(doc["jobs"][0]["id"])).stdout
    assert "direct I/O off" in log and "O_DIRECT" not in log, log
    renamed = [n for n in os.listdir(str(dst) + str(src)) if n.endswith(".restored")]
    assert renamed, "rename kept no copies"


@pytest.mark.ssh
@pytest.mark.parametrize("storage_on", ["local", "ssh"])
def test_backup_over_ssh_restore_to_another_host(tmp_path, sshd, sshd_as_localhost, storage_on,
                                                 storage_type):
    """Client and restore target are SSH hosts; the data goes agent to agent over TLS."""
    home, vol, src, dst = (tmp_path / n for n in ("home", "vol", "src", "dst"))
    make_tree(str(src))
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "host", "add", "client1", "--address", sshd.host, "--port", sshd.port,
          "--user", sshd.user, "--key", sshd.key_file, "--trust-host-key")
    cairn(home, "host", "add", "other", "--address", "localhost", "--port", sshd.port,
          "--user", sshd.user, "--key", sshd.key_file, "--trust-host-key")
    probe, _ = cairn_json(home, "host", "probe", "client1")
    assert probe["python"] and any(f["mount_point"] == "/" for f in probe["filesystems"])
    setup_storage(home, storage_type, str(vol),
                  storage_host="me" if storage_on == "local" else "other")
    cairn(home, "policy", "add-client", "p1", "client1")
    cairn(home, "policy", "add-selection", "p1", str(src))
    job, img = backup_and_check(home, "client1")
    log = cairn(home, "jobs", "log", str(job["id"])).stdout
    assert "data plane" in log and "TLS" in log

    restore_host = "other" if storage_on == "local" else "me"
    doc, _ = cairn_json(home, "restore", img["id"], "--path", str(src), "--to", str(dst),
                        "--to-host", restore_host, "--wait")
    rjob = doc["jobs"][0]
    assert doc["status"] == 0, cairn(home, "jobs", "log", str(rjob["id"])).stdout
    assert "data plane" in cairn(home, "jobs", "log", str(rjob["id"])).stdout
    assert_trees_equal(str(src), str(dst) + str(src))
