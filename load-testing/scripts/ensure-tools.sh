#!/usr/bin/env bash
# What the load-testing tests need beyond npm packages, installed idempotently: k6 (Go module
# proxy, into .toolchain/bin), Prometheus and redis-server (Debian packages).
set -euo pipefail
STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$STRATA_ROOT/scripts/lib/toolchain.sh"
source "$STRATA_ROOT/scripts/lib/prometheus.sh"
bash "$STRATA_ROOT/load-testing/scripts/ensure-k6.sh" >/dev/null
ensure_prometheus
ensure_redis
