"""Real backups on this host follow a policy edited after creation: excludes (name globs,
subtrees, one client's own) are absent from the image and its index on advanced-disk and
dedup pools; the next incremental after an exclude is removed and the selections are
changed picks the files up, and a restore of it matches the source; pseudo file systems and
the pool's own volume are left out by default, said once in the job log; a schedule changed
with set-schedule decides the next scheduled backup."""

import os
import time
from datetime import datetime, timezone

import pytest

from app import status as st
from app.master import Master
from app.scheduler import Scheduler


def files_under(root):
    """{path relative to root: bytes} of the regular files below root."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def indexed(m, image_id, top):
    """Every path of an image's index below `top` (the catalog's directory index)."""
    out, stack = [], [top]
    while stack:
        d = stack.pop()
        for e in m.browse(image_id, d)["entries"]:
            p = d.rstrip("/") + "/" + e["name"]
            out.append(p)
            if e["kind"] == "d":
                stack.append(p)
    return sorted(out)


def run(m, policy, schedule):
    [jid] = m.start_backup(policy, client="me", schedule=schedule)
    [job] = m.wait_for([jid])
    log = [x["message"] for x in m.jobs.logs(jid)]
    assert job["status"] == st.OK, log
    return job, log


def restore(m, image_id, path, to):
    [job] = m.wait_for([m.start_restore(image_id, [path], to, to_host="me")])
    assert job["status"] == st.OK, [x["message"] for x in m.jobs.logs(job["id"])]


@pytest.fixture
def m(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    yield m
    m.close()


def pool(m, kind, root):
    if kind == "dedup":
        m.create_storage_server("ss", type="dedup", host="me", path=str(root))
        m.create_disk_pool("dp", server="ss", volumes=[])
    else:
        os.makedirs(root)
        m.create_storage_server("ss", type="advanced-disk", host="me")
        m.create_disk_pool("dp", server="ss", volumes=[str(root)])
    m.config.add_storage_unit("stu", pool="dp")


@pytest.mark.parametrize("kind", ["advanced-disk", "dedup"])
def test_backups_follow_edited_excludes_and_selections(m, tmp_path, kind):
    data = tmp_path / "data"
    a, b, c = str(data / "a"), str(data / "b"), str(data / "c")
    write(f"{a}/keep.txt", b"keep")
    write(f"{a}/work/x.tmp", b"scratch")
    write(f"{a}/work/y.txt", b"y")
    write(f"{a}/cache/big.bin", b"c" * 100000)
    write(f"{a}/cache.tmp/z", b"a directory matched by name goes whole")
    write(f"{b}/gone.txt", b"b")
    write(f"{c}/new.txt", b"c")
    # the pool lies inside a selection: left out by default
    pool(m, kind, data / "a" / "pool")
    m.create_policy("p", storage_unit="stu", clients=["me"], selections=[a, b, "/proc"],
                    schedules=[{"name": "full", "type": "full"},
                               {"name": "incr", "type": "differential"}])
    m.add_policy_exclude("p", "*.tmp")
    m.add_policy_exclude("p", f"{a}/cache", client="me")

    full, log = run(m, "p", "full")
    paths = indexed(m, full["image_id"], a)
    assert f"{a}/keep.txt" in paths and f"{a}/work/y.txt" in paths
    for gone in (f"{a}/work/x.tmp", f"{a}/cache", f"{a}/cache.tmp"):
        assert not any(p == gone or p.startswith(gone + "/") for p in paths), gone
    assert not any(p.startswith(f"{a}/pool/") for p in paths)     # the pool's files
    assert "proc" not in [e["name"] for e in m.browse(full["image_id"], "/")["entries"]]
    said = [x for x in log if "/proc" in x and "not backed up" in x]
    assert len(said) == 1 and "pseudo file system" in said[0], log
    # once, with the pool's own reason (it is this job's pool)
    said = [x for x in log if x.startswith(f"{a}/pool") and "is not backed up" in x]
    assert len(said) == 1 and " pool dp)" in said[0], log
    assert full["files"] == 3                       # keep.txt, work/y.txt, b/gone.txt
    out1 = tmp_path / "out1"
    restore(m, full["image_id"], a, str(out1))
    assert files_under(str(out1) + a) == {"keep.txt": b"keep", "work/y.txt": b"y"}

    # day two: the excludes go, b is no longer backed up, c is
    m.remove_policy_exclude("p", "*.tmp")
    m.remove_policy_exclude("p", f"{a}/cache", client="me")
    m.remove_policy_selection("p", b)
    m.add_policy_selection("p", c)
    incr, log = run(m, "p", "incr")
    assert any("differential incremental: compared with image " + full["image_id"] in x
               for x in log), log
    paths = indexed(m, incr["image_id"], str(data))
    assert {f"{a}/work/x.tmp", f"{a}/cache/big.bin", f"{a}/cache.tmp/z",
            f"{c}/new.txt"} <= set(paths)
    assert not any(p.startswith(b) for p in paths)
    out2 = tmp_path / "out2"
    for sel in (a, c):
        restore(m, incr["image_id"], sel, str(out2))
    expected = {k: v for k, v in files_under(str(data)).items()
                if not k.startswith(("a/pool/", "b/"))}
    assert files_under(str(out2) + str(data)) == expected


def test_the_next_scheduled_backup_follows_set_schedule(m, tmp_path):
    src = tmp_path / "src"
    write(f"{src}/f.txt", b"scheduled")
    pool(m, "advanced-disk", tmp_path / "pool")
    now = time.time()
    utc = timezone.utc
    later = datetime.fromtimestamp(now + 6 * 3600, utc).strftime("%H:%M")
    m.create_policy("p", storage_unit="stu", clients=["me"], selections=[str(src)],
                    schedules=[{"name": "nightly", "type": "full", "retention": "2w",
                                "windows": [{"day": d, "start": later, "hours": 1}
                                            for d in range(7)]}])
    s = Scheduler(m, tz=utc)
    assert s.tick(now) == []                                 # its window is hours away
    opened = datetime.fromtimestamp(now - 1800, utc).strftime("%H:%M")
    m.set_schedule("p", "nightly", retention="3d",
                   windows=[{"day": d, "start": opened, "hours": 2} for d in range(7)])
    [jid] = s.tick(now)                                      # the next pass follows the edit
    [job] = m.wait_for([jid])
    assert job["status"] == st.OK
    img = m.image(job["image_id"])
    created = datetime.fromisoformat(img["created"].replace("Z", "+00:00")).timestamp()
    expires = datetime.fromisoformat(img["expires"].replace("Z", "+00:00")).timestamp()
    assert abs(expires - created - 3 * 86400) <= 2


@pytest.mark.ssh
def test_excludes_reach_a_client_over_ssh(m, tmp_path, sshd):
    # The client is the loopback sshd's host: it sees the pool's volume as a shared file
    # system would, inside its selection, and leaves it out by default.
    data = str(tmp_path / "data")
    write(f"{data}/keep.txt", b"keep")
    write(f"{data}/core.1234", b"core dump")
    write(f"{data}/mine/secret", b"left out for this client")
    m.add_host("client1", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    pool(m, "advanced-disk", tmp_path / "data" / "pool")
    m.create_policy("p", storage_unit="stu", clients=["client1"], selections=[data],
                    excludes=[{"pattern": "core.*"},
                              {"pattern": f"{data}/mine", "client": "client1"}])
    [jid] = m.start_backup("p")
    [job] = m.wait_for([jid])
    log = [x["message"] for x in m.jobs.logs(jid)]
    assert job["status"] == st.OK, log
    assert any("data plane: client1 -> me" in x for x in log), log
    # the pool's folder is there, its images are not
    assert [e["name"] for e in m.browse(job["image_id"], data)["entries"]] == ["keep.txt",
                                                                               "pool"]
    assert m.browse(job["image_id"], f"{data}/pool")["entries"] == []
    assert any(x.startswith(f"{data}/pool/cairn-images is not backed up") and
               "left out by default" in x for x in log), log


def test_a_queued_job_runs_with_what_it_was_queued_with(m, tmp_path):
    src = str(tmp_path / "src")
    write(f"{src}/f.txt", b"queued")
    write(f"{src}/g.tmp", b"queued too")
    pool(m, "advanced-disk", tmp_path / "pool")
    m.create_policy("p", storage_unit="stu", clients=["me"], selections=[src],
                    schedules=[{"name": "weekly", "type": "full", "retention": "5d"}])
    [jid] = m.start_backup("p", schedule="weekly")
    # edited while it waits: it keeps its selection, its (no) excludes, type and retention
    m.add_policy_exclude("p", "*.tmp")
    assert m.remove_policy_selection("p", src)["warnings"][0].startswith(
        f"1 queued or running job ({jid}) keeps the selections")
    m.remove_schedule("p", "weekly")
    [job] = m.wait_for([jid])
    assert job["status"] == st.OK, [x["message"] for x in m.jobs.logs(jid)]
    assert {e["name"] for e in m.browse(job["image_id"], src)["entries"]} == {"f.txt", "g.tmp"}
    img = m.image(job["image_id"])
    created = datetime.fromisoformat(img["created"].replace("Z", "+00:00")).timestamp()
    expires = datetime.fromisoformat(img["expires"].replace("Z", "+00:00")).timestamp()
    assert abs(expires - created - 5 * 86400) <= 2
