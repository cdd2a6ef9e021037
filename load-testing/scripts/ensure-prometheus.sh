#!/usr/bin/env bash
# Makes sure a Prometheus server binary is on PATH (Debian's `prometheus` package, installed
# when missing; see scripts/lib/prometheus.sh). Prints its path on stdout.
set -euo pipefail
STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$STRATA_ROOT/scripts/lib/toolchain.sh"
source "$STRATA_ROOT/scripts/lib/prometheus.sh"
ensure_prometheus
command -v prometheus
