"""The agent's request loop: reads requests from stdin, runs each in its own thread, writes
events and results to stdout. Ends when stdin closes (the master went away), cancelling what
still runs."""

import os
import platform
import sys
import threading

from app.agent import ops, protocol
from app.agent.errors import AgentFailure, error_message


class Request:
    def __init__(self, server, rid, op, args):
        self.server = server
        self.id = rid
        self.op = op
        self.args = args
        self._cancel = threading.Event()

    def cancel(self):
        self._cancel.set()

    def is_cancelled(self):
        return self._cancel.is_set() or self.server.stopping.is_set()

    def emit(self, event, data):
        self.server.send({"id": self.id, "event": event, "data": data})


class Server:
    def __init__(self, rfile, wfile):
        self.rfile = rfile
        self.wfile = wfile
        self._wlock = threading.Lock()
        self._running = {}
        self._rlock = threading.Lock()
        self.stopping = threading.Event()

    def send(self, msg):
        data = protocol.encode(msg)
        with self._wlock:
            try:
                self.wfile.write(data)
                self.wfile.flush()
            except (OSError, ValueError):
                # The master is gone: stop everything rather than work for nobody.
                self.stopping.set()

    def serve(self):
        threads = []
        for line in iter(self.rfile.readline, b""):
            if not line.strip():
                continue
            try:
                msg = protocol.decode(line)
                rid, op, args = msg.get("id"), msg["op"], msg.get("args") or {}
            except (ValueError, KeyError, AttributeError) as e:
                self.send({"id": None, "error": {"code": 10, "message": f"bad request: {e}"}})
                continue
            if op == "cancel":
                with self._rlock:
                    target = self._running.get(args.get("id"))
                if target:
                    target.cancel()
                self.send({"id": rid, "result": {"cancelled": bool(target)}})
                continue
            if op == "shutdown":
                self.send({"id": rid, "result": {}})
                break
            req = Request(self, rid, op, args)
            with self._rlock:
                self._running[rid] = req
            t = threading.Thread(target=self._run, args=(req,), daemon=True,
                                 name=f"req-{rid}-{op}")
            t.start()
            threads.append(t)
        self.stopping.set()
        for t in threads:
            t.join(timeout=30)

    def _run(self, req):
        try:
            handler = ops.HANDLERS.get(req.op)
            if handler is None:
                raise AgentFailure(f"unknown operation {req.op!r}", code=10)
            result = handler(req, **req.args)
            self.send({"id": req.id, "result": result if result is not None else {}})
        except Exception as e:  # noqa: BLE001 - the master must always get an answer
            self.send({"id": req.id, "error": error_message(req.op, e)})
        finally:
            with self._rlock:
                self._running.pop(req.id, None)


def main():
    if sys.version_info < (3, 9):
        sys.stderr.write("cairn agent needs python3 3.9 or newer\n")
        sys.exit(3)
    # Own stdout for the protocol; anything printed by accident would corrupt it.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    server = Server(sys.stdin.buffer, out)
    server.send({"id": 0, "event": "hello", "data": {
        "protocol": protocol.PROTOCOL_VERSION, "python": platform.python_version(),
        "pid": os.getpid()}})
    _preload()
    server.serve()


# What backups and restores import when they begin, loaded once the master has the agent's
# hello and before its first request is read: a host's first job does not wait for them.
# A module this host cannot load (a missing optional library) is left to the job that
# needs it, which then reports it.
PRELOAD = ("app.agent.archiver", "app.agent.extract", "app.agent.extents",
           "app.agent.restore_streams", "app.dedup.ingest", "app.dedup.recipe")


def _preload():
    import importlib
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - see PRELOAD
            pass
