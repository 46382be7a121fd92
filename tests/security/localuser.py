"""An ordinary local user for attack tests: created by the test with useradd, removed with
userdel afterwards, and a way to run commands as that user. The tests that use it need root
(they play root running Cairn and an ordinary user beside it)."""

import grp
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest


class LocalUser:
    """`base` and this process's id name the user: two test runs on one machine (two
    checkouts) each get their own, and neither deletes the other's while it is in use."""

    def __init__(self, base):
        self.base = base
        self.name = f"{base}{os.getpid()}"
        self.uid = self.gid = None
        self.home = None

    def create(self):
        if os.geteuid() != 0:
            pytest.fail("the attack tests create a local user and need root", pytrace=False)
        _remove_stale(self.base)
        subprocess.run(["userdel", "-f", self.name], capture_output=True)
        # pytest's own temporary directories are root's alone: the home goes beside them
        self.home = tempfile.mkdtemp(prefix=f"cairn-{self.name}-")
        try:
            subprocess.run(["useradd", "-M", "-d", self.home, "-s", "/bin/sh", self.name],
                           check=True)
            self.uid = int(subprocess.run(["id", "-u", self.name], capture_output=True,
                                          text=True, check=True).stdout)
            self.gid = int(subprocess.run(["id", "-g", self.name], capture_output=True,
                                          text=True, check=True).stdout)
            os.chown(self.home, self.uid, self.gid)
            os.chmod(self.home, 0o755)
        except BaseException:
            self.remove()  # the fixture never yields: its teardown does not run
            raise
        return self

    def remove(self):
        subprocess.run(["userdel", "-f", self.name], capture_output=True)
        if self.home:
            shutil.rmtree(self.home, ignore_errors=True)

    def run(self, *argv, check=False, **kw):
        """argv run as this user (real and effective ids, no supplementary groups)."""
        uid, gid = self.uid, self.gid

        def drop():
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        kw.setdefault("capture_output", True)
        return subprocess.run(list(argv), preexec_fn=drop, check=check, cwd=self.home, **kw)

    def sh(self, script, **kw):
        return self.run("/bin/sh", "-c", script, **kw)

    def can_read(self, path):
        """Whether the user can open `path` for reading (a file) or list it (a directory)."""
        r = self.run("/bin/sh", "-c", 'if [ -d "$1" ]; then ls -- "$1"; else cat -- "$1"; fi',
                     "sh", str(path))
        return r.returncode == 0


def _remove_stale(base):
    """Removes the users of `base` left by test runs that were killed before their teardown
    (their process is gone)."""
    for entry in pwd.getpwall():
        rest = entry.pw_name[len(base):]
        if not entry.pw_name.startswith(base) or not rest.isdigit():
            continue
        try:
            os.kill(int(rest), 0)
        except ProcessLookupError:
            subprocess.run(["userdel", "-f", entry.pw_name], capture_output=True)
        except OSError:
            pass  # alive (another user's process): not ours to judge


def shared_dir(prefix):
    """A directory under /tmp that every user can reach (root's, 0755): pytest's temporary
    directories are not reachable by other users."""
    d = tempfile.mkdtemp(prefix=prefix)
    os.chmod(d, 0o755)
    return d


def unnamed_id():
    """An id that is neither a user's nor a group's on this system."""
    for i in range(47_000, 60_000):
        try:
            pwd.getpwuid(i)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(i)
        except KeyError:
            return i
    pytest.fail("no free id between 47000 and 60000")
