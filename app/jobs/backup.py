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
from app.catalog_index import IndexWriter, rebuild_hint
from app.errors import CairnError, Canceled, ValidationError
from app.jobs import holds, incremental
from app.jobs.commit import commit, record_image  # noqa: F401 - record_image: backup_set
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


def expiry_of(job, schedule, created):
    """When an image made at `created` expires (None: never). A retention whose end cannot be
    written as a date (a schedule saved before retentions were limited) fails the backup
    before anything is written."""
    retention = schedule["retention_s"] if schedule else None
    if not retention:
        return None
    try:
        return timeutil.iso(created + retention)
    except (OverflowError, ValueError, OSError):
        raise ValidationError(
            f"schedule {job['schedule']} of policy {job['policy']} keeps images for "
            f"{timeutil.format_duration(retention)}: their expiry date cannot be written; "
            "nothing was backed up",
            hint=f"give the schedule a retention of at most "
                 f"{timeutil.format_duration(timeutil.MAX_DURATION_S)}, or 'infinite'") \
            from None


def hold_base(master, job, *, client, pool, level, stream, use):
    """Chooses the image an incremental compares with (or a full's files cache: level
    "differential" picks the newest image) and holds it and its sources for the job, in one
    catalog transaction (app/jobs/holds.py). `use` says what for, e.g. "as its files cache".
    Returns (base or None, why not)."""
    with master.db.tx():
        base, why = incremental.choose_base(master.db, client=client, policy=job["policy"],
                                            pool=pool, level=level, stream=stream)
        if base is not None:
            reads = incremental.reads_of(base)
            holds.hold(master.db, job["id"], {
                i: (f"reads it {use}" if i == base["id"] else
                    f"reads it through image {base['id']}, which it uses {use}")
                for i in reads})
    return base, why


def missing_images(master, storage, image_ids):
    """Of image_ids, those not in the catalog, being expired, or whose file the storage
    server no longer has: [(image id, why)]."""
    out = []
    for iid in dict.fromkeys(image_ids):
        row = master.db.one("SELECT path, expiring FROM images WHERE id=?", (iid,))
        if row is None:
            out.append((iid, "it is no longer in the catalog"))
        elif row["expiring"] is not None:
            out.append((iid, f"expire job {row['expiring']} is removing it"))
        elif row["path"] and not storage.call("stat_path", {"path": row["path"]},
                                              timeout=60)["exists"]:
            out.append((iid, f"its file {row['path']} is missing"))
    return out


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
    try:
        return _backup(master, job)
    finally:
        # The images it read from may go once it has ended (or been recorded).
        holds.release(master.db, job["id"])


def _backup(master, job):
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
        base, why = hold_base(master, job, client=client_host["name"], pool=pool["name"],
                              level=level, stream=stream,
                              use=f"as the base of its {level} incremental")
        gone = missing_images(master, storage, incremental.reads_of(base)) if base else []
        if gone:
            why = (f"image {base['id']} cannot be used: "
                   + "; ".join(f"image {i}: {w}" for i, w in gone))
            base = None
        if base is not None:
            try:
                base_index = incremental.open_base_index(master, base)
                previous, base_entries = incremental.previous_state(base_index)
            except (CairnError, ValueError) as e:
                why = (f"the index of image {base['id']} cannot be read ({e}); "
                       + rebuild_hint(base["id"]))
                if base_index is not None:
                    base_index.close()
                    base_index = None
                base = None
        if base is None:
            holds.release(master.db, job["id"])
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
            cache_base, why = hold_base(master, job, client=client_host["name"],
                                        pool=pool["name"], level="differential",
                                        stream=stream, use="as its files cache")
            cache = None
            if cache_base is not None:
                cache, why = incremental.files_cache(master, cache_base, checksum=checksum)
        if cache is None:
            holds.release(master.db, job["id"])
            ctx.log(f"files cache: none, every file is read ({why})")
        else:
            previous, references = cache["state"], cache["references"]
            dedup["bases"] = cache["paths"]
            ctx.log(f"files cache: image {cache['base']['id']} ({cache['base']['created']}, "
                    f"{cache['entries']} files); unchanged files are taken from the pool, not "
                    "read again")
    created = time.time()
    expires = expiry_of(job, schedule, created)
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
                                       "since": since, "references": references,
                                       "skip_nodump": bool(policy.get("skip_nodump"))},
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
        sources = completer.sources if completer else []
        # A base removed behind Cairn's back (its file deleted, say) while this backup ran:
        # committing would make an image whose unchanged files cannot be restored.
        gone = missing_images(master, storage, sources)
        if gone:
            raise CairnError(
                f"this {level} incremental takes its unchanged files from image(s) that are "
                "gone: " + "; ".join(f"image {i}: {w}" for i, w in gone)
                + "; the image was not committed",
                status_code=st.IMAGE_DAMAGED,
                hint="check the storage server; expire the damaged image(s) with "
                     "`cairn images expire IMAGE --with-dependents`, then back up again (a "
                     "full is taken when no usable image is left)")
        # The agent counts its warnings in the summary and also sends each as an event.
        warnings = max(summary.get("warnings", 0), ctx.warnings)
        committed = commit(
            master, storage, job_id=job["id"], partial=partial, final=final,
            dedup=_commit_args(dedup),
            extra_bytes=dedup_stats["stored_bytes"] if dedup_stats else 0,
            record=dict(
                id=image_id, client=client_host["name"], policy=job["policy"],
                schedule=job["schedule"], schedule_type=meta["schedule_type"],
                created=meta["created"], expires=expires, bytes=summary["bytes"],
                files=summary["files"], storage_unit=stu["name"], pool=pool["name"],
                storage_host=storage_host["name"], job_id=job["id"], selections=selections,
                warnings=warnings, checksum=meta["checksum"], base_image=meta["base_image"],
                sources=sources, stream=stream,
                snapshot=json.dumps(summary["snapshots"]) if summary.get("snapshots")
                else None,
                scan=json.dumps(summary["scan"]) if summary.get("scan") else None,
                dedup=json.dumps(dedup_stats) if dedup_stats else None))
    except BaseException:
        for c in calls:
            c.cancel()
        for c in calls:
            c.wait_done(30)
        if index is not None:
            index.abort()
        else:
            # closed, and the image not recorded: the index has no image to describe
            master.remove_index(image_id)
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

