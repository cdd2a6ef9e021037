# shellcheck shell=bash
# Sourced by the GPU plan (gpu-plan.sh) and by prebuild.sh: finds the toolkit and cuBLAS, the
# GPU's arch, and builds the engine's GPU programs (check_cuda_*, bench_cuda_*) for that arch
# only, with ninja when it is there; or finds prebuilt ones (.device-bin/, made here by
# prebuild.sh) and decides whether they will do. Run from the repository root.
#
# Under the plan's dry run (STRATA_PLAN_DRY_RUN=1) every command that needs the GPU, the CUDA
# toolkit or PyTorch goes through gpu(), which prints it instead of running it; the logic
# around those commands runs as it does on the GPU machine.

engine_dir=services/inference-backend/native/engine

dry_run() { [ "${STRATA_PLAN_DRY_RUN:-0}" = 1 ]; }

# Runs its arguments; under the dry run prints them instead. STRATA_PLAN_DRY_FAIL and
# STRATA_PLAN_DRY_HANG (space-separated step names) make the commands of those steps fail (exit
# 1) or hang, STRATA_PLAN_DRY_SLEEP makes each take that many seconds: how the plan's own tests
# drive its failure paths.
gpu() {
  if ! dry_run; then
    "$@"
    return
  fi
  printf 'dry-run:'
  printf ' %q' "$@"
  printf '\n'
  local step=" ${STRATA_PLAN_STEP:-} "
  case " ${STRATA_PLAN_DRY_HANG:-} " in *"$step"*) sleep "${STRATA_PLAN_DRY_HANG_S:-3600}" ;; esac
  [ "${STRATA_PLAN_DRY_SLEEP:-0}" = 0 ] || sleep "$STRATA_PLAN_DRY_SLEEP"
  case " ${STRATA_PLAN_DRY_FAIL:-} " in *"$step"*) return 1 ;; esac
  return 0
}

# Sets nvcc_path and cuda_home; returns 1 without nvcc (under the dry run: a stand-in path).
find_gpu_toolkit() {
  nvcc_path=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  if [ -z "$nvcc_path" ]; then
    if ! dry_run; then
      echo "no nvcc on this machine" >&2
      return 1
    fi
    nvcc_path=/usr/local/cuda/bin/nvcc
  fi
  local real
  real=$(readlink -f "$nvcc_path" 2> /dev/null)
  cuda_home=${STRATA_CUDA_HOME:-$(dirname "$(dirname "${real:-$nvcc_path}")")}
}

# The toolkit that builds here for the GPU machine (prebuild.sh, bundle-service.sh):
# STRATA_CUDA_HOME, else .toolchain/cuda's (STRATA_CUDA=install bash scripts/strata setup), else
# one on this machine. Sets nvcc_path, cuda_home and release ("release 13.0"); returns 1 when
# there is none.
find_build_toolkit() {
  if [ -z "${STRATA_CUDA_HOME:-}" ] && [ -x .toolchain/cuda/nvidia/cu13/bin/nvcc ]; then
    export STRATA_CUDA_HOME=$PWD/.toolchain/cuda/nvidia/cu13
  fi
  if [ -n "${STRATA_CUDA_HOME:-}" ]; then
    nvcc_path=$STRATA_CUDA_HOME/bin/nvcc
    cuda_home=$STRATA_CUDA_HOME
  elif ! find_gpu_toolkit; then
    echo "no nvcc: STRATA_CUDA=install bash scripts/strata setup puts one in .toolchain/cuda" >&2
    return 1
  fi
  # shellcheck disable=SC2034 # the callers print it and write it into their manifests
  release=$("$nvcc_path" --version | grep -o 'release [0-9.]*' | head -1)
}

# Exports STRATA_CUBLAS_DIR (unless given): the toolkit's own cuBLAS, else the wheel PyTorch
# brought. The programs dlopen cuBLAS, so prebuilt ones need this too.
find_cublas() {
  [ -n "${STRATA_CUBLAS_DIR:-}" ] && return
  local dir home=${cuda_home:-/usr/local/cuda}
  for dir in "$home/lib64" "$home/lib" /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; [print(os.path.join(p, "cu13", "lib")) for p in nvidia.__path__]; [print(os.path.join(p, "cublas", "lib")) for p in nvidia.__path__]' 2>/dev/null); do
    if ls "$dir"/libcublasLt.so* > /dev/null 2>&1; then
      export STRATA_CUBLAS_DIR=$dir
      return
    fi
  done
}

