"""Several consoles and CLIs at once against one master over the loopback sshd: two
RemoteMasters (two `cairn master serve --stdio` processes, as two admins' consoles) and a
`cairn --master` command queue backups side by side, each sees the others' jobs in its change
feed, a cancel made by one is seen by the other, and the catalog stays consistent: one
dispatcher ran each job once. Then `cairn status` and `cairn audit --verify` over the wire,
the audit log recording who did what from where, an edited entry found from afar."""

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from app import status as st
from app.catalog_check import check_catalog
from app.master import Master
from app.paths import Home
from app.remote.client import RemoteMaster
from clihelp import ROOT, cairn

pytestmark = pytest.mark.ssh


def serve_command(home, user):
    return (f"cd {ROOT} && exec {sys.executable} -m app master serve --stdio --home {home} "
            f"--user {user}")


@pytest.fixture
def site(tmp_path):
    """A master's home: the local host, an AdvancedDisk pool, policies p1, p2 and p3 each with
    a small folder of its own, and the operator olga."""
    home = tmp_path / "master"
    (tmp_path / "vol").mkdir()
    m = Master(str(home))
    try:
        m.add_host("me", local=True)
        m.create_storage_server("ss", type="advanced-disk", host="me")
        m.create_disk_pool("dp", server="ss", volumes=[str(tmp_path / "vol")])
        m.create_storage_unit("stu", pool="dp", max_concurrent_jobs=4)
        for name in ("p1", "p2", "p3"):
            src = tmp_path / "src" / name
            src.mkdir(parents=True)
            (src / "f.txt").write_text(f"data of {name}\n")
            m.create_policy(name, storage_unit="stu", clients=["me"], selections=[str(src)])
        m.add_user("olga", "operator")
    finally:
        m.close()
    return home


@pytest.fixture
def connect(sshd, site, tmp_path):
    """connect(user): a RemoteMaster served for that Cairn user, as a desktop's console
    makes it; closed after the test."""
    made = []
    desktop = tmp_path / "desktop"
    desktop.mkdir()

    def make(user):
        rm = RemoteMaster(f"{sshd.user}@{sshd.host}:{sshd.port}", identity=sshd.key_file,
                          known_hosts=str(desktop / "known_hosts"), trust_key=True,
                          command=serve_command(site, user))
        made.append(rm)
        return rm
    yield make
    for rm in made:
        rm.close()


