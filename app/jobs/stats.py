"""Throughput figures from a job's samples: pure functions over lists of (t, bytes) points,
where t is seconds since the epoch and bytes the job's cumulative count at that time (the
catalog's job_samples, one a second while a job runs).

A job's data rate between two samples is the bytes moved between them over the time between
them. Sustained peak is the best rate over a sliding window (10 s by default; benchmarks of large
backups use 60 minutes) rather than over two neighbouring samples, which a burst of buffered
writes would inflate; progress is interpolated between samples so the window is exact."""

from bisect import bisect_right

from app import timeutil
from app.errors import ValidationError

PEAK_WINDOW_S = 10.0
#: data moved within the first minutes of a job: how fast it ramps up
MARKS_S = (60, 120, 300)
#: the tail over which the ramp-down rate is taken
TAIL_S = 60.0
#: "data moved in the first N minutes" of a job, N as in the usual benchmark figure
FIRST_S = 3600.0


def check_windows(peak_window_s, first_s):
    """Refuses a peak window or a "first N" span that is not a positive number of seconds."""
    for name, v in (("peak window", peak_window_s), ("first-minutes span", first_s)):
        if not isinstance(v, (int, float)) or not v > 0 or v != v:
            raise ValidationError(f"the {name} must be a positive time, not {v!r}",
                                  hint="give it in seconds (--peak-window) or minutes "
                                       "(--first-minutes), greater than 0")


def job_start(job):
    """A job's start in seconds since the epoch: its sub-second clock where the catalog has
    it, else its whole-second start; None before it started."""
    if job.get("started_t") is not None:
        return float(job["started_t"])
    return float(timeutil.parse_iso(job["started"])) if job.get("started") else None


def points(samples, started=None):
    """(t, bytes) points from sample dicts or tuples, ordered by time, with (started, 0) in
    front when the job's start is known and lies before the first sample."""
    pts = []
    for s in samples:
        t, b = (s["t"], s["bytes"]) if isinstance(s, dict) else (s[0], s[1])
        pts.append((float(t), int(b)))
    pts.sort()
    if started is not None and (not pts or started < pts[0][0]):
        pts.insert(0, (float(started), 0))
    return pts


def rates(pts):
    """The rate (bytes/s) between each pair of neighbouring points, at the later one's time."""
    out = []
    for (t0, b0), (t1, b1) in zip(pts, pts[1:]):
        if t1 > t0:
            out.append((t1, max(0.0, (b1 - b0) / (t1 - t0))))
    return out


def bytes_at(pts, t):
    """Cumulative bytes at time t, interpolated between the points around it."""
    if not pts:
        return 0
    if t <= pts[0][0]:
        return pts[0][1]
    if t >= pts[-1][0]:
        return pts[-1][1]
    i = bisect_right([p[0] for p in pts], t)
    (t0, b0), (t1, b1) = pts[i - 1], pts[i]
    return b0 + (b1 - b0) * (t - t0) / (t1 - t0)


def average_rate(pts):
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def sustained_peak(pts, window=PEAK_WINDOW_S):
    """The best rate over any stretch of exactly `window` seconds (the whole job when it ran
    shorter), the job's progress interpolated between points, as (bytes_per_s, start_t).
    Progress is linear between points, so the best stretch starts or ends at a point: those
    are the only stretches tried."""
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None, None
    first, last = pts[0][0], pts[-1][0]
    window = min(float(window), last - first)
    if window <= 0:
        return None, None
    starts = {t for t, _ in pts if t + window <= last}
    starts |= {t - window for t, _ in pts if t - window >= first}
    best, best_t = None, None
    for t0 in sorted(starts):
        r = (bytes_at(pts, t0 + window) - bytes_at(pts, t0)) / window
        if best is None or r > best:
            best, best_t = r, t0
    return best, best_t


def summary(samples, started=None, *, window=PEAK_WINDOW_S, marks=MARKS_S, tail=TAIL_S,
            first_s=FIRST_S):
    """Figures of one job: duration_s, bytes, average_bytes_per_s (all its bytes over its
    whole run, from `started`), peak_bytes_per_s (the best `window` seconds), peak_at_s (when
    that window began, in seconds after the job's start), first: {mark seconds: bytes moved by
    then, or None when the job was shorter}, first_s and first_bytes (data moved in the first
    `first_s` seconds, the whole job's when it ran shorter), tail_bytes_per_s (rate over the
    last `tail` seconds: how the job ramped down).

    The peak is taken over the job's samples only: between its start and its first sample the
    job reported nothing (connecting, scanning), and spreading the first sample's bytes over
    that stall would understate the rate it reached."""
    pts = points(samples, started)
    if not pts:
        return {"duration_s": 0.0, "bytes": 0, "average_bytes_per_s": None,
                "peak_bytes_per_s": None, "peak_at_s": None, "peak_window_s": window,
                "first": {m: None for m in marks}, "first_s": first_s, "first_bytes": None,
                "tail_bytes_per_s": None}
    t0, b0 = pts[0]
    duration = pts[-1][0] - t0
    sampled = points(samples)
    peak, peak_t = sustained_peak(sampled if len(sampled) >= 2 else pts, window)
    peak_window = (min(window, sampled[-1][0] - sampled[0][0]) if len(sampled) >= 2
                   else min(window, duration))
    tail_start = max(t0, pts[-1][0] - tail)
    tail_rate = None
    if pts[-1][0] > tail_start:
        tail_rate = (pts[-1][1] - bytes_at(pts, tail_start)) / (pts[-1][0] - tail_start)
    return {
        "duration_s": duration,
        "bytes": pts[-1][1] - b0,
        "average_bytes_per_s": average_rate(pts),
        "peak_bytes_per_s": peak,
        "peak_at_s": None if peak_t is None else peak_t - t0,
        "peak_window_s": peak_window,
        "first": {m: (bytes_at(pts, t0 + m) - b0 if duration >= m else None) for m in marks},
        "first_s": first_s,
        "first_bytes": bytes_at(pts, t0 + first_s) - b0,
        "tail_bytes_per_s": tail_rate,
    }


def aggregate(rows, start, end, step=1.0):
    """The summed rate of many jobs over time, from (job_id, t, bytes) rows ordered by job and
    time: one (t, bytes_per_s) point per `step` from `start` to `end`. A job's rate between two
    of its samples t0 < t1 counts at every step time in (t0, t1]."""
    n = max(0, int((end - start) // step) + 1)
    totals = [0.0] * n
    prev = None
    for job_id, t, b in rows:
        if prev is not None and prev[0] == job_id and t > prev[1]:
            rate = max(0.0, (b - prev[2]) / (t - prev[1]))
            first = max(0, int((prev[1] - start) // step) + 1)
            last = min(n - 1, int((t - start) // step))
            for k in range(first, last + 1):
                totals[k] += rate
        prev = (job_id, t, b)
    return [(start + k * step, totals[k]) for k in range(n)]
