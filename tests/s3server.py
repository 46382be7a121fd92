"""A real S3 server on the loopback interface for the tests of cloud pools.

scripts/s3-test-server.sh runs it (versitygw built from its Go module, data as files under a
directory of its own); this module starts and stops it through that script, so the tests meet
the same server a developer starts by hand."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "s3-test-server.sh"
# The first start on a machine builds the server (about two minutes on two cores).
START_TIMEOUT_S = 900
SETTINGS = ("endpoint", "bucket", "access_key", "secret_key")


class S3ServerError(RuntimeError):
    pass


class S3Server:
    """endpoint, bucket (empty when the server was first started), access_key, secret_key,
    region and workdir (its data is under workdir/data, one directory per bucket)."""

    region = "us-east-1"

    def __init__(self, workdir):
        self.workdir = Path(workdir)
        self.endpoint = self.bucket = self.access_key = self.secret_key = None

    def _script(self, *args, timeout, **env):
        p = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL,
                           env={**os.environ, **env})
        if p.returncode != 0:
            raise S3ServerError(f"{SCRIPT.name} {' '.join(args)} failed: "
                                f"{p.stderr.strip() or p.stdout.strip()}")
        return p.stdout

    def start(self, max_requests=None):
        """Starts the server, or starts it again after stop() on the same endpoint with the
        same keys and data. max_requests: answer 503 SlowDown past that many in flight."""
        env = {"CAIRN_S3_MAX_REQUESTS": str(max_requests)} if max_requests else {}
        out = self._script("start", str(self.workdir), timeout=START_TIMEOUT_S, **env)
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        missing = [k for k in SETTINGS if not values.get(k)]
        if missing:
            raise S3ServerError(f"the server's start printed no {', '.join(missing)}: {out!r}")
        for key in SETTINGS:
            setattr(self, key, values[key])
        return self

    def stop(self):
        self._script("stop", str(self.workdir), timeout=60)

    def kill(self):
        """Ends the server at once (SIGKILL), in the middle of whatever it was doing, as a
        crash would; start() brings it back."""
        pid_file = self.workdir / "server.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text())
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        self.stop()

    def restart(self, max_requests=None):
        self.stop()
        return self.start(max_requests=max_requests)

    @contextlib.contextmanager
    def stopped(self):
        """The server is down inside the block and up again after it, whatever happens."""
        self.stop()
        try:
            yield self
        finally:
            self.start()

    @contextlib.contextmanager
    def throttled(self, max_requests=1):
        """Inside the block the server answers 503 SlowDown to requests past max_requests
        in flight; it is restarted without the limit afterwards."""
        self.restart(max_requests=max_requests)
        try:
            yield self
        finally:
            self.restart()

    def client(self, access_key=None, secret_key=None, **config):
        """A boto3 S3 client for this server (path-style addressing); keyword arguments go
        to botocore's Config, e.g. retries={"max_attempts": 1}."""
        import boto3
        from botocore.config import Config
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            config=Config(s3={"addressing_style": "path"}, **config))

    def new_bucket(self, prefix="t"):
        """Creates an empty bucket with a name no other test uses, and returns the name."""
        name = f"{prefix}-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name

    def log_text(self):
        log = self.workdir / "server.log"
        return log.read_text(errors="replace") if log.exists() else ""
