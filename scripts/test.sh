#!/usr/bin/env bash
# Sets up what is missing (Debian packages such as openssh-server, the virtualenv), then runs
# every test. Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh" --test
cd "$here"
export QT_QPA_PLATFORM=offscreen
# the slowest tests are listed at the end, so that the suite can be kept within its budget
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
