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


def test_the_job_modules_are_loaded_while_no_request_waits(agent):
    """The agent loads what backups and restores import right after its hello: the pool's
    compression library is mapped though no request has asked for anything."""
    pytest.importorskip("zstandard")
    deadline = time.monotonic() + 30
    while True:
        with open("/proc/%d/maps" % agent.info["pid"]) as f:
            if "zstandard" in f.read():
                break
        assert time.monotonic() < deadline, "the job modules were not loaded"
        time.sleep(0.05)
    assert agent.call("ping", timeout=30)["pong"]


def _preload_with(monkeypatch, modules, waiting):
    """server._preload of `modules` (not loaded before) with a request waiting or not."""
    from app.agent import server
    monkeypatch.setattr(server, "PRELOAD", modules)
    for m in modules:
        monkeypatch.delitem(sys.modules, m, raising=False)
    r, w = os.pipe()
    try:
        if waiting:
            os.write(w, b'{"id":1,"op":"ping","args":{}}\n')
        with os.fdopen(r, "rb", buffering=0) as requests:
            server._preload(requests)
    finally:
        os.close(w)


def test_a_module_that_cannot_load_is_left_to_its_job(monkeypatch):
    _preload_with(monkeypatch, ("app.agent.no_such_module", "app.agent.extents"), False)
    assert "app.agent.extents" in sys.modules


def test_preloading_stops_once_a_request_waits(monkeypatch):
    """An agent started beside the command that asks for it gets its first request while it
    loads: the rest is left to the request, which loads only what it needs."""
    _preload_with(monkeypatch, ("app.agent.extents",), True)
    assert "app.agent.extents" not in sys.modules


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


def test_each_handler_s_arguments_are_read_as_inspect_reads_them():
    """The agent checks a request's arguments against its handler's parameters, read from
    the handler's code rather than through inspect: they must be the same."""
    import inspect
    from app.agent.ops import HANDLERS
    from app.agent.request_check import _REQUIRED, _parameters

    def check(fn):
        params, takes_any = _parameters(fn)
        sig = list(inspect.signature(fn).parameters.values())[1:]
        assert params == {p.name: _REQUIRED if p.default is p.empty else p.default
                          for p in sig if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        assert takes_any == any(p.kind == p.VAR_KEYWORD for p in sig)

    for fn in HANDLERS.values():
        check(fn)

    def odd(req, a, b=1, *rest, c, d=None, **more):
        pass
    check(odd)


def test_base64_arguments_are_written_as_they_are_and_read_back_alike():
    """A request's Base64Text arguments (a backup's previous state, megabytes of it) go into
    the line without the character-by-character look for something to escape; the line
    reads back as the same request, and other arguments are written as ever."""
    import base64
    import json
    from app.formats import protocol

    state = protocol.Base64Text(base64.b64encode(os.urandom(3000)).decode("ascii"))
    args = {"selections": ["/d\udcff/\u00e9\"q\\"], "previous": state, "since": None,
            "references": protocol.Base64Text(""), "n": 3, "meta": {"a": [1.5, True]}}
    for msg in ({"id": 7, "op": "backup", "args": args},
                {"id": 8, "op": "backup", "args": {"previous": state}}):
        line = protocol.encode(msg)
        assert line.endswith(b"\n") and line.count(b"\n") == 1 and line.isascii()
        assert protocol.decode(line) == msg
        assert protocol.decode(line) == json.loads(json.dumps(msg))
    # without such an argument, the line is the one JSON writes
    plain = {"id": 9, "op": "backup", "args": dict(args, previous=str(state),
                                                   references="")}
    assert protocol.encode(plain) == (json.dumps(plain, separators=(",", ":"))
                                      + "\n").encode("ascii")
    # the master's previous states are of the kind
    from app.jobs import incremental
    assert type(incremental._text(b"\x00\xff")) is protocol.Base64Text


DYING_AGENT = r'''
import json, os, sys, time
sys.stdout.write(json.dumps({"id": 0, "event": "hello", "data": {
    "protocol": 1, "python": "3", "pid": os.getpid(), "max_request": 1 << 30}}) + "\n")
sys.stdout.flush()
os.close(0)  # it takes no request: a write to it fails at once
time.sleep(0.5)
sys.stderr.write("killed by the test\n")
'''


def test_a_request_that_cannot_be_written_says_why_the_agent_is_gone(tmp_path):
    """An agent that went away while a request was being written: the error is the reader's
    (the agent stopped, with what it last said), not only that the connection broke."""
    script = tmp_path / "dying_agent.py"
    script.write_text(DYING_AGENT)
    conn = AgentConnection(LocalTransport(command=[sys.executable, str(script)]).start_agent(),
                           "dying")
    try:
        time.sleep(0.1)
        with pytest.raises(AgentError) as e:
            conn.start("ping", {"padding": "x" * 1000})
        assert "the agent on dying stopped: killed by the test" in str(e.value), str(e.value)
    finally:
        conn.close()
