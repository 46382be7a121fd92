"""A real OpenSSH server on the loopback interface for the integration tests.

It runs the distribution's /usr/sbin/sshd with a configuration, host key and authorized key of
its own in a temporary directory, so the tests exercise the same server the product meets in
the field without touching the machine's SSH setup."""

from __future__ import annotations

import getpass
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SFTP_SERVER_CANDIDATES = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                          "/usr/libexec/sftp-server")
MISSING_MESSAGE = (f"OpenSSH's server ({SSHD}) is not installed, and the SSH integration tests "
                   "need it: run scripts/test.sh, which installs openssh-server")


class SSHDMissing(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path, key_type="ed25519", passphrase="", comment="cairn-test"):
    args = ["ssh-keygen", "-q", "-t", key_type, "-N", passphrase, "-C", comment, "-f", str(path)]
    if key_type == "rsa":
        args[4:4] = ["-b", "2048"]
    subprocess.run(args, check=True, stdin=subprocess.DEVNULL, capture_output=True)
    return Path(path)


def fingerprint_of(pub_path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub_path)], check=True,
                         capture_output=True, text=True).stdout
    return out.split()[1]


class SSHServer:
    """host, port, user, key_file (the user's private key), host_key_fingerprint,
    host_public_key_line ("ssh-ed25519 AAAA..."), workdir, log_file."""

    host = "127.0.0.1"

    def __init__(self, workdir=None):
        if not os.path.exists(SSHD):
            raise SSHDMissing(MISSING_MESSAGE)
        sftp = next((p for p in SFTP_SERVER_CANDIDATES if os.path.exists(p)), None)
        if sftp is None:
            raise SSHDMissing(MISSING_MESSAGE + " (no sftp-server found)")
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="cairn-sshd-"))
        self.user = getpass.getuser()
        self.port = None
        self.proc = None
        self._sftp_server = sftp
        self.host_key = keygen(self.workdir / "ssh_host_ed25519_key", comment="cairn-test-host")
        self.host_public_key_line = " ".join(
            (self.workdir / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        self.host_key_fingerprint = fingerprint_of(self.workdir / "ssh_host_ed25519_key.pub")
        self.key_file = str(keygen(self.workdir / "id_ed25519"))
        self.authorized_keys = self.workdir / "authorized_keys"
        shutil.copyfile(self.key_file + ".pub", self.authorized_keys)
        self.log_file = self.workdir / "sshd.log"

    def _config(self):
        w = self.workdir
        return "\n".join([
            f"Port {self.port}",
            f"ListenAddress {self.host}",
            f"HostKey {w / 'ssh_host_ed25519_key'}",
            f"PidFile {w / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "StrictModes no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            # Tests open many sessions over one connection and many connections in a row.
            "MaxSessions 64",
            "MaxStartups 64",
            "LogLevel INFO",
            f"Subsystem sftp {self._sftp_server}",
            "",
        ])

    def start(self, timeout=15.0):
        if os.geteuid() == 0:
            # sshd refuses to start as root without its privilege separation directory.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        last_error = None
        for _ in range(3):  # the free port may be taken between probing and binding
            self.port = self._pick_port()
            config = self.workdir / "sshd_config"
            config.write_text(self._config())
            log = open(self.log_file, "ab")
            self.proc = subprocess.Popen(self._command(config),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            log.close()
            try:
                self._wait_ready(timeout)
                return self
            except RuntimeError as e:
                last_error = e
                self.stop()
        raise last_error

    def _pick_port(self):
        return free_port()

    def _command(self, config):
        return [SSHD, "-D", "-e", "-f", str(config)]

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with status {self.proc.returncode}:\n"
                                   + self.log_text()[-4000:])
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as s:
                    s.settimeout(2)
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"sshd did not answer on port {self.port} within {timeout} s:\n"
                           + self.log_text()[-4000:])

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def accepted_logins(self) -> int:
        """How many SSH connections have logged in so far (sshd logs one line each)."""
        return len(re.findall(r"^Accepted \w+ for ", self.log_text(), re.M))

    def known_hosts_line(self, host=None) -> str:
        host = host or self.host
        return f"[{host}]:{self.port} {self.host_public_key_line}\n"


class ServerView:
    """The same server under another name, as a second host would look."""

    def __init__(self, server: SSHServer, host: str):
        self._server = server
        self.host = host

    def __getattr__(self, name):
        return getattr(self._server, name)

    def known_hosts_line(self, host=None):
        return self._server.known_hosts_line(host or self.host)
