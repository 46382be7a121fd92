"""Jobs: queueing backups, waiting for jobs, and what the activity monitor does to them (restart,
cancel, suspend, resume, statistics). Part of the master API (app/master/__init__.py)."""

import os
import subprocess
import sys
import time

from app import status, timeutil
from app.config import STREAM_MARKER
from app.schedule_rules import CATALOG_SCHEDULE, DEFAULT_RETENTION
from app.errors import CairnError, NotFound, ValidationError
from app.formats import private
from app.jobs import stats
from app.jobs.stats import job_start
from app.jobs.backup_set import split_streams, stream_key
from app.jobs.dispatcher import Dispatcher
from app.jobs.duplicate_queue import JOB_TYPE as DUPLICATE
from app.jobs.kinds import CATALOG_BACKUP
from app.jobs.store import DONE
from app.policy_edit import client_excludes


# How long a headless dispatcher just started has to take the lease before another is.
DISPATCHER_START_WAIT = 10.0


class JobsAPI:
    # ---- backups --------------------------------------------------------------------------
    def start_backup(self, policy, client=None, schedule=None, files_cache=True):
        """Queues one backup job per client of the policy (or the one client given).
        files_cache=False: a full into a deduplication pool reads every file, even those the
        previous image shows unchanged."""
        pol = self.config.policy(policy)
        catalog = [s for s in pol["schedules"] if s["type"] == CATALOG_SCHEDULE]
        chosen = next((s for s in catalog if s["name"] == schedule), None)
        if chosen is None and schedule is None and catalog and not pol["clients"] \
                and len(catalog) == len(pol["schedules"]):
            chosen = catalog[0]  # a policy that only backs up the catalog
        if chosen is not None:
            if client is not None:
                raise ValidationError(f"schedule {chosen['name']!r} backs up the master's "
                                      "catalog, not a client", hint="leave out --client")
            # the catalog backup's module (its archive writer, tar) only for such a job
            from app.jobs import catalog_backup
            return [catalog_backup.queue(self, pol["storage_unit"],
                                         retention_s=chosen["retention_s"], policy=policy,
                                         schedule=chosen["name"],
                                         note=f"catalog backup started by hand: schedule "
                                              f"{chosen['name']} of policy {policy}")]
        if not pol["clients"]:
            raise ValidationError(f"policy {policy!r} has no clients",
                                  hint=f"add one with `cairn policy add-client {policy} HOST`")
        if not pol["selections"]:
            raise ValidationError(f"policy {policy!r} has no backup selections",
                                  hint=f"add one with `cairn policy add-selection {policy} PATH`")
        if client is not None and client not in pol["clients"]:
            raise ValidationError(f"{client!r} is not a client of policy {policy!r}",
                                  hint=f"its clients: {', '.join(pol['clients'])}")
        scheds = [s for s in pol["schedules"] if s["type"] != CATALOG_SCHEDULE]
        if schedule is None:
            full = [s for s in scheds if s["type"] == "full"]
            if not scheds:
                # A manual backup of a policy without schedules is a full with the default
                # retention, as admins expect from a user-directed backup.
                sched = {"name": "manual", "type": "full",
                         "retention_s": timeutil.parse_duration(DEFAULT_RETENTION)}
            else:
                sched = (full or scheds)[0]
        else:
            sched = next((s for s in scheds if s["name"] == schedule), None)
            if sched is None:
                raise NotFound(f"policy {policy!r} has no schedule {schedule!r}",
                               hint="its schedules: " + (", ".join(s["name"] for s in scheds)
                                                         or "none"))
        # One transaction for all the policy's clients: a thousand of them are queued in a
        # fraction of the time, and all or none.
        with self.db.tx() as c:
            return [self.queue_backup(pol, cl, sched, files_cache=files_cache, c=c)
                    for cl in ([client] if client else pol["clients"])]

    def queue_backup(self, pol, client, sched, *, not_after=None, note=None, c=None,
                     files_cache=True):
        """Queues the backup of one client under a policy dict and a schedule dict: one job,
        or with multiple data streams a parent job and a child job per stream. Returns the
        (parent) job id. `c`: an open write transaction to queue it in."""
        if c is None:
            with self.db.tx() as c:
                return self.queue_backup(pol, client, sched, not_after=not_after, note=note,
                                         c=c, files_cache=files_cache)
        plain = [s for s in pol["selections"] if s != STREAM_MARKER]
        streams = split_streams(pol["selections"]) if pol["multiple_streams"] else [plain]
        # A queued job keeps what it was queued with: an edit of the policy applies to the
        # jobs queued after it (app/policy_edit.py).
        base = {"schedule_type": sched["type"], "checksum": pol["checksum"],
                "excludes": client_excludes(self.db, pol["name"], client, c)}
        if "retention_s" in sched:
            base["retention_s"] = sched["retention_s"]
        if not files_cache or sched.get("read_all"):
            base["no_files_cache"] = True
        common = dict(client=client, policy=pol["name"], schedule=sched["name"],
                      priority=pol["priority"], not_after=not_after, c=c)
        if len(streams) < 2:
            return self.jobs.create("backup", storage_unit=pol["storage_unit"],
                                    params={**base, "selections": plain}, note=note, **common)
        parent = self.jobs.create(
            "backup", storage_unit=None,
            params={**base, "selections": plain, "streams": streams},
            note=(note or "backup job queued") + f": {len(streams)} data streams, each a child "
                                                  "job", **common)
        for sel in streams:
            self.jobs.create("backup", storage_unit=pol["storage_unit"], parent_id=parent,
                             params={**base, "selections": sel, "stream": stream_key(sel)},
                             note=f"stream {', '.join(sel)} of job {parent}", **common)
        return parent

    # ---- reading them ---------------------------------------------------------------------
    def job(self, job_id):
        """One job; NotFound when there is none."""
        return self.jobs.get(job_id)

    def jobs_by_id(self, job_ids):
        """The jobs of a list of ids, in its order; NotFound for an id there is no job of."""
        return [self.jobs.get(j) for j in job_ids]

    def job_list(self, state=None):
        """Every job (or those in `state`: queued, active, done), newest first. Not `jobs`:
        that is the master's job store (app/jobs/store.py)."""
        return self.jobs.list(state=state)

    def job_logs(self, job_id, after=0):
        """A job's log entries, oldest first; those after the entry id `after` when given."""
        return self.jobs.logs(job_id, after=after)

    def job_changes(self, since=0):
        """The jobs written after the change counter's value `since` and every active one,
        with the ids of jobs removed since and the cursor to ask from next time
        (JobStore.changes)."""
        return self.jobs.changes(since)

    # ---- running jobs ---------------------------------------------------------------------
    def wait_for(self, job_ids, timeout=None, poll=0.3):
        """Run the jobs here if no other dispatcher is active, else wait for them. A master
        whose jobs run elsewhere (`jobs_run_elsewhere`: the served master, whose process
        ends with its client's connection) starts a headless dispatcher for them instead."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # Ended already (a dispatcher ran them and let go of the lease since the last
            # look): no dispatcher is started for nothing.
            if all(self.jobs.get(j)["state"] == DONE for j in job_ids):
                break
            if Dispatcher.lease_holder(self.db) is None:
                if getattr(self, "jobs_run_elsewhere", False):
                    self.ensure_dispatcher()
                elif self.dispatcher.run_until_done(job_ids):
                    break
            if deadline and time.monotonic() > deadline:
                raise CairnError("timed out waiting for jobs " + ", ".join(map(str, job_ids)))
            time.sleep(poll)
        return [self.jobs.get(j) for j in job_ids]

    def dispatcher_active(self):
        """Whether a dispatcher (a console, `cairn master run`, a command running its jobs)
        holds the catalog's lease, and so runs queued jobs."""
        return Dispatcher.lease_holder(self.db) is not None

    def ensure_dispatcher(self):
        """Queued jobs have to run: when no dispatcher holds the lease, starts a headless
        master (`cairn master run --until-idle`) in a session of its own, so that the jobs
        go on after the command or connection that queued them has ended. Once started, no
        other is started, by this process or another (several consoles and commands on one
        master), until it took the lease or DISPATCHER_START_WAIT seconds passed (the time
        it has to take it). Returns whether one was started."""
        if Dispatcher.lease_holder(self.db) is not None:
            return False
        if not Dispatcher.claim_start(self.db, f"{os.uname().nodename}:{os.getpid()}",
                                      DISPATCHER_START_WAIT):
            return False
        root = self.home.root
        cmd = [sys.executable, "-m", "app", "--home", root, "master", "run", "--until-idle"]
        if getattr(sys, "frozen", False):
            cmd = [sys.executable, "--home", root, "master", "run", "--until-idle"]
        log = os.fdopen(private.create(os.path.join(root, "master.log"),
                                       os.O_WRONLY | os.O_APPEND), "ab")
        try:
            subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True, env=os.environ.copy())
        finally:
            log.close()
        return True

    # ---- the activity monitor -------------------------------------------------------------
    def restart_job(self, job_id):
        """Queues a job again with the type and parameters of one that failed or was
        canceled; returns the new jobs. What it names (policy and client, image and restore
        target) is checked again first, so a restart of something deleted since is refused
        here, not in the middle of the new job."""
        old = self.jobs.get(job_id)
        if old["state"] != DONE:
            raise ValidationError(f"job {job_id} is {old['state']}; only an ended job can be "
                                  "restarted", hint="cancel it first, or wait for it to end")
        if old["status"] in (status.OK, status.PARTIAL):
            raise ValidationError(
                f"job {job_id} ended with status {old['status']} "
                f"({status.text(old['status'])}); only a failed or canceled job is restarted",
                hint="start a new job instead, e.g. `cairn backup POLICY`")
        p = old["params"]
        if old["type"] == "backup":
            pol = self.config.policy(old["policy"])
            if old["client"] not in pol["clients"]:
                raise ValidationError(f"{old['client']!r} is no longer a client of policy "
                                      f"{old['policy']!r}",
                                      hint="add it again with `cairn policy add-client`")
            self.config.storage_unit(old["storage_unit"])
            if p.get("streams"):
                raise ValidationError(f"job {job_id} is the parent of a multi-stream backup",
                                      hint="restart the stream jobs that failed, or start a "
                                           "new backup of the policy")
            new_id = self.jobs.create("backup", client=old["client"], policy=old["policy"],
                                      schedule=old["schedule"], storage_unit=old["storage_unit"],
                                      priority=old["priority"], params=p,
                                      attempt=old["attempt"] + 1,
                                      retry_of=old["retry_of"] or job_id,
                                      note=f"attempt {old['attempt'] + 1}: restart of job "
                                           f"{job_id}")
        elif old["type"] == "restore":
            extra = {"relocate": p["relocate"]} if p.get("relocate") else {}
            new_id = self.start_restore(p["image"], p["paths"], p["to"], to_host=p.get("to_host"),
                                        overwrite=p.get("overwrite", "skip"),
                                        direct_io=p.get("direct_io", "auto"),
                                        streams=p.get("parallel_streams"),
                                        copy=p.get("copy"), **extra)
        elif old["type"] == DUPLICATE:
            # the image and the unit it is copied to must still be there
            self.image(p["image"])
            self.config.storage_unit(old["storage_unit"])
            new_id = self.jobs.create(DUPLICATE, client=old["client"], policy=old["policy"],
                                      schedule=old["schedule"],
                                      storage_unit=old["storage_unit"],
                                      priority=old["priority"], params=p,
                                      parent_id=old["parent_id"], attempt=old["attempt"] + 1,
                                      retry_of=old["retry_of"] or job_id,
                                      note=f"attempt {old['attempt'] + 1}: restart of job "
                                           f"{job_id}")
        elif old["type"] == CATALOG_BACKUP:
            # The escrow made when the first one was queued seals the keys: no passphrase.
            from app.jobs import catalog_backup  # only for such a job: its archive writer, tar
            catalog_backup.target(self, p["storage_unit"])
            new_id = self.jobs.create(CATALOG_BACKUP, params=p, attempt=old["attempt"] + 1,
                                      retry_of=old["retry_of"] or job_id,
                                      note=f"attempt {old['attempt'] + 1}: restart of job "
                                           f"{job_id}")
        else:
            raise ValidationError(f"a {old['type']} job cannot be restarted")
        self.jobs.log(new_id, f"restart of job {job_id}")
        self.jobs.log(job_id, f"restarted as job {new_id}")
        return [self.jobs.get(new_id)]

    def cancel_job(self, job_id):
        """Asks a job to stop: a queued one ends here as canceled, a running one stops at its
        next check; an ended one is left as it is. Returns the job."""
        return self.jobs.request_cancel(job_id)

    def suspend_job(self, job_id):
        """Holds a queued job until it is resumed. A running job cannot be suspended: an
        advanced-disk image is one stream that cannot continue where it stopped, so it is
        canceled and restarted instead."""
        job = self.jobs.get(job_id)
        if job["state"] != "queued":
            raise ValidationError(
                f"job {job_id} is {job['state']}: only a queued job can be suspended",
                hint="an advanced-disk backup cannot resume mid-stream; cancel it and "
                     "restart it later" if job["state"] == "active" else None)
        self.jobs.set_suspended(job_id, True)
        self.jobs.log(job_id, "suspended by the administrator")
        return self.jobs.get(job_id)

    def resume_job(self, job_id):
        job = self.jobs.get(job_id)
        if not job["suspended"]:
            raise ValidationError(f"job {job_id} is not suspended")
        self.jobs.set_suspended(job_id, False)
        self.jobs.log(job_id, "resumed by the administrator")
        return self.jobs.get(job_id)

    def job_stats(self, job_id, after=None, *, peak_window_s=stats.PEAK_WINDOW_S,
                  first_s=stats.FIRST_S):
        """A job with its throughput samples (those after time `after` when given) and, once
        it has ended, its throughput figures (app.jobs.stats.summary over all its samples,
        the sustained peak over `peak_window_s`, the data moved in the first `first_s`)."""
        stats.check_windows(peak_window_s, first_s)
        job = self.jobs.get(job_id)
        samples = self.jobs.samples(job_id, after=after)
        figures = None
        if job["state"] == DONE:
            every = samples if after is None else self.jobs.samples(job_id)
            figures = stats.summary(every, job_start(job), window=peak_window_s,
                                    first_s=first_s)
        return {"job": job, "samples": samples, "stats": figures}

    def throughput(self, window_s=300.0, step=1.0, now=None):
        """The summed data rate of all jobs over the last `window_s` seconds, one
        (t, bytes_per_s) point per `step`."""
        now = time.time() if now is None else now
        # A second is complete once each running job has written its next sample (one a
        # second): ending two steps back keeps the newest point from dipping.
        end = now - 2 * step
        start = end - window_s
        # one sample before the window, so a job's rate counts from its first step
        rows = self.jobs.samples_since(start - 2 * step - 1.0)
        return stats.aggregate(rows, start, end, step)
