"""What a subscription pushes, so that a watcher reads what changed as it changes instead of
asking once a row: each stream is a generator over the master API that yields an event
whenever there is news and returns its last value when the stream ends.

  job_changes  the job change feed (Master.job_changes): the first event at once, then one
               whenever jobs were written or removed, and while jobs run one a tick (their
               elapsed time and rate move on); it ends when unsubscribed. What the activity
               monitor shows beside its table comes with each event when asked for:
               `throughput=SECONDS` (Master.throughput of that window, and an event at least
               every `heartbeat` seconds so that the plot moves on with no job running) and
               `settings=[NAME, ...]` (their values)
  job_log      a job's log entries as they are written, ending with the job once it ended
  jobs         the jobs of a list of ids whenever one of them changed, ending with them once
               every one ended (what `--wait` shows)
  listing      a directory of an image in a file tree's order (app.catalog_index.tree_order):
               its first entries at once, the others right after, ending with their number
               (the restore browser shows the first rows of 100,000 without waiting for all)

The served master runs them for RemoteMaster.subscribe; open() runs one on a master in
this process, for code that watches either kind."""

import threading
import time

from app.catalog_index import tree_order

STREAMS = ("job_changes", "job_log", "jobs", "listing")
DEFAULT_INTERVAL = 0.5
MIN_INTERVAL = 0.05


def open(m, kind, stop=None, **kw):  # noqa: A001 - the stream's own verb, as io.open
    """The generator of stream `kind` over master m; stop: a threading.Event that ends it."""
    if kind not in STREAMS:
        raise ValueError(f"there is no stream {kind!r}; streams: {', '.join(STREAMS)}")
    stop = stop if stop is not None else threading.Event()
    kw["interval"] = max(float(kw.get("interval") or DEFAULT_INTERVAL), MIN_INTERVAL)
    return globals()["_" + kind](m, stop, **kw)


def _job_changes(m, stop, since=0, interval=DEFAULT_INTERVAL, throughput=None,
                 heartbeat=None, settings=()):
    cursor, first, sent = since, True, time.monotonic()
    while not stop.is_set():
        r = m.job_changes(cursor)
        beat = heartbeat is not None and time.monotonic() - sent >= heartbeat
        if first or beat or r["jobs"] or r["removed"] or r["cursor"] != cursor:
            if throughput is not None:
                r["throughput"] = m.throughput(float(throughput))
            if settings:
                r["settings"] = {name: m.setting(name) for name in settings}
            yield r
            sent = time.monotonic()
        first, cursor = False, r["cursor"]
        stop.wait(interval)
    return {"cursor": cursor}


def _job_log(m, stop, job_id, after=0, interval=DEFAULT_INTERVAL):
    while not stop.is_set():
        ended = m.job(job_id)["state"] == "done"
        entries = m.job_logs(job_id, after=after)
        if entries:
            after = entries[-1]["id"]
            yield entries
        if ended:
            # read after the job ended: nothing it wrote is left behind
            return m.job(job_id)
        stop.wait(interval)
    return m.job(job_id)


def _jobs(m, stop, job_ids, interval=DEFAULT_INTERVAL):
    last = None
    while True:
        jobs = [m.job(j) for j in job_ids]
        if all(j["state"] == "done" for j in jobs) or stop.is_set():
            return jobs
        if jobs != last:
            yield jobs
            last = jobs
        stop.wait(interval)


def _listing(m, stop, image_id, path="/", first=2000, interval=None):
    entries = tree_order(m.list_entries(image_id, path))
    yield entries[:first]
    if len(entries) > first and not stop.is_set():
        yield entries[first:]
    return len(entries)
