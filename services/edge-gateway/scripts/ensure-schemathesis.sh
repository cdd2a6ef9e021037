#!/usr/bin/env bash
# Installs schemathesis (the OpenAPI fuzzer the edge's tests run) from PyPI into a virtualenv
# under the repository's .toolchain/, once. Prints the path of its executable.
set -euo pipefail
version=4.32.5
STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
source "$STRATA_ROOT/scripts/lib/toolchain.sh"
venv="$toolchain_dir/schemathesis-$version"
if [ ! -x "$venv/bin/schemathesis" ]; then
  rm -rf "$venv"
  install_step "schemathesis $version" "the edge's OpenAPI fuzz test (PyPI, into .toolchain/schemathesis-$version)" \
    "$venv" python_venv_with "$venv" "schemathesis==$version"
fi
echo "$venv/bin/schemathesis"
