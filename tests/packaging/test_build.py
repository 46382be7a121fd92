"""The one-folder build (scripts/build.sh, packaging/cairn.spec) works on its own: the frozen
`cairn` prints its version, renders the console offscreen, and ships the agent, both as the
local host's subprocess and as the zipapp sent to other hosts."""

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from app import status as st
from app.transport.bundle import agent_bundle
from app.transport.ssh import DEFAULT_AGENT_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_TIMEOUT_S = 900

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("PyInstaller") is None,
    reason="PyInstaller is not installed: run scripts/setup.sh --test")


def _env(**extra):
    # Only what a user's shell would hold: no PYTHONPATH into the source tree, so the build
    # has to carry everything it needs.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DISPLAY",
                        "WAYLAND_DISPLAY", "CAIRN_HOME")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """dist/cairn built by scripts/build.sh into a temporary directory."""
    out = tmp_path_factory.mktemp("frozen")
    start = time.monotonic()
    p = subprocess.run([os.path.join(ROOT, "scripts", "build.sh")], cwd=ROOT,
                       env=_env(CAIRN_DIST_DIR=str(out / "dist"),
                                CAIRN_BUILD_DIR=str(out / "build")),
                       capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert p.returncode == 0, f"build failed:\n{p.stdout[-4000:]}\n{p.stderr[-8000:]}"
    exe = out / "dist" / "cairn" / "cairn"
    assert exe.is_file() and os.access(exe, os.X_OK)
    size = sum(f.stat().st_size for f in (out / "dist" / "cairn").rglob("*")
               if f.is_file() and not f.is_symlink())
    print(f"\nfrozen build: {time.monotonic() - start:.0f} s, {size / 2**20:.0f} MiB")
    return exe


def run(exe, *args, cwd, **env):
    return subprocess.run([str(exe), *map(str, args)], cwd=cwd, env=_env(**env),
                          capture_output=True, text=True, timeout=300)


def test_version(frozen, tmp_path):
    from app import __version__
    p = run(frozen, "--version", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"cairn {__version__}"


def test_the_build_chunks_with_the_accelerator(frozen, tmp_path):
    """Dedup pools cut chunks with pyfastcdc's compiled modules: a build without them falls
    back to the pure-Python chunker, many times slower, and warns on every start."""
    p = run(frozen, "--version", cwd=tmp_path)
    assert "pyfastcdc" not in p.stderr, p.stderr
    cy = frozen.parent / "_internal" / "pyfastcdc" / "cy"
    assert list(cy.glob("fastcdc*.so")), "the chunking accelerator is not in the build"


def test_console_screenshot_offscreen(frozen, tmp_path):
    from PySide6.QtGui import QImage
    out = tmp_path / "hosts.png"
    p = run(frozen, "console", "--screenshot", out, "--view", "hosts", "--home", tmp_path / "h",
            cwd=tmp_path, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    assert p.returncode == 0, p.stderr
    img = QImage(str(out))
    assert not img.isNull() and (img.width(), img.height()) == (1280, 800)
    colours = {img.pixel(x, y) for x in range(0, 1280, 16) for y in range(0, 800, 16)}
    assert len(colours) > 8, "the screenshot is blank"
    # the navigation icons are SVG files: without the SVG plugins they would be missing
    nav_icon = {img.pixel(x, y) for x in range(4, 60) for y in range(30, 120)}
    assert len(nav_icon) > 4, "the navigation shows no icons"


def test_the_local_agent_runs_from_the_build(frozen, tmp_path):
    home = tmp_path / "h"
    p = run(frozen, "--home", home, "host", "add", "me", "--local", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = run(frozen, "--home", home, "host", "probe", "me", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["host"] == "me" and info["filesystems"]
    assert any(f["mount_point"] == "/" for f in info["filesystems"])


def test_what_the_build_ships_finds_its_qt_libraries(frozen):
    """The spec leaves out Qt libraries no wanted module or plugin needs; if one that stays
    still needed one, it would fail only when loaded, e.g. on a user's desktop."""
    internal = frozen.parent / "_internal"
    env = dict(os.environ, LD_LIBRARY_PATH=f"{internal}:{internal / 'PySide6' / 'Qt' / 'lib'}")
    missing = set()
    for lib in internal.rglob("*.so*"):
        if lib.is_symlink() or not lib.is_file():
            continue
        out = subprocess.run(["ldd", str(lib)], env=env, capture_output=True, text=True).stdout
        missing |= {(lib.name, line.split()[0]) for line in out.splitlines()
                    if "not found" in line and line.split()[0].startswith("libQt6")}
    assert not missing


def test_the_build_ships_the_s3_client_with_the_s3_model_only(frozen):
    """Cloud pools load boto3 at run time; botocore needs its service model files to make an
    S3 client, and the spec keeps S3's (and STS's) out of some 450."""
    from PyInstaller.archive.readers import CArchiveReader
    modules = set(CArchiveReader(str(frozen)).open_embedded_archive("PYZ.pyz").toc)
    assert {"boto3", "boto3.s3.transfer", "botocore.client", "s3transfer.manager"} <= modules
    data = frozen.parent / "_internal" / "botocore" / "data"
    assert list(data.glob("s3/*/service-2.json*")), "botocore's S3 model is missing"
    assert (data / "endpoints.json").is_file()
    assert (data / "_retry.json").is_file()
    assert sorted(p.name for p in data.iterdir() if p.is_dir()) == ["s3", "sts"]


@pytest.mark.ssh
def test_the_agent_bundle_reaches_an_ssh_host_from_the_build(frozen, tmp_path, sshd):
    """Hosts reached over SSH get the agent as a zipapp that the build makes from the
    agent's source files it ships: probing the loopback sshd's host proves they are there."""
    home = tmp_path / "h"
    p = run(frozen, "--home", home, "host", "add", "remote", "--address", sshd.host,
            "--port", sshd.port, "--user", sshd.user, "--key", sshd.key_file,
            "--trust-host-key", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = run(frozen, "--home", home, "host", "probe", "remote", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["host"] == "remote" and info["filesystems"]
    # The agent is found on the host under the hash of the bundle's bytes, so the probe
    # answered through a bundle identical to the one the source tree makes. The sshd logs in
    # as this user: the bundle is in this home directory.
    data, version = agent_bundle()
    sent = os.path.join(os.path.expanduser("~"), DEFAULT_AGENT_DIR, f"agent-{version}.pyz")
    with open(sent, "rb") as f:
        assert f.read() == data


@pytest.mark.ssh
def test_the_build_manages_a_master_over_ssh(frozen, tmp_path, sshd):
    """The frozen `cairn --master` and `cairn console --master` reach a master served over
    the loopback sshd: by the source tree's Python, as on a server set up from source, and
    by the build itself."""
    from PySide6.QtGui import QImage
    master_home, desktop = tmp_path / "master", tmp_path / "desktop"
    served = (f"cd {ROOT} && exec {sys.executable} -m app master serve --stdio "
              f"--home {master_home} --user admin")
    where = ["--master", f"{sshd.user}@{sshd.host}:{sshd.port}", "--identity", sshd.key_file]

    def remote(*args, command=served, **env):
        return run(frozen, "--home", desktop, *where, "--master-command", command, *args,
                   cwd=tmp_path, **env)

    # the master's key is unknown to this desktop: refused, then trusted once
    p = remote("status", "--json")
    assert p.returncode == st.HOST_KEY_UNKNOWN, p.stderr
    assert sshd.host_key_fingerprint in p.stderr
    p = remote("--trust-master-key", "host", "add", "me", "--local")
    assert p.returncode == 0, p.stderr
    p = remote("status", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [h["name"] for h in doc["hosts"]] == ["me"] and doc["hosts"][0]["reachable"]
    p = remote("host", "list", "--json")
    assert p.returncode == 0, p.stderr
    assert [h["name"] for h in json.loads(p.stdout)["hosts"]] == ["me"]
    # an error of the master comes back as itself: message, hint and status
    p = remote("policy", "show", "nope", "--json")
    assert p.returncode == st.INVALID_REQUEST and "there is no policy named 'nope'" in p.stderr
    # the master served by the build itself
    p = remote("user", "whoami", "--json",
               command=f"{frozen} master serve --stdio --home {master_home} --user admin")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["role"] == "admin"
    assert not (desktop / "catalog.db").exists()
    # the console, connected to it, renders offscreen
    logins = len(_logins(master_home))
    shot = tmp_path / "remote.png"
    p = remote("console", "--screenshot", shot, "--view", "hosts",
               QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    assert p.returncode == 0, p.stderr
    img = QImage(str(shot))
    assert not img.isNull() and (img.width(), img.height()) == (1280, 800)
    assert len({img.pixel(x, y) for x in range(0, 1280, 16) for y in range(0, 800, 16)}) > 8
    assert len(_logins(master_home)) == logins + 1, "the console did not log in"


def _logins(home):
    import sqlite3
    conn = sqlite3.connect(os.path.join(home, "catalog.db"))
    try:
        return conn.execute("SELECT seq FROM audit_log WHERE action='login'").fetchall()
    finally:
        conn.close()


def test_the_build_carries_what_a_remote_master_loads_by_name(frozen):
    """What `--master` loads only when named, and what the wire codec imports by name
    (app/remote/codec.py), is in the build."""
    from PyInstaller.archive.readers import CArchiveReader
    from app.remote.codec import modules_loaded_by_name
    modules = set(CArchiveReader(str(frozen)).open_embedded_archive("PYZ.pyz").toc)
    wanted = {"app.remote.client", "app.remote.server", "app.remote.streams", "ui.remote",
              "paramiko.agent"} | set(modules_loaded_by_name())
    assert sorted(wanted - modules) == []