# The GPU's SM arch as cmake's STRATA_CUDA_ARCHS wants it ("9.0" -> 90), from nvidia-smi;
# STRATA_CUDA_ARCH overrides, and the dry run reads STRATA_PLAN_DRY_COMPUTE_CAP (9.0).
gpu_arch() {
  local cap
  if [ -n "${STRATA_CUDA_ARCH:-}" ]; then
    cap=$STRATA_CUDA_ARCH
  elif dry_run; then
    cap=${STRATA_PLAN_DRY_COMPUTE_CAP:-9.0}
  else
    cap=$(timeout 30 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
  fi
  cap=${cap//[^0-9]/}
  [ -n "$cap" ] || return 1
  echo "$cap"
}

# The GPU programs, named as cuda/CMakeLists.txt names them: one per tests/check_*.cu
# (check_cuda_*) and bench/bench_*.cu (bench_cuda_*). Not the emulation's emu_* programs.
gpu_programs() {
  local src name
  for src in "$engine_dir"/cuda/tests/check_*.cu "$engine_dir"/cuda/bench/bench_*.cu; do
    name=$(basename "$src" .cu)
    echo "${name/_/_cuda_}"
  done
}

# A hash of the engine's sources (what the GPU programs are built from), the same here and on
# the GPU machine: it ties prebuilt binaries to the tree they were built from.
source_hash() {
  # Cargo's target/ (git-ignored, never carried) holds a generated llguidance.h: left out.
  (cd "$engine_dir" && find . -name target -prune -o -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.hpp' \
    -o -name '*.cpp' -o -name '*.cc' -o -name '*.txt' -o -name '*.cmake' -o -name '*.py' \) -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}

# What the service bundle (.device-service/, made by bundle-service.sh) is built from, hashed the
# same way here and on the GPU machine: the engine's sources (source_hash), the addon's, the
# backend's and @strata/common's TypeScript, the benchmark scripts it bundles, the lockfile (the
# dependencies' versions) and the bundling scripts. A bundle of other sources is refused there.
service_paths=(services/inference-backend/src services/inference-backend/native/addon
  services/inference-backend/CMakeLists.txt services/inference-backend/package.json
  services/inference-backend/bench/http-latency.mjs services/inference-backend/bench/paths.mjs
  services/inference-backend/bench/sse-client.mjs services/inference-backend/bench/sse-client.c
  services/inference-backend/bench/sse-frames.mjs services/inference-backend/bench/percentile.mjs
  services/inference-backend/bench/story-prompts.mjs services/common/src services/common/package.json
  pnpm-lock.yaml scripts/device/bundle-service.sh scripts/device/bundle-service.mjs
  scripts/device/llama3-tokenizer.mjs)

service_source_hash() {
  { source_hash
    find "${service_paths[@]}" -type f ! -name '*.log' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}

# Configures and builds the GPU programs into $build for one arch, with ninja when it is on PATH
# (the GPU machine may have ninja and no make). Arguments: the arch (90), then extra cmake flags.
# Sets build; prints where the programs are. Output goes to stdout: the caller logs it.
build_gpu_targets() {
  local arch=$1
  shift
  build=${STRATA_CUDA_BUILD:-/tmp/strata-cuda-build}
  local generator="Unix Makefiles" targets=() program
  command -v ninja > /dev/null && generator=Ninja
  # A build folder configured with another generator cannot be reused.
  if [ -f "$build/CMakeCache.txt" ] && ! grep -qx "CMAKE_GENERATOR:INTERNAL=$generator" "$build/CMakeCache.txt"; then
    echo "removing $build: configured with another generator than $generator"
    rm -rf "$build"
  fi
  for program in $(gpu_programs); do targets+=("$program"); done
  echo "build: $generator, sm_$arch, ${#targets[@]} programs into $build"
  gpu cmake -S "$engine_dir" -B "$build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
    -DSTRATA_CUDA_HOME="$cuda_home" -DSTRATA_CUDA_ARCHS="$arch" -DSTRATA_NVCC_VERBOSE=ON "$@" &&
    gpu cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
}

# 0 when the prebuilt programs in $1 (.device-bin, from prebuild.sh: manifest.txt and
# programs.tar.xz) will do on this machine for arch $2: same sources, built for this arch, every
# program there once unpacked into $3, every library found, and one of them starting against the
# driver. Otherwise prints why and returns 1.
prebuilt_usable() {
  local dir=$1 arch=$2 bin=$3 program missing out rc
  if [ ! -f "$dir/manifest.txt" ]; then
    echo "no prebuilt programs ($dir/manifest.txt)"
    return 1
  fi
  if [ "$(manifest_field "$dir" sources)" != "$(source_hash)" ]; then
    echo "prebuilt programs in $dir are of other sources ($(manifest_field "$dir" sources), here $(source_hash))"
    return 1
  fi
  case " $(manifest_field "$dir" archs) " in
    *" $arch "*) ;;
    *)
      echo "prebuilt programs are for sm_$(manifest_field "$dir" archs), this GPU is sm_$arch"
      return 1
      ;;
  esac
  rm -rf "$bin"
  mkdir -p "$bin"
  if ! untar_xz "$dir/programs.tar.xz" "$bin"; then
    echo "prebuilt programs: cannot unpack $dir/programs.tar.xz"
    return 1
  fi
  for program in $(gpu_programs); do
    if [ ! -x "$bin/$program" ]; then
      echo "prebuilt $program missing from $dir/programs.tar.xz"
      return 1
    fi
    missing=$(ldd "$bin/$program" 2>&1 | grep -E "not found|not a dynamic" | head -3)
    if [ -n "$missing" ]; then
      echo "prebuilt $program cannot load here: $missing"
      return 1
    fi
  done
  # Started without arguments, the program meets the driver (static cudart), prints the device
  # and then its usage, and exits 2.
  out=$(gpu timeout 60 "$bin/check_cuda_hf_logits" 2>&1)
  rc=$?
  echo "$out"
  if dry_run; then
    [ $rc -eq 0 ] && return 0
  elif [ $rc -eq 2 ] && grep -q '^device: ' <<< "$out" && grep -q 'usage:' <<< "$out"; then
    return 0
  fi
  echo "prebuilt check_cuda_hf_logits does not start here (exit $rc)"
  return 1
}

# Unpacks a .tar.xz into a folder: tar with xz, else Python's lzma (the GPU machine may have no
# xz). Arguments: the archive, the folder.
untar_xz() {
  tar -xJf "$1" -C "$2" 2> /dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"
}

manifest_field() {  # dir, field: the rest of the manifest line that starts with the field
  sed -n "s/^$2 //p" "$1/manifest.txt" | head -1
}
