"""The agent as one file: a zipapp that any python3 (3.9+) on a host can run as it is.

The bundle is byte-for-byte reproducible (sorted entries, fixed timestamps and permissions),
so its version, a hash of its bytes, changes only when the agent's code changes; hosts keep
the copy they have until then.

The source files are looked up next to the `app` package, which is also where a PyInstaller
build must ship them as data files (see AGENT_SOURCES).
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path

from app.errors import AgentError
from app.transport.base import source_dir

# What the agent needs, relative to the directory holding the `app` package: single files,
# and package directories whose *.py files are taken recursively. Of the storage types, the
# agent halves travel (plugins/storage/agents.py); their master halves and the keys of
# encrypted pools (MASTER_ONLY) stay on the master.
AGENT_FILES = ("app/__init__.py", "app/status.py", "app/errors.py", "app/liveness.py",
               "plugins/__init__.py",
               "plugins/storage/__init__.py", "plugins/storage/agent_base.py",
               "plugins/storage/agents.py")
AGENT_PACKAGES = ("app/agent", "app/formats", "plugins/filesystems",
                  "plugins/storage/advanced_disk", "plugins/storage/dedup",
                  "plugins/storage/cloud")
AGENT_SOURCES = AGENT_FILES + AGENT_PACKAGES
MASTER_ONLY = ("plugins/storage/advanced_disk/master.py", "plugins/storage/dedup/master.py",
               "plugins/storage/dedup/keys.py", "plugins/storage/cloud/master.py",
               "plugins/storage/cloud/keys.py")

# The bundle's __main__.py. Python cannot keep the byte code of modules it imports from a
# zip, so an agent run from the zip alone compiles every module at every start (about a
# tenth of a second on each host, each job). The first start of a bundle therefore unpacks it
# beside itself, into agent-VERSION.d in the same private folder, and runs from there, where
# python keeps what it compiles. Unpacked in a folder of its own and renamed into place, so a
# start sees a whole copy or none; a copy not the user's own and private is not used, and
# copies whose bundle was pruned go when another version unpacks.
MAIN = b"""import os
import stat
import sys

STALE = 3600


def _ours(path):
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _prune(parent):
    import shutil
    import time
    for name in os.listdir(parent):
        path = os.path.join(parent, name)
        gone = name.startswith("agent-") and name.endswith(".d") and \\
            not os.path.exists(path[:-2] + ".pyz")
        left = name.startswith(".agent-") and name.endswith(".unpack")
        try:
            if (gone or left) and _ours(path) and time.time() - os.lstat(path).st_mtime > STALE:
                shutil.rmtree(path)
        except OSError:
            pass


def _unpacked(archive):
    if not archive.endswith(".pyz") or not os.path.isfile(archive):
        return None
    folder = archive[:-4] + ".d"
    if _ours(folder):
        return folder
    if os.path.lexists(folder):
        return None
    import shutil
    import tempfile
    import zipfile
    parent = os.path.dirname(archive)
    tmp = tempfile.mkdtemp(prefix=".agent-", suffix=".unpack", dir=parent)
    try:
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
        os.rename(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return folder if _ours(folder) else None
    _prune(parent)
    return folder


def _run():
    try:
        folder = _unpacked(os.path.abspath(sys.argv[0]))
    except Exception:
        folder = None
    if folder is not None:
        sys.path[0] = folder
        sys.dont_write_bytecode = False
    from app.agent.server import main
    return main()


sys.exit(_run())
"""

# The zip format cannot store times before 1980.
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)

_cache = None
_cache_lock = threading.Lock()


def source_root() -> Path:
    """The directory that holds the `app` and `plugins` source directories."""
    return Path(source_dir())


def agent_bundle() -> tuple[bytes, str]:
    """The agent zipapp and its version (16 hex digits); built once per process."""
    global _cache
    with _cache_lock:
        if _cache is None:
            _cache = make_zipapp(agent_files())
        return _cache


def agent_files(root=None) -> dict[str, bytes]:
    """Archive name -> contents of every file the agent bundle holds."""
    root = Path(root) if root is not None else source_root()
    files = {"__main__.py": MAIN}
    for name in AGENT_FILES:
        files[name] = _read(root, name)
    for package in AGENT_PACKAGES:
        base = root / package
        if not (base / "__init__.py").is_file():
            raise AgentError(
                f"the agent's source files are missing: {base / '__init__.py'} not found",
                hint="this Cairn installation is incomplete; reinstall it")
        for dirpath, dirnames, filenames in os.walk(base):
            # Tests and byte code stay behind: hosts run the sources with their own python.
            dirnames[:] = [d for d in dirnames
                           if d not in ("__pycache__", "tests", "test") and not d.startswith(".")]
            for filename in filenames:
                if not filename.endswith(".py") or filename.startswith("test_"):
                    continue
                rel = (Path(dirpath) / filename).relative_to(root).as_posix()
                if rel not in MASTER_ONLY:
                    files[rel] = _read(root, rel)
    return files


def make_zipapp(files: dict[str, bytes]) -> tuple[bytes, str]:
    """A reproducible zip of the given files and its version. `files` must hold __main__.py."""
    import zipfile  # here: the local agent's start needs this module, not the zip
    if "__main__.py" not in files:
        raise ValueError("a zipapp needs a __main__.py")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3  # Unix, whatever system builds it
            zf.writestr(info, files[name], compresslevel=9)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()[:16]


def _read(root, rel):
    try:
        return (root / rel).read_bytes()
    except OSError as e:
        raise AgentError(f"the agent's source file {root / rel} cannot be read: {e.strerror}",
                         hint="this Cairn installation is incomplete; reinstall it") from None
