"""The data plane between two agents: one TCP connection per job, TLS with a certificate the
master made for that job alone (the listening side holds its key; the connecting side trusts
exactly that certificate), and a one-time token the connecting side must present. So a peer
is authenticated per job and the bytes are encrypted in transit, with the standard library
alone.

On the wire, after TLS and the token: frames of a 4-byte big-endian length and that many
bytes; a zero length ends the stream cleanly, and the receiver answers one byte (0 = all
received and stored) so the sender knows the other side holds everything. A connection that
ends without the zero frame is a failure, never a short success."""

import collections
import errno
import hmac
import os
import selectors
import shutil
import socket
import ssl
import struct
import tempfile
import time

from app.errors import Canceled, DataPlaneError
from app.liveness import watch_peer

FRAME = 1 << 20
_LEN = struct.Struct(">I")
ACCEPT_TIMEOUT = 120.0
IO_TIMEOUT = 300.0
# An unauthenticated connection's time for TLS and the token: the real peer needs a few
# round trips.
HANDSHAKE_TIMEOUT = 10.0
MAX_PENDING = 256
BACKLOG = 128
POLL = 0.25  # how often accept() looks at is_cancelled


def _server_context(cert_pem, key_pem):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    d = tempfile.mkdtemp(prefix="cairn-tls-")
    try:
        cert = os.path.join(d, "cert.pem")
        key = os.path.join(d, "key.pem")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key_pem)
        with open(cert, "w") as f:
            f.write(cert_pem)
        ctx.load_cert_chain(cert, key)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return ctx


def _client_context(cert_pem):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # The job's certificate is pinned: trusting exactly it makes host names irrelevant.
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=cert_pem)
    return ctx


class Listener:
    """The listening side (the storage server's agent).

    Anyone who reaches the port can connect, so connections are taken as they come and
    authenticated side by side, without blocking: each has HANDSHAKE_TIMEOUT for TLS and the
    token, one that stays silent, sends garbage or a wrong token is dropped, and none holds up
    the others. At most MAX_PENDING wait at once; beyond that the oldest goes, since the real
    peer finishes within a few round trips of arriving.

    bind: the address the peer was told, when it is an IP address of this host (the port is
    then not offered on the others); anything else listens on every IPv4 address, and
    `note` says why."""

    def __init__(self, cert_pem, key_pem, token, bind=None, port=0):
        self._ctx = _server_context(cert_pem, key_pem)
        self._token = token.encode()
        self.sock, self.address, self.note = _listening_socket(bind, port)
        self.port = self.sock.getsockname()[1]

    def accept(self, is_cancelled, timeout=ACCEPT_TIMEOUT):
        """Wait for the peer that knows the token; others are dropped. Returns a Channel."""
        deadline = time.monotonic() + timeout
        pending = collections.OrderedDict()  # fd -> _Handshake, oldest first
        sel = selectors.DefaultSelector()
        self.sock.setblocking(False)
        sel.register(self.sock, selectors.EVENT_READ)
        try:
            while True:
                if is_cancelled():
                    raise Canceled()
                now = time.monotonic()
                if now >= deadline:
                    raise DataPlaneError(
                        f"no data connection arrived within {int(timeout)} s on port "
                        f"{self.port} (a firewall between client and storage server?)")
                wake = min([deadline, now + POLL] + [h.deadline for h in pending.values()])
                for key, _ in sel.select(max(0.0, wake - now)):
                    if key.fileobj is self.sock:
                        self._take(sel, pending)
                        continue
                    chan = self._advance(sel, pending, key.data)
                    if chan is not None:
                        return chan
                now = time.monotonic()
                for h in [h for h in pending.values() if h.deadline <= now]:
                    self._drop(sel, pending, h)
        finally:
            for h in list(pending.values()):
                self._drop(sel, pending, h)
            sel.close()

    def _take(self, sel, pending):
        """Every connection waiting in the kernel's queue, each started on its handshake."""
        while True:
            try:
                raw, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return  # a connection reset before it was taken
                if not pending:
                    time.sleep(0.05)  # no room at all: wait rather than spin on the queue
                    return
                # Out of descriptors: the oldest waiting connection makes room.
                self._drop(sel, pending, next(iter(pending.values())))
                continue
            if len(pending) >= MAX_PENDING:
                self._drop(sel, pending, next(iter(pending.values())))
            try:
                watch_peer(raw)
                h = _Handshake(raw, self._ctx, len(self._token) + 1)
            except (OSError, ValueError):
                raw.close()
                continue
            pending[h.fd] = h
            sel.register(h.tls, selectors.EVENT_READ, h)

    def _advance(self, sel, pending, h):
        """Drives one handshake as far as its bytes allow; the Channel once it is authentic."""
        if pending.get(h.fd) is not h:
            return None  # dropped earlier in the same round of events
        try:
            events = h.step()
        except (OSError, ValueError, DataPlaneError):
            self._drop(sel, pending, h)
            return None
        if events:
            sel.modify(h.tls, events, h)
            return None
        sel.unregister(h.tls)
        pending.pop(h.fd, None)
        if not hmac.compare_digest(h.line[:-1], self._token):
            h.close()
            return None
        try:
            h.tls.setblocking(True)
            h.tls.settimeout(HANDSHAKE_TIMEOUT)
            h.tls.sendall(b"OK")
            h.tls.settimeout(IO_TIMEOUT)
        except OSError:
            h.close()
            return None
        return Channel(h.tls)

    @staticmethod
    def _drop(sel, pending, h):
        if pending.get(h.fd) is h:
            del pending[h.fd]
        try:
            sel.unregister(h.tls)
        except (KeyError, ValueError):
            pass
        h.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class _Handshake:
    """One connection on its way to authentication, driven without blocking: TLS, then the
    token line. step() returns the selector events it waits for, or 0 once the line is in."""

    def __init__(self, raw, ctx, line_length):
        self.fd = raw.fileno()
        self.deadline = time.monotonic() + HANDSHAKE_TIMEOUT
        raw.setblocking(False)
        self.tls = ctx.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        self._shaken = False
        self._want = line_length
        self.line = b""

    def step(self):
        try:
            if not self._shaken:
                self.tls.do_handshake()
                self._shaken = True
            while len(self.line) < self._want:
                chunk = self.tls.recv(self._want - len(self.line))
                if not chunk:
                    raise DataPlaneError("the data connection closed early")
                self.line += chunk
        except ssl.SSLWantReadError:
            return selectors.EVENT_READ
        except ssl.SSLWantWriteError:
            return selectors.EVENT_WRITE
        return 0

    def close(self):
        try:
            self.tls.close()
        except OSError:
            pass


