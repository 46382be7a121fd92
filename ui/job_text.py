"""Jobs in words: the type, state, attempt and status of a job as the activity monitor's
columns and a job's details window show them, and what a verify, reclaim, import or
benchmark job found."""

from app import status as st
from app import storage_sizing
from app.jobs.object_benchmark import WORKLOAD as OBJECT, best_line
from ui import fmt


def missed(job):
    """A scheduled job that could not start before its start window closed."""
    return job["state"] == "done" and job.get("status") == st.WINDOW_CLOSED


def state_text(job):
    if job["state"] == "active" and job.get("cancel_requested"):
        return "canceling"
    if missed(job):
        return "missed"
    return job["state"]


def type_text(job):
    """The job's type, with the pool or image it works on for the jobs of a deduplicating
    pool (they have no storage unit, and a pool's jobs no client, to tell them apart)."""
    t = job.get("type") or ""
    p = job.get("params") or {}
    if t in ("verify", "reclaim", "import"):
        if p.get("image"):
            return f"{t} image {p['image']}"
        if p.get("pool"):
            return f"{t} pool {p['pool']}"
    if t == "rebuild-index" and p.get("image"):
        return f"{t} image {p['image']}"
    if t == "benchmark" and p.get("server"):
        return f"{t} server {p['server']} ({p.get('workload', 'stgpool')})"
    if t == "catalog-backup" and p.get("storage_unit"):
        return f"{t} to {p['storage_unit']}"
    return t


TYPE_TIPS = {
    "verify": "Reads the image (or every image of the pool) back: on a deduplicating pool "
              "it checks each chunk against its fingerprint, on an AdvancedDisk pool every "
              "tar header and file checksum; the job's details name the damaged files, and "
              "any of the pool's files that were open to other users.",
    "reclaim": "Space reclaim: removes the chunks of a deduplicating pool that no image uses "
               "any more and compacts its container files.",
    "rebuild-index": "Rebuilds the image's catalog index (what browsing and restoring read) "
                     "from the image itself; the job's log names any damage found in the "
                     "image.",
    "import": "Records the images on the disk pool that the catalog does not know, from "
              "what each image says about itself (its metadata and file index); the job's "
              "details list the images recorded and those that were not, with why.",
    "benchmark": "Disk benchmark of a storage server's volumes: writer/reader thread pairs, "
                 "one more each step until the combined throughput stabilizes; its steps "
                 "and the daily ingest they support are in the job's details and in Test "
                 "storage performance (a disk pool's properties). On a cloud server, the "
                 "object benchmark of its bucket: uploads, whole and ranged reads at each "
                 "thread count.",
    "catalog-backup": "Backs up the catalog, its file indexes, known_hosts and the pool keys "
                      "(sealed) to the folder catalog-backups of the storage unit's pool; "
                      "`cairn catalog recover` brings a lost master back from it.",
}


def type_tooltip(job):
    text = type_text(job)
    tip = TYPE_TIPS.get(job.get("type"))
    return f"{text}: {tip}" if tip else text or None


def what(job):
    """`backup of client1`, or only the type for a job without a client (expire, the jobs of
    a pool)."""
    return f"{type_text(job)} of {job['client']}" if job.get("client") else type_text(job)


def status_tooltip(job):
    if job.get("status") is None:
        return None
    return f"{job['status']}: {job.get('status_text') or st.text(job['status'])}"


def max_attempts(job):
    """How many attempts the job may take in all, for a job that is tried again by itself
    (ui/activity.poll sets it)."""
    n = job.get("max_attempts")
    return n if isinstance(n, int) and n > 0 else None


def attempt_text(job):
    n = job.get("attempt") or 1
    most = max_attempts(job)
    return f"{n} of {most}" if most else str(n)


def attempt_tooltip(job):
    text = f"Attempt {attempt_text(job)}"
    if job.get("retry_of"):
        text += f": retries job {job['retry_of']}"
    return text


