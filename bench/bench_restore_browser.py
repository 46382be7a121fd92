#!/usr/bin/env python3
"""Benchmark of the restore browser (ui/restore_view.py, ui/file_tree.py) at image scale.

Builds, inside a fresh catalog, the file index of a synthetic image holding one directory of
100,000 entries beside many small directories (--rows in all), then measures offscreen, in
a real QTreeView over the real ImageFilesModel and bridge:

    expand 100k      < 300 ms   from asking the tree to expand the big directory to its
                                first rows painted in the view (median of --runs)
    check 100k       < 300 ms   checking the big directory once it is listed (its whole
                                subtree is chosen; the view repaints)
    search           (figure)   a name pattern over the whole image (app/search.py)

Prints a table and exits 1 if a target is missed. Usage:
bench/bench_restore_browser.py [--rows N] [--runs N] [--capitals]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.catalog_index import IndexWriter  # noqa: E402

BIG = 100_000
FILES_PER_DIR = 60
TARGET_MS = 300
IMAGE_ID = "bench_1"


def rows(total, capitals=False):
    """Rows in walker order: /data, the big directory, then small directories."""
    mtime = 1_790_000_000 * 10**9
    offset = 0

    def row(path, kind, size=0):
        nonlocal offset
        length = 512 + ((size + 511) // 512) * 512 if kind == "f" else 512
        r = [path, kind, 0o644 if kind == "f" else 0o755, 1000, 1000, size, mtime, offset,
             length, "", ""]
        offset += length
        return r

    yield row("/data", "d")
    yield row("/data/big", "d")
    for i in range(BIG):
        name = f"File-{i:06d}.DAT" if capitals and i % 2 else f"file-{i:06d}.dat"
        yield row(f"/data/big/{name}", "f", 4096 + i)
    left = max(total - BIG - 2, 0)
    ndirs = left // (FILES_PER_DIR + 1)
    for d in range(ndirs):
        base = f"/data/proj/d{d:05d}"
        yield row(base, "d")
        for f in range(FILES_PER_DIR):
            ext = "log" if f % 20 == 0 else "csv"
            yield row(f"{base}/r{f:03d}.{ext}", "f", 1000 + f)


def build_catalog(home, total, capitals=False):
    from app.master import Master
    from app import timeutil
    m = Master(home)
    host = m.ensure_local_host()["name"]
    t0 = time.perf_counter()
    w = IndexWriter(m.home.index_path(IMAGE_ID))
    batch, n = [], 0
    for r in rows(total, capitals):
        batch.append(r)
        if len(batch) == 10_000:
            w.add_rows(batch)
            n += len(batch)
            batch = []
    w.add_rows(batch)
    n += len(batch)
    w.close()
    built = time.perf_counter() - t0
    now = timeutil.iso(time.time())
    with m.db.tx() as c:
        c.execute("INSERT INTO images(id, client, policy, schedule, schedule_type, created, "
                  "expires, bytes, files, storage_unit, pool, storage_host, path, image_bytes, "
                  "job_id, selections, warnings) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                  (IMAGE_ID, host, "p1", "daily", "full", now, None, 0, n, "stu1", "dp1", host,
                   "/nonexistent", 0, None, json.dumps(["/data"]), 0))
    return m, n, built


def measure(m, runs):
    from PySide6.QtWidgets import QApplication, QTreeView
    from ui.bridge import Bridge
    from ui.file_tree import CHECKED, ImageFilesModel

    app = QApplication.instance() or QApplication([])
    bridge = Bridge(m)
    model = ImageFilesModel(bridge)
    tree = QTreeView()
    tree.setUniformRowHeights(True)
    tree.setModel(model)
    tree.resize(1000, 700)
    tree.show()

    def wait(cond, timeout=30.0):
        end = time.perf_counter() + timeout
        while not cond():
            app.processEvents()
            if time.perf_counter() > end:
                raise RuntimeError("timed out")
            time.sleep(0.0005)

    expand_ms, check_ms = [], []
    try:
        for _ in range(runs):
            model.set_image(IMAGE_ID)
            wait(lambda: model.rowCount() == 1)
            data = model.index(0, 0)
            tree.expand(data)
            wait(lambda: model.rowCount(data) == 2)
            big = model.index_of_path("/data/big")
            app.processEvents()
            t0 = time.perf_counter()
            tree.expand(big)
            wait(lambda: model.rowCount(big) > 0)
            tree.viewport().repaint()
            expand_ms.append((time.perf_counter() - t0) * 1000)
            assert model.index(0, 0, big).data() == "file-000000.dat"

            t0 = time.perf_counter()
            model.set_checked(big, CHECKED)
            tree.viewport().repaint()
            check_ms.append((time.perf_counter() - t0) * 1000)
            assert len(model.checked_paths()) == 1
    finally:
        tree.close()
        bridge.shutdown()
    return expand_ms, check_ms


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--capitals", action="store_true",
                    help="half the names of the big directory in capitals, so that the tree "
                         "sorts them case-insensitively (the index keeps name-byte order)")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="cairn-bench-restore-")
    try:
        m, n, built = build_catalog(os.path.join(tmp, "home"), args.rows, args.capitals)
        expand_ms, check_ms = measure(m, args.runs)
        t0 = time.perf_counter()
        found = m.search(IMAGE_ID, "*.log")
        search_s = time.perf_counter() - t0
        m.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    exp, chk = statistics.median(expand_ms), statistics.median(check_ms)
    print(f"image: {n:,} entries, one directory of {BIG:,} (index built in {built:.1f} s)")
    print(f"{'measure':<34}{'median':>10}{'min':>10}{'max':>10}{'target':>10}")
    print(f"{'expand the 100k directory (ms)':<34}{exp:>10.0f}{min(expand_ms):>10.0f}"
          f"{max(expand_ms):>10.0f}{'< 300':>10}")
    print(f"{'check the 100k directory (ms)':<34}{chk:>10.1f}{min(check_ms):>10.1f}"
          f"{max(check_ms):>10.1f}{'< 300':>10}")
    print(f"search '*.log' over the image: {search_s * 1000:.0f} ms, {found['count']:,} "
          f"matches ({len(found['matches']):,} listed)")
    ok = exp < TARGET_MS and chk < TARGET_MS
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
