# shellcheck shell=bash
# Sourced by the GPU machine's scripts (cuda-kernels.sh, cuda-llama3.sh): finds the toolkit
# and cuBLAS there, and builds the engine's CUDA targets for sm_90. Expects $RESULTS to exist.

# Sets nvcc_path, cuda_home and (unless given) STRATA_CUBLAS_DIR; returns 1 without nvcc.
find_gpu_toolkit() {
  nvcc_path=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  if [ -z "$nvcc_path" ]; then
    echo "no nvcc on this machine" >&2
    return 1
  fi
  cuda_home=${STRATA_CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")}
  # cuBLAS: the toolkit's own, else the wheel PyTorch brought.
  if [ -z "${STRATA_CUBLAS_DIR:-}" ]; then
    local dir
    for dir in "$cuda_home/lib64" "$cuda_home/lib" $(python3 -c 'import nvidia, os; [print(os.path.join(p, "cu13", "lib")) for p in nvidia.__path__]; [print(os.path.join(p, "cublas", "lib")) for p in nvidia.__path__]' 2>/dev/null); do
      if ls "$dir"/libcublasLt.so* > /dev/null 2>&1; then
        export STRATA_CUBLAS_DIR=$dir
        break
      fi
    done
  fi
}

# Configures and builds into $build (/tmp/strata-cuda-build), logging to $RESULTS/build.log.
# Arguments: extra cmake flags (-D...), then the targets to build (none: all). Prints the time;
# on failure prints the log's tail and returns 1.
build_gpu_targets() {
  build=/tmp/strata-cuda-build
  local start flags=() targets=() arg rc
  start=$(date +%s)
  for arg in "$@"; do
    case $arg in -D*) flags+=("$arg") ;; *) targets+=(--target "$arg") ;; esac
  done
  cmake -S services/inference-backend/native/engine -B "$build" -DSTRATA_CUDA_HOME="$cuda_home" \
    -DSTRATA_CUDA_ARCHS=90 "${flags[@]}" > "$RESULTS/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" "${targets[@]}" >> "$RESULTS/build.log" 2>&1
  rc=$?
  echo "build: rc $rc in $(( $(date +%s) - start )) s (log: build.log)"
  if [ $rc -ne 0 ]; then
    tail -40 "$RESULTS/build.log"
    return 1
  fi
}
