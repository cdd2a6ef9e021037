#!/usr/bin/env bash
# Builds the GPU programs (check_cuda_*, bench_cuda_*) here, for the GPU machine, so that a
# device call can skip its build: nvcc from .toolchain/cuda (scripts/lib/cuda.sh: NVIDIA's
# PyPI wheels, STRATA_CUDA=install) or any other, one arch (sm_90: H100 and H200), the CUDA
# runtime linked statically (as every build here), libstdc++ too. The stripped programs, packed
# as programs.tar.xz (about 4 MB instead of 42 MB of the call's 64 MiB), and a manifest (the
# sources' hash, the arch, nvcc's release) go to .device-bin/ (git-ignored), which a call
# carries (`carry: [".device-bin"]`); gpu-plan.sh's build step unpacks and uses them when the
# manifest matches the carried sources and they start there, and builds there otherwise.
#   bash scripts/device/prebuild.sh [ARCH]    (default 90; STRATA_CUDA_HOME names the toolkit)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/device/gpu-env.sh
source scripts/device/gpu-env.sh
arch=${1:-90}
out=${STRATA_DEVICE_BIN:-.device-bin}
export STRATA_CUDA_BUILD=${STRATA_PREBUILD_DIR:-/tmp/strata-prebuild}

find_build_toolkit || exit 1
hash=$(source_hash)
echo "prebuild: sources $hash, sm_$arch, nvcc $release ($cuda_home), into $out"
rm -rf "$STRATA_CUDA_BUILD"  # from scratch, so that the log has ptxas's report for every kernel
build_gpu_targets "$arch" "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc" > "$STRATA_CUDA_BUILD.log" 2>&1 ||
  { tail -40 "$STRATA_CUDA_BUILD.log"; exit 1; }
rm -rf "$out" "$STRATA_CUDA_BUILD.strip"
mkdir -p "$out" "$STRATA_CUDA_BUILD.strip"
programs=$(gpu_programs | tr '\n' ' ')
for program in $programs; do
  strip -o "$STRATA_CUDA_BUILD.strip/$program" "$STRATA_CUDA_BUILD/cuda/$program"
done
# shellcheck disable=SC2086 # one word per program
tar -cJf "$out/programs.tar.xz" -C "$STRATA_CUDA_BUILD.strip" $programs
{
  echo "sources $hash"
  echo "archs $arch"
  echo "nvcc $release"
  echo "built $(date -u +%FT%TZ) on $(uname -m)"
  echo "programs ${programs% }"
} > "$out/manifest.txt"
# The kernels that spill, each with ptxas's line (arch by arch, so a kernel can appear twice).
awk '/Function properties for/ { f = $NF } /spill stores/ && !/ 0 bytes spill stores/ { print f ":" $0 }' \
  "$STRATA_CUDA_BUILD.log" | sort -u > "$out/spills.txt"
du -sh "$out"
echo "ptxas spills: $(wc -l < "$out/spills.txt") (in $out/spills.txt); build log: $STRATA_CUDA_BUILD.log"
