"""The master's known_hosts file: the SSH host keys the administrator has trusted.

The file is in OpenSSH format so that administrators can read it, fix it with an editor or
`ssh-keygen -R`, and copy lines from their own ~/.ssh/known_hosts. Several masters or threads
may trust keys at the same time, so every change is made under an exclusive lock, on a fresh
read of the file, and lands with an atomic rename: a concurrent edit is merged, never lost,
and a reader never sees a half-written file.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fnmatch
import hashlib
import hmac
import os
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paramiko


__all__ = ["KnownHost", "fingerprint", "host_pattern", "load", "find", "lookup", "add",
           "remove"]


@dataclass
class KnownHost:
    """One key line of a known_hosts file."""
    lineno: int                     # 1-based, as editors and OpenSSH's messages count
    names: list = field(default_factory=list)
    key_type: str = ""
    key: paramiko.PKey | None = None  # None for key types paramiko cannot parse
    line: str = ""

    def matches(self, hostname, port=22):
        return _names_match(self.names, host_pattern(hostname, port))


def fingerprint(pkey) -> str:
    """The key's fingerprint as OpenSSH prints it: "SHA256:" and unpadded base64."""
    digest = hashlib.sha256(pkey.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def host_pattern(hostname, port=22) -> str:
    """How OpenSSH names a host in known_hosts: the bare name for port 22, else [name]:port."""
    hostname = hostname.lower()
    return hostname if int(port) == 22 else f"[{hostname}]:{int(port)}"


def load(path) -> list[KnownHost]:
    """Every key line of the file; a missing file holds no keys."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return [e for e in (_parse(n, line) for n, line in enumerate(text.splitlines(), 1)) if e]


def find(path, hostname, port=22) -> list[KnownHost]:
    """The entries that name this host and port, with their line numbers."""
    return [e for e in load(path) if e.matches(hostname, port)]


def lookup(path, hostname, port=22) -> list:
    """The trusted keys of this host and port."""
    return [e.key for e in find(path, hostname, port) if e.key is not None]


def add(path, hostname, port, pkey) -> bool:
    """Trusts pkey for the host. Returns False when it was trusted already."""
    pattern = host_pattern(hostname, port)
    new_line = f"{pattern} {pkey.get_name()} {pkey.get_base64()}"
    with _locked(path):
        lines = _read_lines(path)
        for n, line in enumerate(lines, 1):
            entry = _parse(n, line)
            if (entry and entry.key is not None and _names_match(entry.names, pattern)
                    and entry.key.asbytes() == pkey.asbytes()):
                return False
        lines.append(new_line)
        _write_lines(path, lines)
    return True


def remove(path, hostname, port=22) -> int:
    """Forgets every key of the host and port; returns how many entries named it.

    A line that also names other hosts keeps them: only this host's name leaves it."""
    pattern = host_pattern(hostname, port)
    removed = 0
    with _locked(path):
        lines = _read_lines(path)
        kept = []
        for n, line in enumerate(lines, 1):
            entry = _parse(n, line)
            if entry is None or not _names_match(entry.names, pattern):
                kept.append(line)
                continue
            removed += 1
            others = [name for name in entry.names if not _name_matches(name, pattern)]
            if others:
                marker, _, rest = _split_marker(line)
                rest = rest.split(None, 1)[1]
                kept.append(" ".join(filter(None, [marker, ",".join(others), rest])))
        if removed:
            _write_lines(path, kept)
    return removed


# -- parsing -----------------------------------------------------------------------------

def _split_marker(line):
    """OpenSSH lines may start with @cert-authority or @revoked."""
    stripped = line.strip()
    if stripped.startswith("@"):
        marker, _, rest = stripped.partition(" ")
        return marker, True, rest.strip()
    return "", False, stripped


def _parse(lineno, line):
    marker, _, rest = _split_marker(line)
    # Certificate authorities and revocations need semantics this file does not use; their
    # lines are kept as they are, but never match a host.
    if marker or not rest or rest.startswith("#"):
        return None
    fields = rest.split()
    if len(fields) < 3:
        return None
    names, key_type, blob = fields[0].split(","), fields[1], fields[2]
    key = None
    # here, not at the top: the master loads this module at every start, and a master with
    # local hosts only never needs the SSH library
    import paramiko
    try:
        key = paramiko.PKey.from_type_string(key_type, base64.b64decode(blob, validate=True))
    except (binascii.Error, ValueError, paramiko.SSHException, TypeError):
        pass
    return KnownHost(lineno, names, key_type, key, line)


def _names_match(names, pattern):
    """OpenSSH pattern-list semantics: a matching negated name vetoes the whole line."""
    hit = False
    for name in names:
        if name.startswith("!"):
            if _name_matches(name[1:], pattern):
                return False
        elif _name_matches(name, pattern):
            hit = True
    return hit


def _name_matches(name, pattern):
    if name.startswith("|1|"):
        return _hashed_matches(name, pattern)
    name = name.lower()
    if "*" in name or "?" in name:
        return fnmatch.fnmatchcase(pattern, name)
    return name == pattern


def _hashed_matches(name, pattern):
    try:
        _, _, salt, digest = name.split("|", 3)
        salt, digest = base64.b64decode(salt), base64.b64decode(digest)
    except (ValueError, binascii.Error):
        return False
    mine = hmac.new(salt, pattern.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(mine, digest)


# -- safe rewriting ----------------------------------------------------------------------

@contextlib.contextmanager
def _locked(path):
    path = os.path.realpath(path)
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    # A separate lock file, because the file itself is replaced by every write and a lock on
    # the old inode would not exclude a writer that opened the new one.
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _lock_exclusive(fd)
        yield
    finally:
        os.close(fd)


def _lock_exclusive(fd):
    """An exclusive lock on an open file, released when it is closed. fcntl is POSIX's;
    the console on a desktop (which checks a remote master's key with this file) may run on
    Windows, where msvcrt locks instead."""
    try:
        import fcntl
    except ImportError:
        import msvcrt
        msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
        return
    fcntl.flock(fd, fcntl.LOCK_EX)


def _read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _write_lines(path, lines):
    path = os.path.realpath(path)
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o600
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path),
                               prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            if hasattr(os, "fchmod"):   # not on Windows, where the mode means little
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
