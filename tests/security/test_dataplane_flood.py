"""An ordinary local user floods the data-plane port of a running job with silent and garbage
connections (tests/security/flooder.py, run as that user). The listener must take the real
peer at once, drop the others by their deadline, and the jobs must end 0: backups into an
advanced-disk and a deduplication pool and a restore, between a host reached over SSH and
this one."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from app import status
from app.agent import dataplane
from app.jobs.tlscert import job_identity
from app.master import Master
from treegen import assert_trees_equal, make_tree

USER = "cairnwire"
FLOODER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flooder.py")
IDLE = GARBAGE = 50


@pytest.fixture(scope="module")
def attacker():
    """An ordinary user, made for these tests and removed after them."""
    if os.geteuid() != 0:
        pytest.fail("the flood tests create a local user and need root", pytrace=False)
    home = tempfile.mkdtemp(prefix="cairnwire-")
    subprocess.run(["userdel", USER], capture_output=True)
    subprocess.run(["useradd", "-d", home, "-s", "/bin/sh", USER], check=True)
    yield USER
    subprocess.run(["userdel", USER], capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


class Flooder:
    """flooder.py running as the attacker, driven line by line."""

    def __init__(self, user, seed=5):
        with open(FLOODER) as f:
            source = f.read()
        self.proc = subprocess.Popen(
            ["runuser", "-u", user, "--", "/usr/bin/python3", "-I", "-c", source, str(seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
        self._lock = threading.Lock()

    def ask(self, line):
        with self._lock:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline()
        assert answer, f"the flooder ended (exit {self.proc.poll()})"
        return answer.strip()

    def flood(self, port, idle=IDLE, garbage=GARBAGE):
        return int(self.ask(f"flood {port} {idle} {garbage}").split()[1])

    def status(self):
        return json.loads(self.ask("status"))

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def flooder(attacker):
    f = Flooder(attacker)
    yield f
    f.close()


def serve_one(listener, timeout=60):
    """Accepts in a thread; box gets the channel's data, the time accept() returned, or the
    error."""
    box = {}

    def run():
        try:
            chan = listener.accept(lambda: False, timeout=timeout)
            box["accepted"] = time.monotonic()
            box["data"] = chan.read()
            chan.ack(True)
            chan.close()
        except Exception as e:  # noqa: BLE001 - the test reads it
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_the_real_peer_is_accepted_at_once_during_a_flood(flooder):
    cert, key, token = job_identity(11)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    t, box = serve_one(listener)
    try:
        assert flooder.flood(listener.port) == IDLE + GARBAGE
        # Every silent connection and half handshake is still waiting when the real peer
        # comes: it must not queue behind them.
        t0 = time.monotonic()
        chan = dataplane.connect("127.0.0.1", listener.port, cert, token, timeout=5)
        connected = time.monotonic() - t0
        chan.write(b"the real data")
        chan.finish()
        chan.close()
        t.join(10)
    finally:
        listener.close()
    assert "error" not in box, box
    assert box["data"] == b"the real data"
    assert connected < 2.0, f"the real peer waited {connected:.1f} s behind the flood"
    assert box["accepted"] - t0 < 2.0
    assert flooder.status()["ok"] == 0, "a made-up token was accepted"


def test_unauthenticated_connections_are_dropped_by_their_deadline(flooder, monkeypatch):
    # (raising=False: the test must also run, and fail, where the listener has no deadline)
    monkeypatch.setattr(dataplane, "HANDSHAKE_TIMEOUT", 1.0, raising=False)
    cert, key, token = job_identity(12)
    listener = dataplane.Listener(cert, key, token, bind="127.0.0.1")
    t, box = serve_one(listener, timeout=30)
    try:
        flooder.flood(listener.port)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            held = flooder.status()
            if held["open"] == 0:
                break
            time.sleep(0.2)
        assert held["open"] == 0, f"connections still held past their deadline: {held}"
        assert held["closed"] == IDLE + GARBAGE
        # the listener is still waiting for its peer, which then gets in
        chan = dataplane.connect("127.0.0.1", listener.port, cert, token, timeout=5)
        chan.write(b"late but fine")
        chan.finish()
        chan.close()
        t.join(10)
    finally:
        listener.close()
    assert box.get("data") == b"late but fine", box


# ---- whole jobs between two hosts -------------------------------------------------------------

def listening_ports(pid):
    """{port: address} of the TCP sockets process `pid` listens on (as root reads them from
    /proc); IPv4 addresses only, others as None."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    address, port = fields[1].split(":")
                    ports[int(port, 16)] = (socket.inet_ntoa(bytes.fromhex(address)[::-1])
                                            if len(address) == 8 else None)
    return ports


