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

import importlib
from typing import Protocol

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


#: {kind: "module:class"}; a kind is the job's type but for the parent of a multi-stream
#: backup. A kind's module is imported when a job of that kind runs: a command that runs a
#: backup loads none of the other kinds (tens of modules, a fifth of the master's imports).
KINDS = {"backup": "backup:BackupJob", "backup-set": "backup_set:BackupSetJob",
         "restore": "restore:RestoreJob", "expire": "expire:ExpireJob",
         "verify": "pool_jobs:VerifyJob", "reclaim": "pool_jobs:ReclaimJob",
         "cleanup": "cleanup:CleanupJob", "rebuild-index": "reindex:RebuildIndexJob",
         "catalog-backup": "catalog_backup:CatalogBackupJob", "import": "pool_import:ImportJob",
         "duplicate": "duplicate:DuplicateJob", "repair": "repair:RepairJob",
         "benchmark": "benchmark:BenchmarkJob",
         "object-benchmark": "object_benchmark:ObjectBenchmarkJob"}
# names that others compare a job's type with, without loading the kind's module; the
# modules hold the same (tests/unit/test_job_kinds.py)
BENCHMARK, OBJECT_WORKLOAD, CATALOG_BACKUP = "benchmark", "object", "catalog-backup"


def kind_class(kind):
    """The class that runs jobs of a kind (KeyError for no kind)."""
    module, name = KINDS[kind].split(":")
    return getattr(importlib.import_module("app.jobs." + module), name)


def kind_of(job):
    """The kind that runs a job: its type, "backup-set" for a backup with streams, or
    "object-benchmark" for a benchmark of a bucket."""
    if job["type"] == BENCHMARK and job["params"].get("workload") == OBJECT_WORKLOAD:
        return "object-benchmark"
    return "backup-set" if job["params"].get("streams") else job["type"]


def make(master, job) -> JobKind:
    """The job's kind, made for it; prepare() not yet called."""
    return kind_class(kind_of(job))(master, job)
