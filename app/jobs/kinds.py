"""The kinds of job the dispatcher runs, one class each, and what each must do.

A kind is made from the master and the job's row (`Kind(master, job)`); the dispatcher
(app/jobs/dispatcher.py) calls its prepare(), then its run(). prepare() reads and checks the
job's parameters and looks up what the job needs, once: configuration objects, images, the
restore's plan from the image's catalog index. run() does the work with what prepare() found
and checks none of it again. Either may raise a CairnError (app/errors.py): the job ends
with its status and message.

The parent of a multi-stream backup is a backup job whose params list its streams; it is
run by its own kind, "backup-set" (kind_of), and a benchmark of a bucket by "object-benchmark"
(app/jobs/object_benchmark.py)."""

from typing import Protocol

from app.jobs.backup import BackupJob
from app.jobs.backup_set import BackupSetJob
from app.jobs.benchmark import JOB_TYPE as BENCHMARK, BenchmarkJob
from app.jobs.catalog_backup import JOB_TYPE as CATALOG_BACKUP, CatalogBackupJob
from app.jobs.cleanup import CleanupJob
from app.jobs.duplicate import JOB_TYPE as DUPLICATE, DuplicateJob
from app.jobs.expire import ExpireJob
from app.jobs.object_benchmark import WORKLOAD as OBJECT_WORKLOAD, ObjectBenchmarkJob
from app.jobs.pool_import import JOB_TYPE as IMPORT, ImportJob
from app.jobs.pool_jobs import ReclaimJob, VerifyJob
from app.jobs.reindex import JOB_TYPE as REBUILD_INDEX, RebuildIndexJob
from app.jobs.repair import JOB_TYPE as REPAIR, RepairJob
from app.jobs.restore import RestoreJob
from app.jobs.result import JobResult


class JobKind(Protocol):
    """One job of one kind, made with `Kind(master, job)`, which keeps them and writes
    nothing."""

    def prepare(self) -> None:
        """Reads and checks the job's parameters and looks up or opens what run() needs.
        May raise a CairnError, whose status and message end the job. Writes nothing: no
        log line, no catalog change, no host asked; a job refused here has done nothing."""

    def run(self) -> JobResult:
        """Does the job with what prepare() found, without checking it again, and says how
        it ended. Called once, after prepare() returned; raises a CairnError (Canceled when
        the administrator canceled it) to end the job with that error's status."""


#: {kind: class}; a kind is the job's type but for the parent of a multi-stream backup
KINDS = {"backup": BackupJob, "backup-set": BackupSetJob, "restore": RestoreJob,
         "expire": ExpireJob, "verify": VerifyJob, "reclaim": ReclaimJob,
         "cleanup": CleanupJob, REBUILD_INDEX: RebuildIndexJob,
         CATALOG_BACKUP: CatalogBackupJob, IMPORT: ImportJob, DUPLICATE: DuplicateJob,
         REPAIR: RepairJob, BENCHMARK: BenchmarkJob, "object-benchmark": ObjectBenchmarkJob}


def kind_of(job):
    """The kind that runs a job: its type, "backup-set" for a backup with streams, or
    "object-benchmark" for a benchmark of a bucket."""
    if job["type"] == BENCHMARK and job["params"].get("workload") == OBJECT_WORKLOAD:
        return "object-benchmark"
    return "backup-set" if job["params"].get("streams") else job["type"]


def make(master, job) -> JobKind:
    """The job's kind, made for it; prepare() not yet called."""
    return KINDS[kind_of(job)](master, job)
