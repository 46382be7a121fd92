"""The master's end of the agent protocol (see app/formats/protocol.py): one connection per
host, shared by every operation on it; requests are multiplexed by id."""

import itertools
import threading
import time

from app import status
from app.errors import AgentError, CairnError, Canceled, HostUnreachable
from app.formats import protocol

HELLO_TIMEOUT = 60.0
# How long a request that could not be written waits for the reader to say why the agent's
# end is gone (the agent stopped, the host was lost) before it says only that it broke.
READER_GRACE = 2.0


class AgentCallError(CairnError):
    """The agent answered a request with an error; status is the agent's code."""

    def __init__(self, message, code):
        super().__init__(message, status_code=code)


class Call:
    """One request in flight."""

    def __init__(self, conn, rid, op, on_event):
        self.conn = conn
        self.id = rid
        self.op = op
        self.on_event = on_event
        self._done = threading.Event()
        self._result = None
        self._error = None
        self._cancel_sent = False

    def _finish(self, result=None, error=None):
        self._result, self._error = result, error
        self._done.set()

    def done(self):
        return self._done.is_set()

    def failed(self):
        """Ended with an error."""
        return self._done.is_set() and self._error is not None

    def wait_done(self, timeout=None):
        return self._done.wait(timeout)

    def wait(self, timeout=None):
        if not self._done.wait(timeout):
            return None
        if self._error is not None:
            raise self._error
        return self._result

    def cancel(self):
        if not self._done.is_set() and not self._cancel_sent:
            self._cancel_sent = True
            self.conn.send({"id": next(self.conn._ids), "op": "cancel",
                            "args": {"id": self.id}})


class AgentConnection:
    def __init__(self, process, host_name):
        self.process = process
        self.host = host_name
        self._ids = itertools.count(1)
        self._calls = {}
        self._lock = threading.Lock()
        self._wlock = threading.Lock()
        self._closed = False
        self._broken = None
        self._hello = threading.Event()
        self.info = {}
        # when the agent last said anything (wall clock): the host's last contact
        self.last_heard = None
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"agent-{host_name}")
        self._reader.start()
        if not self._hello.wait(HELLO_TIMEOUT) or self._broken:
            detail = self.process.stderr_text().strip()
            self.close()
            raise AgentError(f"the agent on {host_name} did not start"
                             + (f": {detail.splitlines()[-1]}" if detail else ""),
                             hint="see `cairn host probe` for details")

    @property
    def alive(self):
        return not self._closed and self._broken is None and self.process.is_alive()

    def send(self, msg):
        data = protocol.encode(msg)
        limit = self.info.get("max_request")
        if type(limit) is int and len(data) > limit:
            raise AgentError(
                f"the request for {msg.get('op')} on {self.host} is {len(data) >> 20} MiB, "
                f"more than the agent there takes ({limit >> 20} MiB)",
                hint=f"raise the limit with `cairn host set {self.host} agent_env "
                     "CAIRN_MAX_REQUEST_MB=N`, or, for a restore, restore fewer paths at once",
                status_code=status.INVALID_REQUEST)
        with self._wlock:
            try:
                self.process.stdin.write(data)
                self.process.stdin.flush()
            except (OSError, ValueError, EOFError) as e:
                # The reader sees why the other end is gone, most often in the same moment:
                # its reason is the one to give (an agent killed mid-backup was reported as
                # a broken connection when a cancel's write came first).
                if not self._closed and threading.current_thread() is not self._reader:
                    self._reader.join(READER_GRACE)
                self._fail(AgentError(f"the connection to the agent on {self.host} broke: {e}"))
                raise self._broken from None

    def start(self, op, args=None, on_event=None):
        if self._broken:
            raise self._broken
        rid = next(self._ids)
        call = Call(self, rid, op, on_event)
        with self._lock:
            self._calls[rid] = call
        try:
            self.send({"id": rid, "op": op, "args": args or {}})
        except BaseException:
            with self._lock:
                self._calls.pop(rid, None)
            raise
        return call

    def call(self, op, args=None, on_event=None, timeout=None):
        c = self.start(op, args, on_event)
        result = c.wait(timeout)
        if result is None and not c.done():
            c.cancel()
            raise AgentError(f"{op} on {self.host} did not answer within {timeout:.0f} s")
        return result

    def _read_loop(self):
        why = None
        try:
            while True:
                try:
                    line = protocol.read_line(self.process.stdout, protocol.MAX_LINE)
                except protocol.LineTooLong as e:
                    why = f"it sent {e}"
                    break
                if not line:
                    break
                self.last_heard = time.time()
                try:
                    msg = protocol.decode(line)
                except (ValueError, RecursionError):
                    continue  # noise on the channel is not worth a broken connection
                try:
                    self._dispatch(msg)
                except Exception:  # noqa: BLE001 - what an agent says must not end the reader
                    continue
        except (OSError, ValueError, EOFError):
            pass
        if why:
            # Its calls fail; the agent, stopped with the connection, leaves with them.
            self._fail(AgentError(f"the connection to the agent on {self.host} was closed: "
                                  f"{why}"))
            self.close()
            return
        lost = self.process.connection_lost()
        if lost:
            self._fail(HostUnreachable(
                f"the connection to {self.host} was lost: {lost}",
                hint="the host may be down or cut off from the network"))
            return
        detail = self.process.stderr_text().strip()
        self._fail(AgentError(
            f"the agent on {self.host} stopped"
            + (f": {detail.splitlines()[-1]}" if detail else ""),
            hint="the host may have rebooted, or the agent was killed"))

    def _dispatch(self, msg):
        """One message of the agent. One of a shape the protocol does not know is dropped,
        or ends its call with an error: a broken or hostile agent fails its own calls, no
        more."""
        if not isinstance(msg, dict):
            return
        rid = msg.get("id")
        if type(rid) is not int:
            return
        if rid == 0 and msg.get("event") == "hello":
            data = msg.get("data")
            self.info = data if isinstance(data, dict) else {}
            self._hello.set()
            return
        with self._lock:
            call = self._calls.get(rid)
        if call is None:
            return
        if "event" in msg:
            data = msg.get("data")
            if call.on_event and isinstance(msg["event"], str) and isinstance(data, (dict,
                                                                                     type(None))):
                try:
                    call.on_event(msg["event"], data or {})
                except Exception:  # noqa: BLE001 - a bad listener must not kill the reader
                    pass
            return
        with self._lock:
            self._calls.pop(rid, None)
        if "error" in msg:
            err = msg["error"]
            code = err.get("code") if isinstance(err, dict) else None
            message = err.get("message") if isinstance(err, dict) else None
            if type(code) is not int or not 0 < code < 256:
                code = status.AGENT_FAILED
            if not isinstance(message, str):
                message = f"the agent on {self.host} sent an error without a message"
            if code == status.CANCELED:
                call._finish(error=Canceled())
            else:
                call._finish(error=AgentCallError(message, code))
            return
        result = msg.get("result")
        if result is None:
            result = {}
        if not isinstance(result, dict):
            call._finish(error=AgentCallError(
                f"the agent on {self.host} answered {call.op} with a malformed result",
                status.AGENT_FAILED))
            return
        call._finish(result=result)

    def _fail(self, err):
        if self._broken is None:
            self._broken = err
        self._hello.set()
        with self._lock:
            calls, self._calls = list(self._calls.values()), {}
        for c in calls:
            c._finish(error=self._broken)

    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            self.process.close()
        except Exception:  # noqa: BLE001
            pass
