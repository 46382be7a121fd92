"""An ordinary local user for attack tests: created by the test with useradd, removed with
userdel afterwards, and a way to run commands as that user. The tests that use it need root
(they play root running Cairn and an ordinary user beside it)."""

import os
import shutil
import subprocess
import tempfile

import pytest


class LocalUser:
    def __init__(self, name):
        self.name = name
        self.uid = self.gid = None
        self.home = None

    def create(self):
        if os.geteuid() != 0:
            pytest.fail("the attack tests create a local user and need root", pytrace=False)
        subprocess.run(["userdel", "-f", self.name], capture_output=True)
        # pytest's own temporary directories are root's alone: the home goes beside them
        self.home = tempfile.mkdtemp(prefix=f"cairn-{self.name}-")
        subprocess.run(["useradd", "-M", "-d", self.home, "-s", "/bin/sh", self.name],
                       check=True)
        self.uid = int(subprocess.run(["id", "-u", self.name], capture_output=True,
                                      text=True, check=True).stdout)
        self.gid = int(subprocess.run(["id", "-g", self.name], capture_output=True,
                                      text=True, check=True).stdout)
        os.chown(self.home, self.uid, self.gid)
        os.chmod(self.home, 0o755)
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


def shared_dir(prefix):
    """A directory under /tmp that every user can reach (root's, 0755): pytest's temporary
    directories are not reachable by other users."""
    d = tempfile.mkdtemp(prefix=prefix)
    os.chmod(d, 0o755)
    return d
