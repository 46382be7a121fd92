"""The local agent started early (app/transport/local.py prestart): taken by the first local
transport that asks for the same agent, ended when another one is asked for or it died, gone
when the command that started it ends; which commands start it, and how a command leaves once
it has returned (app/entry.py)."""

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


# -- leaving once the command has returned (app/entry.py _leave) ----------------------------

class Left(Exception):
    pass


@pytest.fixture
def leaving(monkeypatch):
    """os._exit and the exit functions of this test process replaced by recorders."""
    seen = {}

    def exit_(code):
        seen["code"] = code
        raise Left()
    monkeypatch.setattr(os, "_exit", exit_)
    import atexit
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: seen.setdefault("atexit", True))
    monkeypatch.delitem(sys.modules, "PySide6", raising=False)
    return seen


def test_a_command_that_returned_leaves_after_its_exit_functions(leaving):
    with pytest.raises(Left):
        entry._leave(10)
    assert leaving == {"atexit": True, "code": 10}


def test_a_running_thread_of_the_command_is_waited_for_as_python_does(leaving):
    import threading
    release = threading.Event()
    t = threading.Thread(target=release.wait, daemon=False)
    t.start()
    try:
        assert entry._leave(3) == 3 and leaving == {}
    finally:
        release.set()
        t.join()


def test_the_console_leaves_as_python_does(leaving, monkeypatch):
    monkeypatch.setitem(sys.modules, "PySide6", object())
    assert entry._leave(0) == 0 and leaving == {}


def test_output_is_whole_and_a_reader_that_left_is_no_error(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    whole = subprocess.run([sys.executable, "-m", "app", "status-codes"], cwd=root,
                           capture_output=True, timeout=60)
    assert whole.returncode == 0 and whole.stderr == b""
    assert whole.stdout.endswith(b"\n") and whole.stdout.count(b"\n") > 20
    p = subprocess.Popen([sys.executable, "-m", "app", "status-codes"], cwd=root,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(10)
    p.stdout.close()                   # as `| head -c 10` does
    assert p.wait(60) in (0, 1, 141) and b"Traceback" not in p.stderr.read()
