#!/usr/bin/env bash
# Prepares a fresh Debian machine for Cairn: Debian packages, a virtualenv in .venv and the
# project installed into it. Safe to run again: it only does what is missing.
#   scripts/setup.sh           what the console needs
#   scripts/setup.sh --test    also what the tests and benchmarks need
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

# Qt's xcb and offscreen platforms need these shared libraries at run time.
debs=(python3 python3-venv libgl1 libegl1 libxkbcommon0 libxkbcommon-x11-0 libfontconfig1
      libdbus-1-3 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxcb-randr0
      libxcb-render-util0 libxcb-image0 libxcb-xinerama0 libxcb-xkb1 libglib2.0-0 fonts-dejavu-core)
if [ $want_test = 1 ]; then
  # sshd for the integration tests; restic and tar are the peers the benchmarks compare with,
  # restic and borg the peers of the dedup benchmark (bench/bench_dedup.py); acl (setfacl)
  # for the tests of restores into directories with default ACLs; iproute2 (ip, tc) for the
  # multi-host test bed (tests/netbed.py); curl for scripts/s3-test-server.sh; fio, the peer
  # of the disk benchmark (bench/bench_diskperf.py); python3-boto3, the S3 client a cloud
  # pool's storage host needs (the test hosts' agents run the system's python3); zstd, with
  # tar, reads compressed advanced-disk images in the tests as an admin would.
  debs+=(openssh-server openssh-client restic borgbackup tar xvfb acl iproute2 curl fio
         python3-boto3 zstd)
fi

missing=()
for d in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q "install ok installed" || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Prefer an interpreter of 3.10 or newer; the console's packages need it.
py=""
for cand in "${PYTHON:-}" python3.13 python3.12 python3.11 python3.10 python3; do
  [ -n "$cand" ] || continue
  if command -v "$cand" >/dev/null 2>&1 &&
     "$cand" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
    py=$cand; break
  fi
done
[ -n "$py" ] || { echo "setup: Python 3.10 or newer is required" >&2; exit 1; }

[ -x .venv/bin/python ] || "$py" -m venv .venv

extra=""
[ $want_test = 1 ] && extra="[test]"
stamp=".cairn-setup-stamp$extra"
# the install mode is part of what the stamp stands for
sum=$({ cat pyproject.toml; echo "editable compat"; } | sha256sum | cut -d' ' -f1)
# The checkout is put on the path by a plain .pth line (setuptools' "compat" editable mode)
# where the build backend still offers it: its default mode imports a module finder (and
# pathlib) at every start of Python, 15-30 ms for each command and each local agent.
editable() {
  .venv/bin/python -m pip install -q -e ".$extra" --config-settings editable_mode=compat ||
    .venv/bin/python -m pip install -q -e ".$extra"
}
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
  echo "setup: installing Python packages into .venv"
  log=.venv/setup-pip.log
  if ! { .venv/bin/python -m pip install -q --upgrade pip && editable; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: installing the Python packages failed (log: $log)" >&2
    exit 1
  fi
  echo "$sum" > "$stamp"
fi

# Byte code for Cairn's own modules, so that no `cairn` command or local agent compiles them
# at its start, even where the environment says not to write byte code (PYTHONDONTWRITEBYTECODE)
# or the checkout is read-only for the user who runs it; changed sources are compiled again.
.venv/bin/python -m compileall -q -j 0 app plugins ui >/dev/null

if [ $want_test = 1 ]; then
  # The S3 server of the cloud pool tests: built from its Go module once per machine and kept
  # in ~/.cache/cairn (about two minutes on two cores the first time, nothing afterwards).
  scripts/s3-test-server.sh build >/dev/null
fi
