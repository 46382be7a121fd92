"""The audit log (app/audit.py) and the `cairn user` and `cairn audit` commands: the hash
chain finds an edited, a deleted and a removed newest entry, `--since` and `--user` filter,
secrets never reach it, syslog gets a copy when configured; users with keys and grants."""

import json
import sqlite3
import subprocess
import sys

import pytest

from app import status as st
from app.cli import main
from app.master import Master


@pytest.fixture
def home(tmp_path):
    return str(tmp_path / "home")


@pytest.fixture
def logged(home):
    """A master with five audit entries."""
    m = Master(home)
    for days in (4, 5, 6):
        m.set_setting("stale_client_days", days)
    m.add_user("vic", "viewer")
    Master(home, user="vic", origin="10.0.0.5").audit_login()
    yield m
    m.close()


def tamper(home, sql, args=()):
    c = sqlite3.connect(f"{home}/catalog.db")
    with c:
        c.execute(sql, args)
    c.close()


def cli(capsys, *argv):
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_a_whole_chain_verifies(logged):
    v = logged.audit_verify()
    assert v == {"ok": True, "entries": 5, "broken": [], "head": "matches", "checked": 5,
                 "segments": []}
    es = logged.audit_entries()
    assert [e["seq"] for e in es] == [1, 2, 3, 4, 5]
    assert all(e["chain_ok"] for e in es)
    assert es[1]["prev_hash"] == es[0]["hash"]
    assert es[-1]["action"] == "login" and es[-1]["origin"] == "10.0.0.5"


def test_an_edited_entry_is_found(logged, home):
    tamper(home, "UPDATE audit_log SET user='nobody' WHERE seq=2")
    v = logged.audit_verify()
    assert not v["ok"]
    assert v["broken"] == [{"seq": 2, "problem": "its contents were changed"}]
    assert [e["chain_ok"] for e in logged.audit_entries()] == [True, False, True, True, True]


def test_an_edit_that_rehashes_its_entry_breaks_the_next_link(logged, home):
    from app.audit import entry_hash
    row = dict(logged.db.one("SELECT * FROM audit_log WHERE seq=2"))
    row["details"] = "{}"
    tamper(home, "UPDATE audit_log SET details=?, hash=? WHERE seq=2",
           (row["details"], entry_hash(row)))
    v = logged.audit_verify()
    assert [b["seq"] for b in v["broken"]] == [3]


def test_a_deleted_entry_is_found(logged, home):
    tamper(home, "DELETE FROM audit_log WHERE seq=3")
    v = logged.audit_verify()
    assert v["broken"] == [{"seq": 4, "problem": "the entry before it is missing"}]


def test_deleting_the_newest_entries_is_found_by_the_head(logged, home):
    tamper(home, "DELETE FROM audit_log WHERE seq>=4")
    v = logged.audit_verify()
    assert v["head"] == "missing" and not v["ok"]
    assert "newest entries were deleted" in v["broken"][0]["problem"]
    # and the status shows it
    doc = logged.health(timeout=1)
    assert any(w["kind"] == "audit" and w["severity"] == "error" for w in doc["warnings"])


def test_cli_audit_lists_filters_and_verifies(logged, home, capsys):
    rc, out, _ = cli(capsys, "--home", home, "audit", "--user", "vic", "--json")
    doc = json.loads(out)
    assert rc == 0 and [e["action"] for e in doc["entries"]] == ["login"]
    assert doc["chain"]["ok"] is True
    rc, out, _ = cli(capsys, "--home", home, "audit", "--since", "2000-01-01T00:00:00Z",
                     "--json")
    assert len(json.loads(out)["entries"]) == 5
    rc, out, _ = cli(capsys, "--home", home, "audit", "--since", "2999-01-01T00:00:00Z",
                     "--json")
    assert json.loads(out)["entries"] == []
    rc, out, _ = cli(capsys, "--home", home, "audit", "--since", "1h")
    assert rc == 0 and "set_setting" in out and "chain: whole (5 entries" in out
    rc, _, err = cli(capsys, "--home", home, "audit", "--since", "yesterday-ish")
    assert rc == st.INVALID_REQUEST and "is not a time" in err
    tamper(home, "UPDATE audit_log SET origin='x' WHERE seq=1")
    rc, out, err = cli(capsys, "--home", home, "audit", "--verify")
    assert rc == st.CATALOG_FAILED
    assert "BROKEN at entry 1" in out and "hash chain is broken" in err
    rc, out, _ = cli(capsys, "--home", home, "audit", "--verify", "--json")
    assert rc == st.CATALOG_FAILED and json.loads(out)["chain"]["ok"] is False


