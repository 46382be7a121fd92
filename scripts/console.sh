#!/usr/bin/env bash
# Sets up what is missing, then starts the Cairn console on the embedded default
# (master in-process, catalog in $CAIRN_HOME or the user's data directory, this machine as host).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh"
exec "$here/.venv/bin/cairn" console "$@"
