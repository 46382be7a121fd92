import os
import socket
import ssl
import threading
import time

import pytest

from app.agent import dataplane
from app.errors import DataPlaneError
from app.jobs.tlscert import job_identity


def serve(listener, sink, **kw):
    def run():
        try:
            chan = listener.accept(lambda: False, timeout=10)
            buf = memoryview(bytearray(1 << 16))
            while True:
                n = chan.readinto(buf)
                if n == 0:
                    break
                sink["data"] += bytes(buf[:n])
            chan.ack(True)
            chan.close()
        except Exception as e:  # noqa: BLE001
            sink["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_stream_roundtrip_with_pinned_cert_and_token():
    cert, key, token = job_identity(1)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    sink = {"data": b""}
    t = serve(listener, sink)
    payload = os.urandom(3 * dataplane.FRAME + 12345)
    chan = dataplane.connect("127.0.0.1", listener.port, cert, token)
    chan.write(payload[:100])
    chan.write(payload[100:])
    chan.finish()
    chan.close()
    t.join(10)
    listener.close()
    assert "error" not in sink
    assert sink["data"] == payload


def test_wrong_token_is_dropped_and_right_one_still_accepted():
    cert, key, token = job_identity(2)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    sink = {"data": b""}
    t = serve(listener, sink)
    with pytest.raises(DataPlaneError):
        bad = dataplane.connect("127.0.0.1", listener.port, cert, "0" * 64)
        bad.write(b"evil")
        bad.finish()
    chan = dataplane.connect("127.0.0.1", listener.port, cert, token)
    chan.write(b"good")
    chan.finish()
    t.join(10)
    listener.close()
    assert sink["data"] == b"good"


def test_other_jobs_certificate_is_not_trusted():
    cert, key, token = job_identity(3)
    other_cert, _, _ = job_identity(4)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    sink = {"data": b""}
    serve(listener, sink)
    with pytest.raises(DataPlaneError, match="TLS"):
        dataplane.connect("127.0.0.1", listener.port, other_cert, token)
    listener.close()


def test_plaintext_peer_cannot_talk():
    cert, key, token = job_identity(5)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    sink = {"data": b""}
    serve(listener, sink)
    s = socket.create_connection(("127.0.0.1", listener.port))
    s.sendall(token.encode() + b"\n")
    s.settimeout(5)
    try:
        reply = s.recv(10)
    except (ConnectionResetError, socket.timeout):
        reply = b""
    assert reply != b"OK"
    s.close()
    listener.close()


def test_connection_lost_before_end_is_a_failure_not_a_short_success():
    cert, key, token = job_identity(6)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    sink = {"data": b""}
    t = serve(listener, sink)
    chan = dataplane.connect("127.0.0.1", listener.port, cert, token)
    chan.write(os.urandom(2 * dataplane.FRAME))
    chan.sock.close()  # the sender dies without the end frame
    t.join(10)
    listener.close()
    assert isinstance(sink.get("error"), DataPlaneError)


def test_nobody_connects_times_out_with_clear_message():
    cert, key, token = job_identity(7)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    with pytest.raises(DataPlaneError, match="no data connection arrived"):
        listener.accept(lambda: False, timeout=1)
    listener.close()


def test_listens_only_on_the_address_the_peer_was_told():
    cert, key, token = job_identity(8)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    try:
        assert listener.address == "127.0.0.1" and listener.note is None
        # 127.0.0.2 is this host too (all of 127/8 is), but not the address the peer was told
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", listener.port), timeout=5)
    finally:
        listener.close()


@pytest.mark.parametrize("told, why", [("192.0.2.7", "not an address of this host"),
                                       ("storage.example", "is a name")])
def test_an_address_it_cannot_bind_to_means_every_address_and_says_why(told, why):
    cert, key, token = job_identity(9)
    listener = dataplane.Listener(cert, key, token, bind=told)
    try:
        assert listener.address == "0.0.0.0"
        assert why in listener.note and told in listener.note
        sink = {"data": b""}
        t = serve(listener, sink)
        chan = dataplane.connect("127.0.0.1", listener.port, cert, token)
        chan.write(b"still works")
        chan.finish()
        t.join(10)
        assert sink["data"] == b"still works"
    finally:
        listener.close()


def test_the_oldest_waiting_connection_makes_room_for_a_new_one(monkeypatch):
    monkeypatch.setattr(dataplane, "MAX_PENDING", 4)
    cert, key, token = job_identity(10)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    sink = {"data": b""}
    t = serve(listener, sink)
    silent = [socket.create_connection(("127.0.0.1", listener.port)) for _ in range(12)]
    try:
        chan = dataplane.connect("127.0.0.1", listener.port, cert, token, timeout=5)
        chan.write(b"room for me")
        chan.finish()
        t.join(10)
        assert sink["data"] == b"room for me"
        # the first ones were dropped to make room, long before their deadline
        silent[0].settimeout(5)
        assert silent[0].recv(1) == b""
    finally:
        for s in silent:
            s.close()
        listener.close()


def test_a_cancel_ends_the_wait_among_waiting_connections():
    cert, key, token = job_identity(13)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    silent = socket.create_connection(("127.0.0.1", listener.port))
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    from app.errors import Canceled
    try:
        with pytest.raises(Canceled):
            listener.accept(stop.is_set, timeout=10)
    finally:
        silent.close()
        listener.close()


def trickling_server(stop):
    """A server that accepts and answers a TLS ClientHello one byte at a time (the start of
    a record it never finishes): each byte comes well within any per-read timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def run():
        conn, _ = srv.accept()
        record = b"\x16\x03\x03\x40\x00" + b"\x02" * 16384
        for b in record:
            if stop.wait(0.2):
                break
            try:
                conn.sendall(bytes([b]))
            except OSError:
                break
        conn.close()
        srv.close()
    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()[1]


def test_connect_gives_up_on_a_peer_that_trickles_within_its_timeout():
    cert, _, token = job_identity(14)
    stop = threading.Event()
    port = trickling_server(stop)
    box = {}

    def run():
        t0 = time.monotonic()
        try:
            dataplane.connect("127.0.0.1", port, cert, token, timeout=1.5)
        except DataPlaneError as e:
            box["error"] = e
        box["took"] = time.monotonic() - t0
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    stop.set()
    assert "took" in box, "connect() was still waiting after 10 s"
    assert box["took"] < 4 and "timed out" in str(box["error"])


def test_connect_gives_up_on_a_peer_that_never_answers():
    cert, _, token = job_identity(15)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)  # the kernel completes the TCP handshake; nobody ever speaks
    try:
        t0 = time.monotonic()
        with pytest.raises(DataPlaneError, match="timed out"):
            dataplane.connect("127.0.0.1", srv.getsockname()[1], cert, token, timeout=1)
        assert time.monotonic() - t0 < 3
    finally:
        srv.close()
