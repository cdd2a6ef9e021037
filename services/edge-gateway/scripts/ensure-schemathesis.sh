#!/usr/bin/env bash
# Installs schemathesis (the OpenAPI fuzzer the edge's tests run) from PyPI into a virtualenv
# under the repository's .toolchain/, once. Prints the path of its executable.
set -euo pipefail
version=4.32.5
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
venv="$root/.toolchain/schemathesis-$version"
if [ ! -x "$venv/bin/schemathesis" ]; then
  echo "[edge] installing schemathesis $version from PyPI into .toolchain/" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version" >&2
fi
echo "$venv/bin/schemathesis"
