#!/usr/bin/env bash
# Builds the one-folder console: dist/cairn/cairn (run it as `dist/cairn/cairn console`).
# Sets up what is missing first (Debian packages, .venv with the test extra, which holds
# PyInstaller). Work files go to build/, the result to dist/ (both git-ignored);
# CAIRN_DIST_DIR and CAIRN_BUILD_DIR put them elsewhere.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dist=${CAIRN_DIST_DIR:-$here/dist}
work=${CAIRN_BUILD_DIR:-$here/build}/pyinstaller
"$here/scripts/setup.sh" --test
cd "$here"
start=$(date +%s)
.venv/bin/python -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$dist" --workpath "$work" packaging/cairn.spec
echo "build: $dist/cairn in $(( $(date +%s) - start )) s, $(du -sh "$dist/cairn" | cut -f1)"