def dedup_tooltip(job):
    if job.get("dedup_ratio") is None:
        return None
    return (f"{fmt.dedup_text(job)} of this job's data was already in the deduplicating pool: "
            "it was not stored again and, with client-side deduplication, not sent over the "
            "network.")


#: damaged files of one image named in a verify result; the rest are counted
RESULT_FILES = 50


def result_text(job):
    """What a verify or reclaim job found, in words for its details window; "" for other
    jobs and for a job without a result yet."""
    r = job.get("result")
    if not r:
        return ""
    if job.get("type") == "verify":
        return verify_result_text(r)
    if job.get("type") == "import":
        return import_result_text(r)
    if job.get("type") == "benchmark":
        return benchmark_result_text(r)
    if job.get("type") == "backup" and r.get("files_cache_files"):
        return (f"Read {fmt.size(r.get('read_bytes') or 0) or '0 B'}; "
                f"{r['files_cache_files']:,} unchanged files "
                f"({fmt.size(r.get('files_cache_bytes') or 0) or '0 B'}) taken from the files "
                "cache without reading them.")
    if job.get("type") == "reclaim":
        return (f"Freed {fmt.size(r.get('freed_bytes') or 0) or '0 B'}: "
                f"{r.get('removed_chunks', 0):,} chunks no image used removed, "
                f"{r.get('containers_deleted', 0):,} container files deleted, "
                f"{r.get('containers_compacted', 0):,} compacted; "
                f"{r.get('live_chunks', 0):,} chunks in use.")
    return ""


def benchmark_result_text(r):
    """A disk benchmark's steps, a line each, and the daily ingest the best one supports; an
    object benchmark's thread counts and its best write and read."""
    steps = r.get("steps") or []
    if r.get("workload") == OBJECT:
        lines = [f"{s['threads']} thread(s): write {s['write_mb_s']:.0f} MiB/s, read "
                 f"{s['read_mb_s']:.0f} MiB/s, ranged reads {s['ranged_read_mb_s']:.0f} MiB/s "
                 f"({s['ranged_ops_s']:,.0f} a second)" for s in steps]
        if steps:
            text = best_line(steps)
            lines.append(text[:1].upper() + text[1:] + ".")
        return "\n".join(lines)
    lines = [f"{s['threads']} pair(s): write {s['write_mb_s']:.0f} MiB/s, read "
             f"{s['read_mb_s']:.0f} MiB/s, combined {s['combined_mb_s']:.0f} MiB/s "
             f"({s['write_iops']:,.0f} + {s['read_iops']:,.0f} IOPS)" for s in steps]
    if steps:
        best = r.get("max_combined_mb_s") or max(s["combined_mb_s"] for s in steps)
        lines.append("Sizing: " + storage_sizing.summary(best) + ".")
    return "\n".join(lines)


def import_result_text(r):
    """An import job's result: what it recorded, and each image it did not record with why."""
    n = len(r.get("imported") or [])
    lines = [f"Imported {n:,} image{'s' if n != 1 else ''}"
             + (f" and {len(r['sets'])} set image{'s' if len(r['sets']) != 1 else ''}"
                if r.get("sets") else "")
             + f" from disk pool {r.get('pool')}; {r.get('already_known', 0):,} were in the "
               "catalog already."]
    for what, items, key in (("Chain incomplete, not recorded", r.get("incomplete"), "why"),
                             ("Not recorded", r.get("errors"), "error")):
        for i in (items or [])[:RESULT_FILES]:
            lines.append(f"{what}: {i['image']}: {i[key]}")
        if len(items or []) > RESULT_FILES:
            lines.append(f"    … and {len(items) - RESULT_FILES:,} more")
    missing = r.get("missing") or {}
    for kind, label in (("hosts", "hosts"), ("policies", "policies"),
                        ("schedules", "schedules"), ("storage_units", "storage units")):
        if missing.get(kind):
            lines.append(f"Recorded with {label} the catalog does not have: "
                         f"{', '.join(missing[kind])}"
                         + (" (restore those images to another host)" if kind == "hosts"
                            else ""))
    if r.get("key"):
        lines.append(r["key"])
    return "\n".join(lines)


