"""The agent's request loop: reads requests from stdin, runs each in its own thread, writes
events and results to stdout. Ends when stdin closes (the master went away), cancelling what
still runs."""

import os
import platform
import sys
import threading

from app import status
from app.agent import ops, request_check
from app.agent.request_check import BadRequest
from app.errors import ValidationError
from app.formats import protocol
from app.formats.protocol import error_message
from plugins.storage import agents

# Requests running at once: far more than any master asks for, and few enough threads.
MAX_RUNNING = 1024


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

    def emit_encoded(self, event, data_json):
        """emit, with the data already encoded as JSON text (ASCII, compact)."""
        self.server.write(protocol.encode_event(self.id, event, data_json))


class Server:
    def __init__(self, rfile, wfile):
        self.rfile = rfile
        self.wfile = wfile
        self._wlock = threading.Lock()
        self._running = {}
        self._rlock = threading.Lock()
        self.stopping = threading.Event()

    def send(self, msg):
        self.write(protocol.encode(msg))

    def write(self, data):
        with self._wlock:
            try:
                self.wfile.write(data)
                self.wfile.flush()
            except (OSError, ValueError):
                # The master is gone: stop everything rather than work for nobody.
                self.stopping.set()

    def serve(self):
        threads = []
        limit = protocol.max_request()
        while True:
            try:
                line = protocol.read_line(self.rfile, limit)
            except protocol.LineTooLong as e:
                self._refuse(None, f"bad request: {e} (CAIRN_MAX_REQUEST_MB in the agent's "
                                   "environment sets the limit)")
                continue
            except (OSError, ValueError):
                break  # stdin is gone: as at its end
            if not line:
                break
            if not line.strip():
                continue
            try:
                outcome = self._take(line)
            except BadRequest as e:
                self._refuse(e.id, e.message)
                continue
            except Exception as e:  # noqa: BLE001 - no line may end the agent
                self._refuse(None, f"the request could not be taken: {type(e).__name__}: {e}",
                             code=status.INTERNAL)
                continue
            if outcome == "shutdown":
                break
            if outcome is not None:
                if len(threads) >= 64:
                    threads = [t for t in threads if t.is_alive()]
                threads.append(outcome)
        self.stopping.set()
        for t in threads:
            t.join(timeout=30)

    def _take(self, line):
        """Acts on one request line: a cancel is answered here, another request is started
        in a thread (returned). Raises BadRequest for anything malformed."""
        try:
            msg = protocol.decode(line)
        except (ValueError, RecursionError, MemoryError) as e:
            raise BadRequest(f"not a JSON document ({type(e).__name__}: "
                             f"{request_check.short(str(e), 100)})") from None
        rid, op, args = request_check.parse(msg)
        if op == "cancel":
            target_id = args.get("id")
            if not request_check.valid_id(target_id) or len(args) != 1:
                raise BadRequest("cancel takes one argument, the id of a request", rid)
            with self._rlock:
                target = self._running.get(target_id)
            if target:
                target.cancel()
            self.send({"id": rid, "result": {"cancelled": bool(target)}})
            return None
        if op == "shutdown":
            self.send({"id": rid, "result": {}})
            return "shutdown"
        handler = ops.HANDLERS.get(op)
        if handler is None:
            raise BadRequest(f"unknown operation {request_check.short(op)}", rid)
        request_check.check_args(rid, op, handler, args)
        req = Request(self, rid, op, args)
        with self._rlock:
            if rid in self._running:
                raise BadRequest(f"request {rid} is still running; each request needs an id "
                                 "of its own", rid)
            if len(self._running) >= MAX_RUNNING:
                raise BadRequest(f"{len(self._running)} requests run already, the most this "
                                 "agent takes at once", rid)
            self._running[rid] = req
        t = threading.Thread(target=self._run, args=(req,), daemon=True,
                             name=f"req-{rid}-{op}")
        try:
            t.start()
        except RuntimeError as e:  # no thread to be had: the host is out of resources
            with self._rlock:
                self._running.pop(rid, None)
            self._refuse(rid, f"{op}: the agent cannot start it: {e}", code=status.AGENT_FAILED)
            return None
        return t

    def _refuse(self, rid, message, code=status.INVALID_REQUEST):
        self.send({"id": rid, "error": {"code": code, "message": message}})

    def _run(self, req):
        try:
            handler = ops.HANDLERS.get(req.op)
            if handler is None:
                raise ValidationError(f"unknown operation {req.op!r}")
            result = handler(req, **req.args)
            self.send({"id": req.id, "result": result if result is not None else {}})
        except Exception as e:  # noqa: BLE001 - the master must always get an answer
            self.send({"id": req.id, "error": error_message(req.op, e)})
        finally:
            with self._rlock:
                self._running.pop(req.id, None)


REQUEST_BUFFER = 1 << 20


def main():
    if sys.version_info < (3, 9):
        sys.stderr.write("cairn agent needs python3 3.9 or newer\n")
        sys.exit(3)
    # Own stdout for the protocol; anything printed by accident would corrupt it.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    # Requests are read a MiB at a time: a request of a MiB (a files cache's state) is read
    # in a few calls, each of which waits for the interpreter while another request's thread
    # works (the pool opened ahead of a backup), instead of in a hundred reads of 8 KiB.
    requests = open(sys.stdin.fileno(), "rb", buffering=REQUEST_BUFFER, closefd=False)
    server = Server(requests, out)
    server.send({"id": 0, "event": "hello", "data": {
        "protocol": protocol.PROTOCOL_VERSION, "python": platform.python_version(),
        "pid": os.getpid(), "max_request": protocol.max_request()}})
    _preload(requests)
    server.serve()
    # Every request has answered and its thread has ended: leave without tearing the
    # interpreter down, which took 20-60 ms that each command closing an agent waited for.
    sys.stderr.flush()
    os._exit(0)


# What backups and restores import when they begin, loaded once the master has the agent's
# hello and before its first request is read: a host's first job does not wait for them.
# A module this host cannot load (a missing optional library) is left to the job that
# needs it, which then reports it. Once a request waits, the rest is left to the requests
# that need it: an agent started beside the command that asks for it (app/entry.py) gets
# its first request before it could load everything, and its job imports only its own.
PRELOAD = ("app.agent.archiver", "app.agent.scale_backup") + agents.PRELOAD + (
    "app.agent.extract", "app.agent.extents", "app.agent.restore_streams",
    "app.agent.dataplane")


def _preload(requests):
    import importlib
    import select
    for name in PRELOAD:
        try:
            if select.select([requests], [], [], 0)[0]:
                return
        except (OSError, ValueError):
            pass  # not a stream select() takes: load everything, as before
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - see PRELOAD
            pass
