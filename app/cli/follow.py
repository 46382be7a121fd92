"""Waiting for jobs while showing them: live lines on a terminal (app/cli/progress_line.py) or
`--progress json`, a stream of events for scripts, one JSON object a line. A job's end is
its last event.

The jobs then run in a dispatcher outside this command (the console, a headless master, or
one started here for them, in its own session): Ctrl-C asks whether to cancel them or leave
them running, and a job left running goes on after the command has exited. A command that
runs its jobs itself (`--wait` with nothing to show, Master.wait_for) cannot leave them:
Ctrl-C cancels those (stop_waiting)."""

import json
import sys
import time

from app.cli.progress_line import Block, job_line, use_color

STOP_TIMEOUT = 60.0  # for the jobs this command runs to end once canceled
POLL = 0.25          # a few redraws a second; each reads the jobs' rows by id
RESTART_AFTER = 10.0  # no dispatcher for this long while jobs wait: start one again
EVENT_FIELDS = ("id", "type", "client", "state", "status", "phase", "bytes", "files",
                "total_bytes", "total_files", "rate_bytes_per_s", "percent", "eta_s")


def mode(args):
    """How a --wait shows its jobs: "json" (--progress json), "line" (stdout is a terminal
    and no --json) or None (nothing until the jobs end, as without a terminal)."""
    chosen = getattr(args, "progress", None) or "auto"
    if chosen == "json":
        return "json"
    if chosen == "none" or getattr(args, "json", False):
        return None
    return "line" if sys.stdout.isatty() else None


class Follow:
    def __init__(self, m, ids, how, start_dispatcher):
        self.m = m
        self.ids = list(ids)
        self.how = how
        self.start_dispatcher = start_dispatcher
        self.block = Block(sys.stdout) if how == "line" else None
        self.color = use_color(sys.stdout)
        self.sent = {}       # job id -> the last event written (json)
        self.left_running = False

    def run(self):
        """Waits until the jobs end, or until the user leaves them running (left_running).
        Returns the jobs as they are then."""
        if getattr(self.m, "remote", False):
            return self._run_pushed()
        self.start_dispatcher()
        last_dispatcher = time.monotonic()
        try:
            while True:
                try:
                    jobs = self.m.jobs_by_id(self.ids)
                    self.show(jobs)
                    if all(j["state"] == "done" for j in jobs):
                        break
                    if self.m.dispatcher_active():
                        last_dispatcher = time.monotonic()
                    elif time.monotonic() - last_dispatcher > RESTART_AFTER:
                        self.start_dispatcher()
                        last_dispatcher = time.monotonic()
                    time.sleep(POLL)
                except KeyboardInterrupt:
                    if not self.interrupted():
                        self.left_running = True
                        break
        finally:
            # also before an error's message, which would otherwise follow a progress line
            if self.block is not None:
                self.block.clear()
        return self.m.jobs_by_id(self.ids)

    def _run_pushed(self):
        """Against a master over SSH: it pushes the jobs whenever one changed (the "jobs"
        stream, app/remote/streams.py) instead of being asked a few times a second."""
        self.start_dispatcher()
        sub = self.m.subscribe("jobs", job_ids=self.ids, interval=POLL)
        try:
            while True:
                try:
                    self.show(next(sub))
                except StopIteration:
                    self.show(sub.result)
                    return sub.result
                except KeyboardInterrupt:
                    if not self.interrupted():
                        self.left_running = True
                        return self.m.jobs_by_id(self.ids)
        finally:
            sub.close()
            if self.block is not None:
                self.block.clear()

    def show(self, jobs):
        if self.block is not None:
            self.block.draw([job_line(j, self.color) for j in jobs if j["state"] != "done"])
            return
        for j in jobs:
            ev = {k: j.get(k) for k in EVENT_FIELDS}
            if self.sent.get(j["id"]) == ev:
                continue
            self.sent[j["id"]] = ev
            ev = dict(event="end" if j["state"] == "done" else "progress",
                      job=ev.pop("id"), **ev)
            sys.stdout.write(json.dumps(ev, ensure_ascii=True) + "\n")
        sys.stdout.flush()

    def interrupted(self):
        """Ctrl-C: cancel the jobs that have not ended, or leave them running. True when
        the wait goes on (they were asked to cancel)."""
        waiting = [j for j in self.ids if self.m.job(j)["state"] != "done"]
        if self.block is not None:
            self.block.clear()
        if not waiting:
            return True
        if not sys.stdin.isatty():
            return False
        names = ", ".join(map(str, waiting))
        sys.stderr.write(f"Cancel job{'s' if len(waiting) > 1 else ''} {names}? [y/N] ")
        sys.stderr.flush()
        try:
            answer = sys.stdin.readline()
        except KeyboardInterrupt:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            if not answer.endswith("\n"):
                sys.stderr.write("\n")
            return False
        for j in waiting:
            self.m.cancel_job(j)
        sys.stderr.write(f"cancel requested for job{'s' if len(waiting) > 1 else ''} "
                         f"{names}; waiting for {'them' if len(waiting) > 1 else 'it'} "
                         "to stop\n")
        sys.stderr.flush()
        return True


def stop_waiting(m, ids):
    """Ctrl-C while Master.wait_for waited, showing nothing. Jobs this command runs itself
    cannot outlive it: they are canceled and waited for, so that they end as canceled
    (status 150) with nothing half committed rather than be cut off. Jobs another dispatcher
    runs, or that are still queued, are left to it. Returns the jobs and whether some were
    left."""
    # A remote master never runs a command's jobs in its own process (it starts a headless
    # dispatcher for them): none ran "here".
    here = {} if getattr(m, "remote", False) else m.dispatcher.running_here()
    mine = [j for j in ids if j in here and m.job(j)["state"] != "done"]
    for j in mine:
        m.cancel_job(j)
    if mine:
        sys.stderr.write(f"cairn: interrupted: job{'s' if len(mine) > 1 else ''} "
                         f"{', '.join(map(str, mine))} ran in this command and "
                         f"{'are' if len(mine) > 1 else 'is'} canceled (with a console or "
                         "`cairn master run` running, or on a terminal, Ctrl-C can leave "
                         "jobs running)\n")
        sys.stderr.flush()
    deadline = time.monotonic() + STOP_TIMEOUT
    for j in mine:
        here[j].join(timeout=max(0.0, deadline - time.monotonic()))
    jobs = [m.job(j) for j in ids]
    return jobs, any(j["state"] != "done" for j in jobs)
