"""The agent protocol end to end with a real agent subprocess (the local transport)."""

import os
import sys
import time

import pytest

from app import status
from app.errors import AgentError, Canceled
from app.transport.agent_client import AgentCallError, AgentConnection
from app.transport.local import LocalTransport


@pytest.fixture
def agent():
    conn = AgentConnection(LocalTransport().start_agent(), "local")
    yield conn
    conn.close()


def test_hello_ping_and_probe(agent):
    assert agent.info["protocol"] == 1
    assert agent.call("ping", timeout=10)["pid"] == agent.info["pid"]
    info = agent.call("probe", timeout=30)
    assert info["cpus"] == os.cpu_count()
    mounts = [f["mount_point"] for f in info["filesystems"]]
    assert "/" in mounts
    root = next(f for f in info["filesystems"] if f["mount_point"] == "/")
    assert root["size"] > 0 and 0 <= root["free"] <= root["size"]


def test_the_job_modules_are_loaded_before_the_first_request(agent):
    """The agent loads what backups and restores import right after its hello: the pool's
    compression library is mapped once a ping was answered, though a ping needs none."""
    pytest.importorskip("zstandard")
    assert agent.call("ping", timeout=30)["pong"]
    with open("/proc/%d/maps" % agent.info["pid"]) as f:
        maps = f.read()
    assert "zstandard" in maps


def test_a_module_that_cannot_load_is_left_to_its_job(monkeypatch):
    from app.agent import server
    monkeypatch.setattr(server, "PRELOAD", ("app.agent.no_such_module", "app.agent.extents"))
    monkeypatch.delitem(sys.modules, "app.agent.extents", raising=False)
    server._preload()
    assert "app.agent.extents" in sys.modules


def test_unknown_operation_and_bad_arguments_are_errors_not_crashes(agent):
    with pytest.raises(AgentCallError, match="unknown operation") as e:
        agent.call("format_disk", timeout=10)
    assert e.value.code == status.INVALID_REQUEST
    with pytest.raises(AgentCallError):
        agent.call("check_volumes", {"nonsense": 1}, timeout=10)
    assert agent.call("ping", timeout=10)["pong"]


def test_check_volumes_reports_each_problem(agent, tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    afile = tmp_path / "file"
    afile.write_text("x")
    vols = agent.call("check_volumes", {"paths": [str(good), str(afile),
                                                  str(tmp_path / "missing")]},
                      timeout=10)["volumes"]
    assert vols[0]["ok"] and vols[0]["free"] > 0
    assert vols[1]["error"] == "not a directory"
    assert vols[2]["error"] == "does not exist"


def test_non_utf8_names_cross_the_protocol_exactly(agent, tmp_path):
    name = os.fsdecode(b"caf\xe9-\xff")
    (tmp_path / name).write_text("x")
    listing = agent.call("list_dir", {"path": str(tmp_path)}, timeout=10)
    assert os.fsencode(listing["entries"][0]["name"]) == b"caf\xe9-\xff"


def test_cancel_reaches_a_running_request(agent):
    from app.jobs.tlscert import job_identity
    cert, key, token = job_identity(1)
    # receive_image waits for a peer that never comes: only cancel ends it early
    events = []
    call = agent.start("receive_image", {"path": f"/tmp/cairn-test-{os.getpid()}.partial",
                                         "cert": cert, "key": key, "token": token},
                       on_event=lambda e, d: events.append(e))
    deadline = time.time() + 10
    while "listening" not in events and time.time() < deadline:
        time.sleep(0.05)
    call.cancel()
    with pytest.raises(Canceled):
        call.wait(15)
    assert not os.path.exists(f"/tmp/cairn-test-{os.getpid()}.partial")


def test_agent_killed_fails_pending_calls_with_clear_error(agent):
    from app.jobs.tlscert import job_identity
    cert, key, token = job_identity(1)
    call = agent.start("receive_image", {"path": f"/tmp/cairn-kill-{os.getpid()}.partial",
                                         "cert": cert, "key": key, "token": token})
    os.kill(agent.info["pid"], 9)
    with pytest.raises(AgentError, match="stopped"):
        call.wait(15)
    assert not agent.alive
