"""What the master needs from a way of reaching a host: start the agent there and talk to it
over its stdin and stdout. The local host and SSH hosts differ only below this line."""

from __future__ import annotations

import abc
import os
import threading

import app

STDERR_LIMIT = 64 * 1024


def source_dir() -> str:
    """The directory that holds the `app` and `plugins` source directories: where a local
    agent imports them from, and what the agent bundle is made of (bundle.py)."""
    return os.path.dirname(os.path.dirname(os.path.realpath(app.__file__)))


class StderrBuffer:
    """The tail of what an agent wrote on stderr.

    It is drained by a thread of its own: an agent that writes much on stderr must never
    block because nobody reads it, and only the end is kept because that is where the reason
    of a failure is."""

    def __init__(self, limit=STDERR_LIMIT):
        self._limit = limit
        self._data = bytearray()
        self._lock = threading.Lock()
        self._done = threading.Event()

    def feed(self, chunk: bytes):
        with self._lock:
            self._data += chunk
            if len(self._data) > self._limit:
                del self._data[:len(self._data) - self._limit]

    def text(self) -> str:
        with self._lock:
            return bytes(self._data).decode("utf-8", errors="replace")

    def drain(self, read, name="agent-stderr"):
        """Starts a thread that feeds read(n) chunks until it returns b"" or fails."""
        def run():
            try:
                while True:
                    chunk = read(32768)
                    if not chunk:
                        break
                    self.feed(chunk)
            except (OSError, EOFError, ValueError):
                pass
            finally:
                self._done.set()
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def wait_closed(self, timeout):
        """Lets a caller that saw the agent end pick up its last words before reporting."""
        return self._done.wait(timeout)


class AgentProcess(abc.ABC):
    """A started agent, whatever the transport.

    stdin: binary, .write(bytes) and .flush(); stdout: binary, .readline() -> bytes, b"" at
    end of file."""

    stdin = None
    stdout = None

    @abc.abstractmethod
    def stderr_text(self) -> str:
        """What the agent wrote on stderr so far (the last 64 KiB), for error messages."""
        ...

    @abc.abstractmethod
    def close(self) -> None:
        """Ends the agent: closes its stdin, waits briefly for it to leave, then kills it."""
        ...

    @abc.abstractmethod
    def is_alive(self) -> bool:
        ...

    @abc.abstractmethod
    def exit_status(self) -> int | None:
        """The agent's exit status once it has ended, else None."""
        ...

    def connection_lost(self) -> str | None:
        """Why the connection to the agent's host broke, when it was the connection that
        ended and not the agent (a host that died or was cut off), else None."""
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Transport(abc.ABC):
    """The way to one host."""

    @abc.abstractmethod
    def start_agent(self) -> AgentProcess:
        ...

    @abc.abstractmethod
    def local_address(self) -> str | None:
        """This machine's address on the connection towards the host; None for the local host."""
        ...

    @abc.abstractmethod
    def peer_address(self) -> str:
        """The host's address as the data plane should use it."""
        ...

    @abc.abstractmethod
    def close(self) -> None:
        ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
