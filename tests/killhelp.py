"""A master killed (SIGKILL) at a chosen step: a `cairn` command runs in a process of its own
whose agent client kills that process right before or right after an operation of an agent,
so nothing of the command runs past that point. A minute of waiting for the dispatcher to
notice is played by ageing the dead process's lease and heartbeat in the catalog."""

import os
import sqlite3
import subprocess
import sys
import time

from clihelp import ROOT, cairn

KILL_AT = """
import os, signal, sys
sys.path.insert(0, {root!r})
from app.transport import agent_client
at, when = sys.argv[1], sys.argv[2]
call = agent_client.AgentConnection.call
start = agent_client.AgentConnection.start
def killing_call(self, op, args=None, **kw):
    if op == at and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    result = call(self, op, args, **kw)
    if op == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return result
def killing_start(self, op, args=None, on_event=None):
    if op == at and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    started = start(self, op, args, on_event)
    if op == at and when == "sent":
        os.kill(os.getpid(), signal.SIGKILL)
    if op == at and when == "after":  # the answer read, whoever waits for it
        wait = started.wait
        def killing_wait(timeout=None):
            result = wait(timeout)
            if started.done():
                os.kill(os.getpid(), signal.SIGKILL)
            return result
        started.wait = killing_wait
    return started
agent_client.AgentConnection.call = killing_call
agent_client.AgentConnection.start = killing_start
from app.cli import main
sys.exit(main(sys.argv[3:]))
"""


def killed_backup(home, when, policy="p"):
    """`cairn backup POLICY --wait`, killed by SIGKILL before or after the commit's rename."""
    return killed(home, "commit_image", when, "backup", policy, "--wait")


def killed(home, op, when, *args):
    """A `cairn` command killed by SIGKILL right before or right after its first call of
    agent operation `op` ("before", "after"), or right after it sent the request ("sent");
    returns the newest job's id."""
    env = dict(os.environ, CAIRN_HOME=home, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-c", KILL_AT.format(root=ROOT), op, when, *args],
                       env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == -9, (p.returncode, p.stdout, p.stderr)
    # a minute later, as far as the catalog can tell: the lease has run out, the job's
    # heartbeat has stopped
    with sqlite3.connect(os.path.join(home, "catalog.db")) as db:
        db.execute("UPDATE leases SET expires=0")
        db.execute("UPDATE jobs SET heartbeat=0 WHERE state='active'")
        [(jid,)] = db.execute("SELECT max(id) FROM jobs").fetchall()
    return jid


def forget_commit(home):
    """What a Cairn that did not record its commits left after such a kill: nothing in the
    catalog."""
    with sqlite3.connect(os.path.join(home, "catalog.db")) as db:
        db.execute("DELETE FROM image_commits")


def next_master_run(home):
    cairn(home, "master", "run", "--until-idle")


def age(path, seconds=3600):
    t = time.time() - seconds
    os.utime(path, (t, t))
