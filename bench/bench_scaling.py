"""Aggregate backup and restore throughput with 1, 2 and 4 storage servers (seed 000's twelve
clients, seed 003's scaling with servers), each host a network namespace of its own with its
own sshd and address (tests/netbed.py), every host's link limited so that the links, not this
machine's two cores, bound the run.

Twelve clients each back up their own tree at once through a storage unit group
(least-loaded) over the units of 1, 2 or 4 storage servers, then restore it to a new
directory on themselves. The configurations alternate round by round; medians are reported.
For each run: the wall-clock rate (bytes over the span from the first start to the last end)
and seed 000's total average data rate (the sum of the clients' own rates, app/reports.py),
and each storage server's share of the jobs. A plot of the aggregate rate over time (seed
000's Figure 37) is written with --plot.

    .venv/bin/python bench/bench_scaling.py                 # about 8 minutes
    .venv/bin/python bench/bench_scaling.py --quick         # one round, less data
    .venv/bin/python bench/bench_scaling.py --plot scaling.png

Needs root (network namespaces). Exits 1 when 2 and 4 servers do not reach 1.8x and 3.4x the
1-server figure, for backup or restore."""

import argparse
import filecmp
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from app import reports  # noqa: E402
from app import status as st  # noqa: E402
from app.master import Master  # noqa: E402
from netbed import NetBed  # noqa: E402

TARGETS = {2: 1.8, 4: 3.4}
MB = 1e6


