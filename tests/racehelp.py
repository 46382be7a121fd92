"""A backup held at a known point while something else happens: a client reached over the
loopback sshd, the storage on this host, and the client's agent process stopped (SIGSTOP) once
the backup has chosen its base (tests/security/test_expire_race.py,
tests/storage/test_storage_concurrency.py)."""

import os
import signal
import threading
import time
from contextlib import contextmanager

from app import status as st
from treegen import assert_trees_equal


def write_tree(root, nfiles=24, size=20_000):
    for i in range(nfiles):
        d = os.path.join(root, f"d{i % 4}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.bin"), "wb") as f:
            f.write(os.urandom(size // 2) + bytes([i]) * (size // 2))


def backup(m, schedule):
    [job] = m.wait_for(m.start_backup("p", schedule=schedule))
    assert job["status"] == st.OK, log_of(m, job["id"])
    return job


def log_of(m, jid):
    return "\n".join(x["message"] for x in m.jobs.logs(jid))


def restored_equal(m, tmp_path, image_id, src, name):
    to = str(tmp_path / name)
    [job] = m.wait_for([m.start_restore(image_id, [src], to, to_host="me")])
    assert job["status"] == st.OK, log_of(m, job["id"])
    assert_trees_equal(src, to + src)


@contextmanager
def client_stopped(m):
    """The client's agent process stopped: a backup started now chooses its base and then
    waits, held, until the block ends."""
    pid = m.hosts.connect(m.config.host("cl")).call("ping")["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def start_held(m, schedule, mark):
    """Starts a backup in a thread and waits until its log shows `mark` (its base chosen)."""
    [jid] = m.start_backup("p", schedule=schedule)
    box = {}
    t = threading.Thread(target=lambda: box.update(job=m.wait_for([jid])[0]), daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while mark not in log_of(m, jid):
        assert time.monotonic() < deadline, log_of(m, jid)
        assert m.jobs.get(jid)["state"] != "done", log_of(m, jid)
        time.sleep(0.05)
    return jid, t, box
