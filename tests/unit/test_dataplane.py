import os
import socket
import ssl
import threading

import pytest

from app.agent import dataplane
from app.agent.errors import DataPlaneFailure
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
    with pytest.raises(DataPlaneFailure):
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
    with pytest.raises(DataPlaneFailure, match="TLS"):
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
    assert isinstance(sink.get("error"), DataPlaneFailure)


def test_nobody_connects_times_out_with_clear_message():
    cert, key, token = job_identity(7)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    with pytest.raises(DataPlaneFailure, match="no data connection arrived"):
        listener.accept(lambda: False, timeout=1)
    listener.close()
