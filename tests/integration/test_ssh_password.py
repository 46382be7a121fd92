"""Password logins: the password comes from the OS keyring or from a prompt, and is never
written anywhere by Cairn. A second loopback sshd allows passwords for a throwaway user that
the fixture creates and removes."""

import os
import secrets
import shutil
import subprocess
import tempfile

import pytest

from app.errors import AuthFailed
from app.transport import ssh as ssh_transport
from app.transport.agent_client import AgentConnection
from sshd import SSHServer

USER = "cairn-pwtest"


class PasswordSSHServer(SSHServer):
    def _config(self):
        return (super()._config().replace("PasswordAuthentication no",
                                          "PasswordAuthentication yes")
                + f"AllowUsers {USER}\n")


@pytest.fixture(scope="module")
def password_host(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("the password test creates a local user and needs root", pytrace=False)
    # pytest's own temporary directories are root's alone: the user's home goes beside them
    home = tempfile.mkdtemp(prefix="cairn-pwhome-")
    password = secrets.token_urlsafe(16)
    subprocess.run(["userdel", USER], capture_output=True)
    subprocess.run(["useradd", "-d", home, "-s", "/bin/sh", USER], check=True)
    uid = int(subprocess.run(["id", "-u", USER], capture_output=True, text=True).stdout)
    gid = int(subprocess.run(["id", "-g", USER], capture_output=True, text=True).stdout)
    os.chown(home, uid, gid)
    subprocess.run(["chpasswd"], input=f"{USER}:{password}", text=True, check=True)
    server = PasswordSSHServer(tmp_path_factory.mktemp("pwsshd")).start()
    yield server, password
    server.stop()
    subprocess.run(["userdel", USER], capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


def transport(server, tmp_path, **kw):
    return ssh_transport.SSHTransport(server.host, port=server.port, user=USER,
                                      known_hosts=str(tmp_path / "known_hosts"),
                                      trust_unknown_key=True, **kw)


def start_and_ping(t):
    conn = AgentConnection(t.start_agent(), "pw")
    try:
        return conn.call("ping", timeout=30)["pong"]
    finally:
        conn.close()


def test_password_from_a_prompt_is_used_and_not_kept(password_host, tmp_path,
                                                     memory_keyring):
    server, password = password_host
    prompts = []
    t = transport(server, tmp_path,
                  password_provider=lambda prompt: prompts.append(prompt) or password)
    try:
        assert start_and_ping(t)
    finally:
        t.close()
    assert prompts and USER in prompts[0]
    assert memory_keyring.items == {}, "a prompted password must not be stored"
    assert password not in (tmp_path / "known_hosts").read_text()


def test_password_from_the_keyring(password_host, tmp_path, memory_keyring):
    server, password = password_host
    ssh_transport.save_password(USER, server.host, server.port, password)
    assert list(memory_keyring.items) == [
        ("cairn", ssh_transport.keyring_username(USER, server.host, server.port))]
    t = transport(server, tmp_path)  # no prompt at all
    try:
        assert start_and_ping(t)
    finally:
        t.close()


def test_wrong_password_is_refused_with_what_was_tried(password_host, tmp_path,
                                                       memory_keyring):
    server, _ = password_host
    t = transport(server, tmp_path, password_provider=lambda prompt: "not-the-password")
    try:
        with pytest.raises(AuthFailed) as e:
            t.start_agent()
    finally:
        t.close()
    assert USER in e.value.message and "password" in e.value.message
