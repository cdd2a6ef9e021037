#!/usr/bin/env bash
# A Python venv under .toolchain with matplotlib from PyPI, for the load runs' PNG plots.
# Idempotent and fast when present. Prints the venv's python on stdout.
set -euo pipefail
MATPLOTLIB_VERSION=3.10.3
STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$STRATA_ROOT/scripts/lib/toolchain.sh"
venv="$toolchain_dir/plot-venv"
if ! "$venv/bin/python" -c "import matplotlib, sys; sys.exit(matplotlib.__version__ != '$MATPLOTLIB_VERSION')" 2>/dev/null; then
  command -v python3 >/dev/null || die "the load runs' plots need python3 (3.10+)"
  rm -rf "$venv"
  install_step "matplotlib $MATPLOTLIB_VERSION" "the load runs' PNG plots (PyPI, into .toolchain/plot-venv)" \
    "$venv" python_venv_with "$venv" "matplotlib==$MATPLOTLIB_VERSION"
fi
echo "$venv/bin/python"
