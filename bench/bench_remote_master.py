#!/usr/bin/env python3
"""The console's budgets on a master over SSH across a link with 50 ms round-trip time.

The master is served (`cairn master serve --stdio`) by the loopback sshd of the tests
(tests/sshd.py), reached through a delay line: a relay that hands on every byte 25 ms after
it arrived, each way (`tc netem` does the same in the kernel, where the kernel has it; the
relay needs nothing), from a catalog holding the restore browser benchmark's image (one
directory of 100,000 entries beside many small ones, bench/bench_restore_browser.py). Over a
RemoteMaster it measures, median of --runs:

    round trip        a call that does nothing much (settings)          (figure)
    status bar        the status bar's five reads, in one batch          < 150 ms
                      and one by one                                     (figure)
    activity tick     the job change feed's read (job_changes)           < 150 ms
    job pushed        a job written on the master until the activity monitor's stream
                      (job_changes, as ui/activity.py opens it) brings it  < 1000 ms (its
                      clock's tick, when it read on the clock)
    expand small      the restore browser's listing of a 60-entry directory < 150 ms
    expand 100k       the restore browser's real tree expanding the big directory, first
                      rows painted (ui/file_tree.py over the bridge)     < 300 ms
    wizard steps      what each step of the setup wizards reads (bench/wizard_steps.py), on
                      the embedded master and over the link; for the steps that read several
                      lists, also one by one as before they were batched  < 150 ms each

The targets are the console's local budgets plus a round trip or two. Prints a table; exits
1 if a target is missed. Usage:
bench/bench_remote_master.py [--rows N] [--runs N] [--delay-ms 25]
"""

import argparse
import heapq
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import bench_restore_browser as browser  # noqa: E402
import wizard_steps  # noqa: E402
from sshd import SSHServer  # noqa: E402

STATUS_READS = [("job_list", (), {"state": "active"}), ("job_list", (), {"state": "queued"}),
                ("host_list",), ("catalog_backup_state",), ("duplication_problems",)]


class DelayLine:
    """A TCP relay on 127.0.0.1:port to `target` that delivers every chunk `delay` seconds
    after it arrived, in order, each way: a link with a round trip of twice that."""

    def __init__(self, target, delay):
        self.target, self.delay = target, delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            b = socket.create_connection(self.target)
            for s in (a, b):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst):
        due, cv, n = [], threading.Condition(), [0]

        def writer():
            while True:
                with cv:
                    while not due:
                        cv.wait()
                    t, _, data = due[0]
                    wait = t - time.monotonic()
                    if wait > 0:
                        cv.wait(wait)
                        continue
                    heapq.heappop(due)
                if data is None:
                    dst.shutdown(socket.SHUT_WR)
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return
        threading.Thread(target=writer, daemon=True).start()
        while True:
            try:
                data = src.recv(1 << 20)
            except OSError:
                data = b""
            with cv:
                n[0] += 1
                heapq.heappush(due, (time.monotonic() + self.delay, n[0], data or None))
                cv.notify()
            if not data:
                return

    def close(self):
        self.listener.close()


def timed(fn, runs):
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pushed(rm, home, runs):
    """ms from a job written on the master to the stream's event that holds it."""
    import queue
    import random
    # lazily, as the module's other Cairn imports: after sys.path names the checkout
    from app import status as st
    from app.master import Master
    from ui.activity import ActivityView
    m = Master(home)
    kind, kwargs = ActivityView.stream_call(_Cursor(m.job_changes(0)["cursor"]))
    sub, arrived = rm.subscribe(kind, **kwargs()), queue.Queue()

    def read():
        for event in sub:
            arrived.put((time.perf_counter(), [j["id"] for j in event["jobs"]]))
    threading.Thread(target=read, daemon=True).start()
    out = []
    try:
        for _ in range(runs):
            time.sleep(random.uniform(0.3, 0.8))   # any phase of the master's reads
            while not arrived.empty():
                arrived.get()
            t0 = time.perf_counter()
            with m.db.tx() as c:   # claimed at once: no dispatcher runs it
                jid = m.jobs.create("backup", client="me", policy="p1", c=c)
                m.jobs.claim(jid, "bench", c=c)
            while True:
                t, ids = arrived.get(timeout=10)
                if jid in ids:
                    out.append((t - t0) * 1000)
                    break
            m.jobs.finish(jid, st.OK)
    finally:
        sub.close()
        m.close()
    return out


