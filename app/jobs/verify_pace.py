"""A pool's verify pace (`cairn disk-pool set POOL verify_max_mb_s N`): the most a verify of
the pool reads back per second, so that a verify, scheduled or by hand, leaves backups and
restores their share of the pool's disks instead of taking all they can give. The storage
host's agent holds its reading to it (app/formats/pace.py)."""

MB = 1000 * 1000


def pace_args(ctx, pool):
    """The pool_verify arguments of a pool's pace ({} without one), said in the job's log."""
    mb = pool.get("verify_max_mb_s")
    if not mb:
        return {}
    ctx.log(f"reading at most {mb} MB/s (the pool's verify pace)")
    return {"max_bytes_per_s": int(mb) * MB}