def test_secrets_never_reach_the_log(home):
    m = Master(home)
    try:
        with pytest.raises(Exception):
            m.change_catalog_passphrase(b"old secret words", b"new secret words")
        m.set_alert_settings({"smtp_host": "mail.example"})
        rows = m.db.all("SELECT details FROM audit_log")
        assert rows and not any(b"secret words" in r[0].encode() for r in rows)
        e = m.audit_entries()[-1]
        assert e["details"]["after"]["smtp_host"] == "mail.example"
    finally:
        m.close()
    from app.audit import scrub
    assert scrub({"passphrase": b"pw", "password": "pw", "new": b"pw", "paths": ("/a",)}) == \
        {"passphrase": "(secret)", "password": "(secret)", "new": "(bytes)", "paths": ["/a"]}


def test_entries_go_to_syslog_when_configured(home, monkeypatch):
    sent = []

    class FakeSyslog:
        LOG_LOCAL3, LOG_USER, LOG_INFO, LOG_WARNING = 19 << 3, 1 << 3, 6, 4

        def openlog(self, ident, opt, fac):
            sent.append(("open", ident, fac))

        def syslog(self, prio, text):
            sent.append(("log", prio, text))
    monkeypatch.setitem(sys.modules, "syslog", FakeSyslog())
    m = Master(home)
    try:
        m.set_setting("audit_syslog", "local3")
        m.add_user("ann", "viewer")
        assert ("open", "cairn-audit", 19 << 3) in sent
        line = [s for s in sent if s[0] == "log"][-1]
        assert line[1] == (19 << 3) | 6 and "add_user user ann ok" in line[2]
        with pytest.raises(Exception, match="not a syslog facility"):
            m.set_setting("audit_syslog", "local9")
    finally:
        m.close()


def test_cli_user_forms(home, tmp_path, capsys):
    key = tmp_path / "ann"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ann@desk", "-f",
                    str(key)], check=True)
    fp = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], check=True, capture_output=True,
                        text=True).stdout.split()[1]
    rc, out, _ = cli(capsys, "--home", home, "user", "add", "ann", "--role", "restore",
                     "--ssh-key", f"{key}.pub", "--grant", "fs1:/data/alpha/",
                     "--grant-dest", "fs1:/scratch", "--json")
    u = json.loads(out)
    assert rc == 0 and u["grants"] == ["fs1:/data/alpha"] and u["dest_grants"] == \
        ["fs1:/scratch"]
    [k] = u["keys"]
    assert k["fingerprint"] == fp
    pub = (tmp_path / "ann.pub").read_text().split()
    assert k["authorized_keys"] == ('command="cairn master serve --stdio --user ann",restrict '
                                    f"{pub[0]} {pub[1]} ann@desk")
    rc, out, _ = cli(capsys, "--home", home, "user", "list", "--json")
    assert [x["name"] for x in json.loads(out)["users"]] == ["admin", "ann"]
    rc, out, _ = cli(capsys, "--home", home, "user", "list")
    assert 'command="cairn master serve --stdio --user ann",restrict ssh-ed25519' in out
    rc, out, _ = cli(capsys, "--home", home, "user", "set", "ann", "--role", "viewer",
                     "--remove-ssh-key", fp, "--remove-grant", "fs1:/data/alpha", "--json")
    u = json.loads(out)
    assert (u["role"], u["keys"], u["grants"]) == ("viewer", [], [])
    rc, _, err = cli(capsys, "--home", home, "user", "add", "bob", "--role", "viewer",
                     "--grant", "fs1:/data/../etc")
    assert rc == st.INVALID_REQUEST and "'..'" in err
    rc, _, err = cli(capsys, "--home", home, "user", "add", "bob", "--role", "operator",
                     "--grant", "fs1:/data")
    assert rc == st.INVALID_REQUEST and "grants limit the restore role only" in err
    rc, _, err = cli(capsys, "--home", home, "user", "add", "bob", "--role", "viewer",
                     "--ssh-key", str(key))
    assert rc == st.INVALID_REQUEST and "not an SSH public key" in err
    rc, _, err = cli(capsys, "--home", home, "user", "remove", "admin")
    assert rc == st.INVALID_REQUEST and "last user with the admin role" in err
    rc, out, _ = cli(capsys, "--home", home, "user", "remove", "ann", "--json")
    assert rc == 0 and json.loads(out) == {"removed": "ann"}
    rc, out, _ = cli(capsys, "--home", home, "user", "whoami", "--json")
    assert json.loads(out)["role"] == "admin"
    rc, out, _ = cli(capsys, "--home", home, "audit", "--json")
    actions = [e["action"] for e in json.loads(out)["entries"]]
    assert actions == ["add_user", "set_user", "remove_user"]
