"""What may be done with a job, decided from its row alone (a dict as JobStore.get and
JobStore.changes give it): which category it counts in, whether it can be canceled or
restarted, and whether a failed attempt is tried again by itself. The console's activity
monitor and the dispatcher ask the same rules, so that what the console offers is what the
master does."""

from app import status as st

#: the categories of the activity monitor's filter and counters, in their order
CATEGORIES = ("queued", "active", "done", "failed", "canceled")

#: the job types that can be restarted (Master.restart_job)
RESTARTABLE_TYPES = ("backup", "restore", "duplicate")

# Failures another attempt cannot mend: wrong input, missing trust or software, or a decision.
NO_RETRY = {st.OK, st.PARTIAL, st.CANCELED, st.WINDOW_CLOSED, st.INVALID_REQUEST,
            st.NOTHING_TO_BACKUP, st.AUTH_FAILED, st.HOST_KEY_UNKNOWN, st.HOST_KEY_CHANGED,
            st.NO_PYTHON}


def category(job):
    """queued, active, done (status 0 or 1), canceled (150: the admin's decision, not a
    failure) or failed (any other status)."""
    if job["state"] != "done":
        return job["state"]
    if job.get("status") == st.CANCELED:
        return "canceled"
    return "done" if job.get("status") in (st.OK, st.PARTIAL) else "failed"


def cancellable(job):
    """A job that has not ended: a queued one does not start, a running one stops."""
    return job["state"] in ("queued", "active")


def restartable(job):
    """An ended backup or restore that failed or was canceled: it can be run again with the
    same parameters."""
    return job["state"] == "done" and category(job) in ("failed", "canceled") \
        and job.get("type") in RESTARTABLE_TYPES


def retried(job):
    """Whether a failed attempt of the job is tried again by itself, up to the master's
    backup_tries: scheduled backups (they have a start window), not the parent of a backup's
    streams, and a lifecycle's duplications (queued by the master, never by hand). A backup
    started by hand is the administrator's to restart."""
    if job.get("type") == "duplicate":
        return True
    return (job.get("type") == "backup" and job.get("not_after") is not None
            and not (job.get("params") or {}).get("streams"))


def retry_wanted(job):
    """Whether the dispatcher queues another attempt of this ended job, tries and its start
    window permitting: a job that is retried() and ended with a status another attempt may
    mend (not in NO_RETRY)."""
    return retried(job) and job.get("status") not in NO_RETRY
