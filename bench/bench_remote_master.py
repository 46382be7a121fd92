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
    expand small      the restore browser's listing of a 60-entry directory < 150 ms
    expand 100k       the restore browser's real tree expanding the big directory, first
                      rows painted (ui/file_tree.py over the bridge)     < 300 ms

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
        expand_ms, _check = browser.measure(rm, args.runs)
        rows.append(("expand 100k in the tree", expand_ms, 300))
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
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
