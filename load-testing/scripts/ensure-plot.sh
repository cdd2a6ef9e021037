#!/usr/bin/env bash
# A Python venv under .toolchain with matplotlib from PyPI, for the load runs' PNG plots.
# Idempotent and fast when present. Prints the venv's python on stdout.
set -euo pipefail
MATPLOTLIB_VERSION=3.10.3
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv="$repo/.toolchain/plot-venv"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import matplotlib, sys; sys.exit(matplotlib.__version__ != '$MATPLOTLIB_VERSION')" 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
command -v python3 >/dev/null || { echo "[load-testing] the plot needs python3 (3.10+)" >&2; exit 1; }
echo "[load-testing] installing matplotlib $MATPLOTLIB_VERSION from PyPI into .toolchain/plot-venv" >&2
python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "matplotlib==$MATPLOTLIB_VERSION" >&2
echo "$venv/bin/python"
