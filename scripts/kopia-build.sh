#!/usr/bin/env bash
# kopia (Apache-2.0), a peer of the deduplication benchmark (bench/bench_dedup.py), built once
# per machine from its Go module with the machine's Go toolchain and kept outside the checkout,
# keyed by its version. It is for the benchmarks only: the tests do not use it.
#
#   scripts/kopia-build.sh        build the pinned version if missing; prints its path
#
# Exit status 3 when there is no Go toolchain to build it with (the benchmark then leaves kopia
# out), 1 when the build failed.
#
# The module is built through a small module of its own that requires it (the proxy does not
# answer a plain `go install ...@version` of it). CAIRN_KOPIA_CACHE overrides where the binary
# is kept.
set -euo pipefail

KOPIA_MODULE=github.com/kopia/kopia
KOPIA_VERSION=v0.22.3
cache_dir=${CAIRN_KOPIA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cairn/kopia}
bin_dir=$cache_dir/kopia-$KOPIA_VERSION
bin=$bin_dir/kopia

die() { echo "kopia-build: $*" >&2; exit 1; }

find_go() {
  local go
  go=$(command -v go 2>/dev/null || true)
  if [ -z "$go" ] && [ -x /usr/local/go/bin/go ]; then
    go=/usr/local/go/bin/go
  fi
  if [ -z "$go" ]; then
    echo "kopia-build: the Go toolchain (1.25 or newer) is needed to build kopia" >&2
    exit 3
  fi
  echo "$go"
}

build() {
  [ -x "$bin" ] && return 0
  mkdir -p "$bin_dir"
  # Several runs may start at once on a fresh machine: one builds, the others wait.
  exec 9>"$bin_dir/.lock"
  flock 9
  if [ ! -x "$bin" ]; then
    local go tmp start
    go=$(find_go)
    tmp=$(mktemp -d "$bin_dir/.build.XXXXXX")
    start=$(date +%s)
    echo "kopia-build: building kopia $KOPIA_VERSION (once per machine, a few minutes)" >&2
    cat >"$tmp/go.mod" <<EOF
module cairnbench/kopia

go 1.25

require $KOPIA_MODULE $KOPIA_VERSION
EOF
    cat >"$tmp/tools.go" <<EOF
//go:build tools

package tools

import _ "$KOPIA_MODULE"
EOF
    if ! (cd "$tmp" &&
          GOFLAGS="${GOFLAGS:-} -modcacherw" "$go" mod tidy &&
          GOFLAGS="${GOFLAGS:-} -modcacherw" "$go" build -trimpath -ldflags='-s -w' \
            -o "$tmp/kopia" "$KOPIA_MODULE") >"$tmp/build.log" 2>&1; then
      cat "$tmp/build.log" >&2
      rm -rf "$tmp"
      die "building kopia $KOPIA_VERSION failed"
    fi
    mv "$tmp/kopia" "$bin"
    rm -rf "$tmp"
    echo "kopia-build: built $bin in $(( $(date +%s) - start )) s" >&2
  fi
  exec 9>&-
}

case "${1:-build}" in
  build) build; echo "$bin" ;;
  *) die "usage: $0 [build]" ;;
esac