def make_trees(base, clients, mib):
    """One tree per client: files of 8 MiB of random bytes (advanced-disk stores them as they
    are, so the bytes on the wire are the bytes read)."""
    srcs = {}
    for c in clients:
        d = base / f"src-{c}"
        d.mkdir(parents=True)
        for i in range(max(1, mib // 8)):
            (d / f"f{i:02d}.bin").write_bytes(os.urandom(8 << 20))
        srcs[c] = d
    return srcs


def build(work, bed, n_clients, n_servers, rate_mbit):
    m = Master(str(work / "home"))
    clients = [f"c{i:02d}" for i in range(1, n_clients + 1)]
    servers = [f"s{i}" for i in range(1, n_servers + 1)]
    for name in clients + servers:
        h = bed.add_host(name, rate_mbit=rate_mbit)
        m.add_host(name, address=h.address, port=h.port, user=h.user, key_file=h.key_file,
                   trust_host_key=True)
    for s in servers:
        vol = work / f"vol-{s}"
        vol.mkdir()
        m.create_storage_server(s, type="advanced-disk", host=s)
        m.create_disk_pool(f"p{s}", server=s, volumes=[str(vol)], high_water=100,
                           low_water=99)
        m.create_storage_unit(f"u{s}", pool=f"p{s}", max_concurrent_jobs=n_clients)
    m.set_setting("max_jobs_per_client", 2)
    # Every host's agent started before the first timed run, as in a site that runs nightly.
    for name in clients + servers:
        m.hosts.connect(m.config.host(name))
    return m, clients, servers


def rate_over_time(db, job_ids, t0, step=1.0):
    """[(seconds since t0, aggregate bytes/s)]: each job's progress samples interpolated on a
    grid and differentiated, summed over the jobs."""
    series = {}
    for jid in job_ids:
        pts = [(r["t"], r["bytes"] or 0) for r in db.all(
            "SELECT t, bytes FROM job_samples WHERE job_id=? ORDER BY t", (jid,))]
        j = db.one("SELECT started_t, ended_t, bytes FROM jobs WHERE id=?", (jid,))
        if j["started_t"]:
            pts = [(j["started_t"], 0)] + pts
        if j["ended_t"]:
            pts.append((j["ended_t"], j["bytes"] or 0))
        series[jid] = sorted(pts)
    end = max((p[-1][0] for p in series.values() if p), default=t0)
    grid = [t0 + k * step for k in range(int((end - t0) / step) + 2)]

    def at(pts, t):
        if not pts or t <= pts[0][0]:
            return 0.0
        for (ta, ba), (tb, bb) in zip(pts, pts[1:]):
            if ta <= t <= tb:
                return ba + (bb - ba) * ((t - ta) / (tb - ta) if tb > ta else 1.0)
        return pts[-1][1]
    totals = [sum(at(p, t) for p in series.values()) for t in grid]
    return [(grid[k] - t0, (totals[k + 1] - totals[k]) / step) for k in range(len(grid) - 1)]


def figures(m, kind, job_ids):
    rows = [r for r in reports.job_rows(m.db, kind) if r["job_id"] in set(job_ids)]
    groups = reports.group_overlapping(rows)
    total = sum(r["bytes"] for r in rows)
    start = min(r["started_t"] for r in rows)
    end = max(r["ended_t"] for r in rows)
    return {"bytes": total, "span_s": end - start, "wall_clock_mb_s": total / (end - start) / MB,
            "total_average_mb_s": sum(g["total_average_rate_bytes_per_s"] or 0
                                      for g in groups) / MB,
            "groups": len(groups), "t0": start,
            "curve": rate_over_time(m.db, job_ids, start)}


def one_run(m, work, clients, servers, srcs, n, label):
    for c in clients:
        m.update_object("policy", f"p-{c}", storage_unit_group=f"g{n}")
    ids = [jid for c in clients for jid in m.start_backup(f"p-{c}")]
    jobs = m.wait_for(ids, timeout=1800)
    bad = [j for j in jobs if j["status"] != st.OK]
    if bad:
        raise SystemExit(f"{label}: backup job {bad[0]['id']} ended with status "
                         f"{bad[0]['status']}: " + "\n".join(
                             x["message"] for x in m.jobs.logs(bad[0]["id"])))
    share = {}
    for j in jobs:
        share[j["storage_unit"]] = share.get(j["storage_unit"], 0) + 1
    backup = figures(m, "backup", ids)
    out = work / f"out-{label}"
    rids = [m.start_restore(j["image_id"], [str(srcs[j["client"]])], str(out / j["client"]),
                            to_host=j["client"]) for j in jobs]
    rjobs = m.wait_for(rids, timeout=1800)
    bad = [j for j in rjobs if j["status"] != st.OK]
    if bad:
        raise SystemExit(f"{label}: restore job {bad[0]['id']} ended with status "
                         f"{bad[0]['status']}")
    restore = figures(m, "restore", rids)
    for c in clients:
        got = Path(str(out / c) + str(srcs[c]))
        cmp = filecmp.dircmp(srcs[c], got)
        if cmp.left_only or cmp.right_only or filecmp.cmpfiles(
                srcs[c], got, cmp.common_files, shallow=False)[1]:
            raise SystemExit(f"{label}: the restore of {c} differs from its tree")
    shutil.rmtree(out)
    for j in jobs:
        m.expire_image(j["image_id"])
    return {"servers": n, "backup": backup, "restore": restore, "share": share}


def plot(path, runs_by_n, rate_mbit):
    """Aggregate rate over time of the median run of each configuration, backup and
    restore side by side (pyqtgraph, drawn off screen)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    import pyqtgraph.exporters as exporters
    from PySide6.QtWidgets import QApplication
    app = QApplication.instance() or QApplication([])
    pg.setConfigOptions(background="w", foreground="k", antialias=True)
    win = pg.GraphicsLayoutWidget()
    win.resize(1200, 500)
    win.ci.setContentsMargins(10, 10, 10, 24)
    colors = {1: (200, 60, 40), 2: (40, 120, 200), 4: (40, 160, 80)}
    for col, kind in enumerate(("backup", "restore")):
        p = win.addPlot(row=0, col=col, title=f"Aggregate {kind} rate, 12 clients "
                                              f"({rate_mbit} Mbit/s per host link)")
        p.setLabel("bottom", "seconds since the first job started")
        p.setLabel("left", "MB/s")
        p.addLegend(offset=(-10, 10))
        p.showGrid(x=True, y=True, alpha=0.3)
        for n, runs in sorted(runs_by_n.items()):
            run = sorted(runs, key=lambda r: r[kind]["wall_clock_mb_s"])[len(runs) // 2]
            xs = [x for x, _ in run[kind]["curve"]]
            ys = [y / MB for _, y in run[kind]["curve"]]
            p.plot(xs, ys, pen=pg.mkPen(colors.get(n, (0, 0, 0)), width=2),
                   name=f"{n} server{'s' if n > 1 else ''}: total average "
                        f"{run[kind]['total_average_mb_s']:.0f} MB/s")
    app.processEvents()
    exporters.ImageExporter(win.scene()).export(str(path))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--servers", default="1,2,4")
    ap.add_argument("--rate-mbit", type=int, default=160,
                    help="each host's link, both ways (default 160 Mbit/s = 20 MB/s)")
    ap.add_argument("--mib", type=int, default=64, help="data per client (MiB)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one round of 24 MiB per client")
    ap.add_argument("--plot", help="write the aggregate rate over time to this PNG")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.mib = 1, 24
    configs = [int(x) for x in args.servers.split(",")]
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-scaling-"))
    bed = NetBed(work / "bed")
    m = None
    try:
        m, clients, servers = build(work, bed, args.clients, max(configs), args.rate_mbit)
        for n in configs:
            m.create_storage_unit_group(f"g{n}", ",".join(f"u{s}" for s in servers[:n]),
                                        "least-loaded")
        srcs = make_trees(work, clients, args.mib)
        for c in clients:
            m.create_policy(f"p-{c}", storage_unit_group=f"g{configs[0]}", clients=[c],
                            selections=[str(srcs[c])],
                            schedules=[{"name": "full", "type": "full"}])
        runs = {n: [] for n in configs}
        for rnd in range(args.rounds):
            order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
            for n in order:
                r = one_run(m, work, clients, servers, srcs, n, f"r{rnd}-{n}")
                runs[n].append(r)
                print(f"round {rnd + 1}, {n} server(s): backup "
                      f"{r['backup']['wall_clock_mb_s']:.1f} MB/s wall clock, "
                      f"{r['backup']['total_average_mb_s']:.1f} total average; restore "
                      f"{r['restore']['wall_clock_mb_s']:.1f} / "
                      f"{r['restore']['total_average_mb_s']:.1f}; jobs per unit "
                      f"{dict(sorted(r['share'].items()))}", flush=True)
        result = report(runs, configs, args)
        if args.plot:
            plot(args.plot, runs, args.rate_mbit)
            print(f"plot: {args.plot}")
    finally:
        if m is not None:
            m.close()
        bed.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    return 0 if result["targets_met"] else 1


def report(runs, configs, args):
    med = {n: {k: {f: statistics.median(r[k][f] for r in runs[n])
                   for f in ("wall_clock_mb_s", "total_average_mb_s", "span_s")}
               for k in ("backup", "restore")} for n in configs}
    base = configs[0]
    print(f"\n{args.clients} clients, {args.mib} MiB each, every host link "
          f"{args.rate_mbit} Mbit/s ({args.rate_mbit / 8:.0f} MB/s); medians of "
          f"{args.rounds} round(s)\n")
    print("| servers | backup MB/s (wall clock) | total average | vs 1 | restore MB/s "
          "(wall clock) | total average | vs 1 | target |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    met = True
    out = {"configs": {}, "targets_met": True}
    for n in configs:
        b, r = med[n]["backup"], med[n]["restore"]
        xb = b["wall_clock_mb_s"] / med[base]["backup"]["wall_clock_mb_s"]
        xr = r["wall_clock_mb_s"] / med[base]["restore"]["wall_clock_mb_s"]
        target = TARGETS.get(n)
        if target and (xb < target or xr < target):
            met = False
        print(f"| {n} | {b['wall_clock_mb_s']:.1f} | {b['total_average_mb_s']:.1f} | "
              f"{xb:.2f}x | {r['wall_clock_mb_s']:.1f} | {r['total_average_mb_s']:.1f} | "
              f"{xr:.2f}x | {f'>= {target}x' if target else '-'} |")
        out["configs"][n] = {"backup": b, "restore": r, "backup_x": xb, "restore_x": xr,
                             "target_x": target,
                             "shares": [run["share"] for run in runs[n]]}
    out["targets_met"] = met
    print("\ntargets " + ("met" if met else "MISSED"))
    return out


if __name__ == "__main__":
    sys.exit(main())
