"""Connections to the hosts' agents: one per host, made on first use and reused until it
breaks. The local host is reached without SSH (the agent runs as a subprocess)."""

import threading
import time

from app.errors import HostKeyChanged, HostKeyUnknown
from app.transport.agent_client import AgentConnection

# How long closing waits for the agents to leave: a live one leaves at once (its stdin
# closed), one on a host that died waits out its grace times and a kill that cannot arrive.
CLOSE_WAIT = 5.0
# A host's last contact is handed to on_contact at most this often: a busy host's calls do
# not each write the catalog.
CONTACT_EVERY = 60.0


class HostPool:
    def __init__(self, home, password_provider=None):
        self.home = home
        self.password_provider = password_provider
        self._conns = {}
        self._transports = {}
        self._locks = {}
        self._lock = threading.Lock()
        # Connections made with an agent environment that has changed since: their running
        # calls finish on them, new calls get a connection with the new environment.
        self._retired = []
        # on_contact(host name, epoch seconds): called when the master has heard from a host
        # (the master records it as the host's last contact)
        self.on_contact = None
        self._noted = {}

    def _host_lock(self, name):
        with self._lock:
            return self._locks.setdefault(name, threading.Lock())

    def transport(self, host, trust_unknown_key=False):
        if host["kind"] == "local":
            # Each transport loads when a host of its kind is first reached, not with every
            # master: a command that reaches no host (or only this one) skips ssh.py.
            from app.transport.local import LocalTransport
            return LocalTransport(env=host.get("agent_env") or None)
        from app.transport.ssh import SSHTransport  # as LocalTransport above
        return SSHTransport(host["address"], port=host["port"] or 22, user=host["user"],
                            key_file=host["key_file"], known_hosts=self.home.known_hosts,
                            trust_unknown_key=trust_unknown_key,
                            password_provider=self.password_provider,
                            env=host.get("agent_env") or None)

    def connect(self, host, trust_unknown_key=False):
        """The live agent connection of a host (a dict from Config.host)."""
        conn = self._connect(host, trust_unknown_key)
        # outside the host's lock: a catalog busy with a long write holds no other call
        self._note_contact(host["name"], conn)
        return conn

    def _connect(self, host, trust_unknown_key):
        name = host["name"]
        with self._host_lock(name):
            env = host.get("agent_env") or {}
            conn = self._conns.get(name)
            if conn is not None and conn.alive and getattr(conn, "agent_env", {}) == env:
                return conn
            old = self._transports.pop(name, None)
            if conn is not None and conn.alive:
                self._retired.append((conn, old))
            else:
                if conn is not None:
                    conn.close()
                if old is not None:
                    old.close()
            transport = self.transport(host, trust_unknown_key)
            try:
                process = transport.start_agent()
                conn = AgentConnection(process, name)
            except (HostKeyUnknown, HostKeyChanged) as e:
                transport.close()
                # The host is registered: say how to trust it by its name.
                fix = (f"cairn host trust {name} --fingerprint {e.fingerprint}"
                       if isinstance(e, HostKeyUnknown) else
                       f"cairn host trust {name} --replace --fingerprint NEW_FINGERPRINT")
                e.hint = f"check the fingerprint with the host's administrator, then: {fix}"
                raise
            except BaseException:
                transport.close()
                raise
            conn.agent_env = env
            self._transports[name] = transport
            self._conns[name] = conn
            return conn

    def _note_contact(self, name, conn):
        heard = getattr(conn, "last_heard", None)
        if heard is None or self.on_contact is None:
            return
        with self._lock:
            if heard - self._noted.get(name, 0.0) < CONTACT_EVERY:
                return
            self._noted[name] = heard
        try:
            self.on_contact(name, heard)
        except Exception:  # noqa: BLE001 - a catalog busy with a long write must not fail the call
            pass

    def last_heard(self, name):
        """When the live connection to a host last heard from its agent, or None."""
        conn = self._conns.get(name)
        return getattr(conn, "last_heard", None) if conn is not None and conn.alive else None

    def sftp(self, host):
        """The SFTP session of an SSH host, on the connection its agent uses (the agent is
        started first, so the host key was checked as for any job); None for the local host,
        whose files the master reaches itself."""
        if host["kind"] == "local":
            return None
        self.connect(host)
        return self._transports[host["name"]].sftp()

    def data_address(self, storage_host, peer_host):
        """The address at which peer_host's agent reaches storage_host's data plane."""
        if storage_host.get("data_address"):
            return storage_host["data_address"]
        if storage_host["kind"] == "ssh":
            return storage_host["address"]
        # The storage server is this machine: use our address on the path to the peer.
        self.connect(peer_host)
        t = self._transports.get(peer_host["name"])
        addr = t.local_address() if t is not None else None
        return addr or "127.0.0.1"

    def close(self):
        with self._lock:
            pairs = [(c, self._transports.get(name)) for name, c in self._conns.items()]
            pairs += [(None, t) for name, t in self._transports.items()
                      if name not in self._conns]
            pairs += self._retired
            self._conns, self._transports, self._retired = {}, {}, []
        # Host by host, side by side: an agent on a host that died waits out its grace
        # times before its connection is given up, and one such host must not hold the
        # others' closing.
        closers = [threading.Thread(target=_close_pair, args=pair, daemon=True,
                                    name="close-host") for pair in pairs]
        for th in closers:
            th.start()
        deadline = time.monotonic() + CLOSE_WAIT
        for th in closers:
            # past that, a dead host's agent is given up; its thread ends on its own
            th.join(max(0.0, deadline - time.monotonic()))


def _close_pair(conn, transport):
    if conn is not None:
        conn.close()
    if transport is not None:
        transport.close()
