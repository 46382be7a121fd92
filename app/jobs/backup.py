"""A backup job: choose a volume, stream the client's selections into a partial image (on the
storage host directly, or agent to agent over the data plane), index the file rows as they
arrive, then commit the image and record it in the catalog. Until the commit nothing is
visible; any failure or cancel removes the partial image and the partial index."""

import json
import posixpath
import time

import plugins.storage
from app import status as st
from app import timeutil
from app.catalog_index import IndexWriter
from app.errors import CairnError, Canceled
from app.jobs import incremental
from app.jobs.context import JobContext, results, start_listening_side


def new_image_id(db, client, job_id):
    """Client, second and job: unique even for backups of one client that run at once
    (streams, several policies)."""
    base = f"{client}_{int(time.time())}_{job_id}"
    n, iid = 1, base
    while db.one("SELECT 1 FROM images WHERE id=?", (iid,)):
        n += 1
        iid = f"{base}.{n}"
    return iid


def record_image(c, *, sources, selections, **fields):
    """The catalog row of a committed image and its dependencies on the images it reads
    from, in the caller's transaction."""
    fields.update(sources=json.dumps(sources), selections=json.dumps(selections))
    names = ", ".join(fields)
    c.execute(f"INSERT INTO images({names}) VALUES ({', '.join('?' * len(fields))})",
              tuple(fields.values()))
    c.executemany("INSERT OR IGNORE INTO image_deps(image_id, depends_on) VALUES (?,?)",
                  [(fields["id"], s) for s in sources])


def _delete_left_snapshots(master, ctx, client_host, snapshots):
    """The client's agent deletes its snapshots itself, also when the backup fails; this is
    for an agent that was killed before it could. Deleting a deleted one is harmless."""
    try:
        r = master.hosts.connect(client_host).call(
            "delete_snapshots", {"snapshots": [[s["device"], s["name"], s.get("fileset")]
                                               for s in snapshots]}, timeout=300)
    except Exception as e:  # noqa: BLE001 - the backup's own error matters more
        ctx.log(f"the snapshots {', '.join(s['name'] for s in snapshots)} on "
                f"{client_host['name']} may be left behind: {e}", "warning")
        return
    for x in r["snapshots"]:
        if not x["deleted"] and x["error"]:
            ctx.log(f"snapshot {x['name']} on {client_host['name']} could not be deleted: "
                    f"{x['error']}", "warning")


def pool_access(master, server):
    """What the storage agent needs to use a deduplication pool (its root, the chunk sizes
    and, when encrypted, the key), or None for other storage types."""
    plugin = plugins.storage.get(server["type"])
    if plugin is not plugins.storage.dedup:
        return None
    from app.dedup import keys
    opts = plugin.check_options(server.get("options"))
    return {"root": server["path"], "params": plugin.chunk_params(opts),
            "key": keys.load(master.home, server["name"]).hex() if opts["encrypted"] else None}


def _commit_args(dedup):
    return None if dedup is None else {"root": dedup["root"], "key": dedup.get("key")}


def _mib(n):
    return f"{n / (1 << 20):.1f} MiB"


def dedup_summary(s):
    text = (f"deduplication: {s['dedup_ratio'] if s.get('dedup_ratio') is not None else 0:.1f}% "
            f"of {_mib(s['bytes'])} was in the pool already; {s['new_chunks']} of "
            f"{s['chunks']} chunks new ({_mib(s['new_bytes'])}), {_mib(s['stored_bytes'])} "
            "stored after compression")
    if s.get("sent_bytes") is not None:
        text += f"; the client sent {_mib(s['sent_bytes'])}"
    return text