class Feed:
    """A RemoteMaster's job change feed, read on a thread: the newest of each job seen."""

    def __init__(self, rm):
        self.sub = rm.subscribe("job_changes", interval=0.1)
        self.jobs, self.removed = {}, set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for event in self.sub:
            with self.lock:
                self.jobs.update((j["id"], j) for j in event["jobs"])
                self.removed.update(event["removed"])

    def wait(self, what, timeout=30.0):
        """Until what(jobs) is true of the jobs seen; returns them."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                seen = dict(self.jobs)
            if what(seen):
                return seen
            assert time.monotonic() < deadline, f"the feed never showed it: {seen}"
            time.sleep(0.05)

    def close(self):
        self.sub.close()
        self.thread.join(10)
        assert not self.thread.is_alive(), "closing the subscription left its reader waiting"


class HeldLease:
    """The dispatcher's lease held (and renewed) by another dispatcher, as a busy console's:
    queued jobs wait until it is let go."""

    def __init__(self, home):
        self.m = Master(str(home))
        self.stop = threading.Event()
        assert self.m.dispatcher.acquire_lease()
        self.thread = threading.Thread(target=self._renew, daemon=True)
        self.thread.start()

    def _renew(self):
        while not self.stop.wait(2.0):
            self.m.dispatcher.acquire_lease()
        self.m.dispatcher.release_lease()
        self.m.close()

    def release(self):
        self.stop.set()
        self.thread.join(10)


def test_two_consoles_and_a_cli_at_once_against_one_master(site, connect, sshd, tmp_path):
    held = HeldLease(site)
    ann, olga = connect("admin"), connect("olga")
    assert (ann.cairn_user, olga.cairn_user) == (("admin", "admin"), ("olga", "operator"))
    fa, fo = Feed(ann), Feed(olga)
    cli = None
    try:
        [j1] = ann.start_backup("p1")
        [j2] = olga.start_backup("p2")
        # a command on a third connection, waiting for its backup
        env = dict(os.environ, CAIRN_HOME=str(tmp_path / "desktop"),
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cli = subprocess.Popen(
            [sys.executable, "-m", "app", "--master", f"{sshd.user}@{sshd.host}:{sshd.port}",
             "--identity", sshd.key_file, "--master-command", serve_command(site, "admin"),
             "backup", "p3", "--wait", "--json"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        # each console sees every job queued, whoever queued it
        for feed in (fa, fo):
            seen = feed.wait(lambda js: {j["policy"] for j in js.values()} >= {"p1", "p2", "p3"})
            assert all(j["state"] == "queued" for j in seen.values())
        [j3] = [j["id"] for j in fa.jobs.values() if j["policy"] == "p3"]
        # olga cancels ann's job: ann's console sees it end, canceled
        olga.cancel_job(j1)
        for feed in (fa, fo):
            seen = feed.wait(lambda js: js[j1]["state"] == "done")
            assert seen[j1]["status"] == st.CANCELED
        assert ann.job(j1)["status"] == st.CANCELED
    finally:
        held.release()
    try:
        # let go, the others run: in one dispatcher, however many asked for one
        done = ann.wait_for([j2, j3], timeout=90)
        assert [j["status"] for j in done] == [st.OK, st.OK]
        out, err = cli.communicate(timeout=90)
        assert cli.returncode == 0, err
        assert [j["id"] for j in json.loads(out)["jobs"]] == [j3]
        for feed in (fa, fo):
            feed.wait(lambda js: all(js[j]["state"] == "done" for j in (j2, j3)))
    finally:
        if cli is not None and cli.poll() is None:
            cli.kill()
        fa.close()
        fo.close()
    _check_consistent(site, canceled=[j1], ok=[j2, j3])
    # one headless dispatcher ran them, however many connections found them queued at once
    assert _headless_dispatchers_started(site) == 1
    # who did what, from where
    m = Master(str(site))
    try:
        log = m.audit_entries()
        assert m.audit_verify()["ok"]
    finally:
        m.close()
    started = {e["details"]["result"]["jobs"][0]: (e["user"], e["origin"]) for e in log
               if e["action"] == "start_backup"}
    assert started == {j1: ("admin", "127.0.0.1"), j2: ("olga", "127.0.0.1"),
                       j3: ("admin", "127.0.0.1")}
    [cancel] = [e for e in log if e["action"] == "cancel_job"]
    assert (cancel["user"], cancel["object"]) == ("olga", f"job {j1}")
    assert sum(e["action"] == "login" for e in log) == 3


def _headless_dispatchers_started(home):
    """How many `cairn master run --until-idle` the master started, once each of them has
    ended (each says so in master.log as it starts)."""
    from app.jobs.dispatcher import Dispatcher
    m = Master(str(home))
    try:
        for _ in range(2):
            deadline = time.monotonic() + 30
            while Dispatcher.lease_holder(m.db) is not None:
                assert time.monotonic() < deadline, "a dispatcher did not end"
                time.sleep(0.1)
            time.sleep(0.5)
    finally:
        m.close()
    with open(os.path.join(home, "master.log")) as f:
        return f.read().count("dispatcher running on")


def _check_consistent(home, canceled, ok):
    """Every job ended once, in one dispatcher at a time; an image for each backup that
    succeeded and none for the one canceled; the catalog sound."""
    conn = sqlite3.connect(os.path.join(home, "catalog.db"))
    conn.row_factory = sqlite3.Row
    try:
        jobs = {r["id"]: r for r in conn.execute("SELECT * FROM jobs")}
        images = conn.execute("SELECT job_id FROM images").fetchall()
    finally:
        conn.close()
    assert sorted(jobs) == sorted(canceled + ok)
    assert all(jobs[j]["state"] == "done" for j in jobs)
    assert jobs[canceled[0]]["runner"] is None   # canceled while queued: never claimed
    assert sorted(r["job_id"] for r in images) == sorted(ok)
    spans = sorted((jobs[j]["started_t"], jobs[j]["ended_t"], jobs[j]["runner"]) for j in ok)
    for (s1, e1, r1), (s2, e2, r2) in zip(spans, spans[1:]):
        # jobs of two dispatchers never ran at the same time
        assert r1 == r2 or e1 <= s2, spans
    report = check_catalog(Home(str(home)))
    assert report["ok"], report["problems"]


def test_status_and_audit_verify_of_a_master_over_ssh(site, sshd, tmp_path):
    """`cairn --master ... status` and `audit --verify` answer for the master's catalog, not
    the desktop's, and an entry edited on the master is found from the desktop."""
    desktop = tmp_path / "desktop"

    def remote(*args, check=True, user="admin"):
        return cairn(desktop, "--master", f"{sshd.user}@{sshd.host}:{sshd.port}",
                     "--identity", sshd.key_file, "--trust-master-key", "--master-command",
                     serve_command(site, user), *args, check=check, timeout=120)

    doc = json.loads(remote("status", "--json").stdout)
    assert [(h["name"], h["reachable"]) for h in doc["hosts"]] == [("me", True)]
    assert doc["audit"]["ok"] and not [w for w in doc["warnings"] if w["kind"] == "audit"]
    doc = json.loads(remote("audit", "--verify", "--json", user="olga").stdout)
    assert doc["chain"]["ok"] and doc["chain"]["head"] == "matches"
    first = doc["entries"][0]
    assert (first["user"], first["origin"], first["action"]) == ("admin", "local", "add_host")
    logins = [e for e in doc["entries"] if e["action"] == "login"]
    assert [(e["user"], e["origin"]) for e in logins] == [("admin", "127.0.0.1"),
                                                          ("olga", "127.0.0.1")]
    assert not (desktop / "catalog.db").exists()
    # an entry edited on the master's machine
    conn = sqlite3.connect(os.path.join(site, "catalog.db"))
    with conn:
        conn.execute("UPDATE audit_log SET user='mallory' WHERE seq=?", (first["seq"],))
    conn.close()
    p = remote("audit", "--verify", check=False)
    assert p.returncode == st.CATALOG_FAILED
    assert f"chain: BROKEN at entry {first['seq']}: its contents were changed" in p.stdout
    assert "hash chain is broken" in p.stderr
    p = remote("audit", "--verify", "--json", check=False)
    assert p.returncode == st.CATALOG_FAILED and not json.loads(p.stdout)["chain"]["ok"]
    doc = json.loads(remote("status", "--json").stdout)
    [w] = [w for w in doc["warnings"] if w["kind"] == "audit"]
    assert w["severity"] == "error" and f"broken at entry {first['seq']}" in w["message"]