def _damaged_files(name, damage, count=None):
    """The files of an AdvancedDisk image that verify found damaged, each with why; `count`
    of them in all (the result lists the first ones of a very large image)."""
    n = count or len(damage)
    lines = [f"{name}: {n:,} damaged file{'s' if n != 1 else ''}:"]
    lines += [f"    {d['path']}: {d['reason']}" for d in damage[:RESULT_FILES]]
    if n > RESULT_FILES:
        lines.append(f"    … and {n - RESULT_FILES:,} more")
    return lines


def _modes_text(modes):
    n = len(modes)
    lines = [f"{n} file{'s' if n != 1 else ''} or folder{'s' if n != 1 else ''} of the pool "
             f"{'were' if n != 1 else 'was'} open to other users (Cairn keeps them private; "
             "find out who changed them):"]
    for m in modes[:RESULT_FILES]:
        lines.append(f"    {m['path']} (mode {m['mode']}): "
                     + (f"could not be made private: {m['error']}" if m.get("error")
                        else "private again"))
    if n > RESULT_FILES:
        lines.append(f"    … and {n - RESULT_FILES} more")
    return lines


def verify_result_text(result):
    """A verify job's result: each damaged image with the files the damage hits, and what
    was open to other users."""
    images = result.get("images") or []
    containers = result.get("container_damage") or []
    modes = result.get("modes") or []
    if not images and not containers:
        clean = ("No damage found: every chunk matched its fingerprint."
                 if "container_damage" in result else
                 "No damage found: every tar header and file checksum matched.")
        return "\n".join([clean] + (_modes_text(modes) if modes else []))
    lines = []
    for d in images:
        name = f"Image {d['image']}" if d.get("image") else f"Recipe {d.get('path')}"
        if d.get("error"):
            lines.append(f"{name}: {d['error']}")
            if "damage" not in d:
                continue
        if "damage" in d:  # an AdvancedDisk image: its damaged files, each with why
            if d["damage"]:
                lines += _damaged_files(name, d["damage"], d.get("damaged_files"))
            lines += [f"{name}: {x['image_file']} at byte {x['offset']}: {x['reason']}"
                      for x in d.get("structure") or []]
            continue
        files = d.get("files") or []
        ranges = len(d.get("ranges") or [])
        lines.append(f"{name}: {ranges} damaged chunk range{'s' if ranges != 1 else ''}, "
                     f"{len(files)} file{'s' if len(files) != 1 else ''} hit"
                     + (":" if files else ""))
        lines += [f"    {f}" for f in files[:RESULT_FILES]]
        if len(files) > RESULT_FILES:
            lines.append(f"    … and {len(files) - RESULT_FILES} more")
    for c in containers:
        where = str(c.get("container", "")).rsplit("/", 1)[-1]
        lines.append(f"Container {where} at byte {c.get('offset')}: {c.get('reason')}")
    if containers and not images:
        lines.append("No image uses these records: space reclaim removes them when it "
                     "compacts their containers.")
    aside = result.get("set_aside") or 0
    if aside:
        lines.append(f"{aside:,} damaged chunk{'s' if aside != 1 else ''} set aside: the next "
                     "backup of the same data stores "
                     f"{'them' if aside != 1 else 'it'} again, and the images above become "
                     "restorable in full once it has.")
    for r in result.get("repairs") or []:
        lines.append(f"Image {r['image']}: repair job {r['job']} writes copy {r['copy']} "
                     f"again from copy {r['from']}.")
    if modes:
        lines += _modes_text(modes)
    return "\n".join(lines)
