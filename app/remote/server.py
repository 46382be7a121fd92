"""`cairn master serve --stdio`: the master API as line-delimited JSON on stdin and stdout,
for RemoteMaster (app/remote/client.py) at the other end of an SSH session.

  hello      {"hello": {"protocol", "cairn", "user", "origin", "home", "host"}}   first line
             (or {"hello": null, "error": {...}} when the master cannot be opened)
  call       {"id": 1, "method": "job", "args": [7], "kwargs": {}}
             -> {"id": 1, "result": ...} or {"id": 1, "error": {"type", "message", ...}}
  batch      {"id": 2, "batch": [{"method", "args", "kwargs"}, ...]}
             -> {"id": 2, "result": [{"result": ...} or {"error": {...}}, ...]}
  subscribe  {"id": 3, "subscribe": "job_changes", "kwargs": {"since": 0}}
             -> {"id": 3, "event": ...} as often as there is news (app/remote/streams.py),
                then {"id": 3, "result": ...} when the stream ends
  cancel     {"cancel": 3}: ends subscription 3, or sets the `cancel` event of call 3 (a call
             whose kwargs hold "cancel": {"$c": "event"}, such as a search)

Each request runs on a thread of its own (threads are kept a while for the next ones, each
with its catalog connection), so that a long call (waiting for jobs, a search) holds no
other request. Only the public methods of the API's parts (the classes in app/master/*.py)
are served: the master's configuration, job store, catalog, hosts and dispatcher are its
own. Values and errors travel as app/remote/codec.py makes them.

The served master runs no jobs in its own process, whose life is its client's connection:
jobs queued through it run in the dispatcher that holds the catalog's lease (a console,
`cairn master run`), or in a headless one started for them as a local command does
(Master.ensure_dispatcher)."""

import base64
import getpass
import inspect
import os
import queue
import socket
import sqlite3
import sys
import threading

from app import __version__, users
from app.access_scope import internal
from app.errors import CairnError, ValidationError
from app.formats import protocol
from app.remote import codec, streams
from app.store.db import catalog_error

PROTOCOL, EVENT, OWN_PARTS = codec.PROTOCOL, codec.EVENT, codec.OWN_PARTS
IDLE_WORKER = 60.0          # seconds an idle request thread waits for the next request
DISPATCHER_CHECK = 2.0      # how often queued jobs without a dispatcher are looked for
# Public methods of the API that are no calls to make from afar, with what to do instead.
NOT_SERVED = {
    "open_index": "it hands out the open index file: use browse, list_entries or search",
    "queue_backup": "it queues inside a catalog transaction of the caller: use start_backup",
    "record_contact": "the master records its hosts' contact itself",
    "remove_index": "index files are removed by the jobs that expire or replace images",
}


def served_methods(cls):
    """The names of the public methods of the API's parts that cls is made of. They are
    called on the master itself, where each is checked against its user (app/access.py)."""
    found = set()
    for part in cls.__mro__:
        if part is cls or not part.__module__.startswith("app.master."):
            continue
        found.update(name for name, attr in vars(part).items()
                     if not name.startswith("_") and name not in NOT_SERVED
                     and inspect.isfunction(attr))
    return found