class PortWatch:
    """Floods each port the storage agent opens, as soon as it is open: the attacker's
    connections come before the real client's."""

    def __init__(self, pid, flooder):
        self.pid = pid
        self.flooder = flooder
        self.flooded = {}
        self.bound = {}
        self._stop = threading.Event()
        self._seen = set(listening_ports(pid))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            for port, address in listening_ports(self.pid).items():
                if port in self._seen:
                    continue
                self._seen.add(port)
                self.bound[port] = address
                self.flooded[port] = self.flooder.flood(port)
            time.sleep(0.002)

    def stop(self):
        self._stop.set()
        self._thread.join(30)


def add_ssh_host(m, name, server):
    m.add_host(name, address=server.host, port=server.port, user=server.user,
               key_file=server.key_file, trust_host_key=True)


def run_job(m, jid, watch, what):
    t0 = time.monotonic()
    [job] = m.wait_for([jid], timeout=600)
    took = time.monotonic() - t0
    log = "\n".join(x["message"] for x in m.jobs.logs(jid))
    assert job["status"] == status.OK, (what, job["status"], log)
    assert watch.flooded, f"{what}: no data-plane port was seen to flood"
    # The flood cost the job no handshake deadline (10 s), let alone 30 s per connection.
    assert took < 10, f"{what} took {took:.1f} s under the flood"
    return job


@pytest.mark.ssh
def test_backups_and_a_restore_across_two_hosts_end_0_during_a_flood(tmp_path, sshd,
                                                                    flooder):
    src, vol, pool = (str(tmp_path / n) for n in ("src", "vol", "pool"))
    os.mkdir(vol)
    make_tree(src)
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        add_ssh_host(m, "client1", sshd)
        m.config.add_storage_server("ss1", type="advanced-disk", host="me")
        m.create_disk_pool("dp1", server="ss1", volumes=[vol])
        m.config.add_storage_unit("stu1", pool="dp1")
        m.create_storage_server("dd", type="dedup", host="me", path=pool)
        m.create_disk_pool("ddp", server="dd", volumes=[])
        m.config.add_storage_unit("dstu", pool="ddp")
        for policy, unit, extra in (("p1", "stu1", {}), ("dp", "dstu", {"dedup": "server"})):
            m.config.add_policy(policy, storage_unit=unit, **extra)
            m.config.add_schedule(policy, "full", type="full", retention="2w")
            m.config.add_policy_client(policy, "client1")
            m.config.add_policy_selection(policy, src)
        # Both agents up before the clock starts: the flood, not an SSH login, is measured.
        storage = m.hosts.connect(m.config.host("me"))
        m.hosts.connect(m.config.host("client1")).call("ping", timeout=60)
        watch = PortWatch(storage.info["pid"], flooder)
        try:
            [jid] = m.start_backup("p1")
            job = run_job(m, jid, watch, "backup into the advanced-disk pool")
            [jid] = m.start_backup("dp")
            run_job(m, jid, watch, "backup into the deduplication pool")
            dst = str(tmp_path / "dst")
            jid = m.start_restore(job["image_id"], [src], dst, to_host="client1")
            run_job(m, jid, watch, "restore to the other host")
        finally:
            watch.stop()
        assert len(watch.flooded) == 3, watch.flooded
        assert all(n == IDLE + GARBAGE for n in watch.flooded.values()), watch.flooded
        # the client was told 127.0.0.1 (the SSH connection's own address): nothing else
        # offers the port
        assert set(watch.bound.values()) == {"127.0.0.1"}, watch.bound
        assert_trees_equal(src, dst + src)
        assert flooder.status()["ok"] == 0, "a made-up token was accepted"
    finally:
        m.close()
