#!/usr/bin/env bash
# Makes sure k6 is built into <repo>/.toolchain/bin, from the Go module proxy only (go install).
# Idempotent and fast when the pinned version is already there. Prints the k6 path on stdout.
set -euo pipefail
K6_VERSION=v1.8.1
STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$STRATA_ROOT/scripts/lib/toolchain.sh"
k6="$toolchain_dir/bin/k6"
if ! "$k6" version 2>/dev/null | grep -q "k6 $K6_VERSION"; then
  go_install "k6 $K6_VERSION" "the k6 load suites (built from the Go module proxy; minutes, once)" "go.k6.io/k6@$K6_VERSION"
fi
echo "$k6"
