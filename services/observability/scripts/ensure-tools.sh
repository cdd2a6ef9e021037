#!/usr/bin/env bash
# The observability tests need prometheus and promtool; installs them when missing. Fast when
# they are there.
set -euo pipefail
STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
source "$STRATA_ROOT/scripts/lib/toolchain.sh"
source "$STRATA_ROOT/scripts/lib/prometheus.sh"
ensure_prometheus
