#!/usr/bin/env bash
# Installs moto's S3-compatible server (the model downloader's tests run it as a real S3 API)
# from PyPI into a virtualenv under the repository's .toolchain/, once. Prints the path of its
# executable (moto_server). scripts/strata test runs it during setup; the test runs it too, so a
# bare `vitest run` installs it on first use.
set -euo pipefail
version=5.2.5
STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
source "$STRATA_ROOT/scripts/lib/toolchain.sh"
venv="$toolchain_dir/moto-$version"
if [ ! -x "$venv/bin/moto_server" ]; then
  rm -rf "$venv"
  install_step "moto $version" "the model downloader's S3 tests (PyPI moto[server], into .toolchain/moto-$version)" \
    "$venv" python_venv_with "$venv" "moto[server]==$version"
fi
echo "$venv/bin/moto_server"
