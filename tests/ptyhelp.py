"""Running the real `cairn` command on a pseudo-terminal, as an admin at a terminal does:
stdin, stdout and stderr are the terminal, of a set width; what it writes is collected as it
comes, escape sequences and all."""

import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

from clihelp import ROOT


def interruptible():
    """In the child before it starts: Ctrl-C (SIGINT) as a shell on a terminal gives it. A
    test run started in the background (`cmd &`) ignores SIGINT, and its children would
    inherit that, so Python would never raise KeyboardInterrupt in them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class PtyRun:
    def __init__(self, home, *args, columns=100, env=None, stdin_devnull=False):
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
        e = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
        e.update(CAIRN_HOME=str(home), TERM="xterm",
                 PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        e.update(env or {})
        self.proc = subprocess.Popen([sys.executable, "-m", "app", *map(str, args)],
                                     stdin=subprocess.DEVNULL if stdin_devnull else slave,
                                     stdout=slave, stderr=slave, env=e, cwd=ROOT,
                                     start_new_session=True, preexec_fn=interruptible)
        os.close(slave)
        self.fd = master
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:   # EIO: the last writer closed the terminal
                return
            if not data:
                return
            with self._lock:
                self._buf += data

    @property
    def output(self):
        with self._lock:
            return bytes(self._buf).decode("utf-8", "replace")

    def wait_for_output(self, predicate, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.output
            if predicate(text):
                return text
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"not seen on the terminal: {self.output!r}")

    def type(self, text):
        os.write(self.fd, text.encode())

    def finish(self, timeout=120):
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        os.close(self.fd)
        return rc, self.output