def run(master, job):
    ctx = JobContext(master.jobs, job["id"])
    p = job["params"]
    cfg = master.config
    stu = cfg.storage_unit(job["storage_unit"])
    pool = cfg.disk_pool(stu["pool"])
    server = cfg.storage_server(pool["server"])
    plugin = plugins.storage.get(server["type"])
    storage_host = cfg.host(server["host"])
    client_host = cfg.host(job["client"])
    selections = p["selections"]
    ctx.log(f"backup of {client_host['name']} ({', '.join(selections)}) under policy "
            f"{job['policy']}, schedule {job['schedule']}, to storage unit {stu['name']} "
            f"(disk pool {pool['name']} on {storage_host['name']})")
    ctx.flush()

    storage = master.hosts.connect(storage_host)
    vols = storage.call("check_volumes", {"paths": pool["volumes"]}, timeout=120)["volumes"]
    counts = {v: master.db.one("SELECT count(*) FROM images WHERE pool=? AND path LIKE ?",
                               (pool["name"], v.rstrip("/") + "/%"))[0] for v in pool["volumes"]}
    volume, reason = plugin.choose_volume(vols, pool["high_water"], counts)
    if volume is None:
        code = st.POOL_FULL if "high-water" in reason else st.VOLUME_UNAVAILABLE
        raise CairnError(f"no volume of disk pool {pool['name']} can take the image: {reason}",
                         status_code=code)
    client = master.hosts.connect(client_host)

    image_id = new_image_id(master.db, client_host["name"], job["id"])
    partial, final = plugin.image_paths(volume, client_host["name"], image_id)
    dedup = pool_access(master, server)
    if dedup is None:
        ctx.log(f"image {image_id} goes to volume {volume}")
    else:
        dedup["mode"] = plugins.storage.dedup.effective_mode(
            cfg.policy(job["policy"]).get("dedup"), client_host.get("dedup"))
        dedup["image_id"] = image_id
        ctx.log(f"image {image_id} goes to deduplication pool {pool['name']} ({volume})"
                + (", encrypted at rest" if dedup.get("key") else ""))
    schedule = next((s for s in cfg.policy(job["policy"])["schedules"]
                     if s["name"] == job["schedule"]), None)
    level = p.get("schedule_type") or (schedule["type"] if schedule else "full")
    checksum = p.get("checksum", "crc32")
    stream = p.get("stream")
    policy = cfg.policy(job["policy"])
    base = base_index = completer = previous = since = None
    if level != "full":
        base, why = incremental.choose_base(master.db, client=client_host["name"],
                                            policy=job["policy"], pool=pool["name"],
                                            level=level, stream=stream)
        if base is not None:
            try:
                base_index = incremental.open_base_index(master, base)
                previous, base_entries = incremental.previous_state(base_index)
            except (CairnError, ValueError) as e:
                why = f"the index of image {base['id']} cannot be read ({e})"
                if base_index is not None:
                    base_index.close()
                    base_index = None
                base = None
        if base is None:
            ctx.log(f"{level} incremental taken as a full backup: {why}", "warning")
            level = "full"
        else:
            # The chain keeps one checksum kind, so that a restore verifies all its members
            # alike.
            checksum = base["checksum"]
            completer = incremental.Completer(base, base_index, base_entries)
            since = incremental.scan_started(base)
            ctx.log(f"{level} incremental: compared with image {base['id']} "
                    f"({base['schedule_type']}, {base['created']}, {base_entries} files)")
    cache = references = None
    if level == "full" and dedup is not None:
        if p.get("no_files_cache"):
            cache, why = None, "the backup was asked to read every file"
        else:
            cache, why = incremental.files_cache(master, client=client_host["name"],
                                                 policy=job["policy"], pool=pool["name"],
                                                 stream=stream, checksum=checksum)
        if cache is None:
            ctx.log(f"files cache: none, every file is read ({why})")
        else:
            previous, references = cache["state"], cache["references"]
            dedup["bases"] = cache["paths"]
            ctx.log(f"files cache: image {cache['base']['id']} ({cache['base']['created']}, "
                    f"{cache['entries']} files); unchanged files are taken from the pool, not "
                    "read again")
    created = time.time()
    meta = {"format": "cairn-image", "format_version": 1, "image_id": image_id,
            "client": client_host["name"], "policy": job["policy"],
            "schedule": job["schedule"], "schedule_type": level,
            "base_image": base["id"] if base else None,
            "created": timeutil.iso(created), "selections": selections, "job_id": job["id"],
            "checksum": checksum}

    index_path = master.home.index_path(image_id)
    index = IndexWriter(index_path)
    index_error = []

    snapshots = []

    def on_event(event, data):
        if event == "snapshot":
            snapshots.append(data)
        elif event == "rows":
            if not index_error:
                try:
                    if completer is not None:
                        completer.complete(data["rows"])
                    index.add_rows(data["rows"])
                except Exception as e:  # noqa: BLE001 - reported as the job's failure below
                    index_error.append(e)
        else:
            ctx.on_event(event, data)

    calls = []
    try:
        if storage_host["name"] == client_host["name"]:
            if dedup is None:
                ctx.log("client and storage server are the same host: writing the image "
                        "directly")
            else:
                ctx.log("client and storage server are the same host: the client's agent "
                        "deduplicates into the pool directly")
            dest = {"mode": "file", "path": partial, "dedup": dedup}
        else:
            listening = {}
            addr = master.hosts.data_address(storage_host, client_host)
            recv, port, cert, token = start_listening_side(
                ctx, storage, "receive_image", {"path": partial, "dedup": dedup}, job["id"],
                listening=listening, address=addr)
            calls.append(recv)
            if references and listening.get("bases_problem"):
                ctx.log("files cache not used, every file is read: "
                        + listening["bases_problem"], "warning")
                previous = references = None
            ctx.log(f"data plane: {client_host['name']} -> {storage_host['name']} "
                    f"({addr}:{port}, TLS, per-job key)")
            dest = {"mode": "net", "host": addr, "port": port, "cert": cert, "token": token}
            if dedup is not None:
                # The client learns how to cut chunks, never the pool's path or key.
                dest["dedup"] = {"mode": dedup["mode"], "params": dedup["params"]}
                ctx.log("client-side deduplication: the client sends only chunks the pool "
                        "lacks" if dedup["mode"] == "client" else
                        "server-side deduplication: the client sends a plain stream")
        excludes = {}
        if storage_host["name"] == client_host["name"]:
            # Backing up the pool's own images into the pool helps nobody and grows forever.
            for v in pool["volumes"]:
                if dedup is not None:
                    excludes[v] = f"deduplication pool {pool['name']}"
                else:
                    excludes[posixpath.join(v, plugin.IMAGE_DIR)] = \
                        f"the image directory of disk pool {pool['name']}"
        send = client.start("backup", {"selections": selections, "image_meta": meta,
                                       "dest": dest, "checksum": meta["checksum"],
                                       "excludes": excludes, "previous": previous,
                                       "snapshot": policy.get("snapshot") or "none",
                                       "file_list": policy.get("file_list") or "auto",
                                       "since": since, "references": references},
                            on_event=on_event)
        calls.insert(0, send)
        ctx.supervise(calls)
        outcome = results(calls)
        summary = outcome[0]
        if ctx.cancelled:
            raise Canceled()
        if index_error:
            raise CairnError(f"indexing the image failed: {index_error[0]}")
        dedup_stats = None
        if dedup is not None:
            dedup_stats = summary.get("dedup") or outcome[1].get("dedup")
            if summary.get("client_dedup"):
                dedup_stats["sent_bytes"] = summary["client_dedup"]["sent_bytes"]
            dedup_stats["mode"] = (summary.get("dedup_mode") or dedup["mode"]
                                   if len(outcome) > 1 else "local")
        info = index.close()
        index = None
        committed = storage.call("commit_image", {"partial": partial, "final": final,
                                                  "dedup": _commit_args(dedup)}, timeout=300)
    except BaseException:
        for c in calls:
            c.cancel()
        for c in calls:
            c.wait_done(30)
        if index is not None:
            index.abort()
        try:
            # A fresh connection: the agent that was writing may be the one that died.
            master.hosts.connect(storage_host).call("abort_image", {"partial": partial},
                                                    timeout=60)
        except Exception:  # noqa: BLE001 - the original error matters more
            pass
        if snapshots:
            _delete_left_snapshots(master, ctx, client_host, snapshots)
        ctx.flush()
        raise
    finally:
        if base_index is not None:
            base_index.close()

    retention = schedule["retention_s"] if schedule else None
    expires = timeutil.iso(created + retention) if retention else None
    # The agent counts its warnings in the summary and also sends each as an event.
    warnings = max(summary.get("warnings", 0), ctx.warnings)
    sources = completer.sources if completer else []
    with master.db.tx() as c:
        record_image(c, id=image_id, client=client_host["name"], policy=job["policy"],
                     schedule=job["schedule"], schedule_type=meta["schedule_type"],
                     created=meta["created"], expires=expires, bytes=summary["bytes"],
                     files=summary["files"], storage_unit=stu["name"], pool=pool["name"],
                     storage_host=storage_host["name"], path=committed["path"],
                     image_bytes=committed["bytes"] + (dedup_stats["stored_bytes"]
                                                       if dedup_stats else 0),
                     job_id=job["id"],
                     selections=selections, warnings=warnings, checksum=meta["checksum"],
                     base_image=meta["base_image"], sources=sources, stream=stream,
                     snapshot=json.dumps(summary["snapshots"]) if summary.get("snapshots")
                     else None,
                     scan=json.dumps(summary["scan"]) if summary.get("scan") else None,
                     dedup=json.dumps(dedup_stats) if dedup_stats else None)
    if dedup_stats is not None:
        master.jobs.set_dedup_ratio(job["id"], dedup_stats.get("dedup_ratio"))
    if completer is not None:
        ctx.log(f"{level} incremental: {summary['files']} new or changed entries sent "
                f"({completer.new} new), {completer.unchanged} unchanged "
                f"({summary.get('unchanged_bytes', 0)} bytes not sent again), "
                f"{completer.deleted} deleted since image {base['id']}")
    if summary.get("reused"):
        ctx.log(f"files cache: {summary['reused']} unchanged files "
                f"({_mib(summary.get('reused_bytes', 0))}) taken from image "
                f"{cache['base']['id']} without reading them")
    if dedup_stats is not None:
        ctx.log(dedup_summary(dedup_stats))
    ctx.bytes, ctx.files = summary["bytes"], summary["files"]
    ctx.log(f"image {image_id} committed: {summary['files']} files, {summary.get('dirs', 0)} "
            f"directories, {summary['bytes']} bytes of data ({committed['bytes']} bytes on "
            f"{posixpath.dirname(committed['path'])}); index {info['bytes']} bytes")
    ctx.flush(sample=True)
    code = st.PARTIAL if warnings else st.OK
    msg = (f"{warnings} warning(s): some files were skipped or changed, see the log"
           if warnings else None)
    return code, msg, image_id, summary["bytes"], summary["files"]

