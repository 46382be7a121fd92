#!/usr/bin/env bash
# A real S3 server on 127.0.0.1 for the tests and benchmarks of cloud pools: versitygw
# (Apache-2.0) with its POSIX back end, so a bucket is a directory and an object a file under
# DIR/data. It is built once per machine from its Go module with the machine's Go toolchain
# and kept outside the checkout, keyed by its version.
#
#   scripts/s3-test-server.sh build        build the pinned version if missing; prints its path
#   scripts/s3-test-server.sh start DIR    start a server with its data under DIR; prints
#                                          endpoint=, bucket=, access_key=, secret_key= lines
#   scripts/s3-test-server.sh stop DIR     stop it (nothing to do when it is not running)
#
# The first start under DIR picks a free port, random keys and an empty bucket; a later start
# under the same DIR (after a stop) comes back on the same port with the same keys and data, as
# a server that was down for a while would. CAIRN_S3_MAX_REQUESTS=N at start makes it answer
# 503 SlowDown to requests past N in flight, for tests of throttling.
# CAIRN_S3_SERVER_CACHE overrides where the binary is kept.
set -euo pipefail

VGW_MODULE=github.com/versity/versitygw
VGW_VERSION=v1.8.0
cache_dir=${CAIRN_S3_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cairn/s3-test-server}
bin_dir=$cache_dir/versitygw-$VGW_VERSION
bin=$bin_dir/versitygw
region=us-east-1
empty_sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855

die() { echo "s3-test-server: $*" >&2; exit 1; }

find_go() {
  local go
  go=$(command -v go 2>/dev/null || true)
  [ -n "$go" ] || { [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go; }
  [ -n "$go" ] || die "the Go toolchain (1.25 or newer) is needed to build the S3 test server"
  echo "$go"
}

build() {
  [ -x "$bin" ] && return 0
  mkdir -p "$bin_dir"
  # Several test runs may start at once on a fresh machine: one builds, the others wait.
  exec 9>"$bin_dir/.lock"
  flock 9
  if [ ! -x "$bin" ]; then
    local go tmp start
    go=$(find_go)
    tmp=$(mktemp -d "$bin_dir/.build.XXXXXX")
    start=$(date +%s)
    echo "s3-test-server: building versitygw $VGW_VERSION (once per machine, a few minutes)" >&2
    if ! GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -modcacherw" "$go" install -trimpath \
          -ldflags='-s -w' "$VGW_MODULE/cmd/versitygw@$VGW_VERSION" >"$tmp/build.log" 2>&1; then
      cat "$tmp/build.log" >&2
      rm -rf "$tmp"
      die "building versitygw $VGW_VERSION failed"
    fi
    mv "$tmp/versitygw" "$bin"
    rm -rf "$tmp"
    echo "s3-test-server: built $bin in $(( $(date +%s) - start )) s" >&2
  fi
  exec 9>&-
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

random_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }

running_pid() {
  # The pid in DIR/server.pid, if that process is still this server.
  local pid
  [ -f "$1/server.pid" ] || return 1
  pid=$(cat "$1/server.pid")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$bin")" ] || return 1
  echo "$pid"
}

print_settings() {
  echo "endpoint=http://127.0.0.1:$port"
  echo "bucket=$bucket"
  echo "access_key=$access_key"
  echo "secret_key=$secret_key"
}

healthy() { curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$1/health" 2>/dev/null; }

launch() {
  # Starts the server on $port in the background; succeeds once it answers.
  local dir=$1 meta=() limit=() pid i
  # Object metadata lives in extended attributes; where the file system has none (an old
  # tmpfs), in a directory beside the data.
  if ! python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.cairn", b"1")' "$dir/data" \
       2>/dev/null; then
    mkdir -p "$dir/meta"
    meta=(--sidecar "$dir/meta")
  fi
  [ -n "${CAIRN_S3_MAX_REQUESTS:-}" ] && limit=(--max-requests "$CAIRN_S3_MAX_REQUESTS")
  # Keys through the environment, not the command line, where ps would show them.
  ROOT_ACCESS_KEY_ID="$access_key" ROOT_SECRET_ACCESS_KEY="$secret_key" \
    "$bin" --port "127.0.0.1:$port" --region "$region" --health /health --keep-alive \
    --quiet "${limit[@]}" posix "${meta[@]}" "$dir/data" \
    </dev/null >>"$dir/server.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/server.pid"
  for i in $(seq 1 200); do
    healthy "$port" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill "$pid" 2>/dev/null || true
  rm -f "$dir/server.pid"
  return 1
}

start() {
  local dir=$1 fresh=0 tries
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  build
  if [ -f "$dir/server.env" ]; then
    # shellcheck disable=SC1091
    . "$dir/server.env"
  else
    fresh=1
    access_key=$(random_hex 10 | tr a-f A-F)
    secret_key=$(random_hex 20)
    bucket=cairn-test-$(random_hex 4)
  fi
  if running_pid "$dir" >/dev/null; then
    [ $fresh = 0 ] || die "a server runs under $dir without its settings file"
    print_settings
    return 0
  fi
  if [ $fresh = 1 ]; then
    # The port may be taken between choosing it and binding it: choose again.
    for tries in 1 2 3; do
      port=$(free_port)
      launch "$dir" && break
      port=""
    done
    [ -n "$port" ] || { tail -20 "$dir/server.log" >&2; die "the server did not start"; }
    curl -fsS -o /dev/null -X PUT --aws-sigv4 "aws:amz:$region:s3" \
      --user "$access_key:$secret_key" -H "x-amz-content-sha256: $empty_sha256" \
      "http://127.0.0.1:$port/$bucket" ||
      { stop "$dir"; die "creating bucket $bucket failed"; }
    (umask 077; printf 'port=%s\naccess_key=%s\nsecret_key=%s\nbucket=%s\n' \
       "$port" "$access_key" "$secret_key" "$bucket" >"$dir/server.env")
  else
    launch "$dir" || { tail -20 "$dir/server.log" >&2;
                       die "the server did not start again on port $port"; }
  fi
  print_settings
}

stop() {
  local dir=$1 pid i
  [ -d "$dir" ] || return 0
  if pid=$(running_pid "$dir"); then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/server.pid"
}

case "${1:-}" in
  build) build; echo "$bin" ;;
  start) [ -n "${2:-}" ] || die "usage: $0 start DIR"; start "$2" ;;
  stop) [ -n "${2:-}" ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 build | start DIR | stop DIR" ;;
esac
