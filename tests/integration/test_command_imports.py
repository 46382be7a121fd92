"""What a command loads: `cairn backup --wait` imports the backup's own modules, and none of
the other kinds of job (verify, reclaim, catalog backup, benchmarks) or the libraries only they
use. Every module a command imports is time before its agent is asked anything; an unchanged
full of many small files takes about a third of a second, a quarter of it imports."""

import os
import subprocess
import sys

from clihelp import ROOT, local_dedup_policy

# Modules a backup has no use for, each of which was once loaded by every command.
NOT_FOR_A_BACKUP = (
    "app.jobs.pool_jobs", "app.jobs.disk_verify", "app.jobs.chunk_verify", "app.jobs.repair",
    "app.jobs.cleanup", "app.jobs.catalog_backup", "app.catalog_backup.archive",
    "app.jobs.object_benchmark", "plugins.storage.cloud.objbench",
    "plugins.storage.advanced_disk.image_check", "tarfile",
)


def imported(home, *args):
    """The modules the command imported (Python's own report of its imports)."""
    env = dict(os.environ, CAIRN_HOME=str(home))
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "app", *map(str, args)],
                       env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    return {line.rsplit("|", 1)[1].strip() for line in p.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_a_backup_imports_its_own_modules_only(tmp_path):
    home, src, pool = tmp_path / "home", tmp_path / "src", tmp_path / "pool"
    src.mkdir()
    for i in range(20):
        (src / f"f{i}").write_bytes(os.urandom(1000))
    local_dedup_policy(home, src, pool)
    for _ in range(2):   # a first full, then one with a files cache
        loaded = imported(home, "backup", "p", "--wait", "--json")
        # what the backup needs is seen, so that what is not seen was not loaded
        assert {"app.jobs.backup", "app.jobs.dispatcher", "plugins.storage.dedup.master",
                "sqlite3"} <= loaded
        assert sorted(loaded.intersection(NOT_FOR_A_BACKUP)) == []
    # the job kinds it left out are there when a job of theirs runs
    loaded = imported(home, "disk-pool", "verify", "ddp", "--wait", "--json")
    assert {"app.jobs.pool_jobs", "app.jobs.chunk_verify"} <= loaded
