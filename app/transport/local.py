"""The local host: the agent runs as a subprocess of the master, no SSH involved."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading

try:
    import fcntl
except ImportError:  # Windows: a console there reaches masters over SSH only
    fcntl = None

from app.errors import AgentError
from app.transport.base import AgentProcess, StderrBuffer, Transport, source_dir

# How long close() lets an agent finish on its own after its stdin closed, and then after
# SIGTERM, before it is killed.
EXIT_GRACE = 2.0
TERM_GRACE = 1.0
# The pipe the agent's events come through (F_SETPIPE_SZ; 1 MiB is Linux's limit for users).
PIPE_BYTES = 1 << 20


def agent_command() -> list[str]:
    if getattr(sys, "frozen", False):
        # The frozen executable is no Python interpreter; it runs the agent itself.
        return [sys.executable, "agent"]
    return [sys.executable, "-m", "app.agent"]


def _wait(popen, timeout):
    """popen.wait(timeout), woken the moment the process ends: wait() with a timeout polls,
    sleeping up to 50 ms past the end, which every command that ends an agent would pay."""
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        return popen.wait(timeout)  # no pidfd here, or the process is reaped already
    try:
        if not select.select([fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(popen.args, timeout)
    finally:
        os.close(fd)
    return popen.wait()


class LocalAgentProcess(AgentProcess):
    def __init__(self, popen: subprocess.Popen):
        self._popen = popen
        self.pid = popen.pid
        self.stdin = popen.stdin
        self.stdout = popen.stdout
        self._stderr = StderrBuffer()
        self._stderr.drain(popen.stderr.read1, name=f"agent-{popen.pid}-stderr")

    def stderr_text(self) -> str:
        if self._popen.poll() is not None:
            self._stderr.wait_closed(0.5)
        return self._stderr.text()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def exit_status(self):
        return self._popen.poll()

    def close(self) -> None:
        try:
            self.stdin.close()
        except OSError:
            pass  # the agent is gone already: a broken pipe is expected
        p = self._popen
        try:
            _wait(p, EXIT_GRACE)
        except subprocess.TimeoutExpired:
            # The whole process group: the agent leads it (start_new_session) and the
            # commands it runs must not outlive it.
            self._signal_group(signal.SIGTERM)
            try:
                p.wait(TERM_GRACE)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                p.wait()
        self.stdout.close()

    def _signal_group(self, sig):
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass


def _widen_pipe(f):
    """A pipe of a MiB to or from the agent (Linux; the default is 64 KiB). Its events run
    that far ahead of the master, which reads them on one thread that also indexes each batch
    of rows it reads: with a small pipe the agent waited for every batch to be indexed before
    it could send the next, and walked at the master's pace. A request of a MiB (a files
    cache's state) crosses in one write and one read, not twenty, each of which waited for
    the agent's interpreter while another of its threads opened the pool."""
    setsz = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if setsz is None:
        return
    try:
        fcntl.fcntl(f.fileno(), setsz, PIPE_BYTES)
    except OSError:
        pass  # a lower limit (/proc/sys/fs/pipe-max-size): the default size works too


def _agent_env(added):
    env = dict(os.environ)
    env.update(added)
    if not getattr(sys, "frozen", False):
        root = source_dir()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _spawn(command, env):
    try:
        popen = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, close_fds=True,
            # Its own session, so a Ctrl-C meant for the console does not cut the agent off
            # in the middle of a message; it leaves when its stdin closes.
            start_new_session=True)
    except OSError as e:
        raise AgentError(f"cannot start the local agent ({command[0]}): {e.strerror}")
    _widen_pipe(popen.stdout)
    _widen_pipe(popen.stdin)
    return popen


# An agent started before it is asked for (prestart): (command, env, Popen), or None.
_spare = None
_spare_lock = threading.Lock()
# How long a spare waits to be taken: a job that starts later (queued behind others, or
# with no local host to reach) starts its own agent, and the spare does not idle meanwhile.
SPARE_FOR = 30.0


def prestart():
    """Starts the local host's agent now, for the first LocalTransport that asks for one
    with the default command and no variables of its own. A command that will run a job here
    calls it before it loads the master, so that the agent's start (a Python interpreter and
    its imports, some 80 ms) runs beside the command's own imports instead of after them.
    An agent nobody takes within SPARE_FOR seconds is ended; one left when this process ends
    leaves by itself (its stdin closes)."""
    global _spare
    with _spare_lock:
        if _spare is not None:
            return
        command, env = agent_command(), _agent_env({})
        try:
            popen = _spawn(command, env)
        except AgentError:
            return  # started again, with its error, when a job asks for it
        _spare = (command, env, popen)
    timer = threading.Timer(SPARE_FOR, _expire, args=(popen,))
    timer.daemon = True
    timer.start()


def _take(popen=None):
    """The spare (only if it is `popen`, when given), no longer spare."""
    global _spare
    with _spare_lock:
        spare = _spare
        if spare is None or (popen is not None and spare[2] is not popen):
            return None
        _spare = None
        return spare


def _expire(popen):
    if _take(popen) is not None:
        discard(popen)


def _take_spare(command, env):
    spare = _take()
    if spare is None:
        return None
    if spare[0] == command and spare[1] == env and spare[2].poll() is None:
        return spare[2]
    discard(spare[2])
    return None


def discard(popen):
    """Ends an agent that was started but is not used: it has done nothing yet."""
    try:
        popen.kill()
    except OSError:
        pass
    popen.wait()
    for f in (popen.stdin, popen.stdout, popen.stderr):
        try:
            f.close()
        except OSError:
            pass


class LocalTransport(Transport):
    """command replaces the agent command line; it exists for tests. env: variables added
    to the agent's environment (the host's agent_env)."""

    def __init__(self, command=None, env=None):
        self._command = list(command) if command else agent_command()
        self._env = dict(env or {})

    def start_agent(self) -> LocalAgentProcess:
        env = _agent_env(self._env)
        popen = _take_spare(self._command, env)
        if popen is None:
            popen = _spawn(self._command, env)
        return LocalAgentProcess(popen)

    def local_address(self):
        return None

    def peer_address(self) -> str:
        return "127.0.0.1"

    def close(self) -> None:
        pass
