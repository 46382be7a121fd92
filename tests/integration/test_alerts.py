"""Alerts on real parts: a real SMTP server on loopback (aiosmtpd, STARTTLS with its own
certificate, a login whose password is in the keyring), a syslog socket, an HTTP server for
the webhook and a command; the events come from real jobs, a real full pool, a host nobody
listens for and missed windows (the site of test_status_health)."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from app import status as st
from app.master import Master
from smtpserver import SMTPServer
from sshd import free_port
from test_status_health import MIB, REPO, fill, miss_windows, run_backup, site  # noqa: F401

HOUR = 3600


def smtp_settings(server, **more):
    s = {"smtp_host": server.host, "smtp_port": str(server.port),
         "smtp_tls": "starttls" if server.ca_file else "none",
         "smtp_ca_file": str(server.ca_file or ""), "sender": "cairn@backup.example",
         "recipients": "ops@example.org, oncall@example.org"}
    s.update(more)
    return s


@pytest.fixture
def smtp(tmp_path):
    server = SMTPServer(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def master(tmp_path):
    m = Master(str(tmp_path / "home"))
    yield m
    m.close()


def body(msg):
    return msg.get_body(("plain",)).get_content()


def test_the_test_message_arrives_over_starttls_with_the_password_from_the_keyring(
        tmp_path, memory_keyring, master):
    server = SMTPServer(tmp_path, users={"cairn-alerts": "s3cret pass"}).start()
    try:
        master.set_alert_settings(smtp_settings(server, smtp_user="cairn-alerts"))
        assert master.alert_settings()["password_stored"] is False
        master.set_alert_password("s3cret pass")
        assert master.alert_settings()["password_stored"] is True
        got = master.alerts_test()
        assert got["results"]["email"]["ok"], got
        [m] = server.wait_for(1)
    finally:
        server.stop()
    assert m["tls"], "the login and the message went over STARTTLS"
    assert m["from"] == "cairn@backup.example"
    assert m["to"] == ["ops@example.org", "oncall@example.org"]
    assert m["message"]["Subject"].endswith(": test message")
    assert "cairn alerts test" in body(m["message"])
    # the password is the keyring's, never the catalog's
    catalog = (tmp_path / "home" / "catalog.db").read_bytes()
    assert b"s3cret pass" not in catalog
    assert list(memory_keyring.items.values()) == ["s3cret pass"]
    [h] = master.alert_history()
    assert h["test"] and h["delivered"] and h["results"]["email"]["ok"]


def test_a_wrong_password_an_untrusted_certificate_and_no_starttls_are_said_plainly(
        tmp_path, memory_keyring, master):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    login = SMTPServer(tmp_path / "a", users={"u": "right"}).start()
    plain = SMTPServer(tmp_path / "b", tls=False).start()
    try:
        master.set_alert_settings(smtp_settings(login, smtp_user="u"))
        r = master.alerts_test()["results"]["email"]
        assert not r["ok"] and "no password for u in the OS keyring" in r["text"]
        master.set_alert_password("wrong")
        r = master.alerts_test()["results"]["email"]
        assert not r["ok"] and "refused the login of u" in r["text"]
        # the server's certificate is not signed by a CA the master trusts
        master.set_alert_settings({"smtp_ca_file": ""})
        r = master.alerts_test()["results"]["email"]
        assert not r["ok"] and "TLS failed" in r["text"]
        master.set_alert_settings(smtp_settings(plain, smtp_tls="starttls", smtp_user=""))
        r = master.alerts_test()["results"]["email"]
        assert not r["ok"] and "does not offer STARTTLS" in r["text"]
        assert login.messages == [] and plain.messages == []
        # without STARTTLS, as the site asked for
        master.set_alert_settings({"smtp_tls": "none"})
        assert master.alerts_test()["results"]["email"]["ok"]
        assert len(plain.wait_for(1)) == 1
    finally:
        login.stop()
        plain.stop()


def test_failures_a_full_pool_a_host_down_and_missed_windows_arrive_in_one_digest(site, smtp):
    m, tiny = site
    m.set_alert_settings(smtp_settings(smtp, host_down_after="1s", interval="1h"))
    t0 = time.time()
    first = m.alerts_round(now=t0, ask_hosts=False)   # alerting begins: nothing old is sent
    assert first["sent"] is None
    good = run_backup(m, "good")
    bad = run_backup(m, "bad")
    assert good["status"] == st.OK and bad["status"] not in (st.OK, st.PARTIAL)
    missed = miss_windows(m)
    fill(tiny, "big", int(3.8 * MIB))
    time.sleep(1.1)  # the host nobody listens for has been down longer than host_down_after
    r = m.alerts_round(now=time.time(), ask_hosts=True)
    assert r["sent"]["email"]["ok"], r
    [mail] = smtp.wait_for(1)
    subject, text = mail["message"]["Subject"], body(mail["message"])
    assert "1 failed job" in subject and "3 missed backups" in subject
    assert "1 pool above its high-water mark" in subject and "1 host unreachable" in subject
    assert f"Job {bad['id']}, backup of client me (policy bad" in text
    for jid in missed:
        assert f"Job {jid}, " in text
    assert f"Job {good['id']}," not in text
    assert "Disk pool tiny on me is" in text and "high-water mark of 90%" in text
    assert "Host down is not reachable" in text and "never reached" in text
    assert "Host up " not in text and "Disk pool roomy" not in text
    assert "catalog backup is overdue" in text  # images, and no catalog backup yet

    # within the interval: a new failure waits for the next digest; nothing is told twice
    bad2 = run_backup(m, "bad")
    r = m.alerts_round(now=time.time() + 60, ask_hosts=False)
    assert r["events"] == 1 and r["sent"] is None and "next digest is due" in r["why"]
    os.unlink(tiny / "big")                 # the pool has room again
    r = m.alerts_round(now=time.time() + HOUR + 1, ask_hosts=True)
    assert r["sent"]["email"]["ok"], r
    mails = smtp.wait_for(2)
    subject, text = mails[1]["message"]["Subject"], body(mails[1]["message"])
    assert subject.endswith(": 1 failed job"), subject
    assert f"Job {bad2['id']}, " in text and f"Job {bad['id']}, " not in text
    assert "Resolved:" in text and "Disk pool tiny is below its high-water mark again." in text
    assert "Host down" not in text                 # still down: told once, not again
    r = m.alerts_round(now=time.time() + 3 * HOUR, ask_hosts=True)
    assert r["sent"] is None and r["why"] == "nothing to tell"
    assert len(smtp.messages) == 2


class _Hook(http.server.BaseHTTPRequestHandler):
    got = []

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        self.got.append((self.headers["Content-Type"], json.loads(self.rfile.read(n))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_syslog_a_webhook_and_a_command_each_get_the_digest(tmp_path, master):
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(str(tmp_path / "log.sock"))
    log.settimeout(10)
    hook = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    _Hook.got = []
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    script = tmp_path / "on-alert"
    script.write_text("#!/bin/sh\ncat > \"$1\"\necho \"$CAIRN_ALERT_SUBJECT\" > \"$1.subject\"\n")
    script.chmod(0o755)
    try:
        master.set_alert_settings({
            "syslog": "on", "syslog_address": str(tmp_path / "log.sock"),
            "webhook_url": f"http://127.0.0.1:{hook.server_port}/cairn",
            "command": f"{script} '{tmp_path / 'got it.json'}'", "interval": "1m"})
        master.alerts_round(ask_hosts=False)
        jid = master.jobs.create("backup", client="c1", policy="p1", storage_unit="stu1")
        master.jobs.finish(jid, st.STORAGE_WRITE_FAILED, "disk full on /srv/pool")
        r = master.alerts_round(now=time.time() + 1, ask_hosts=False)
        assert all(x["ok"] for x in r["sent"].values()) and set(r["sent"]) == {
            "syslog", "webhook", "command"}, r
        line = log.recv(8192).decode()
        # facility daemon (3), severity err (3): <27>
        assert line.startswith(f"<27>cairn[{os.getpid()}]: failed: Job {jid}, backup of "
                               "client c1 (policy p1, storage unit stu1)"), line
        assert "disk full on /srv/pool" in line and "\n" not in line
        [(ctype, doc)] = _Hook.got
        assert ctype == "application/json"
        [e] = doc["events"]
        assert e["kind"] == "failed" and e["job_id"] == jid and e["severity"] == "error"
        assert doc["subject"].endswith(": 1 failed job") and doc["resolved"] == []
        assert json.loads((tmp_path / "got it.json").read_text()) == doc
        assert (tmp_path / "got it.json.subject").read_text().strip() == doc["subject"]
    finally:
        hook.shutdown()
        log.close()


def test_an_undelivered_digest_stays_pending_is_warned_about_and_goes_out_later(
        tmp_path, master):
    server = SMTPServer(tmp_path)
    master.set_alert_settings(smtp_settings(server, interval="10m"))
    master.alerts_round(ask_hosts=False)
    jid = master.jobs.create("restore", client="c1")
    master.jobs.finish(jid, st.RESTORE_TARGET_INVALID, "the target is a file")
    t = time.time() + 1
    r = master.alerts_round(now=t, ask_hosts=False)      # nobody listens yet
    assert not r["sent"]["email"]["ok"] and "Connection refused" in r["sent"]["email"]["text"]
    assert "tried again" in r["why"]
    [pending] = master.alert_events()
    assert pending["job_id"] == jid and not pending["told"]
    warn = [w for w in master.health(timeout=2)["warnings"] if w["kind"] == "alerts"]
    assert warn and warn[0]["name"] == "email" and "could not be sent by email" in \
        warn[0]["message"]
    server.start()
    try:
        assert master.alerts_round(now=t + 60, ask_hosts=False)["sent"] is None  # interval
        r = master.alerts_round(now=t + 601, ask_hosts=False)
        assert r["sent"]["email"]["ok"]
        [mail] = server.wait_for(1)
        assert f"Job {jid}, restore of client c1" in body(mail["message"])
        assert not [w for w in master.health(timeout=2)["warnings"] if w["kind"] == "alerts"]
    finally:
        server.stop()


def test_the_dispatcher_alerts_a_failed_backup_on_its_own(tmp_path, smtp):
    src = tmp_path / "src"
    pool = tmp_path / "pool"
    pool.mkdir()
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        m.create_storage_server("ss1", type="advanced-disk", host="me")
        m.create_disk_pool("dp1", server="ss1", volumes=[str(pool)])
        m.create_storage_unit("stu1", pool="dp1")
        m.create_policy("p1", storage_unit="stu1")
        m.add_policy_client("p1", "me")
        m.add_policy_selection("p1", str(src))     # it does not exist: the backup fails
        m.set_alert_settings(smtp_settings(smtp, kinds="failed"))
        m.alerts_round(ask_hosts=False)
        runner = threading.Thread(target=m.dispatcher.run_forever, kwargs={"poll": 0.2},
                                  daemon=True)
        runner.start()
        [jid] = m.start_backup("p1")
        [mail] = smtp.wait_for(1, timeout=30)   # a round follows a job's end within seconds
        assert f"Job {jid}, backup of client me (policy p1" in body(mail["message"])
        assert m.jobs.get(jid)["status"] == st.NOTHING_TO_BACKUP
    finally:
        m.dispatcher.stop()
        runner.join(30)
        m.close()


def test_cli_alerts_set_test_check_show_and_history(tmp_path, smtp):
    home = str(tmp_path / "home")
    Master(home).close()

    def cairn(*args, ok=(0,)):
        r = subprocess.run([sys.executable, "-m", "app", "--home", home, "alerts", *args],
                           capture_output=True, text=True, timeout=60, cwd=REPO)
        assert r.returncode in ok, (args, r.stdout, r.stderr)
        return r
    s = smtp_settings(smtp)
    cairn("set", *[x for kv in s.items() for x in kv])
    r = cairn("set", "kinds", "failed,bogus", ok=(10,))
    assert "unknown alert kind 'bogus'" in r.stderr
    r = cairn("set", "recipients", "not an address", ok=(10,))
    assert "is not a mail address" in r.stderr
    doc = json.loads(cairn("test", "--json").stdout)
    assert doc["results"]["email"]["ok"]
    assert smtp.wait_for(1)[0]["message"]["Subject"].endswith(": test message")
    assert "email    ok: sent" in cairn("test").stdout
    doc = json.loads(cairn("check", "--json").stdout)
    assert doc["sent"] is None
    shown = json.loads(cairn("show", "--json").stdout)
    assert shown["channels"] == ["email"]
    assert shown["settings"]["smtp_port"]["value"] == str(smtp.port)
    assert shown["settings"]["interval"]["value"] == "15m"
    text = cairn("show").stdout
    assert "Channels turned on: email" in text and "Last messages" in text
    hist = json.loads(cairn("history", "--json").stdout)["history"]
    assert [h["test"] for h in hist] == [True, True]
    # a channel that fails: status 1, and what failed
    cairn("set", "smtp_port", str(free_port()))
    r = cairn("test", ok=(1,))
    assert "email    FAILED: mail through 127.0.0.1:" in r.stdout


def test_without_alerts_the_pools_are_still_sampled_hourly_for_their_growth(tmp_path, master):
    pool = tmp_path / "pool"
    pool.mkdir()
    master.config.add_host("me", local=True)
    master.create_storage_server("ss1", type="advanced-disk", host="me")
    master.create_disk_pool("dp1", server="ss1", volumes=[str(pool)])
    samples = "SELECT count(*) FROM pool_usage"
    a = master.alerter
    t0 = time.time()
    assert a.start_round(now=t0) is False            # the dispatcher starts: no sample yet
    assert a.start_round(now=t0 + 600) is False
    assert master.db.one(samples)[0] == 0
    assert a.start_round(now=t0 + 3601) is True      # an hour on: the hosts are asked
    a.wait(30)
    assert master.db.one(samples)[0] == 1
    assert a.start_round(now=t0 + 3700) is False     # and not again within the hour


def test_a_hostile_job_message_cannot_forge_syslog_lines(tmp_path, master):
    """What a job's log says comes partly from agents; a taken-over client can put anything in
    it. In syslog it stays one record: no line of its own, no forged second message."""
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(str(tmp_path / "log.sock"))
    log.settimeout(2)
    try:
        master.set_alert_settings({"syslog": "on", "syslog_address": str(tmp_path / "log.sock"),
                                   "interval": "1m"})
        master.alerts_round(ask_hosts=False)
        jid = master.jobs.create("backup", client="c1", policy="p1")
        master.jobs.finish(jid, st.AGENT_FAILED,
                           "boom\n<27>cairn[1]: forged: everything is fine\r\x1b[2J")
        r = master.alerts_round(now=time.time() + 1, ask_hosts=False)
        assert r["sent"]["syslog"]["ok"], r
        line = log.recv(8192).decode()
        assert line.startswith(f"<27>cairn[{os.getpid()}]: failed: Job {jid}, ")
        assert "\n" not in line and "\r" not in line and "forged" in line
        with pytest.raises(socket.timeout):
            log.recv(8192)          # one event, one record
    finally:
        log.close()
