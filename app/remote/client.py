"""RemoteMaster: the master served on another machine (`cairn master serve --stdio`, see
app/remote/server.py), reached over SSH, standing for a Master. Its API's methods are called
by name as on the embedded one, with the same results and the same errors:

    m = RemoteMaster("admin@backup1", known_hosts=Home().known_hosts)
    m.job_list()                                        one round trip
    m.batch([("host_list",), ("disk_pools",)])          one round trip for both
    for changes in m.subscribe("job_changes"): ...      pushed by the master as jobs change

The SSH connection is made as a host's is (app/transport/ssh.py): the master's host key is
checked against the desktop's known_hosts (unknown: refused with its fingerprint unless
trusted; changed: refused), keys from a file or the SSH agent, passwords from the OS
keyring or the password provider. A connection that drops fails the calls waiting on it
with ConnectionLost; reconnect() makes a new one."""

import itertools
import queue
import socket
import threading

from app.errors import CairnError, HostKeyChanged, HostKeyUnknown, HostUnreachable
from app.formats import protocol
from app.remote import codec, target
from app.remote.errors import ConnectionLost, NotOverSSH
from app.transport.base import StderrBuffer
from app.transport.ssh import SSHTransport, _ChannelReader

DEFAULT_COMMAND = target.DEFAULT_COMMAND
CONNECT_TIMEOUT = 15.0
START_TIMEOUT = 60.0      # for the served master to say hello (Python starting, the catalog)
CANCEL_POLL = 0.2
WINDOW = 32 << 20


class _Pending:
    def __init__(self, stream=False):
        self.done = threading.Event()
        self.reply = None
        self.events = queue.Queue() if stream else None


