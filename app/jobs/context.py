"""What a running job shares between the agents' event threads and the job's own thread:
counters, totals, warnings and log lines, and the one-second tick that writes progress and a
throughput sample to the catalog and turns a cancel request into a cancel of the agent calls."""

import collections
import threading
import time

from app import status as st
from app.errors import CairnError, Canceled
from app.transport.agent_client import AgentCallError

TICK = 0.25
SAMPLE_EVERY = 1.0
RATE_WINDOW = 5.0
LISTEN_TIMEOUT = 60.0
SCANNING, COMMITTING = "scanning", "committing"


class JobContext:
    """work: the phase a job is in once data moves (copying; verifying for a verify), shown
    by the CLI's progress lines and kept in the job's row."""

    def __init__(self, jobs, job_id, work="copying"):
        self.jobs = jobs
        self.id = job_id
        self.phase = None
        self.work = work
        self.files = 0
        self.bytes = 0
        self.total_files = None
        self.total_bytes = None
        self.warnings = 0
        self._logs = []
        self._lock = threading.Lock()
        self._hist = collections.deque()
        self.cancelled = False

    # -- called from agent reader threads --------------------------------------------------
    def on_event(self, event, data):
        if event == "progress":
            self.files = data.get("files", self.files)
            self.bytes = data.get("bytes", self.bytes)
            # Data moving ends a scanning before it (or the commit of a duplication's previous
            # image); the next flush records it.
            if self.phase in (None, SCANNING, COMMITTING) and (self.files or self.bytes):
                self.phase = self.work
        elif event == "totals":
            self.total_files = data.get("files")
            self.total_bytes = data.get("bytes")
        elif event == "warning":
            self.warnings += 1
            path = data.get("path")
            self.log(f"{path}: {data.get('message')}" if path else data.get("message", ""),
                     "warning")
        elif event == "log":
            # A warning-level log line says something went another way than planned without
            # any file being skipped: it does not make the job partial.
            self.log(data.get("message", ""),
                     "warning" if data.get("level") == "warning" else "info")

    def log(self, message, level="info"):
        with self._lock:
            self._logs.append((level, message))

    def set_totals(self, files, bytes):
        self.total_files, self.total_bytes = files, bytes

    def set_phase(self, phase):
        """Records at once what the job does from now on (scanning, committing, ...); the
        phase of moving data (`work`) follows by itself from the first progress event."""
        if phase != self.phase:
            self.phase = phase
            self.jobs.set_phase(self.id, phase)

    # -- called from the job's thread -------------------------------------------------------
    def flush(self, sample=False):
        with self._lock:
            logs, self._logs = self._logs, []
        self.jobs.log_many(self.id, logs)
        now = time.monotonic()
        self._hist.append((now, self.bytes))
        while len(self._hist) > 2 and now - self._hist[0][0] > RATE_WINDOW:
            self._hist.popleft()
        t0, b0 = self._hist[0]
        rate = (self.bytes - b0) / (now - t0) if now - t0 > 0.2 else None
        self.jobs.progress(self.id, bytes=self.bytes, files=self.files, rate=rate,
                           total_bytes=self.total_bytes, total_files=self.total_files,
                           sample_t=time.time() if sample else None, phase=self.phase)

    def check_cancel(self):
        if not self.cancelled and self.jobs.cancel_requested(self.id):
            self.cancelled = True
        return self.cancelled

    def supervise(self, calls):
        """Wait for agent calls to end, ticking meanwhile. A cancel request cancels them all,
        and so does one call's failure: the calls of a job work on one stream, and the peer of
        a side that failed before connecting would wait for it until its timeout.
        Returns when every call has ended (their results are read by the caller)."""
        last_sample = 0.0
        while True:
            pending = [c for c in calls if not c.done()]
            if not pending:
                break
            pending[0].wait_done(TICK)
            if self.check_cancel() or any(c.failed() for c in calls):
                for c in pending:
                    c.cancel()
            now = time.monotonic()
            sample = now - last_sample >= SAMPLE_EVERY
            if sample:
                last_sample = now
            self.flush(sample=sample)
        self.flush(sample=True)

    def raise_if_cancelled(self):
        if self.check_cancel():
            raise Canceled()


def start_listening_side(ctx, conn, op, args, job_id, listening=None, address=None):
    """Starts the data plane's listening side (the storage server's agent) for a job and
    waits until it has a port. Returns (call, port, cert, token) for the connecting side;
    the listening event's other news go into the dict `listening` when given. address: the
    one the connecting side is told, which the listener binds to where it can."""
    # here, not at the top: the certificate library costs every `cairn` command's start,
    # and only jobs whose data crosses between two agents need it
    from app.jobs.tlscert import job_identity
    cert, key, token = job_identity(job_id)
    if address:
        args = dict(args, bind=address)
    port_box = {}

    def on_event(event, data):
        if event == "listening":
            if listening is not None:
                listening.update(data)
            port_box["port"] = data["port"]
            if data.get("note"):
                ctx.log(f"data plane: the storage server listens on all its addresses: "
                        f"{data['note']} (a host's data_address set to an IP address of it "
                        f"limits the port to that address)")
        else:
            ctx.on_event(event, data)

    call = conn.start(op, dict(args, cert=cert, key=key, token=token), on_event=on_event)
    deadline = time.monotonic() + LISTEN_TIMEOUT
    while "port" not in port_box and not call.done() and time.monotonic() < deadline:
        time.sleep(0.02)
    if "port" not in port_box:
        results([call], timeout=0)  # raises the storage side's own error if it has one
        call.cancel()
        raise CairnError("the storage server's agent did not open a data port",
                         status_code=st.DATA_PLANE_FAILED)
    return call, port_box["port"], cert, token


def results(calls, timeout=None):
    """The agent calls' results; an agent's error becomes the job's status."""
    out = []
    errors = []
    canceled = None
    for c in calls:
        try:
            out.append(c.wait(timeout))
        except AgentCallError as e:
            errors.append(e)
        except Canceled as e:
            canceled = e
    if errors:
        # A side canceled because its peer failed: the peer's error is the job's.
        e = next((e for e in errors if e.code != st.CANCELED), errors[0])
        raise CairnError(e.message, status_code=e.code) from None
    if canceled is not None:
        raise canceled
    return out
