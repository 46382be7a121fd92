"""The local agent started early (app/transport/local.py prestart): taken by the first local
transport that asks for the same agent, ended when another one is asked for or it died, gone
when the command that started it ends; and which commands start it (app/entry.py)."""

import os
import subprocess
import sys
import time

import pytest

from app import entry
from app.transport import local
from app.transport.agent_client import AgentConnection
from app.transport.local import LocalTransport


@pytest.fixture(autouse=True)
def no_spare_left():
    yield
    spare, local._spare = local._spare, None
    if spare is not None:
        local.discard(spare[2])


def spare_pid():
    return local._spare[2].pid


def gone(pid, timeout=10):
    """Whether the process ended (reaped, or a zombie nobody reaps here) within timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


def test_the_first_transport_takes_the_agent_started_early():
    local.prestart()
    pid = spare_pid()
    local.prestart()                  # one is enough
    assert spare_pid() == pid
    conn = AgentConnection(LocalTransport().start_agent(), "local")
    try:
        assert conn.info["pid"] == pid and conn.call("ping", timeout=30)["pong"]
        assert local._spare is None
        # the next one starts its own
        other = AgentConnection(LocalTransport().start_agent(), "local")
        try:
            assert other.info["pid"] != pid
        finally:
            other.close()
    finally:
        conn.close()


def test_a_transport_with_its_own_variables_ends_the_spare_and_starts_its_own():
    local.prestart()
    pid = spare_pid()
    conn = AgentConnection(LocalTransport(env={"CAIRN_MMFS_SUDO": "1"}).start_agent(), "l")
    try:
        assert conn.info["pid"] != pid and local._spare is None
        assert gone(pid)
        with open(f"/proc/{conn.info['pid']}/environ", "rb") as f:
            assert b"CAIRN_MMFS_SUDO=1" in f.read().split(b"\0")
    finally:
        conn.close()


def test_a_spare_that_died_is_not_taken():
    local.prestart()
    dead = local._spare[2]
    dead.kill()
    dead.wait()
    conn = AgentConnection(LocalTransport().start_agent(), "local")
    try:
        assert conn.info["pid"] != dead.pid and conn.call("ping", timeout=30)["pong"]
    finally:
        conn.close()


def test_a_spare_nobody_takes_in_time_is_ended(monkeypatch):
    monkeypatch.setattr(local, "SPARE_FOR", 0.3)
    local.prestart()
    pid = spare_pid()
    assert gone(pid) and local._spare is None
    conn = AgentConnection(LocalTransport().start_agent(), "local")
    try:
        assert conn.info["pid"] != pid and conn.call("ping", timeout=30)["pong"]
    finally:
        conn.close()


def test_a_spare_nobody_took_leaves_with_the_command():
    code = ("from app.transport import local; local.prestart(); "
            "print(local._spare[2].pid, flush=True)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))), timeout=60)
    assert gone(int(out.stdout))


@pytest.mark.parametrize("argv, runs", [
    (["backup", "p", "--wait"], True),
    (["backup", "p", "--wait", "--json"], True),
    (["--json", "restore", "img", "/data", "--to", "/r", "--wait"], True),
    (["--home", "/srv/cairn", "backup", "p", "--wait"], True),
    (["--home", "backup", "jobs", "list", "--wait"], False),  # backup is --home's value
    (["--master", "admin@m1", "backup", "p", "--wait"], False),
    (["--master=m1", "backup", "p", "--wait"], False),
    (["backup", "p"], False),
    (["images", "list"], False),
    ([], False),
])
def test_only_commands_that_run_jobs_here_start_an_agent_early(argv, runs):
    assert entry._runs_jobs_here(argv) is runs
