#!/usr/bin/env bash
# Builds llama.cpp's llama-batched-bench, the peer of bench/gguf-cpu.mjs, from the llama.cpp
# source that node-llama-cpp carries on the npm registry (package/llama/gitRelease.bundle), into
# .toolchain/llama-cpp/ (build/bin/llama-batched-bench). Native CPU build, no network features.
# Reuses what is there on a second run. About 10 minutes on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
dest="$repo/.toolchain/llama-cpp"
version=node-llama-cpp@3.22.1
say() { printf '[llama.cpp] %s\n' "$*" >&2; }
started=$(date +%s)
mkdir -p "$dest"
if [ ! -d "$dest/src/.git" ]; then
  say "fetching $version from the npm registry"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack "$version" --silent >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  rm -rf "$dest/src"
  git clone -q "$tmp/package/llama/gitRelease.bundle" "$dest/src"
  cp "$tmp/package/llama/llama.cpp.info.json" "$dest/"
  rm -rf "$tmp"
fi
say "source: $(cat "$dest/llama.cpp.info.json" | tr -d '\n ') ($(($(date +%s) - started)) s)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$dest/src" -B "$dest/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
say "configured ($(($(date +%s) - started)) s); building llama-batched-bench"
cmake --build "$dest/build" --target llama-batched-bench -j "$(nproc)" >"$dest/build.log" 2>&1 ||
  { tail -20 "$dest/build.log" >&2; say "build failed (log: $dest/build.log)"; exit 1; }
say "built $dest/build/bin/llama-batched-bench in $(($(date +%s) - started)) s"
