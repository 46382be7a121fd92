"""Hosts reached over SSH (paramiko): host key checking, authentication, installing the agent
bundle and starting it.

One SSH connection per host, opened on first use and shared by every agent session and file
transfer to that host: the handshake and authentication cost far more than a channel.
"""

from __future__ import annotations

import getpass
import logging
import os
import posixpath
import secrets
import shlex
import socket
import stat
import threading
import time
import weakref

import paramiko
from paramiko.common import cMSG_CHANNEL_REQUEST

from app.errors import (AgentError, AuthFailed, HostKeyChanged, HostKeyUnknown,
                        HostUnreachable, NoPython)
from app.liveness import DEAD_PEER_SECONDS, watch_peer
from app.transport import hostkeys
from app.transport.base import AgentProcess, StderrBuffer, Transport
from app.transport.bundle import agent_bundle

# paramiko logs failed handshakes with tracebacks; without a handler of its own they would
# land on the console's stderr through logging's last-resort handler.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_AGENT_DIR = ".cache/cairn"    # relative to the remote user's home directory
MIN_PYTHON = (3, 9)
# A keepalive every few seconds gives an idle connection outstanding data, so that a host
# that died is noticed within about DEAD_PEER_SECONDS (app/liveness.py).
KEEPALIVE = 10
KEYRING_SERVICE = "cairn"
# Older agent versions kept besides the current one: another master, or an agent still
# running from an older bundle, may need its file (zipimport reads it lazily).
KEEP_OLD_AGENTS = 2
STALE_UPLOAD = 3600                   # seconds after which a left-over temp upload is removed
EXIT_GRACE = 2.0
SIGNAL_GRACE = 1.0
PID_MARKER = b"cairn-agent-pid "

_DEFAULT_KEY_FILES = ("id_ed25519", "id_ecdsa", "id_rsa")
# known_hosts names RSA keys "ssh-rsa"; the handshake offers the SHA-2 signature algorithms.
_KEY_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256")}


def keyring_username(user, address, port=22) -> str:
    """The name under which a host password is kept in the OS keyring (service "cairn")."""
    return f"{user}@{address}:{port}"


def save_password(user, address, port, password) -> None:
    """Keeps a host password in the OS keyring, the only place a password may be kept."""
    import keyring
    keyring.set_password(KEYRING_SERVICE, keyring_username(user, address, port), password)


def _keyring_password(user, address, port):
    try:
        import keyring
        return keyring.get_password(KEYRING_SERVICE, keyring_username(user, address, port))
    except Exception:
        # No backend, a locked or absent Secret Service, a broken D-Bus: all mean "no
        # password stored", and the other ways to log in still apply.
        return None


class _ChannelStdin:
    """The agent's stdin: every write goes out at once, and nothing is left to do when it is
    garbage-collected. paramiko's channel file flushes its write buffer from __del__; after
    the agent died, or when the buffer was collected first (a reference cycle, the end of
    the process), that fails and prints "Exception ignored in BufferedFile.__del__" with a
    traceback on the terminal, long after the error was reported."""

    def __init__(self, channel: paramiko.Channel):
        self._channel = channel
        self.closed = False

    def write(self, data) -> int:
        if self.closed:
            raise ValueError("the agent's input is closed")
        self._channel.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._channel.shutdown_write()


class _ChannelReader(paramiko.ChannelFile):
    """The agent's stdout: paramiko's line reading, without the flush of a write buffer on
    close and in __del__ (see _ChannelStdin): a reader never writes."""

    def flush(self) -> None:
        pass


