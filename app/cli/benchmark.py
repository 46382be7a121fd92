"""`cairn storage-server benchmark` and `benchmark-results`: the disk benchmark of a storage
server's volumes (app/jobs/benchmark.py) and the runs the catalog keeps."""

from app import storage_sizing
from app.cli.output import out, table
from app.cli.shared import jobs_result, progress_option
from app.errors import ValidationError


def benchmark_commands(ss, cmd, size_arg):
    p = cmd(ss, "benchmark", "measure the disks of a storage server's volumes (writer and "
                             "reader thread pairs, as tsmdiskperf)", handler=_benchmark,
            description="Run writer/reader thread pairs on the volumes (one pair per "
                        "directory, directories round-robin over the volumes), adding a pair "
                        "per step until the combined throughput stabilizes or --max-pairs is "
                        "reached, past the page cache. stgpool: 256 KiB sequential I/O; db: "
                        "8 KiB random I/O. Throughput in MiB/s (the *_mb_s fields of "
                        "--json). The run is kept in the catalog (benchmark-results). "
                        "Refused while backups or restores use a pool on the volumes, unless "
                        "--force.")
    p.add_argument("name")
    p.add_argument("--volume", action="append", default=[], metavar="PATH",
                   help="a directory on the server's host to test; repeat for more "
                        "(default: the volumes of the server's disk pools)")
    p.add_argument("--workload", choices=("stgpool", "db"), default="stgpool")
    p.add_argument("--max-pairs", type=int, default=8, metavar="N",
                   help="the most writer/reader pairs (1-100; default 8)")
    p.add_argument("--force", action="store_true",
                   help="run even while backups or restores use the pool")
    p.add_argument("--step-seconds", type=float, metavar="S",
                   help="the shortest a step is measured (default 10; a step goes on, up to "
                        "three times as long, until its throughput is steady)")
    p.add_argument("--file-size", type=size_arg, metavar="SIZE",
                   help="the size of each pair's files (default 1G)")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    progress_option(p)
    p = cmd(ss, "benchmark-results", "the benchmark runs kept for a storage server",
            handler=_results)
    p.add_argument("name")
    p.add_argument("--run", type=int, metavar="ID", help="one run, with its steps")
    p.add_argument("--limit", type=int, default=20, help="the newest N runs (default 20)")


def _benchmark(m, args):
    job = m.start_storage_benchmark(args.name, volumes=args.volume or None,
                                    workload=args.workload, max_pairs=args.max_pairs,
                                    force=args.force, step_seconds=args.step_seconds,
                                    file_size=args.file_size)

    def more(doc):
        r = m.job(job).get("result") or {}
        doc.update(benchmark_doc(r))
        return show_run if doc["steps"] else None
    return jobs_result(m, args, [job], more=more)


def benchmark_doc(r):
    """The benchmark's part of the command's result: its steps and what they support."""
    best = r.get("max_combined_mb_s")
    return {"server": r.get("server"), "workload": r.get("workload"),
            "io_size": r.get("io_size"), "volumes": r.get("volumes"),
            "steps": r.get("steps") or [], "stopped": r.get("stopped"),
            "max_combined_mb_s": best, "cache_bypass": r.get("cache_bypass"),
            "notes": r.get("notes") or [], "sizing": storage_sizing.verdict(best)}


COLUMNS = [("pairs", "threads"), ("io", "io_size"), ("write MiB/s", "write_mb_s"),
           ("read MiB/s", "read_mb_s"), ("combined", "combined_mb_s"),
           ("peak", "max_combined_mb_s"), ("write IOPS", "write_iops"),
           ("read IOPS", "read_iops"), ("write ms p50/95/99", "write_lat"),
           ("read ms p50/95/99", "read_lat")]


def _lat(s, k):
    vals = [s.get(f"{k}_p{q}_ms") for q in (50, 95, 99)]
    return "/".join("-" if v is None else f"{v:g}" for v in vals)


def show_run(d):
    rows = []
    for s in d["steps"]:
        row = {label: s.get(key) for label, key in COLUMNS}
        row["io"] = f"{s['io_size'] >> 10}K"
        row["write ms p50/95/99"] = _lat(s, "write")
        row["read ms p50/95/99"] = _lat(s, "read")
        rows.append(row)
    table(rows, [label for label, _ in COLUMNS])
    if d.get("stopped"):
        print({"stable": "the combined throughput stabilized",
               "max_pairs": "the most pairs were reached",
               "canceled": "canceled", "failed": "the run failed"}.get(d["stopped"],
                                                                     d["stopped"]))
    for note in d.get("notes") or []:
        print(f"note: {note}")
    if d.get("cache_bypass") == "fadvise":
        print("page cache: bypassed by syncing and dropping cached pages (no direct I/O here)")
    print("sizing: " + storage_sizing.summary(d.get("max_combined_mb_s")))
    for lv in d["sizing"]:
        print(f"  {lv['label']:<7} {lv['ingest']:<18} needs {lv['low_mb_s']}-"
              f"{lv['high_mb_s']} MiB/s: {lv['supported']}")


def _results(m, args):
    runs = m.storage_benchmarks(args.name, limit=args.limit if args.run is None else 100000)
    if args.run is not None:
        run = next((r for r in runs if r["id"] == args.run), None)
        if run is None:
            raise ValidationError(f"storage server {args.name} has no benchmark run "
                                  f"{args.run}", hint="list them with `cairn storage-server "
                                                      f"benchmark-results {args.name}`")
        return out(args, run, show_run)

    def human(d):
        table([dict(r, best=r["max_combined_mb_s"], volumes=",".join(r["volumes"]),
                    pairs=len(r["steps"]),
                    supports=next((lv["label"] for lv in reversed(r["sizing"])
                                   if lv["supported"] != "no"), "-"))
               for r in d["runs"]],
              ["id", "started", "workload", "status", "stopped", "pairs", "best",
               "cache_bypass", "supports", "volumes"])
    return out(args, {"runs": runs}, human)
