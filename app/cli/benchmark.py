"""`cairn storage-server benchmark` and `benchmark-results`: the disk benchmark of a storage
server's volumes (app/jobs/benchmark.py), the object storage benchmark of a cloud server's
bucket (app/jobs/object_benchmark.py), and the runs the catalog keeps.

The object benchmark's helpers are imported lazily, by the commands that show its figures:
every `cairn` command imports this module (its parsers are named for --help), and they would
load the bucket client with it."""

import csv
import sys

from app import storage_sizing
from app.cli.output import out, size, table
from app.cli.shared import jobs_result, progress_option
from app.errors import ValidationError
from app.jobs.kinds import OBJECT_WORKLOAD as OBJECT


def benchmark_commands(ss, cmd, size_arg):
    p = cmd(ss, "benchmark", "measure the disks of a storage server's volumes (writer and "
                             "reader thread pairs, as tsmdiskperf) or a cloud server's bucket "
                             "(PUT and GET threads)", handler=_benchmark,
            description="stgpool and db: run writer/reader thread pairs on the volumes (one "
                        "pair per directory, directories round-robin over the volumes), "
                        "adding a pair per step until the combined throughput stabilizes or "
                        "--max-pairs is reached, past the page cache. stgpool: 256 KiB "
                        "sequential I/O; db: 8 KiB random I/O. object (a cloud server's "
                        "bucket): for each thread count from --min-threads to --max-threads "
                        "by --step, the threads upload objects of --object-size (multipart "
                        "from the part size up), read them back whole, then read ranges of "
                        "them; the objects are removed afterwards. Throughput in MiB/s (the "
                        "*_mb_s fields of --json). The run is kept in the catalog "
                        "(benchmark-results). Refused while backups or restores use the "
                        "pool, unless --force.")
    p.add_argument("name")
    p.add_argument("--volume", action="append", default=[], metavar="PATH",
                   help="a directory on the server's host to test; repeat for more "
                        "(default: the volumes of the server's disk pools)")
    p.add_argument("--workload", choices=("stgpool", "db", OBJECT),
                   help="default: object for a cloud server (its bucket), stgpool otherwise; "
                        "stgpool or db on a cloud server measures its cache's disks")
    p.add_argument("--max-pairs", type=int, metavar="N",
                   help="the most writer/reader pairs (1-100; default 8)")
    p.add_argument("--min-threads", type=int, metavar="N",
                   help="cloud servers: the first thread count (default 1)")
    p.add_argument("--max-threads", type=int, metavar="N",
                   help="cloud servers: the last thread count (1-100; default 8)")
    p.add_argument("--step", type=int, metavar="N",
                   help="cloud servers: the thread counts between, by N (default 1; 1, 10, "
                        "20 ... 100 for --min-threads 1 --max-threads 100 --step 10)")
    p.add_argument("--object-size", type=size_arg, metavar="SIZE",
                   help="cloud servers: the size of each object (default 64M, as a pool's "
                        "containers; at most 1G)")
    p.add_argument("--objects-per-thread", type=int, metavar="N",
                   help="cloud servers: the objects each thread uploads and reads back at "
                        "each thread count (default 4)")
    p.add_argument("--csv", action="store_true",
                   help="cloud servers: print the thread counts as CSV (thread count, object "
                        "size, write and read MB/s) instead of the table")
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
    p.add_argument("--csv", action="store_true",
                   help="with --run ID of an object benchmark: its thread counts as CSV "
                        "(thread count, object size, write and read MB/s)")