class Server:
    def __init__(self, master, rfile, wfile):
        self.m = master
        self.rfile, self.wfile = rfile, wfile
        self.methods = served_methods(type(master))
        self._wlock = threading.Lock()
        self._lock = threading.Lock()
        self._events = {}          # request id -> threading.Event (subscriptions, cancel=)
        self._work = queue.Queue()
        self._idle = 0
        self._closed = threading.Event()

    # ---- the connection ---------------------------------------------------------------------
    def send(self, msg):
        data = protocol.encode(msg)
        with self._wlock:
            if self._closed.is_set():
                return
            try:
                self.wfile.write(data)
                self.wfile.flush()
            except (OSError, ValueError):
                self._closed.set()   # the client went away: the reading loop ends too

    def hello(self):
        """What the client is told first: who it works as (the Cairn user its login or
        --user names, and that user's role), from where, on which master."""
        me = self.m.whoami()
        return {"protocol": PROTOCOL, "cairn": __version__, "user": me["user"],
                "role": me["role"], "origin": me["origin"], "home": self.m.home.root,
                "host": socket.gethostname()}

    def run(self):
        """Serves until stdin ends (the client closed the session)."""
        try:
            # a login, in the audit log; an unknown user is refused here, and recorded
            self.m.audit_login(method="ssh" if os.environ.get("SSH_CONNECTION") else "local",
                               key_fingerprint=login_key(), client="cairn master serve")
            hello = self.hello()
        except CairnError as e:
            self.send({"hello": None, "error": codec.encode_error(e)})
            return e.status or 1
        self.send({"hello": hello})
        watcher = threading.Thread(target=self._watch_queue, name="serve-dispatcher",
                                   daemon=True)
        watcher.start()
        try:
            while not self._closed.is_set():
                try:
                    line = protocol.read_line(self.rfile)
                except protocol.LineTooLong as e:
                    self.send({"id": None, "error": codec.encode_error(ValidationError(str(e)))})
                    continue
                if not line:
                    break
                try:
                    msg = protocol.decode(line)
                    if not isinstance(msg, dict):
                        raise ValueError("a request is a JSON object")
                except ValueError as e:
                    self.send({"id": None, "error": codec.encode_error(
                        ValidationError(f"not a request: {e}"))})
                    continue
                if "cancel" in msg:
                    ev = self._events.get(msg["cancel"])
                    if ev is not None:
                        ev.set()
                    continue
                self._submit(msg)
        finally:
            self._closed.set()
            for ev in list(self._events.values()):
                ev.set()
        return 0

    # ---- request threads ----------------------------------------------------------------------
    def _submit(self, msg):
        with self._lock:
            spare = self._idle > 0
            if spare:
                self._idle -= 1
        self._work.put(msg)
        if not spare:
            threading.Thread(target=self._worker, name="serve-request", daemon=True).start()

    def _worker(self):
        try:
            while True:
                try:
                    msg = self._work.get(timeout=IDLE_WORKER)
                except queue.Empty:
                    with self._lock:
                        if self._idle > 0 and self._work.empty():
                            self._idle -= 1
                            return
                    continue
                self._handle(msg)
                with self._lock:
                    self._idle += 1
        finally:
            self.m.db.close()   # this thread's catalog connection

    def _handle(self, msg):
        rid = msg.get("id")
        try:
            if "subscribe" in msg:
                self._stream(rid, msg)
                return
            if "batch" in msg:
                calls = msg["batch"]
                if not isinstance(calls, list):
                    raise ValidationError("a batch is a list of calls")
                result = [self._one(c) for c in calls]
            else:
                result = codec.encode(self.call(msg.get("method"), msg.get("args"),
                                                msg.get("kwargs"), rid))
            self.send({"id": rid, "result": result})
        except BaseException as e:  # noqa: BLE001 - every failure is the caller's answer
            self.send({"id": rid, "error": codec.encode_error(self._named(e))})
        finally:
            self._events.pop(rid, None)

    def _one(self, c):
        try:
            if not isinstance(c, dict):
                raise ValidationError("each call of a batch is an object")
            return {"result": codec.encode(self.call(c.get("method"), c.get("args"),
                                                     c.get("kwargs"), None))}
        except BaseException as e:  # noqa: BLE001 - one call's failure is its own answer
            return {"error": codec.encode_error(self._named(e))}

    def _named(self, e):
        if isinstance(e, sqlite3.Error):
            # what the catalog layer did not name yet, named as the CLI and console do
            return catalog_error(self.m.db.path, e, any_error=True)
        return e

    # ---- calls --------------------------------------------------------------------------------
    def call(self, method, args, kwargs, rid):
        fn = self.method(method)
        args = codec.decode(args or [])
        kwargs = codec.decode(kwargs or {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValidationError(f"{method}: args is a list and kwargs an object")
        if kwargs.get("cancel") == EVENT:
            kwargs["cancel"] = self._events.setdefault(rid, threading.Event())
        return fn(*args, **kwargs)

    def method(self, name):
        """The master's bound method `name`: the one the master's access checks wrap."""
        if not isinstance(name, str) or not name:
            raise ValidationError("a request names its method")
        if name in self.methods:
            return getattr(self.m, name)
        if name in NOT_SERVED:
            raise ValidationError(f"{name} is not served over the wire: {NOT_SERVED[name]}")
        if name.startswith("_") or name in OWN_PARTS:
            raise ValidationError(f"{name!r} is the master's own, not a call of its API",
                                  hint="the served master answers the methods of its API "
                                       "(app/master/) only")
        raise ValidationError(f"the master has no method {name!r}",
                              hint="a newer Cairn on the desktop than on the master? "
                                   "update the master")

    def _stream(self, rid, msg):
        stop = self._events.setdefault(rid, threading.Event())
        kwargs = codec.decode(msg.get("kwargs") or {})
        try:
            gen = streams.open(self.m, msg["subscribe"], stop=stop, **kwargs)
        except (TypeError, ValueError) as e:
            raise ValidationError(f"subscription {msg['subscribe']!r}: {e}") from None
        try:
            while True:
                event = next(gen)
                self.send({"id": rid, "event": codec.encode(event)})
        except StopIteration as end:
            self.send({"id": rid, "result": codec.encode(end.value)})

    # ---- jobs queued through this master ------------------------------------------------------
    def _watch_queue(self):
        """Jobs queued through this master (by a console, say, which runs no dispatcher when
        its master is remote) still run: a headless dispatcher starts for them when none
        holds the lease, as a local command starts one."""
        while not self._closed.wait(DISPATCHER_CHECK):
            try:
                # the master's own work, as its dispatcher's: not a call of the user's
                with internal():
                    if self.m.db.one("SELECT 1 FROM jobs WHERE state='queued' LIMIT 1"):
                        self.m.ensure_dispatcher()
            except (CairnError, sqlite3.Error, OSError):
                pass   # a busy or damaged catalog: the calls report it; tried again later


def login_key(environ=None):
    """The fingerprint of the public key the client logged in with, where sshd tells it
    (`ExposeAuthInfo yes`: the file SSH_USER_AUTH names, "publickey TYPE BASE64" lines),
    else None."""
    path = (environ if environ is not None else os.environ).get("SSH_USER_AUTH")
    if not path:
        return None
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        words = line.split()
        if len(words) >= 3 and words[0] == "publickey":
            try:
                return users.fingerprint(base64.b64decode(words[2], validate=True))
            except ValueError:
                return None
    return None


def origin_address(environ=None):
    """The client's address from sshd's SSH_CONNECTION, else "local"."""
    conn = (environ if environ is not None else os.environ).get("SSH_CONNECTION", "").split()
    return conn[0] if conn else "local"


def serve_stdio(home=None, user=None):
    """`cairn master serve --stdio`: serves until stdin ends. Stdout is the protocol's own;
    whatever else writes to it (a print, a child process) goes to stderr."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    rfile = sys.stdin.buffer
    # The master loads here, not at the top: this module is part of the client's package.
    from app.master import Master
    try:
        m = Master(home, password_provider=None, user=user or getpass.getuser(),
                   origin=origin_address())
    except CairnError as e:
        out.write(protocol.encode({"hello": None, "error": codec.encode_error(e)}))
        out.flush()
        return e.status or 1
    m.jobs_run_elsewhere = True
    try:
        return Server(m, rfile, out).run()
    finally:
        m.close()