class _Cursor:
    """What ActivityView.stream_call reads of the page: where its table is."""

    def __init__(self, cursor):
        self._cursor = cursor


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=150_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--delay-ms", type=float, default=25.0,
                    help="delay each way (the round trip is twice this)")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="cairn-bench-remote-"))
    (tmp / "sshd").mkdir()
    server = line = None
    try:
        home = tmp / "master"
        m, n, _ = browser.build_catalog(str(home), args.rows)
        (tmp / "vol").mkdir()
        host = wizard_steps.setup(m, tmp / "vol")
        wizard_local = [(name, timed(lambda: fn(m), args.runs)) for name, fn, _ in
                        wizard_steps.steps(host)]
        m.close()
        server = SSHServer(tmp / "sshd").start()
        line = DelayLine((server.host, server.port), args.delay_ms / 1000)
        # lazily: the SSH client loads once the server is up
        from app.remote.client import RemoteMaster
        serve = (f"cd {ROOT} && exec {sys.executable} -m app master serve --stdio --home {home} "
                 "--user admin")
        t0 = time.perf_counter()
        rm = RemoteMaster(f"{server.user}@127.0.0.1:{line.port}", identity=server.key_file,
                          trust_key=True, command=serve,
                          known_hosts=str(tmp / "desktop" / "known_hosts"))
        connect_ms = (time.perf_counter() - t0) * 1000
        rm.settings()
        rows = [
            ("round trip (settings)", timed(rm.settings, args.runs), None),
            ("status bar, one batch", timed(lambda: rm.batch(STATUS_READS), args.runs), 150),
            ("status bar, call by call",
             timed(lambda: [rm.call(c[0], *(c[1:2] and c[1]), **(c[2] if len(c) > 2 else {}))
                            for c in STATUS_READS], args.runs), None),
            ("activity tick (job_changes)", timed(lambda: rm.job_changes(0), args.runs), 150),
            ("expand a 60-entry directory",
             timed(lambda: rm.list_entries(browser.IMAGE_ID, "/data/proj/d00000"), args.runs),
             150),
            ("list the 100k directory (call)",
             timed(lambda: rm.list_entries(browser.IMAGE_ID, "/data/big"), args.runs), None),
        ]
        rows.append(("job pushed (job_changes stream)", pushed(rm, str(home), args.runs),
                     1000))
        expand_ms, _check = browser.measure(rm, args.runs)
        rows.append(("expand 100k in the tree", expand_ms, 300))
        wizard = [(name, local, timed(lambda: fn(rm), args.runs),
                   timed(lambda: before(rm), args.runs) if before else None)
                  for (name, fn, before), (_, local) in zip(wizard_steps.steps(host),
                                                            wizard_local)]
        rm.close()
    finally:
        if line is not None:
            line.close()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"image: {n:,} entries; link: {2 * args.delay_ms:g} ms round trip; connect "
          f"{connect_ms:.0f} ms")
    print(f"{'measure (ms)':<34}{'median':>10}{'min':>10}{'max':>10}{'target':>10}")
    ok = True
    for name, values, target in rows:
        med = statistics.median(values)
        print(f"{name:<34}{med:>10.0f}{min(values):>10.0f}{max(values):>10.0f}"
              f"{('< ' + str(target)) if target else '':>10}")
        ok = ok and (target is None or med < target)
    print(f"\n{'wizard step (ms, median)':<36}{'local':>8}{'link':>8}{'max':>8}"
          f"{'1 by 1':>8}{'target':>8}")
    for name, local, link, before in wizard:
        med = statistics.median(link)
        print(f"{name:<36}{statistics.median(local):>8.0f}{med:>8.0f}{max(link):>8.0f}"
              f"{f'{statistics.median(before):.0f}' if before else '':>8}{'< 150':>8}")
        ok = ok and med < 150
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
