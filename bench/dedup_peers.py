"""The peers of the deduplication benchmark (bench/bench_dedup.py): restic, borg and kopia,
each a class with the same steps (setup, backup, restore, size, warm_repository, close), and
the helpers they share with Cairn's side of the benchmark. How each is set up is in
bench_dedup.py's docstring and in bench/README.md."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import time

from bench.benchlib import du

KOPIA_BUILD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "scripts", "kopia-build.sh")


class ToolError(Exception):
    """A tool's step failed; the tool's later steps are skipped, the other tools run on."""


class RestoreDiffers(ToolError):
    """A restore did not give back the data backed up."""


def run(cmd, env=None, cwd=None):
    p = subprocess.run(cmd, shell=True, env=env, cwd=cwd, capture_output=True)
    if p.returncode:
        raise ToolError(f"{cmd} failed ({p.returncode}): "
                        f"{p.stderr.decode(errors='replace').strip()[-800:]}")
    return p.stdout.decode(errors="replace")


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def warm(src):
    """Reads a directory into the page cache (what a tool before dropped from it)."""
    run(f"tar -cf - -C {shlex.quote(src)} . | cat > /dev/null")


class Restic:
    name = "restic"

    def __init__(self, src, work):
        self.src, self.repo = src, os.path.join(work, "restic-repo")
        self.env = dict(os.environ, RESTIC_PASSWORD="bench", RESTIC_REPOSITORY=self.repo,
                        RESTIC_CACHE_DIR=os.path.join(work, "restic-cache"))

    @staticmethod
    def version():
        return run("restic version").strip() if shutil.which("restic") else None

    @staticmethod
    def why_missing():
        return "restic is not installed (scripts/setup.sh --test installs it)"

    @staticmethod
    def skippable():
        return False

    def setup(self):
        run("restic init", env=self.env)
        config = json.loads(run("restic cat config", env=self.env))
        return {"repository_version": config.get("version")}

    def backup(self, label):
        return {"seconds": timed(lambda: run(f"restic backup -q {shlex.quote(self.src)}",
                                             env=self.env))}

    def restore(self, tgt):
        return timed(lambda: run(f"restic restore -q latest --target {shlex.quote(tgt)}",
                                 env=self.env))

    def size(self):
        return du(self.repo)

    def warm_repository(self):
        warm(self.repo)
        if os.path.isdir(self.env["RESTIC_CACHE_DIR"]):
            warm(self.env["RESTIC_CACHE_DIR"])

    def close(self):
        pass


class Borg:
    name = "borg"

    def __init__(self, src, work):
        self.src, self.repo = src, os.path.join(work, "borg-repo")
        base = os.path.join(work, "borg-base")
        self.env = dict(os.environ, BORG_REPO=self.repo, BORG_BASE_DIR=base,
                        BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK="yes",
                        BORG_RELOCATED_REPO_ACCESS_IS_OK="yes")
        self.last = None

    @staticmethod
    def version():
        return run("borg --version").strip() if shutil.which("borg") else None

    @staticmethod
    def why_missing():
        return "borg is not installed (scripts/setup.sh --test installs it)"

    @staticmethod
    def skippable():
        return False

    def setup(self):
        run("borg init --encryption=none", env=self.env)
        return {}

    def backup(self, label):
        s = timed(lambda: run(f"borg create --compression lz4 ::{label} "
                              f"{shlex.quote(self.src)}", env=self.env))
        self.last = label
        return {"seconds": s}

    def restore(self, tgt):
        os.makedirs(tgt)
        # borg extracts into the current directory, the paths without their leading "/".
        return timed(lambda: run(f"borg extract ::{self.last}", env=self.env, cwd=tgt))

    def size(self):
        return du(self.repo)

    def warm_repository(self):
        warm(self.repo)

    def close(self):
        pass


# The kopia binary from scripts/kopia-build.sh, looked for once per run: its path, or why
# there is none and whether that is for want of a Go toolchain.
_kopia = {}
NO_GO = 3  # scripts/kopia-build.sh's exit status when there is no Go toolchain


def kopia_binary():
    """The path of the kopia binary, built by scripts/kopia-build.sh the first time on a
    machine (its messages go to stderr as they come); None when it could not be built (the
    reason is then in _kopia["why"])."""
    if not _kopia:
        try:
            p = subprocess.Popen([KOPIA_BUILD, "build"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        except OSError as e:
            _kopia["why"] = f"{KOPIA_BUILD} could not run: {e}"
            return None
        said = []
        for line in p.stderr:
            sys.stderr.write(line)
            said.append(line.strip())
        out = p.stdout.read().strip()
        if p.wait() == 0 and out and os.access(out.splitlines()[-1], os.X_OK):
            _kopia["bin"] = out.splitlines()[-1]
        else:
            last = [s for s in said if s][-1:] or [f"exit status {p.returncode}"]
            _kopia["no_go"] = p.returncode == NO_GO
            _kopia["why"] = ("scripts/kopia-build.sh could not build it: "
                             + last[0].removeprefix("kopia-build: "))
    return _kopia.get("bin")


class Kopia:
    """kopia with its default settings (no compression) in a filesystem repository; config,
    cache, logs and the password all in the work directory, nothing in $HOME."""

    name = "kopia"
    compression = None  # kopia's default policy: none

    def __init__(self, src, work):
        self.src = src
        self.repo = os.path.join(work, f"{self.name}-repo")
        base = os.path.join(work, f"{self.name}-base")
        self.cache = os.path.join(base, "cache")
        self.env = dict(os.environ, KOPIA_PASSWORD="bench",
                        KOPIA_CONFIG_PATH=os.path.join(base, "repository.config"),
                        KOPIA_CACHE_DIRECTORY=self.cache,
                        KOPIA_LOG_DIR=os.path.join(base, "logs"),
                        KOPIA_CHECK_FOR_UPDATES="false", KOPIA_USE_KEYRING="false")
        self.last = None

    @staticmethod
    def version():
        k = kopia_binary()
        return f"kopia {run(shlex.quote(k) + ' --version').strip()}" if k else None

    @staticmethod
    def why_missing():
        return _kopia.get("why", "kopia was not built")

    @staticmethod
    def skippable():
        # without a Go toolchain kopia is left out, as a bench-only peer; a failed build is
        # an error of the run
        return _kopia.get("no_go", False)

    def kopia(self, args):
        return run(f"{shlex.quote(kopia_binary())} {args}", env=self.env)

    def setup(self):
        self.kopia(f"repository create filesystem --path {shlex.quote(self.repo)}")
        if self.compression:
            self.kopia(f"policy set --global --compression={self.compression}")
        # Automatic maintenance stays on, as by default: the first snapshot of a repository
        # ends with a full one (garbage collection, index compaction), the next is due an
        # hour later, after the run; on 268 MB of this data it made no difference to the time.
        status = json.loads(self.kopia("repository status --json"))
        fmt = status.get("contentFormat", {})
        return {"compression": self.compression or "none",
                "splitter": status.get("objectFormat", {}).get("splitter"),
                "hash": fmt.get("hash"), "encryption": fmt.get("encryption"),
                "format_version": fmt.get("version")}

    def backup(self, label):
        out = []
        s = timed(lambda: out.append(self.kopia(
            f"snapshot create --no-progress --json {shlex.quote(self.src)}")))
        try:
            manifest = json.loads(out[0])
        except ValueError:
            raise ToolError(f"kopia snapshot create printed no snapshot: {out[0][-300:]!r}")
        failed = manifest.get("rootEntry", {}).get("summ", {}).get("numFailed")
        if failed:
            raise ToolError(f"kopia snapshot {manifest.get('id')}: {failed} entries failed")
        self.last = manifest["id"]
        return {"seconds": s, "snapshot": self.last}

    def restore(self, tgt):
        # kopia restores the snapshot's root into the target; the others restore the source's
        # whole path below it, where the benchmark compares the tree.
        where = os.path.join(tgt, self.src.lstrip("/"))
        return timed(lambda: self.kopia(f"snapshot restore --no-progress {self.last} "
                                        f"{shlex.quote(where)}"))

    def size(self):
        return du(self.repo)

    def warm_repository(self):
        warm(self.repo)
        if os.path.isdir(self.cache):
            warm(self.cache)

    def close(self):
        pass


class KopiaZstd(Kopia):
    """kopia with the global policy's compression set to zstd after the repository is made."""

    name = "kopia-zstd"
    compression = "zstd"


PEER_CLASSES = {c.name: c for c in (Restic, Borg, Kopia, KopiaZstd)}
