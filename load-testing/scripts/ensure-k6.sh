#!/usr/bin/env bash
# Makes sure k6 is built into <repo>/.toolchain/bin, from the Go module proxy only (go install).
# Idempotent and fast when the pinned version is already there. Prints the k6 path on stdout.
set -euo pipefail
K6_VERSION=v1.8.1

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
toolchain="$repo/.toolchain"
k6="$toolchain/bin/k6"

if [ -x "$k6" ] && "$k6" version 2>/dev/null | grep -q "k6 $K6_VERSION"; then
  echo "$k6"
  exit 0
fi

command -v go >/dev/null || {
  echo "[load-testing] k6 is built with Go (go install go.k6.io/k6@$K6_VERSION): install Go 1.24+ first" >&2
  exit 1
}
mkdir -p "$toolchain/bin" "$toolchain/go/path" "$toolchain/go/cache"
echo "[load-testing] building k6 $K6_VERSION from the Go module proxy into .toolchain/bin (a few minutes, once)" >&2
start=$(date +%s)
GOBIN="$toolchain/bin" GOPATH="$toolchain/go/path" GOCACHE="$toolchain/go/cache" \
  GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0 \
  go install "go.k6.io/k6@$K6_VERSION" >&2
echo "[load-testing] k6 built in $(($(date +%s) - start)) s" >&2
echo "$k6"
