"""What an ordinary local user can do to a data-plane port it finds (`ss -ltn` lists it to
anyone): open connections that say nothing, send garbage, start TLS and stop, or finish TLS
with a made-up token. Run by the tests as an unprivileged user with the system's python3,
standard library only.

Commands on stdin, one per line; answers on stdout, one line each:
  flood PORT IDLE GARBAGE   opens IDLE silent connections, then GARBAGE ones (a third random
                            bytes, a third half TLS handshakes, a third wrong tokens); holds
                            them all; answers "flooded N" with the connections opened
  status                    answers JSON: {"open": connections the server still holds,
                            "closed": ones it dropped, "ok": ones it answered OK (never)}
The connections are held until stdin closes."""

import json
import os
import random
import socket
import ssl
import sys
import threading

HOST = "127.0.0.1"
rnd = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
held = []  # raw descriptors, each a dup of one connection
accepted = []
lock = threading.Lock()


def hold(sock):
    with lock:
        held.append(os.dup(sock.fileno()))


def tls_context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the attacker has no business trusting anything
    return ctx


def idle(port):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((HOST, port))
    hold(s)
    return s


def garbage(port, kind, keep):
    try:
        s = socket.create_connection((HOST, port), timeout=3)
    except OSError:
        return
    keep.append(s)
    hold(s)
    try:
        if kind == 0:
            s.sendall(rnd.randbytes(rnd.randint(1, 4096)))
        elif kind == 1:
            t = tls_context().wrap_socket(s, do_handshake_on_connect=False)
            keep.append(t)
            s.setblocking(False)
            try:
                t.do_handshake()  # sends the ClientHello, then waits for what never comes
            except ssl.SSLWantReadError:
                pass
        else:
            t = tls_context().wrap_socket(s)
            keep.append(t)
            t.sendall(rnd.randbytes(32).hex().encode() + b"\n")
            if t.recv(2) == b"OK":
                with lock:
                    accepted.append(port)
    except (OSError, ValueError):
        pass


def flood(port, n_idle, n_garbage, keep):
    for _ in range(n_idle):
        keep.append(idle(port))
    threads = [threading.Thread(target=garbage, args=(port, i % 3, keep), daemon=True)
               for i in range(n_garbage)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return n_idle + n_garbage


def status():
    """Reads what each connection has (never blocking): its end means the server dropped it."""
    open_, closed = 0, 0
    with lock:
        fds = list(held)
    for fd in fds:
        s = socket.socket(fileno=os.dup(fd))
        s.setblocking(False)
        try:
            while True:
                if not s.recv(65536):
                    closed += 1
                    break
        except BlockingIOError:
            open_ += 1
        except OSError:
            closed += 1  # reset, or never connected
        finally:
            s.close()
    return {"open": open_, "closed": closed, "ok": len(accepted)}


def main():
    keep = []
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "flood":
            n = flood(int(words[1]), int(words[2]), int(words[3]), keep)
            print(f"flooded {n}", flush=True)
        elif words[0] == "status":
            print(json.dumps(status()), flush=True)


if __name__ == "__main__":
    main()
