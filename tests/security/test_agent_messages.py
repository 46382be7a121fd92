"""Malformed messages on the control protocol (app/formats/protocol.py), both ways. A real agent
process gets lines that once ended it, and then thousands of generated malformed ones
(seeded: CAIRN_FUZZ_SEED repeats a run), while a real job runs on it: each bad line gets
error 10, the job finishes untouched and the agent still answers. The other way, a
compromised agent's malformed replies fail its own calls and nothing else of the master."""

import inspect
import json
import os
import random
import sys
import threading
import time

import pytest

from app import status
from app.agent import dataplane
from app.agent.ops import HANDLERS
from app.errors import AgentError
from app.formats import protocol
from app.jobs.tlscert import job_identity
from app.transport.agent_client import AgentCallError, AgentConnection
from app.transport.local import LocalTransport

SEED = int(os.environ.get("CAIRN_FUZZ_SEED", "24"))
FUZZ_LINES = 3000


class RawAgent:
    """A real agent process spoken to line by line, bypassing the master's client."""

    def __init__(self, env=None):
        self.process = LocalTransport(env=env).start_agent()
        self.messages = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.hello = self.wait(lambda m: m.get("event") == "hello", 30)["data"]

    def _read(self):
        for line in iter(self.process.stdout.readline, b""):
            msg = json.loads(line)
            with self._cond:
                self.messages.append(msg)
                self._cond.notify_all()

    def send(self, line):
        try:
            self.process.stdin.write(line if line.endswith(b"\n") else line + b"\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise AssertionError("the agent is gone: "
                                 + self.process.stderr_text()[-800:]) from None

    def wait(self, match, timeout=10):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = next((m for m in self.messages if match(m)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or not self.process.is_alive():
                    return None
                self._cond.wait(min(left, 0.2))

    def ping(self, rid, timeout=10):
        self.send(b'{"id":%d,"op":"ping"}' % rid)
        return self.wait(lambda m: m.get("id") == rid and "result" in m, timeout)

    def errors(self):
        with self._cond:
            return [m for m in self.messages if "error" in m]

    def close(self):
        self.process.close()


@pytest.fixture
def agent():
    a = RawAgent()
    yield a
    a.close()


# ---- the lines that ended the agent ------------------------------------------------------------

KILLERS = [
    (b'{"id":[1],"op":"ping"}', None),
    (b'{"id":{"a":1},"op":"ping"}', None),
    (b'{"id":3,"op":"cancel","args":"7"}', 3),
    (b'{"id":4,"op":"cancel","args":[7]}', 4),
    (b'{"id":5,"op":"cancel","args":{"id":[7]}}', 5),
    (b'{"id":6,"op":"cancel","args":{"id":{"x":7}}}', 6),
    (b"[" * 100_000, None),
    (b'{"id":' + b"[" * 100_000, None),
    (b'{"id":8,"op":"ping","args":"x"}', 8),
    (b'{"id":9,"op":["ping"]}', 9),
    (b'{"id":10,"op":"list_dir","args":{"path":5}}', 10),
    (b'{"id":11,"op":"check_volumes","args":{"paths":"/"}}', 11),
    (b'{"id":12,"op":"check_volumes","args":{"nonsense":1}}', 12),
    (b'\xff\xfe\x00 not json at all', None),
]


def test_each_line_that_ended_the_agent_gets_error_10_and_it_goes_on(agent):
    for n, (line, rid) in enumerate(KILLERS):
        before = len(agent.errors())
        agent.send(line)
        pong = agent.ping(1000 + n)
        assert pong is not None, (f"the agent did not answer a ping after {line[:60]!r}: "
                                  f"{agent.process.stderr_text()[-500:]}")
        errors = agent.errors()[before:]
        assert [(e["id"], e["error"]["code"]) for e in errors] == [(rid, 10)], (line[:60],
                                                                                errors)
        assert "bad request" in errors[0]["error"]["message"]


def test_a_line_over_the_limit_is_refused_without_being_held():
    """64 MiB without a newline to an agent whose limit is 1 MiB: refused with what to do,
    and the agent's memory does not grow by the line."""
    a = RawAgent(env={"CAIRN_MAX_REQUEST_MB": "1"})
    try:
        assert a.ping(1)
        before = peak_rss(a.hello["pid"])
        block = b"x" * (1 << 20)
        for _ in range(64):
            a.process.stdin.write(block)
        a.send(b"")
        assert a.ping(2, timeout=30), a.process.stderr_text()[-500:]
        [err] = a.errors()
        assert err["id"] is None and err["error"]["code"] == 10
        assert "limit" in err["error"]["message"]
        assert "CAIRN_MAX_REQUEST_MB" in err["error"]["message"]
        grown = peak_rss(a.hello["pid"]) - before
        assert grown < 16 << 20, f"the agent grew by {grown >> 20} MiB reading the line"
        assert a.hello["max_request"] == 1 << 20  # the master checks its requests against it
    finally:
        a.close()


def peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


# ---- generated malformed messages ------------------------------------------------------------

class Malformed:
    """Seeded generator of request lines that are each wrong in one way, with the id the
    error answering it must carry (None where the line has no usable id)."""

    REAL_OPS = sorted(HANDLERS)
    NEED_ARGUMENTS = {op for op, fn in HANDLERS.items()
                      if any(p.default is p.empty
                             for p in list(inspect.signature(fn).parameters.values())[1:])}

    def __init__(self, seed, long_line):
        self.rnd = random.Random(seed)
        self.long_line = long_line
        self.next_id = 1_000_000

    def rid(self):
        self.next_id += 1
        return self.next_id

    def value(self, depth=0):
        """A random JSON value."""
        r = self.rnd
        pick = r.randrange(8 if depth < 3 else 5)
        if pick == 0:
            return None
        if pick == 1:
            return r.choice([True, False])
        if pick == 2:
            return r.choice([r.randint(-2**70, 2**70), r.random() * 1e6, -1, 0])
        if pick == 3:
            return "".join(chr(r.randrange(1, 0x2FFF)) for _ in range(r.randrange(12)))
        if pick == 4:
            return r.choice(["ping", "cancel", "", "\udcff", "backup"])
        if pick == 5:
            return [self.value(depth + 1) for _ in range(r.randrange(4))]
        return {self.word(): self.value(depth + 1) for _ in range(r.randrange(4))}

    def not_(self, *types):
        while True:
            v = self.value()
            if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
                return v

    def word(self):
        return "".join(self.rnd.choice("abcdefghijklmnopqrstuvwxyz_")
                       for _ in range(self.rnd.randrange(1, 12)))

    def dump(self, obj):
        return json.dumps(obj, separators=(",", ":")).encode()

    # one case per kind of mistake; each returns (line, id expected in the answer)
    def not_an_object(self):
        return self.dump(self.not_(dict)), None

    def bad_id(self):
        r = self.rnd
        bad = r.choice([self.not_(int), -r.randint(1, 99), 2**64, 1.0, True, "7"])
        msg = {"id": bad, "op": r.choice(["ping", "cancel"] + self.REAL_OPS)}
        if r.random() < 0.3:
            del msg["id"]
        return self.dump(msg), None

    def bad_op(self):
        rid = self.rid()
        msg = {"id": rid, "op": self.rnd.choice([self.not_(str), ""])}
        if self.rnd.random() < 0.3:
            del msg["op"]
        return self.dump(msg), rid

    def bad_args(self):
        rid = self.rid()
        op = self.rnd.choice(["ping", "cancel"] + self.REAL_OPS)
        return self.dump({"id": rid, "op": op, "args": self.not_(dict, type(None))}), rid

    def unknown_op(self):
        rid = self.rid()
        while True:
            op = self.rnd.choice([self.word(), "\udcff" + self.word(), self.word() * 40])
            if op not in HANDLERS and op not in ("cancel", "shutdown"):
                return self.dump({"id": rid, "op": op, "args": {}}), rid

    def unknown_or_missing_argument(self):
        rid = self.rid()
        op = self.rnd.choice(self.REAL_OPS)
        args = {"no_such_" + self.word(): self.value()}
        if self.rnd.random() < 0.5 and op in self.NEED_ARGUMENTS:
            args = {}
        return self.dump({"id": rid, "op": op, "args": args}), rid

    def argument_of_a_wrong_type(self):
        rid = self.rid()
        op, name, want = self.rnd.choice([("list_dir", "path", str), ("stat_path", "path", str),
                                          ("abort_image", "partial", str),
                                          ("remove_image", "path", str),
                                          ("check_volumes", "paths", list),
                                          ("pool_usage", "storage", dict)])
        return self.dump({"id": rid, "op": op, "args": {name: self.not_(want)}}), rid

    def bad_cancel(self):
        rid = self.rid()
        args = self.rnd.choice([{"id": self.not_(int)}, {}, {"id": 1, "and": 2},
                                {"id": -5}, {"id": [1]}, {"id": {"id": 1}}])
        if "id" in args and type(args["id"]) is int and args["id"] >= 0 and len(args) == 1:
            args["id"] = "1"
        return self.dump({"id": rid, "op": "cancel", "args": args}), rid

    def extra_field(self):
        rid = self.rid()
        return self.dump({"id": rid, "op": "ping", "args": {}, self.word() + "x": 1}), rid

    def deep(self):
        r = self.rnd
        depth = r.choice([2_000, 20_000, 100_000])
        opener = r.choice([b"[", b'{"a":', b'{"id":1,"op":"ping","args":{"x":['])
        tail = b"]" * depth if r.random() < 0.5 else b""
        return opener * depth + tail, None

    def not_json(self):
        r = self.rnd
        raw = bytes(r.choice(range(0x21, 0x100)) for _ in range(r.randrange(1, 200)))
        return raw.replace(b"\n", b"?"), None

    def numbers_json_cannot_hold(self):
        return self.rnd.choice([b'{"id":1e999,"op":"ping"}', b'{"id":NaN,"op":"ping"}',
                                b'{"id":' + b"9" * 5000 + b',"op":"ping"}',
                                b'{"id":-Infinity,"op":"ping"}']), None

    def too_long(self):
        return b'{"id":1,"op":"' + b"p" * self.long_line + b'"}', None

    def cases(self, n):
        kinds = [self.not_an_object, self.bad_id, self.bad_op, self.bad_args, self.unknown_op,
                 self.unknown_or_missing_argument, self.argument_of_a_wrong_type,
                 self.bad_cancel, self.extra_field, self.not_json,
                 self.numbers_json_cannot_hold]
        for i in range(n):
            if i % 100 == 50:
                yield self.deep()
            elif i % 500 == 250:
                yield self.too_long()
            else:
                yield self.rnd.choice(kinds)()


def test_thousands_of_malformed_messages_while_a_job_runs(tmp_path):
    """A backup's storage side (receive_image) waits for its data while the agent takes
    FUZZ_LINES malformed lines and a ping after every hundred; then the data comes and the
    job ends as it would have."""
    limit_mb = 0.25
    a = RawAgent(env={"CAIRN_MAX_REQUEST_MB": str(limit_mb)})
    try:
        cert, key, token = job_identity(24)
        partial = str(tmp_path / "image.partial")
        a.send(json.dumps({"id": 999, "op": "receive_image", "args": {
            "path": partial, "cert": cert, "key": key, "token": token}}).encode())
        listening = a.wait(lambda m: m.get("id") == 999 and m.get("event") == "listening")
        assert listening, a.process.stderr_text()[-500:]

        # a request may not take the id of one that runs: refused, the running one untouched
        a.send(b'{"id":999,"op":"ping"}')
        expected = {999: 1}
        pings = []
        gen = Malformed(SEED, long_line=int(limit_mb * (1 << 20)) + 1000)
        t0 = time.monotonic()
        for n, (line, rid) in enumerate(gen.cases(FUZZ_LINES)):
            assert b"\n" not in line
            a.send(line)
            expected[rid] = expected.get(rid, 0) + 1
            if n % 100 == 99:
                pings.append(n)
                a.send(b'{"id":%d,"op":"ping"}' % (n + 1))
        for n in pings:
            assert a.wait(lambda m: m.get("id") == n + 1 and "result" in m, 30), (
                f"seed {SEED}: no answer to the ping after line {n}: "
                f"{a.process.stderr_text()[-500:]}")
        answered = {}
        for e in a.errors():
            assert e["error"]["code"] == 10, (SEED, e)
            answered[e["id"]] = answered.get(e["id"], 0) + 1
        assert answered == expected, f"seed {SEED}: not one error 10 per malformed line"
        assert sum(answered.values()) == FUZZ_LINES + 1
        took = time.monotonic() - t0

        payload = os.urandom(3 << 20)
        chan = dataplane.connect("127.0.0.1", listening["data"]["port"], cert, token)
        chan.write(payload)
        chan.finish()
        chan.close()
        done = a.wait(lambda m: m.get("id") == 999 and (
            "result" in m or "error" in m and m["error"]["code"] != 10), 30)
        assert done and done.get("result", {}).get("bytes") == len(payload), done
        with open(partial, "rb") as f:
            assert f.read() == payload
        assert a.ping(2**40)
        assert took < 30, f"{FUZZ_LINES} malformed lines took {took:.1f} s"
    finally:
        a.close()


# ---- a compromised agent, seen from the master -----------------------------------------------

HOSTILE_AGENT = r'''
import json, os, sys
out = sys.stdout.buffer
def say(b):
    out.write(b + b"\n")
    out.flush()
say(b'{"id":0,"event":"hello","data":{"protocol":1,"pid":%d}}' % os.getpid())
for line in sys.stdin.buffer:
    req = json.loads(line)
    rid = str(req["id"]).encode()
    op = req["op"]
    if op == "ping":
        say(b'{"id":%s,"result":{"pong":true}}' % rid)
        continue
    # what a compromised agent may send before it answers
    for junk in (b'{"id":[%s]}', b'{"id":{"x":%s}}', b'[%s]', b'"%s"', b'{"id":%s,"event":5}',
                 b'{"id":%s,"event":"progress","data":[1]}', b'[' * 100000, b'\xff\xfe',
                 b'{"id":0,"event":"hello","data":[%s]}'):
        say(junk % rid if b"%s" in junk else junk)
    if op == "bad_result":
        say(b'{"id":%s,"result":[1,2,3]}' % rid)
    elif op == "bad_error":
        say(b'{"id":%s,"error":"boom"}' % rid)
    elif op == "bad_code":
        say(b'{"id":%s,"error":{"code":"x","message":{"a":1}}}' % rid)
    elif op == "long_line":
        say(b'{"id":%s,"result":{"x":"' % rid + b"x" * (3 << 20) + b'"}}')
'''


def hostile_connection():
    return AgentConnection(LocalTransport(
        command=[sys.executable, "-c", HOSTILE_AGENT]).start_agent(), "hostile")


def test_malformed_replies_fail_their_own_call_and_nothing_else():
    conn = hostile_connection()
    try:
        for op in ("bad_result", "bad_error", "bad_code"):
            with pytest.raises(AgentCallError) as e:
                conn.call(op, timeout=10)
            assert e.value.code == status.AGENT_FAILED, op
            assert conn.call("ping", timeout=10) == {"pong": True}, op
        assert conn.alive
    finally:
        conn.close()


def test_a_reply_line_over_the_limit_closes_the_connection_with_a_clear_error(monkeypatch):
    monkeypatch.setattr(protocol, "MAX_LINE", 1 << 20, raising=False)
    conn = hostile_connection()
    try:
        with pytest.raises(AgentError, match="was closed: it sent a line of"):
            conn.call("long_line", timeout=10)
        assert not conn.alive
    finally:
        conn.close()