def _benchmark(m, args):
    disk = dict(step_seconds=args.step_seconds, file_size=args.file_size)
    threads = dict(min_threads=args.min_threads, max_threads=args.max_threads,
                   step=args.step, object_size=args.object_size,
                   objects_per_thread=args.objects_per_thread)
    # Each workload takes its own settings; the master names one given to the other.
    given = {k: v for k, v in {**disk, **threads}.items() if v is not None}
    from app.jobs.object_benchmark import has_bucket
    if args.csv and (args.workload or (OBJECT if has_bucket(m.storage_server(args.name))
                                       else "stgpool")) != OBJECT:
        raise ValidationError("--csv is for the object benchmark of a cloud server's bucket",
                              hint="give --json for a disk benchmark's figures")
    job = m.start_storage_benchmark(args.name, volumes=args.volume or None,
                                    workload=args.workload, max_pairs=args.max_pairs,
                                    force=args.force, **given)

    def more(doc):
        r = m.job(job).get("result") or {}
        doc.update(benchmark_doc(r))
        if not doc["steps"]:
            return None
        return show_csv if args.csv else show_run
    return jobs_result(m, args, [job], more=more, job_lines=sys.stderr if args.csv else None)


def benchmark_doc(r):
    """The benchmark's part of the command's result: its steps and what they support."""
    if r.get("workload") == OBJECT:
        return {"server": r.get("server"), "workload": OBJECT, "io_size": r.get("object_size"),
                "object_size": r.get("object_size"), "volumes": r.get("volumes"),
                "thread_counts": r.get("thread_counts"), "steps": r.get("steps") or [],
                "stopped": r.get("stopped"), "max_write_mb_s": r.get("max_write_mb_s"),
                "max_read_mb_s": r.get("max_read_mb_s"), "max_combined_mb_s": None,
                "sizing": []}
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


OBJECT_COLUMNS = [("threads", "threads"), ("object", "object_size"),
                  ("write MiB/s", "write_mb_s"), ("read MiB/s", "read_mb_s"),
                  ("ranged MiB/s", "ranged_read_mb_s"), ("ranged ops/s", "ranged_ops_s"),
                  ("put ms p50/95", "put"), ("get ms p50/95", "get"),
                  ("ranged ms p50/95", "ranged")]


def _pair(s, k):
    vals = [s.get(f"{k}_p{q}_ms") for q in (50, 95)]
    return "/".join("-" if v is None else f"{v:g}" for v in vals)


def show_object_run(d):
    rows = []
    for s in d["steps"]:
        row = {label: s.get(key) for label, key in OBJECT_COLUMNS}
        row["object"] = size(s["object_size"])
        for kind in ("put", "get", "ranged"):
            row[f"{kind} ms p50/95"] = _pair(s, kind)
        rows.append(row)
    table(rows, [label for label, _ in OBJECT_COLUMNS])
    if d.get("volumes"):
        print(f"bucket: {', '.join(d['volumes'])}")
    if d.get("stopped") in ("canceled", "failed"):
        print(d["stopped"])
    from app.jobs.object_benchmark import best_line
    print(best_line(d["steps"]))


def show_csv(d):
    if d.get("workload") != OBJECT:
        raise ValidationError("--csv is for the runs of the object benchmark",
                              hint="give --json for a disk benchmark's figures")
    from plugins.storage.cloud.objbench import csv_rows
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerows(csv_rows(d))


def show_run(d):
    if d.get("workload") == OBJECT:
        return show_object_run(d)
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
        return out(args, run, show_csv if args.csv else show_run)
    if args.csv:
        raise ValidationError("--csv prints one run", hint="give --run ID")

    def human(d):
        table([dict(r, best=_best(r), volumes=",".join(r["volumes"]), steps=len(r["steps"]),
                    supports=next((lv["label"] for lv in reversed(r["sizing"])
                                   if lv["supported"] != "no"), "-"))
               for r in d["runs"]],
              ["id", "started", "workload", "status", "stopped", "steps", "best",
               "cache_bypass", "supports", "volumes"])
    return out(args, {"runs": runs}, human)


def _best(run):
    """A disk run's best combined MiB/s; an object run's best write/read MiB/s."""
    if run["workload"] == OBJECT:
        if run.get("max_write_mb_s") is None:
            return None
        return f"{run['max_write_mb_s']:g}/{run['max_read_mb_s']:g} w/r"
    return run["max_combined_mb_s"]