class RemoteMaster:
    remote = True

    def __init__(self, where, *, known_hosts, identity=None, trust_key=False, command=None,
                 password_provider=None, connect_timeout=CONNECT_TIMEOUT):
        self.ssh_user, self.address, self.port = target.parse(where)
        self.command = command or DEFAULT_COMMAND
        self._ssh = SSHTransport(self.address, port=self.port, user=self.ssh_user,
                                 key_file=identity, known_hosts=known_hosts,
                                 trust_unknown_key=trust_key,
                                 password_provider=password_provider,
                                 connect_timeout=connect_timeout)
        self.ssh_user = self._ssh.user
        self.where = target.display(self.ssh_user, self.address, self.port)
        self.hello = {}
        self._ids = itertools.count(1)
        self._pending = {}
        self._lock = threading.Lock()
        self._wlock = threading.Lock()
        self._channel = None
        self._lost = None
        self._connect()

    def __repr__(self):
        return f"<RemoteMaster {self.where}>"

    # ---- the connection ---------------------------------------------------------------------
    @property
    def cairn_user(self):
        """The Cairn user the master serves this connection as, and its role (not `user`:
        that is a method of the API, a user's record)."""
        return self.hello.get("user"), self.hello.get("role")

    @property
    def connected(self):
        return self._channel is not None and self._lost is None

    def _connect(self):
        try:
            t = self._ssh.connect()
        except HostKeyUnknown as e:
            e.message = (f"the SSH host key of master {self.where} is not trusted yet "
                         f"({e.key_type} {e.fingerprint})")
            e.hint = ("check the fingerprint with the master's administrator (ssh-keygen -lf "
                      "/etc/ssh/ssh_host_*_key.pub there), then connect once with "
                      "--trust-master-key")
            raise
        except HostKeyChanged as e:
            e.message = f"master {self.where}: {e.message}"
            raise
        try:
            # A window that keeps a large listing flowing over a link with a long round trip
            # (paramiko's default, 2 MB, allows 40 MB/s at 50 ms).
            ch = t.open_session(window_size=WINDOW, timeout=self._ssh.connect_timeout)
            ch.exec_command(self.command)
        except Exception as e:  # noqa: BLE001 - paramiko's errors, said as the master's
            self._ssh.close()
            raise HostUnreachable(f"cannot start the master on {self.where}: {e}") from None
        stderr = StderrBuffer()
        stderr.drain(ch.recv_stderr, name="master-stderr")
        rfile = _ChannelReader(ch, "rb")
        hello = self._read_hello(ch, rfile, stderr)
        self._channel, self._rfile, self._stderr, self._lost = ch, rfile, stderr, None
        self.hello = hello
        threading.Thread(target=self._read, args=(ch, rfile), name="master-reader",
                         daemon=True).start()

    def _read_hello(self, ch, rfile, stderr):
        ch.settimeout(START_TIMEOUT)
        try:
            msg = protocol.decode(protocol.read_line(rfile) or b"null")
        except (socket.timeout, OSError, EOFError, ValueError):
            msg = None
        finally:
            ch.settimeout(None)
        if isinstance(msg, dict) and msg.get("error"):
            ch.close()
            self._ssh.close()
            raise codec.decode_error(msg["error"])
        if not isinstance(msg, dict) or not isinstance(msg.get("hello"), dict):
            stderr.wait_closed(1.0)
            said = stderr.text().strip()[-2000:]
            ch.close()
            self._ssh.close()
            raise CairnError(f"the master did not start on {self.where}: `{self.command}` "
                             + (f"said: {said}" if said else "gave no answer"),
                             hint="install Cairn there (the `cairn` command in the PATH of "
                                  f"{self.ssh_user}), or give the command that serves it "
                                  "with --master-command", status_code=HostUnreachable.status)
        if msg["hello"].get("protocol") != codec.PROTOCOL:
            ch.close()
            self._ssh.close()
            raise CairnError(f"the master on {self.where} speaks protocol "
                             f"{msg['hello'].get('protocol')}, this Cairn {codec.PROTOCOL}",
                             hint="use the same Cairn version on the desktop and the master")
        return msg["hello"]

    def _read(self, ch, rfile):
        reason = "the master closed the connection"
        try:
            while True:
                line = protocol.read_line(rfile)
                if not line:
                    break
                with codec.no_gc(len(line)):
                    msg = protocol.decode(line)
                    if len(line) >= codec.LARGE and "result" in msg:
                        # decoded here, on the reader's thread, while the collector rests
                        msg["result"] = codec.decode(msg["result"])
                        msg["decoded"] = True
                with self._lock:
                    p = self._pending.get(msg.get("id"))
                if p is None:
                    continue
                if "event" in msg and p.events is not None:
                    p.events.put(msg)
                    continue
                p.reply = msg
                if p.events is not None:
                    p.events.put(msg)
                p.done.set()
        except (OSError, EOFError, ValueError) as e:
            reason = str(e) or type(e).__name__
        if ch is not self._channel:
            return
        said = self._stderr.text().strip()[-500:]
        self._lost = reason + (f" ({said})" if said else "")
        with self._lock:
            waiting = list(self._pending.values())
        for p in waiting:
            if p.events is not None:
                p.events.put(None)
            p.done.set()

    def reconnect(self):
        """A new connection after one was lost (the console retries with it)."""
        self._drop()
        self._connect()

    def close(self):
        self._drop()
        self._ssh.close()

    def _drop(self):
        ch, self._channel = self._channel, None
        if ch is not None:
            ch.close()

    def _lost_error(self):
        return ConnectionLost(f"the connection to the master on {self.where} was lost: "
                              f"{self._lost or 'not connected'}",
                              hint="check the network and that the master's machine is up; "
                                   "then try again")

    # ---- requests ---------------------------------------------------------------------------
    def _send(self, msg):
        if not self.connected:
            raise self._lost_error()
        data = protocol.encode(msg)
        try:
            with self._wlock:
                self._channel.sendall(data)
        except (OSError, EOFError, AttributeError) as e:
            self._lost = self._lost or str(e) or "the connection broke"
            raise self._lost_error() from None

    def _request(self, msg, cancel=None):
        rid = msg["id"] = next(self._ids)
        p = _Pending()
        with self._lock:
            self._pending[rid] = p
        try:
            self._send(msg)
            canceled = False
            while not p.done.wait(CANCEL_POLL if cancel is not None and not canceled else None):
                if cancel.is_set():
                    canceled = True
                    self._send({"cancel": rid})
        finally:
            with self._lock:
                self._pending.pop(rid, None)
        if p.reply is None:
            raise self._lost_error()
        if "error" in p.reply:
            raise codec.decode_error(p.reply["error"])
        return p.reply.get("result"), p.reply.get("decoded", False)

    def call(self, method, *args, **kwargs):
        """Master.method(*args, **kwargs) on the master. A threading.Event given as `cancel`
        (a search's) cancels the call there when it is set."""
        cancel = kwargs.get("cancel")
        if isinstance(cancel, threading.Event):
            kwargs["cancel"] = codec.EVENT
        else:
            cancel = None
        msg = {"method": method, "args": codec.encode(list(args)),
               "kwargs": codec.encode(kwargs)}
        result, decoded = self._request(msg, cancel)
        return result if decoded else codec.decode(result)

    def batch(self, calls, return_exceptions=False):
        """Several calls in one round trip: calls are (method, args, kwargs) with args and
        kwargs optional. Their results in order; a failed call raises its error, or with
        return_exceptions stands in the list as the error."""
        wire = []
        for c in calls:
            method, args = c[0], (c[1] if len(c) > 1 else ())
            kwargs = c[2] if len(c) > 2 else {}
            wire.append({"method": method, "args": codec.encode(list(args)),
                         "kwargs": codec.encode(dict(kwargs))})
        out = []
        results, decoded = self._request({"batch": wire})
        for r in results:
            if "error" in r:
                e = codec.decode_error(r["error"])
                if not return_exceptions:
                    raise e
                out.append(e)
            else:
                out.append(r.get("result") if decoded else codec.decode(r.get("result")))
        return out

    def subscribe(self, kind, **kwargs):
        """A stream the master pushes (app/remote/streams.py): iterate it for its events;
        its `result` holds the last value once it ended; close() ends it early."""
        return Subscription(self, kind, kwargs)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in codec.OWN_PARTS:
            raise NotOverSSH(f"the master's {name} is its own: not reachable on a master "
                             f"over SSH ({self.where})",
                             hint="this needs the master's machine: run it there")

        def remote_call(*args, **kwargs):
            return self.call(name, *args, **kwargs)
        remote_call.__name__ = name
        return remote_call


