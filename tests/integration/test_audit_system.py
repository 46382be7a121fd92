"""The master's own work in the audit log (app/audit.py): jobs the scheduler queues, the
dispatcher's automatic retries, expiries and scheduled verifies, each one entry with the
part of the master as its user (role "system", origin "local"), written in the transaction
that queues the job: the scheduler's round takes no more write transactions for it however
many jobs it queues. Real catalogs, a real failed backup (its client refuses connections)."""

import json
import os
import socket
import time

import pytest

from app import status as st
from app.access_scope import internal
from app.errors import ValidationError
from app.jobs.dispatcher import Dispatcher
from app.master import Master
from app.scheduler import Scheduler


@pytest.fixture
def master(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.add_host("me", local=True)
    m.create_storage_server("ss", type="advanced-disk", host="me")
    m.create_disk_pool("dp", server="ss", volumes=[str(tmp_path)], check=False)
    m.config.add_storage_unit("stu", pool="dp", max_concurrent_jobs=4)
    yield m
    m.close()


def open_window_now():
    """A daily start window that is open now (UTC), whatever the time of day."""
    start = time.gmtime(time.time() - 3600)
    return [{"day": d, "start": f"{start.tm_hour:02d}:00", "hours": 4} for d in range(7)]


def system_entries(m, **match):
    return [e for e in m.audit_entries() if e["role"] == "system"
            and all(e[k] == v for k, v in match.items())]


def head(m):
    with open(m.home.root + "/audit.head") as f:
        return json.load(f)


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_jobs_the_scheduler_queues_are_audited_in_its_own_transaction(master, tmp_path):
    m = master
    clients = [f"c{i:02d}" for i in range(20)]
    for c in clients:
        m.config.add_host(c, address="192.0.2.1")
    m.config.add_policy("p", storage_unit="stu")
    for c in clients:
        m.config.add_policy_client("p", c)
    m.config.add_policy_selection("p", "/data")
    m.config.add_schedule("p", "daily", type="full", windows=open_window_now())
    begun = []
    m.db.conn.set_trace_callback(lambda sql: begun.append(sql) if sql.startswith("BEGIN")
                                 else None)
    queued = Scheduler(m).tick()
    m.db.conn.set_trace_callback(None)
    assert len(queued) == len(clients)
    entries = system_entries(m, user="scheduler")
    assert sorted(e["details"]["result"]["jobs"][0] for e in entries) == sorted(queued)
    e = entries[0]
    assert (e["action"], e["object"], e["origin"], e["outcome"]) == \
        ("start_backup", "policy p", "local", "ok")
    assert e["details"]["args"]["schedule"] == "daily" and e["details"]["args"]["client"] \
        in clients
    # the scheduler's one transaction for its round holds its entries: none of their own
    assert len(begun) <= 3, begun
    assert m.audit_verify()["ok"]
    assert head(m)["seq"] == max(x["seq"] for x in entries)   # the head follows at once


def test_an_automatic_retry_is_audited_as_the_dispatchers(master):
    m = master
    m.config.add_host("gone", address="127.0.0.1", port=closed_port(), user="nobody")
    m.config.add_policy("p", storage_unit="stu")
    m.config.add_policy_client("p", "gone")
    m.config.add_policy_selection("p", "/data")
    m.config.add_schedule("p", "daily", type="full", windows=open_window_now())
    m.set_setting("backup_tries", "2")
    m.set_setting("retry_delay", "1h")
    [first] = Scheduler(m).tick()
    [job] = m.wait_for([first], timeout=60)
    assert job["status"] not in (st.OK, st.PARTIAL)
    [retry] = system_entries(m, user="dispatcher", action="retry_job")
    [again] = retry["details"]["result"]["jobs"]
    assert retry["object"] == f"job {first}" and retry["details"]["args"]["attempt"] == 2
    assert m.job(again)["retry_of"] == first and m.job(again)["state"] == "queued"
    [started] = system_entries(m, user="scheduler")
    assert started["details"]["result"]["jobs"] == [first]
    assert m.audit_verify()["ok"] and m.audit_verify()["head"] == "matches"


def test_a_scheduled_verify_is_audited_as_the_dispatchers(master):
    m = master
    m.update_object("disk-pool", "dp", verify_every="1d")
    with internal():    # as the dispatcher's loop runs it
        m.dispatcher.housekeeping()
    [e] = system_entries(m, action="start_verify")
    [jid] = e["details"]["result"]["jobs"]
    assert (e["user"], e["object"], e["details"]["args"]) == \
        ("dispatcher", f"job {jid}", {"pool": "dp"})
    assert m.job(jid)["type"] == "verify"
    assert m.audit_verify()["ok"]


@pytest.mark.parametrize("name", ["scheduler", "dispatcher", "Recovery", "system"])
def test_no_user_takes_the_name_of_the_masters_own_work(master, name):
    with pytest.raises(ValidationError, match="the master's own"):
        master.add_user(name, "viewer")


def test_an_automatic_expiry_is_audited_as_the_dispatchers(master, tmp_path):
    m = master
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("kept two weeks\n")
    m.config.add_policy("p", storage_unit="stu")
    m.config.add_policy_client("p", "me")
    m.config.add_policy_selection("p", str(src))
    [job] = m.wait_for(m.start_backup("p"))
    assert job["status"] == st.OK
    # the dispatcher's housekeeping a month later: the image's retention has ended
    later = Dispatcher(m, clock=lambda: time.time() + 30 * 86400)
    with internal():
        later.housekeeping()
    [e] = system_entries(m, action="start_expire")
    [jid] = e["details"]["result"]["jobs"]
    assert (e["user"], e["object"]) == ("dispatcher", f"job {jid}")
    assert e["details"]["args"]["images"] == [job["image_id"]]
    assert m.audit_verify()["ok"]


def test_a_catalog_copied_back_by_hand_shows_as_a_broken_chain(master, tmp_path):
    """Not a recovery: the head file still names the newest entry of the log it replaced."""
    import sqlite3
    m = master
    m.set_setting("backup_tries", "3")
    copy = tmp_path / "copy.db"
    src, dst = sqlite3.connect(m.home.catalog), sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    m.set_setting("backup_tries", "4")
    m.set_setting("backup_tries", "5")
    m.close()
    os.replace(copy, m.home.catalog)
    for name in ("-wal", "-shm"):
        if os.path.exists(m.home.catalog + name):
            os.remove(m.home.catalog + name)
    back = Master(m.home.root)
    try:
        v = back.audit_verify()
        assert not v["ok"] and v["head"] == "missing"
        # entries written since take the numbers of those it lost: still found
        back.set_setting("backup_tries", "6")
        back.set_setting("backup_tries", "7")
        v = back.audit_verify()
        assert not v["ok"] and v["head"] == "differs"
    finally:
        back.close()