def _listening_socket(address, port):
    """(socket, address bound, why not `address` or None) for Listener."""
    why = None
    if address and address != "0.0.0.0":
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            socket.inet_pton(family, address)
        except OSError:
            # A name may stand for other addresses here than where the peer looks it up.
            why = f"{address} is a name, not an IP address"
        else:
            s = socket.socket(family, socket.SOCK_STREAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((address, port))
                s.listen(BACKLOG)
                return s, address, None
            except OSError as e:
                s.close()
                why = f"{address} is not an address of this host ({e.strerror or e})"
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(BACKLOG)
    return s, "0.0.0.0", why


def connect(host, port, cert_pem, token, timeout=30.0):
    """The connecting side. `timeout` bounds the TCP connect, the whole TLS handshake (one
    deadline in the ssl module) and each read of the listener's OK, so a peer that never
    answers, or trickles its handshake, fails the job instead of holding it."""
    ctx = _client_context(cert_pem)
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise DataPlaneError(f"cannot open the data connection to {host}:{port}: "
                               f"{e.strerror or e}") from None
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        watch_peer(raw)
        tls = ctx.wrap_socket(raw)
        tls.sendall(token.encode() + b"\n")
        if _read_exact(tls, 2) != b"OK":
            raise DataPlaneError("the storage server refused the data connection")
        tls.settimeout(IO_TIMEOUT)
        return Channel(tls)
    except ssl.SSLError as e:
        raw.close()
        raise DataPlaneError(f"TLS with {host}:{port} failed: {e.reason or e}") from None
    except OSError as e:
        raw.close()
        raise DataPlaneError(f"data connection to {host}:{port} failed: {e}") from None


def _read_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise DataPlaneError("the data connection closed early")
        buf += chunk
    return bytes(buf)


class Channel:
    """A framed, authenticated byte stream. Write side: write() then finish(). Read side:
    readinto()/read() until b"" (clean end), then ack()."""

    def __init__(self, sock):
        self.sock = sock
        self._out = bytearray()
        self._in_left = 0
        self._ended = False

    # -- sending ----------------------------------------------------------------------------
    def write(self, data):
        try:
            if len(self._out) + len(data) < FRAME:
                self._out += data
                return
            if self._out:
                self._send_frame(self._out)
                self._out = bytearray()
            if len(data) >= FRAME:
                self._send_frame(data)
            else:
                self._out += data
        except OSError as e:
            raise DataPlaneError(f"sending on the data connection failed: {e}") from None

    def _send_frame(self, data):
        self.sock.sendall(_LEN.pack(len(data)))
        self.sock.sendall(data)

    def finish(self):
        """End the stream and wait until the receiver confirms it stored everything."""
        try:
            if self._out:
                self._send_frame(self._out)
                self._out = bytearray()
            self.sock.sendall(_LEN.pack(0))
            ack = _read_exact(self.sock, 1)
        except OSError as e:
            raise DataPlaneError(f"finishing the data stream failed: {e}") from None
        if ack != b"\0":
            raise DataPlaneError("the receiving side reported a failure")

    # -- messages, for exchanges in both directions (client-side deduplication) -------------
    def send_message(self, data):
        """One whole frame, after whatever write() buffered."""
        if not data:
            raise ValueError("a message cannot be empty (a zero frame ends the stream)")
        try:
            if self._out:
                self._send_frame(self._out)
                self._out = bytearray()
            self._send_frame(data)
        except OSError as e:
            raise DataPlaneError(f"sending on the data connection failed: {e}") from None

    def send_tagged(self, tag, data):
        """One whole frame of a tag byte then data, without joining them first."""
        try:
            if self._out:
                self._send_frame(self._out)
                self._out = bytearray()
            self.sock.sendall(_LEN.pack(len(data) + 1) + tag)
            self.sock.sendall(data)
        except OSError as e:
            raise DataPlaneError(f"sending on the data connection failed: {e}") from None

    def recv_message(self):
        """The next whole frame as bytes; None at the clean end of the stream."""
        if self._ended:
            return None
        try:
            n = _LEN.unpack(_read_exact(self.sock, 4))[0]
            if n == 0:
                self._ended = True
                return None
            buf = bytearray(n)
            mv = memoryview(buf)
            got = 0
            while got < n:
                k = self.sock.recv_into(mv[got:], n - got)
                if k == 0:
                    raise DataPlaneError("the data connection closed in the middle of a "
                                           "message")
                got += k
        except OSError as e:
            raise DataPlaneError(f"receiving on the data connection failed: {e}") from None
        return buf

    # -- receiving --------------------------------------------------------------------------
    def readinto(self, mv):
        if self._ended:
            return 0
        try:
            while self._in_left == 0:
                hdr = _read_exact(self.sock, 4)
                self._in_left = _LEN.unpack(hdr)[0]
                if self._in_left == 0:
                    self._ended = True
                    return 0
            want = min(len(mv), self._in_left)
            n = self.sock.recv_into(mv, want)
        except OSError as e:
            raise DataPlaneError(f"receiving on the data connection failed: {e}") from None
        if n == 0:
            raise DataPlaneError("the data connection closed before the end of the stream")
        self._in_left -= n
        return n

    def read(self, n=-1):
        if n is None or n < 0:
            chunks = []
            while True:
                c = self.read(FRAME)
                if not c:
                    return b"".join(chunks)
                chunks.append(c)
        buf = bytearray(n)
        mv = memoryview(buf)
        got = 0
        while got < n:
            k = self.readinto(mv[got:])
            if k == 0:
                break
            got += k
        return bytes(buf[:got])

    def drain(self):
        """Read to the end of the stream (after the consumer stopped early)."""
        buf = memoryview(bytearray(FRAME))
        while self.readinto(buf):
            pass

    @property
    def ended(self):
        return self._ended

    def ack(self, ok=True):
        try:
            self.sock.sendall(b"\0" if ok else b"\1")
        except OSError:
            pass

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
