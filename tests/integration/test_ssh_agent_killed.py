"""An agent on an SSH host killed with kill -9 in the middle of a backup: the command says
which agent stopped and ends with status 25, and nothing else reaches the terminal (paramiko
once printed "Exception ignored in BufferedFile.__del__" with its traceback as the command
exited)."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from app import status as st
from app.master import Master
from clihelp import ROOT, cairn

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(300)]

SIZE = 512 << 20     # written zeros: no compression, so still sending when the kill comes


def children(pid):
    """Every process below pid: the sessions of the test's own sshd."""
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    out, todo = [], list(kids.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def agents_below(pid):
    """The Cairn agents started over the test's sshd: `python3 .../agent-*.pyz`."""
    found = []
    for p in children(pid):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) >= 2 and os.path.basename(argv[1]).startswith(b"agent-") \
                and argv[1].endswith(b".pyz"):
            found.append(p)
    return found


def test_killed_storage_agent_leaves_no_traceback(tmp_path, sshd):
    src, vol, home = tmp_path / "src", tmp_path / "vol", tmp_path / "home"
    src.mkdir()
    vol.mkdir()
    with open(src / "big", "wb") as f:
        block = bytes(8 << 20)
        for _ in range(SIZE // len(block)):
            f.write(block)
    m = Master(str(home))
    m.config.add_host("me", local=True)
    m.add_host("store", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="store")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    m.close()

    env = dict(os.environ, CAIRN_HOME=str(home), PYTHONPATH=ROOT)
    backup = subprocess.Popen([sys.executable, "-m", "app", "backup", "p1", "--wait"], env=env,
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.monotonic() + 120
        killed = []
        while time.monotonic() < deadline and not killed:
            row = None
            try:
                conn = sqlite3.connect(f"file:{home}/catalog.db?mode=ro", uri=True)
                row = conn.execute("SELECT state, bytes FROM jobs ORDER BY id DESC").fetchone()
                conn.close()
            except sqlite3.Error:
                pass
            if row and row[0] == "active" and row[1] > 0:
                for pid in agents_below(sshd.proc.pid):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.05)
        assert killed, "the backup never got going, or no agent ran over SSH"
        out, err = backup.communicate(timeout=120)
    finally:
        if backup.poll() is None:
            backup.kill()
            backup.communicate()
    assert backup.returncode == st.AGENT_FAILED, (out, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err == "", err
    assert "status 25" in out
    log = cairn(home, "jobs", "log", "1").stdout.splitlines()
    assert "the agent on store stopped" in log[-1], log