# What wakes a thread iterating a subscription that was closed (from another thread).
_CLOSED = {"closed": True}


class Subscription:
    def __init__(self, master, kind, kwargs):
        self._m = master
        self.result = None
        self.ended = False
        self._p = _Pending(stream=True)
        self.id = next(master._ids)
        with master._lock:
            master._pending[self.id] = self._p
        try:
            master._send({"id": self.id, "subscribe": kind, "kwargs": codec.encode(kwargs)})
        except BaseException:
            self._end()
            raise

    def __iter__(self):
        return self

    def __next__(self):
        if self.ended:
            raise StopIteration
        msg = self._p.events.get()
        if msg is not None and "event" in msg:
            return codec.decode(msg["event"])
        self._end()
        if msg is _CLOSED:
            raise StopIteration
        if msg is None:
            raise self._m._lost_error()
        if "error" in msg:
            raise codec.decode_error(msg["error"])
        self.result = codec.decode(msg.get("result"))
        raise StopIteration

    def close(self):
        """Ends the stream; a thread iterating it (a console's feed reader) stops too."""
        if not self.ended:
            try:
                self._m._send({"cancel": self.id})
            except ConnectionLost:
                pass
            self._end()
            self._p.events.put(_CLOSED)

    def _end(self):
        self.ended = True
        with self._m._lock:
            self._m._pending.pop(self.id, None)
