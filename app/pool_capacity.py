"""A disk pool's capacity as its storage host's file systems report it (the agent's
check_volumes), and its growth, told from samples of its use that the catalog keeps
(pool_usage). For `cairn status`, the dashboard and the disk pool lists."""

# A pool's use is recorded at most hourly, kept a month, and its growth told from the last
# week of it: enough to see a trend, too little to grow the catalog.
SAMPLE_EVERY = 3600
KEEP_SAMPLES = 30 * 86400
TREND_SPAN = 7 * 86400
# Fewer hours than this say more about one night's backups than about a trend.
MIN_TREND_SPAN = 6 * 3600
DAY = 86400


def capacity(pool, checks):
    """{size_bytes, used_bytes, free_bytes, used_percent, above_high_water, volumes, error}
    of a pool from check_volumes entries ({path: entry}). Volumes on one file system (several
    directories of a disk) count once. Sizes are None when no volume could be measured."""
    counted, volumes, errors = {}, [], []
    for path in pool["volumes"]:
        v = checks.get(path)
        if v is None or v.get("size") is None:
            why = (v or {}).get("error") or "not measured"
            errors.append(f"{path}: {why}")
            volumes.append({"path": path, "size_bytes": None, "free_bytes": None,
                            "error": why})
            continue
        fs = v.get("filesystem") or {}
        key = (fs.get("device"), fs.get("mount_point")) if fs.get("mount_point") else path
        counted[key] = v
        volumes.append({"path": path, "size_bytes": v["size"], "free_bytes": v["free"],
                        "error": v.get("error")})
        if v.get("error"):
            errors.append(f"{path}: {v['error']}")
    out = {"size_bytes": None, "used_bytes": None, "free_bytes": None, "used_percent": None,
           "above_high_water": None, "volumes": volumes,
           "error": "; ".join(errors) or None}
    if counted:
        size = sum(v["size"] for v in counted.values())
        free = sum(v["free"] for v in counted.values())
        used = size - free
        pct = round(100.0 * used / size, 1) if size else 100.0
        out.update(size_bytes=size, used_bytes=used, free_bytes=free, used_percent=pct,
                   above_high_water=pct >= pool["high_water"])
    return out


def record(db, pool_id, size, used, now):
    """Keeps a sample of a pool's use, unless one was kept within SAMPLE_EVERY."""
    last = db.one("SELECT max(t) FROM pool_usage WHERE pool_id=?", (pool_id,))[0]
    if last is not None and now - last < SAMPLE_EVERY:
        return
    with db.tx() as c:
        c.execute("INSERT OR REPLACE INTO pool_usage(pool_id, t, size, used) VALUES (?,?,?,?)",
                  (pool_id, now, size, used))
        c.execute("DELETE FROM pool_usage WHERE pool_id=? AND t<?",
                  (pool_id, now - KEEP_SAMPLES))


def growth(db, pool_id, now, used_now=None):
    """Bytes a day the pool's use grows by (negative: shrinks), the least-squares slope of
    the last TREND_SPAN's samples and of used_now; None while they span under
    MIN_TREND_SPAN."""
    pts = [(t, u) for t, u in db.all("SELECT t, used FROM pool_usage WHERE pool_id=? AND t>=? "
                                     "AND t<=? ORDER BY t", (pool_id, now - TREND_SPAN, now))]
    if used_now is not None and (not pts or pts[-1][0] < now):
        pts.append((now, used_now))
    if len(pts) < 2 or pts[-1][0] - pts[0][0] < MIN_TREND_SPAN:
        return None
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mu = sum(u for _, u in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    slope = sum((t - mt) * (u - mu) for t, u in pts) / var
    return round(slope * DAY)


def days_to_high_water(cap, high_water, growth_per_day):
    """Days until the pool reaches its high-water mark at its present growth; None when it
    does not grow or is past it already."""
    if not growth_per_day or growth_per_day <= 0 or cap["size_bytes"] is None:
        return None
    room = cap["size_bytes"] * high_water / 100.0 - cap["used_bytes"]
    return round(room / growth_per_day, 1) if room > 0 else None
