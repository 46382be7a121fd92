"""Terminal injection: a client's file names reach the admin's terminal through `cairn
browse`, `cairn jobs log`, `cairn jobs show`, a restore preview and error messages. A hostile
client names its files to fake listing lines (a newline), overwrite what was printed (a
carriage return), clear the screen or retitle the terminal (ESC sequences), hide bytes that
are not UTF-8. Human output must show every such name escaped, as `ls -b` does, and never
let a control byte through; --json must still give the exact names back.

An ordinary user of the client (a user this test creates and removes) makes the files; root
backs them up for real, and the admin reads them back through the real `cairn` command, its
output taken as raw bytes."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from app import status as st
from app.master import Master
from clihelp import ROOT

HOSTILE = [
    b"fake\nf 0644      0      0            1 2026-01-01T00:00:00Z passwords.txt",
    b"cr\rX",
    b"clear\x1b[2J",
    b"title\x1b]0;pwned\x07",
    b"back\\slash",
    b"bad\xe9\xff",
    b"c1\xc2\x9b31m",            # U+009B, the 8-bit CSI
    "rtl\u202etxt.exe".encode(),  # a right-to-left override
]
ESCAPED = {
    HOSTILE[0]: "fake\\nf 0644      0      0            1 2026-01-01T00:00:00Z passwords.txt",
    HOSTILE[1]: "cr\\rX",
    HOSTILE[2]: "clear\\033[2J",
    HOSTILE[3]: "title\\033]0;pwned\\a",
    HOSTILE[4]: "back\\\\slash",
    HOSTILE[5]: "bad\\351\\377",
    HOSTILE[6]: "c1\\302\\23331m",
    HOSTILE[7]: "rtl\\342\\200\\256txt.exe",
}
# skipped with a log line that names it: a name in the backup job's log
SOCKET = b"sock\x1b[2J\nline"
SOCKET_ESCAPED = "sock\\033[2J\\nline"
USER = "cairncli"

# What the user runs in a directory of theirs that root backs up.
MAKE_NAMES = """
import os, socket, sys
names = [bytes.fromhex(h) for h in sys.argv[2:]]
os.chdir(sys.argv[1])
for n in names[:-1]:
    with open(n, "wb") as f:
        f.write(b"data of " + n)
s = socket.socket(socket.AF_UNIX)
s.bind(names[-1])
"""


def run(home, *args):
    """The real `cairn`, its output as the terminal would get it: bytes."""
    env = dict(os.environ, CAIRN_HOME=str(home), PYTHONPATH=ROOT, LANG="C.UTF-8")
    argv = [a if isinstance(a, bytes) else str(a) for a in args]
    return subprocess.run([sys.executable, "-m", "app", *argv], env=env, capture_output=True,
                          timeout=300, cwd=ROOT)


def assert_terminal_safe(raw):
    """Valid UTF-8 and nothing that does not print but the line ends."""
    text = raw.decode("utf-8")   # raises on a raw byte that is not UTF-8
    bad = sorted({f"U+{ord(ch):04X}" for ch in text if ch != "\n" and not ch.isprintable()})
    assert not bad, f"control characters reach the terminal: {bad}\n{text!r}"
    return text


@pytest.fixture(scope="module")
def client_user():
    if os.geteuid() != 0:
        pytest.fail("the test creates a local user and needs root", pytrace=False)
    subprocess.run(["userdel", USER], capture_output=True)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], check=True)
    uid = int(subprocess.run(["id", "-u", USER], capture_output=True, text=True).stdout)
    gid = int(subprocess.run(["id", "-g", USER], capture_output=True, text=True).stdout)
    # pytest's own temporary directories are root's alone: the user's directory goes beside
    src = tempfile.mkdtemp(prefix="cairn-inject-")
    os.chown(src, uid, gid)
    yield uid, gid, src
    subprocess.run(["userdel", USER], capture_output=True)
    shutil.rmtree(src, ignore_errors=True)


@pytest.fixture(scope="module")
def backed_up(tmp_path_factory, client_user):
    uid, gid, src = client_user

    def as_user():
        os.setgid(gid)
        os.setgroups([])
        os.setuid(uid)

    # the system's python: the test's own may live where the user cannot reach
    subprocess.run(["/usr/bin/python3", "-c", MAKE_NAMES, src, *(n.hex() for n in HOSTILE),
                    SOCKET.hex()], preexec_fn=as_user, check=True, cwd="/")
    assert sorted(os.listdir(os.fsencode(src))) == sorted(HOSTILE + [SOCKET])
    assert {os.stat(os.path.join(os.fsencode(src), n)).st_uid for n in HOSTILE} == {uid}
    tmp = tmp_path_factory.mktemp("inject")
    vol = tmp / "vol"
    vol.mkdir()
    home = tmp / "home"
    m = Master(str(home))
    try:
        m.config.add_host("me", local=True)
        m.config.add_storage_server("ss1", type="advanced-disk", host="me")
        m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
        m.config.add_storage_unit("stu1", pool="dp1")
        m.config.add_policy("p1", storage_unit="stu1")
        m.config.add_policy_client("p1", "me")
        m.config.add_policy_selection("p1", src)
        [job] = m.wait_for(m.start_backup("p1"))
        assert job["status"] == st.OK, m.jobs.logs(job["id"])
        image = m.images()[0]["id"]
    finally:
        m.close()
    return home, src, image, job["id"]


def test_browse_shows_names_escaped_and_json_keeps_them_exact(backed_up):
    home, src, image, _ = backed_up
    p = run(home, "browse", image, src)
    assert p.returncode == 0, p.stderr
    text = assert_terminal_safe(p.stdout)
    lines = text.splitlines()
    # the image:path line and one line per entry: no line was faked
    assert len(lines) == 1 + len(HOSTILE), text
    shown = {line.split("Z ", 1)[1] for line in lines[1:]}
    assert shown == set(ESCAPED.values()), text

    p = run(home, "browse", image, src, "--json")
    doc = json.loads(p.stdout)
    assert {os.fsencode(e["name"]) for e in doc["entries"]} == set(HOSTILE)


def test_job_log_and_job_show_show_names_escaped(backed_up):
    home, src, _, job = backed_up
    for cmd in (["jobs", "log", job], ["jobs", "show", job]):
        p = run(home, *cmd)
        assert p.returncode == 0, p.stderr
        text = assert_terminal_safe(p.stdout)
        assert f"{src}/{SOCKET_ESCAPED}: sockets cannot be backed up" in text, text
    doc = json.loads(run(home, "jobs", "log", job, "--json").stdout)
    assert any(os.fsencode(src) + b"/" + SOCKET in os.fsencode(x["message"])
               for x in doc["log"]), doc


def test_restore_preview_and_error_messages_show_names_escaped(backed_up, tmp_path):
    home, src, image, _ = backed_up
    p = run(home, "restore", image, "--path", src, "--to", tmp_path / "to", "--preview")
    assert p.returncode == 0, p.stderr
    text = assert_terminal_safe(p.stdout)
    for escaped in ESCAPED.values():
        assert f"{src}/{escaped}  ->  " in text, text
    # a path that is not in the image, quoted back in the error message
    p = run(home, "browse", image, os.fsencode(src) + b"/gone\x1b[2J\xe9")
    assert p.returncode == st.INVALID_REQUEST
    err = assert_terminal_safe(p.stderr)
    assert "gone\\033[2J\\351 is not in image" in err, err
    assert_terminal_safe(p.stdout)