class SSHAgentProcess(AgentProcess):
    """An agent started by exec on an SSH channel.

    kill(pid, signal_name) ends the agent's process group on the host when it does not leave
    by itself; the RFC 4254 "signal" request alone is not enough, because OpenSSH ignores it
    for root logins."""

    def __init__(self, channel: paramiko.Channel, kill, start_timeout):
        self._channel = channel
        self._kill = kill
        self.pid = None
        self.stdin = _ChannelStdin(channel)
        self.stdout = _ChannelReader(channel, "rb")
        self._stderr = StderrBuffer()
        self._stderr.drain(channel.recv_stderr, name=f"agent-{channel.get_id()}-stderr")
        self._read_pid(start_timeout)

    def _read_pid(self, timeout):
        # Shell start-up files may print to stdout before the agent runs; everything up to
        # the marker line is theirs and never reaches the protocol.
        self._channel.settimeout(timeout)
        try:
            for _ in range(1000):
                line = self.stdout.readline()
                if not line:
                    break
                if line.startswith(PID_MARKER):
                    self.pid = int(line[len(PID_MARKER):])
                    return
        except (socket.timeout, ValueError, OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            self._channel.settimeout(None)
        self.close()
        raise AgentError("the agent did not start: " + (self.stderr_text().strip()[-2000:]
                                                        or "no output"))

    def stderr_text(self) -> str:
        if self._channel.exit_status_ready():
            self._stderr.wait_closed(0.5)
        return self._stderr.text()

    def is_alive(self) -> bool:
        ch = self._channel
        return not ch.exit_status_ready() and ch.get_transport() is not None \
            and ch.get_transport().is_active()

    def connection_lost(self):
        ch = self._channel
        t = ch.get_transport()
        # paramiko marks a channel of a dead connection ended, with no exit status (-1).
        if ch.exit_status != -1 or t is None or t.is_active():
            return None
        e = getattr(t, "saved_exception", None)
        if isinstance(e, (TimeoutError, socket.timeout)):
            return f"no answer from it for about {DEAD_PEER_SECONDS} s"
        if isinstance(e, EOFError):
            return "the host stopped answering or closed the connection"
        return _reason(e) if e is not None else "the SSH connection was closed"

    def exit_status(self):
        ch = self._channel
        if not ch.status_event.is_set():
            return None
        return ch.exit_status

    def close(self) -> None:
        ch = self._channel
        try:
            self.stdin.close()
        except (OSError, EOFError, paramiko.SSHException):
            pass
        if not ch.status_event.wait(EXIT_GRACE):
            for sig in ("TERM", "KILL"):
                reached = self._signal(sig)
                # a host that did not let the first kill through will not let the second
                if ch.status_event.wait(SIGNAL_GRACE) or not reached:
                    break
        ch.close()

    def _signal(self, name):
        """Sends the signal; False when the host could not be reached to deliver it."""
        ch = self._channel
        if ch.closed or ch.get_transport() is None or not ch.get_transport().is_active():
            return False
        # RFC 4254 6.9; paramiko has no call for it.
        m = paramiko.Message()
        m.add_byte(cMSG_CHANNEL_REQUEST)
        m.add_int(ch.remote_chanid)
        m.add_string("signal")
        m.add_boolean(False)
        m.add_string(name)
        try:
            ch.get_transport()._send_user_message(m)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        if self.pid is not None and not ch.status_event.wait(0.2):
            return self._kill(self.pid, name) is not False
        return True


class SSHTransport(Transport):
    """A host reached over SSH.

    known_hosts: the master's known_hosts file (CAIRN_HOME/known_hosts); it need not exist.
    trust_unknown_key: accept and save a key never seen for this host; a changed key is
        refused all the same.
    password_provider: callable(prompt) -> str or None, asked for a key's passphrase or the
        login password when the keyring has none.
    python: the interpreter command that runs the agent on the host.
    agent_dir: where the agent bundle is kept on the host (relative to its home directory).
    bundle: (bytes, version) to install instead of the real agent; for tests.
    env: variables set in the agent's environment (the host's agent_env).
    """

    def __init__(self, address, port=22, user=None, key_file=None, known_hosts=None,
                 trust_unknown_key=False, password_provider=None, connect_timeout=10.0, *,
                 python="python3", agent_dir=DEFAULT_AGENT_DIR, bundle=None, env=None):
        if known_hosts is None:
            raise ValueError("SSHTransport needs the known_hosts file to check host keys")
        self.address = address
        self.port = int(port)
        self.user = user or getpass.getuser()
        self.key_file = os.path.expanduser(str(key_file)) if key_file else None
        self.known_hosts = os.fspath(known_hosts)
        self.trust_unknown_key = trust_unknown_key
        self.password_provider = password_provider
        self.connect_timeout = connect_timeout
        self.python = python
        self.agent_dir = agent_dir
        self._bundle = bundle
        self.env = dict(env or {})
        self._lock = threading.RLock()
        self._t: paramiko.Transport | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._python_checked = False
        self._agents = weakref.WeakSet()

    def __repr__(self):
        return f"<SSHTransport {self.user}@{self.address}:{self.port}>"

    # -- the connection ------------------------------------------------------------------

    @property
    def where(self):
        return f"{self.address}:{self.port}"

    def connect(self) -> paramiko.Transport:
        """The SSH connection, opened (host key checked, logged in) if it is not open yet."""
        with self._lock:
            if self._t is not None and self._t.is_active():
                return self._t
            self._drop_connection()
            sock = self._open_socket()
            t = paramiko.Transport(sock)
            try:
                self._handshake(t)
                self._authenticate(t)
            except BaseException:
                t.close()
                raise
            t.set_keepalive(KEEPALIVE)
            self._t = t
            return t

    def _open_socket(self):
        try:
            infos = socket.getaddrinfo(self.address, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise HostUnreachable(
                f"cannot reach {self.where}: the name {self.address!r} cannot be resolved "
                f"({e.strerror})", hint="check the host's address and the DNS") from None
        reasons = []
        for family, type_, proto, _, sockaddr in infos:
            sock = socket.socket(family, type_, proto)
            sock.settimeout(self.connect_timeout)
            try:
                sock.connect(sockaddr)
            except socket.timeout:
                reasons.append(f"no answer within {self.connect_timeout:g} s")
            except ConnectionRefusedError:
                reasons.append("connection refused")
            except OSError as e:
                reasons.append(e.strerror or str(e))
            else:
                watch_peer(sock)
                return sock
            sock.close()
        reason = "; ".join(dict.fromkeys(reasons)) or "no address found"
        hint = ("check that sshd runs on the host and listens on port "
                f"{self.port}" if "connection refused" in reasons
                else "check the address, the network and any firewall on the way")
        raise HostUnreachable(f"cannot reach {self.where}: {reason}", hint=hint)

    def _handshake(self, t):
        t.banner_timeout = self.connect_timeout
        t.handshake_timeout = self.connect_timeout
        t.auth_timeout = max(self.connect_timeout, 30.0)
        known = hostkeys.find(self.known_hosts, self.address, self.port)
        self._prefer_known_key_types(t, known)
        done = threading.Event()
        hint = f"check that port {self.port} of the host is its SSH server"
        try:
            t.start_client(event=done)
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise HostUnreachable(
                f"cannot reach {self.where}: the SSH handshake failed ({_reason(e)})",
                hint=hint) from None
        # The banner and the key exchange each get the connect timeout.
        done.wait(2 * self.connect_timeout)
        if not t.is_active():
            e = t.get_exception()
            reason = _reason(e) if e is not None else "the server closed the connection"
            raise HostUnreachable(
                f"cannot reach {self.where}: the SSH handshake failed ({reason})", hint=hint)
        if not done.is_set():
            raise HostUnreachable(
                f"cannot reach {self.where}: the SSH handshake did not finish within "
                f"{2 * self.connect_timeout:g} s", hint=hint)
        self._check_host_key(t.get_remote_server_key(), known)

    def _prefer_known_key_types(self, t, known):
        # Without this the server could present another of its keys than the one trusted
        # and the connection would be refused although nothing changed.
        wanted = []
        for entry in known:
            for alg in _KEY_ALGORITHMS.get(entry.key_type, (entry.key_type,)):
                if alg not in wanted:
                    wanted.append(alg)
        opts = t.get_security_options()
        rest = [alg for alg in opts.key_types if alg not in wanted]
        supported = [alg for alg in wanted if alg in opts.key_types]
        if supported:
            opts.key_types = supported + rest

    def _check_host_key(self, key, known):
        fp = hostkeys.fingerprint(key)
        if any(e.key is not None and e.key.asbytes() == key.asbytes() for e in known):
            return
        if known:
            # Any trusted key of this host that the server does not show counts as a change:
            # the key types it trusts were preferred in the handshake, so a server that still
            # had one of them would have presented it.
            lines = ", ".join(f"line {e.lineno}" for e in known)
            old = ", ".join(f"{e.key_type} {hostkeys.fingerprint(e.key) if e.key else '?'}"
                            for e in known)
            err = HostKeyChanged(
                f"the host key of {self.where} has CHANGED: it is now {key.get_name()} {fp}, "
                f"trusted was {old}. Someone may be intercepting the connection, or the "
                f"host was reinstalled; not connecting",
                hint=f"if the change is expected, remove the old key ({lines} of "
                     f"{self.known_hosts}, or run: ssh-keygen -R "
                     f"{shlex.quote(hostkeys.host_pattern(self.address, self.port))} -f "
                     f"{shlex.quote(self.known_hosts)}) and trust the new key after checking "
                     f"its fingerprint")
            err.fingerprint, err.key_type = fp, key.get_name()
            err.old_fingerprints = [hostkeys.fingerprint(e.key) for e in known if e.key]
            err.known_hosts, err.lines = self.known_hosts, [e.lineno for e in known]
            raise err
        if self.trust_unknown_key:
            try:
                hostkeys.add(self.known_hosts, self.address, self.port, key)
            except OSError as e:
                raise AgentError(f"cannot save the host key of {self.where} in "
                                 f"{self.known_hosts}: {e.strerror}") from None
            return
        err = HostKeyUnknown(
            f"host key of {self.where} is not trusted ({key.get_name()} {fp})",
            fingerprint=fp, key_type=key.get_name(),
            hint="check the fingerprint with the host's administrator (ssh-keygen -lf "
                 "/etc/ssh/ssh_host_*_key.pub on the host), then trust it: cairn host add "
                 f"NAME --address {self.address}"
                 + (f" --port {self.port}" if self.port != 22 else "")
                 + " --trust-host-key")
        # What the console needs to trust exactly the key it showed, not whatever key a
        # second connection might bring.
        err.pkey, err.address, err.port = key, self.address, self.port
        raise err

    # -- authentication ------------------------------------------------------------------

    def _authenticate(self, t):
        user = self.user
        tried = []
        try:
            t.auth_none(user)
            if t.is_authenticated():
                return
            allowed = None
        except paramiko.BadAuthenticationType as e:
            allowed = list(e.allowed_types)
        except paramiko.AuthenticationException:
            allowed = None
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise HostUnreachable(f"the connection to {self.where} broke during login "
                                  f"({_reason(e)})") from None

        def may(method):
            return allowed is None or method in allowed

        if may("publickey"):
            offered = False
            for desc, key in self._keys(tried):
                offered = True
                tried.append(f"publickey ({desc})")
                try:
                    remaining = t.auth_publickey(user, key)
                except paramiko.BadAuthenticationType as e:
                    allowed = list(e.allowed_types)
                    break
                except paramiko.AuthenticationException:
                    continue
                except paramiko.SSHException as e:
                    if not t.is_active():
                        raise HostUnreachable(f"the connection to {self.where} broke during "
                                              f"login ({_reason(e)})") from None
                    continue
                if t.is_authenticated():
                    return
                allowed = list(remaining)   # the server wants a second factor
                break
            if not offered and not self.key_file:
                tried.append("publickey (no key found: no ssh-agent keys, no ~/.ssh/"
                             + ", ~/.ssh/".join(_DEFAULT_KEY_FILES) + ")")
        elif not tried:
            tried.append("publickey (not offered: the server does not accept it)")

        if may("password") or may("keyboard-interactive"):
            password = _keyring_password(user, self.address, self.port)
            source = "password from the keyring"
            if password is None and self.password_provider is not None:
                password = self.password_provider(f"Password for {user}@{self.where}: ")
                source = "password"
            if password is None:
                tried.append("password (none in the keyring, none given)")
            else:
                tried.append(source)
                try:
                    t.auth_password(user, password)
                except paramiko.AuthenticationException:
                    pass
                except paramiko.SSHException as e:
                    if not t.is_active():
                        raise HostUnreachable(f"the connection to {self.where} broke during "
                                              f"login ({_reason(e)})") from None
                if t.is_authenticated():
                    return

        accepts = ", ".join(allowed) if allowed else "unknown"
        raise AuthFailed(
            f"{user}@{self.where} refused the login (tried: {'; '.join(tried) or 'nothing'}; "
            f"the server accepts: {accepts})",
            hint="check the user name and that the host's ~/.ssh/authorized_keys holds the "
                 "public key, or give the right key file (--key FILE)")

    def _keys(self, tried):
        """(description, private key) in the order OpenSSH would offer them."""
        if self.key_file:
            yield self.key_file, self._load_key(self.key_file, required=True)
            return
        try:
            agent = paramiko.Agent()
        except (paramiko.SSHException, OSError):
            agent = None
        if agent is not None:
            try:
                for key in agent.get_keys():
                    yield f"ssh-agent {key.get_name()} {hostkeys.fingerprint(key)}", key
            finally:
                agent.close()
        home = os.path.expanduser("~/.ssh")
        for name in _DEFAULT_KEY_FILES:
            path = os.path.join(home, name)
            if os.path.exists(path):
                key = self._load_key(path, required=False)
                if key is not None:
                    yield path, key
                else:
                    tried.append(f"publickey ({path}: unusable, skipped)")

    def _load_key(self, path, required):
        """A private key file; for a key the user did not name, None where it cannot be used."""
        def fail(reason):
            if required:
                raise AuthFailed(f"cannot use the key file {path} for {self.user}@{self.where}: "
                                 f"{reason}", hint="give a readable private key (--key FILE)")
            return None

        try:
            return paramiko.PKey.from_path(path, None)
        except (TypeError, paramiko.PasswordRequiredException):
            pass                        # encrypted: needs its passphrase
        except OSError as e:
            return fail(e.strerror or str(e))
        except (ValueError, paramiko.SSHException) as e:
            return fail(f"not a private key paramiko can read ({e})")
        if self.password_provider is None:
            return fail("the key is protected by a passphrase, and none can be asked for")
        passphrase = self.password_provider(f"Passphrase for key {path}: ")
        if not passphrase:
            return fail("the key is protected by a passphrase, and none was given")
        try:
            return paramiko.PKey.from_path(path, passphrase.encode())
        except (TypeError, ValueError, paramiko.SSHException):
            return fail("wrong passphrase")

    # -- commands, files, the agent ------------------------------------------------------

    def sftp(self) -> paramiko.SFTPClient:
        """The SFTP session on the shared connection."""
        with self._lock:
            t = self.connect()
            if self._sftp is None or self._sftp.get_channel().get_transport() is not t \
                    or self._sftp.get_channel().closed:
                try:
                    self._sftp = paramiko.SFTPClient.from_transport(t)
                except (paramiko.SSHException, EOFError, OSError) as e:
                    raise AgentError(f"cannot open an SFTP session on {self.where}: "
                                     f"{_reason(e)}",
                                     hint="the host's sshd needs the sftp subsystem") from None
            return self._sftp

    def run(self, command: str, timeout: float = 30.0) -> tuple[int, bytes, bytes]:
        """Runs a short shell command on the host: (exit status, stdout, stderr)."""
        t = self.connect()
        try:
            ch = t.open_session(timeout=self.connect_timeout)
            ch.settimeout(timeout)
            ch.exec_command(command)
            out = ch.makefile("rb").read()
            err = ch.makefile_stderr("rb").read()
            status = ch.recv_exit_status()
            ch.close()
        except socket.timeout:
            raise AgentError(f"{command!r} on {self.where} did not finish within "
                             f"{timeout:g} s") from None
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise AgentError(f"cannot run {command!r} on {self.where}: {_reason(e)}") from None
        return status, out, err

    def check_python(self) -> str:
        """The host's python version ("3.11.2"); NoPython if it has none that can run the agent."""
        script = 'import sys; print("cairn-python %d.%d.%d" % sys.version_info[:3])'
        status, out, err = self.run(f"{shlex.quote(self.python)} -c {shlex.quote(script)}")
        found = [line.split()[1] for line in out.decode(errors="replace").splitlines()
                 if line.startswith("cairn-python ")]
        errtext = err.decode(errors="replace").strip()
        how = "install python3 (3.9 or newer) on the host, e.g. apt install python3 or " \
              "dnf install python3"
        if not found:
            if status in (126, 127) or "not found" in errtext:
                raise NoPython(f"{self.where} has no {self.python}: the command was not found "
                               f"for {self.user}", hint=how)
            raise NoPython(f"{self.python} on {self.where} does not work (exit status "
                           f"{status}): {errtext[-2000:]}", hint=how)
        version = found[0]
        if tuple(int(x) for x in version.split(".")[:2]) < MIN_PYTHON:
            raise NoPython(f"{self.python} on {self.where} is version {version}; the agent "
                           f"needs 3.9 or newer", hint=how)
        return version

    def install_agent(self) -> str:
        """Puts the agent bundle on the host unless the right one is there; its remote path."""
        data, version = self._bundle if self._bundle is not None else agent_bundle()
        with self._lock:
            sftp = self.sftp()
            try:
                directory = self._make_dirs(sftp, self.agent_dir)
                path = posixpath.join(directory, f"agent-{version}.pyz")
                try:
                    st = sftp.lstat(path)
                    current = st.st_size
                except FileNotFoundError:
                    st = current = None
                if st is not None and stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
                    sftp.chmod(path, 0o600)  # in the private folder: no link can be swapped in
                if current != len(data):
                    self._upload(sftp, directory, path, data)
                    self._remove_old(sftp, directory, path)
            except (OSError, paramiko.SSHException, EOFError) as e:
                raise AgentError(f"cannot install the agent in {self.agent_dir} on "
                                 f"{self.where}: {_reason(e)}",
                                 hint="the remote user needs a writable home directory "
                                      "with some free space") from None
            return path

    @staticmethod
    def _make_dirs(sftp, directory):
        parts = [p for p in directory.split("/") if p]
        current = "/" if directory.startswith("/") else ""
        for part in parts:
            current = posixpath.join(current, part) if current else part
            try:
                if not stat.S_ISDIR(sftp.stat(current).st_mode):
                    raise NotADirectoryError(20, "not a directory", current)
            except FileNotFoundError:
                sftp.mkdir(current, 0o700)
                # the server applies its umask (sshd's may be 0): exactly 0700
                sftp.chmod(current, 0o700)
        # The agent's own folder is private (an older Cairn made it 0755): what runs as the
        # remote user must not be readable or replaceable by others. Changed only when it is a
        # real folder, never through a link the user made in its place.
        own = sftp.lstat(current)
        if stat.S_ISDIR(own.st_mode) and own.st_mode & 0o077:
            sftp.chmod(current, stat.S_IMODE(own.st_mode) & ~0o077)
        # An absolute path, so that the exec does not depend on the login shell's directory.
        return sftp.normalize(current)

    @staticmethod
    def _upload(sftp, directory, path, data):
        tmp = posixpath.join(directory, f".{posixpath.basename(path)}.{secrets.token_hex(6)}.tmp")
        try:
            with sftp.open(tmp, "wb") as f:
                f.chmod(0o600)
                f.set_pipelined(True)
                f.write(data)
            if sftp.stat(tmp).st_size != len(data):
                raise OSError(5, "the uploaded file is incomplete", tmp)
            try:
                sftp.posix_rename(tmp, path)
            except OSError:
                # Servers without the posix-rename extension cannot rename onto a file.
                try:
                    sftp.remove(path)
                except FileNotFoundError:
                    pass
                sftp.rename(tmp, path)
        except BaseException:
            try:
                sftp.remove(tmp)
            except Exception:
                pass
            raise

    @staticmethod
    def _remove_old(sftp, directory, current):
        try:
            entries = sftp.listdir_attr(directory)
        except OSError:
            return
        now = time.time()
        agents = sorted((e for e in entries if e.filename.startswith("agent-")
                         and e.filename.endswith(".pyz")
                         and posixpath.join(directory, e.filename) != current),
                        key=lambda e: e.st_mtime or 0, reverse=True)
        # An agent uploaded within the hour may be about to start for another master (of
        # another version) that manages this host too.
        doomed = [e for e in agents[KEEP_OLD_AGENTS:]
                  if now - (e.st_mtime or 0) > STALE_UPLOAD]
        doomed += [e for e in entries if e.filename.startswith(".agent-")
                   and e.filename.endswith(".tmp") and now - (e.st_mtime or 0) > STALE_UPLOAD]
        for e in doomed:
            try:
                sftp.remove(posixpath.join(directory, e.filename))
            except OSError:
                pass

    def start_agent(self) -> SSHAgentProcess:
        with self._lock:
            t = self.connect()
            if not self._python_checked:
                self.check_python()
                self._python_checked = True
            path = self.install_agent()
        # /bin/sh whatever the login shell is, for a known syntax; exec keeps one pid from
        # the shell to the agent, so the pid it prints is the agent's and its process group.
        # Variables go through `export` in the script: sshd's AcceptEnv is rarely open.
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted(self.env.items()))
        script = f'{exports}echo "{PID_MARKER.decode()}$$"; exec "$0" "$1"'
        command = (f"exec /bin/sh -c {shlex.quote(script)} {shlex.quote(self.python)} "
                   f"{shlex.quote(path)}")
        try:
            ch = t.open_session(timeout=self.connect_timeout)
            ch.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise AgentError(f"cannot start the agent on {self.where}: {_reason(e)}") from None
        try:
            agent = SSHAgentProcess(ch, self._kill_remote, self.connect_timeout)
        except AgentError as e:
            e.message = f"on {self.where}, {e.message}"
            raise
        self._agents.add(agent)
        return agent

    def _kill_remote(self, pid, signal_name):
        script = ("import os, signal, sys\n"
                  "pid, sig = int(sys.argv[1]), getattr(signal, 'SIG' + sys.argv[2])\n"
                  "try:\n    os.killpg(pid, sig)\nexcept OSError:\n    os.kill(pid, sig)\n")
        try:
            self.run(f"{shlex.quote(self.python)} -c {shlex.quote(script)} {int(pid)} "
                     f"{shlex.quote(signal_name)}", timeout=10)
        except AgentError:
            return False                # the connection is gone: nothing more can be done
        return True

    # -- addresses, closing --------------------------------------------------------------

    def local_address(self) -> str:
        return self.connect().sock.getsockname()[0]

    def peer_address(self) -> str:
        return self.connect().sock.getpeername()[0]

    def close(self) -> None:
        with self._lock:
            for agent in list(self._agents):
                if agent.is_alive():
                    agent.close()
            self._drop_connection()

    def _drop_connection(self):
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:
                pass
            self._sftp = None
        if self._t is not None:
            self._t.close()
            self._t = None


def _reason(e):
    if isinstance(e, socket.timeout):
        return "timed out"
    if isinstance(e, EOFError):
        return "the connection was closed by the other side"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__
