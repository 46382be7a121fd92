"""Queueing and job control on the embedded default with an injected dispatcher clock: the
per-client limit, missed start windows (status 196), automatic retries of scheduled backups
with a record of each attempt, suspend and resume, and two masters on one catalog never
running the same job twice."""

import threading

import pytest

from app import status as st
from app.master import Master


@pytest.fixture
def master(tmp_path):
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.txt").write_text("data\n")
    vol = tmp_path / "vol"
    vol.mkdir()
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1", max_concurrent_jobs=10)
    for name in ("p1", "p2"):
        m.config.add_policy(name, storage_unit="stu1")
        m.config.add_policy_client(name, "me")
        m.config.add_policy_selection(name, str(src))
        m.config.add_schedule(name, "full", type="full")
    yield m
    m.close()


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def sched(m, policy):
    pol = m.config.policy(policy)
    return pol, pol["schedules"][0]


def test_per_client_limit_holds_the_second_backup_with_its_reason(master):
    m = master
    m.update_object("host", "me", max_jobs=1)
    a = m.queue_backup(*sched(m, "p1")[:1], "me", sched(m, "p1")[1])
    b = m.queue_backup(*sched(m, "p2")[:1], "me", sched(m, "p2")[1])
    d = m.dispatcher
    assert d.acquire_lease()
    try:
        d.tick()
        assert m.jobs.get(a)["state"] in ("active", "done")
        jb = m.jobs.get(b)
        assert jb["state"] == "queued"
        assert jb["wait_reason"] == "client me is at its limit of 1 job"
    finally:
        d.release_lease()
    done = m.wait_for([a, b])
    assert [j["status"] for j in done] == [st.OK, st.OK]
    # with the host's own limit removed, the master's default applies again
    m.update_object("host", "me", max_jobs="")
    assert m.config.host("me")["max_jobs"] is None


def test_a_job_still_queued_when_its_window_closes_is_missed(master):
    m = master
    pol, s = sched(m, "p1")
    clock = Clock(1_000_000.0)
    m.dispatcher.clock = clock
    jid = m.queue_backup(pol, "me", s, not_after=clock.t + 60)
    m.jobs.set_suspended(jid, True)          # held: it cannot start in its window
    assert m.dispatcher.acquire_lease()
    try:
        m.dispatcher.tick()
        assert m.jobs.get(jid)["wait_reason"].startswith("suspended")
        clock.t += 61
        m.dispatcher.tick()
    finally:
        m.dispatcher.release_lease()
    job = m.jobs.get(jid)
    assert (job["state"], job["status"]) == ("done", st.WINDOW_CLOSED)
    log = " ".join(x["message"] for x in m.jobs.logs(jid))
    assert "missed: the start window closed" in log and "suspended" in log
    assert m.images() == []


def test_scheduled_backup_is_retried_after_the_delay_and_each_attempt_is_recorded(master,
                                                                                   tmp_path):
    m = master
    # An unreachable client: a retryable failure.
    m.config.add_host("gone", address="127.0.0.1", port=1)
    m.config.add_policy_client("p1", "gone")
    m.set_setting("backup_tries", 2)
    m.set_setting("retry_delay", "5m")
    pol, s = sched(m, "p1")
    clock = Clock(2_000_000.0)
    m.dispatcher.clock = clock
    first = m.queue_backup(pol, "gone", s, not_after=clock.t + 3600)
    [j1] = m.wait_for([first])
    assert j1["status"] == st.HOST_UNREACHABLE and j1["attempt"] == 1
    [retry] = m.db.all("SELECT id FROM jobs WHERE retry_of=?", (first,))
    j2 = m.jobs.get(retry[0])
    assert (j2["attempt"], j2["not_before"], j2["state"]) == (2, clock.t + 300, "queued")
    assert "attempt 2 queued as job" in " ".join(x["message"] for x in m.jobs.logs(first))
    assert m.dispatcher.acquire_lease()
    try:
        m.dispatcher.tick()
        assert m.jobs.get(j2["id"])["wait_reason"].startswith("attempt 2 starts at")
    finally:
        m.dispatcher.release_lease()
    clock.t += 301
    [j2] = m.wait_for([j2["id"]])
    assert j2["status"] == st.HOST_UNREACHABLE
    assert "no tries left" in " ".join(x["message"] for x in m.jobs.logs(j2["id"]))
    assert m.db.one("SELECT count(*) FROM jobs WHERE retry_of=?", (first,))[0] == 1
    # A backup started by hand is not retried on its own.
    [manual] = m.wait_for(m.start_backup("p1", client="gone"))
    assert manual["status"] == st.HOST_UNREACHABLE
    assert m.db.one("SELECT count(*) FROM jobs WHERE retry_of=?", (manual["id"],))[0] == 0


def test_suspend_and_resume_a_queued_job(master):
    m = master
    [jid] = m.start_backup("p1")
    assert m.suspend_job(jid)["suspended"] is True
    assert m.dispatcher.acquire_lease()
    try:
        m.dispatcher.tick()
        assert m.jobs.get(jid)["state"] == "queued"
    finally:
        m.dispatcher.release_lease()
    m.resume_job(jid)
    [job] = m.wait_for([jid])
    assert job["status"] == st.OK
    with pytest.raises(Exception, match="only a queued job can be suspended"):
        m.suspend_job(jid)


def test_two_masters_on_one_catalog_never_run_the_same_job(master, tmp_path):
    m1 = master
    m2 = Master(m1.home.root)
    try:
        ids = [m1.queue_backup(*sched(m1, p)[:1], "me", sched(m1, p)[1])
               for p in ("p1", "p2", "p1", "p2")]
        stop = threading.Event()
        claimed = {1: [], 2: []}

        def run(m, n):
            orig = m.jobs.claim

            def claim(job_id, runner, c=None):
                ok = orig(job_id, runner, c)
                if ok:
                    claimed[n].append(job_id)
                return ok
            m.jobs.claim = claim
            while not stop.is_set():
                if m.dispatcher.acquire_lease():
                    m.dispatcher.tick()
                stop.wait(0.01)
        threads = [threading.Thread(target=run, args=(m, n)) for n, m in ((1, m1), (2, m2))]
        for t in threads:
            t.start()
        try:
            for _ in range(3000):
                if all(m1.jobs.get(j)["state"] == "done" for j in ids):
                    break
                stop.wait(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join()
        for d in (m1.dispatcher, m2.dispatcher):
            for t in list(d._threads.values()):
                t.join(60)
        assert sorted(claimed[1] + claimed[2]) == sorted(ids)
        assert [m1.jobs.get(j)["status"] for j in ids] == [st.OK] * 4, [
            m1.jobs.logs(j) for j in ids]
        # one lease: only one of them ran jobs
        assert not (claimed[1] and claimed[2])
    finally:
        m2.close()
