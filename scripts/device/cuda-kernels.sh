#!/usr/bin/env bash
# The CUDA backend's kernels on the GPU machine, in one call: build with the machine's nvcc
# (ptxas's register and spill report kept), run every GPU check (float64 references, fresh
# seeds), compute-sanitizer memcheck over the kernel check, then every benchmark. Logs and JSON
# are packed into $OUT/cuda-kernels.tgz (the device tool brings back at most 8 files); the
# summary table is printed last. Run from the repository root:
#   STRATA_MODELS_DIR=.device-models bash scripts/device/cuda-kernels.sh
# (through the device tool, OUT is set there; .device-models comes from prepare-models.sh here
# and travels with `carry: [".device-models"]`; without it the backend check is skipped.)
# Exit status: 0 when every check passed, 1 otherwise.
set -uo pipefail
OUT=${OUT:-/tmp/strata-cuda-out}
RESULTS=/tmp/strata-cuda-results
rm -rf "$RESULTS"
mkdir -p "$OUT" "$RESULTS"
trap 'tar czf "$OUT/cuda-kernels.tgz" -C "$RESULTS" .' EXIT
cd "$(dirname "$0")/../.." || exit 1

# shellcheck source=scripts/device/gpu-env.sh
source scripts/device/gpu-env.sh
find_gpu_toolkit || exit 1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  "$nvcc_path" --version | tail -2
  echo "cuda_home=$cuda_home STRATA_CUBLAS_DIR=${STRATA_CUBLAS_DIR:-none found}"
} 2>&1 | tee "$RESULTS/machine.txt"

build_gpu_targets -DSTRATA_NVCC_VERBOSE=ON || exit 1  # ptxas's register and spill report, kept below
grep -E "spill stores" "$RESULTS/build.log" | grep -v " 0 bytes spill stores" | sort | uniq > "$RESULTS/spills.txt"

declare -A result
failed=0
run_check() {  # name, then the command
  local name=$1
  shift
  local t0
  t0=$(date +%s)
  STRATA_CHECK_JSON="$RESULTS/$name.json" "$@" > "$RESULTS/$name.log" 2>&1
  local rc=$?
  result[$name]="rc $rc, $(grep -cE '^ok ' "$RESULTS/$name.log") ok, $(grep -cE '^FAIL ' "$RESULTS/$name.log") failed, $(( $(date +%s) - t0 )) s"
  [ $rc -eq 0 ] || failed=1
  grep -E '^FAIL|error|Error' "$RESULTS/$name.log" | head -20
}
for program in "$build"/cuda/check_cuda_*; do
  name=$(basename "$program")
  [ "$name" = check_cuda_hf_logits ] && continue  # needs the random Llama-3: cuda-llama3.sh
  if [ "$name" = check_cuda_backend ]; then
    models=()
    for m in tinystories-656k stories260K; do
      [ -d "${STRATA_MODELS_DIR:-/nonexistent}/$m" ] && models+=("$STRATA_MODELS_DIR/$m")
    done
    if [ ${#models[@]} -eq 0 ]; then
      result[$name]="skipped: no models (STRATA_MODELS_DIR)"
      continue
    fi
    run_check "$name" "$program" "${models[@]}"
  else
    run_check "$name" "$program"
  fi
done
if command -v compute-sanitizer > /dev/null; then
  run_check memcheck_kernels compute-sanitizer --tool memcheck --error-exitcode 3 "$build/cuda/check_cuda_kernels"
  # The sampler hands data between threads and blocks through shared memory: memcheck, then
  # racecheck (shared-memory hazards), each bounded so a slow run cannot eat the session.
  run_check memcheck_sampling timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$build/cuda/check_cuda_sampling"
  run_check racecheck_sampling timeout 300 compute-sanitizer --tool racecheck --error-exitcode 3 "$build/cuda/check_cuda_sampling"
fi
for program in "$build"/cuda/bench_cuda_*; do
  name=$(basename "$program")
  case $name in bench_cuda_forward | bench_cuda_e2e) continue ;; esac  # need a model: cuda-llama3.sh
  t0=$(date +%s)
  "$program" "$RESULTS/$name.json" > "$RESULTS/$name.log" 2>&1
  result[$name]="rc $?, $(( $(date +%s) - t0 )) s"
done

echo
for name in "${!result[@]}"; do printf '%-28s %s\n' "$name" "${result[$name]}"; done | sort
echo "spills: $(wc -l < "$RESULTS/spills.txt") kernels (spills.txt)"
for program in "$build"/cuda/bench_cuda_*; do
  case $(basename "$program") in bench_cuda_forward | bench_cuda_e2e) continue ;; esac
  echo "--- $(basename "$program")"
  tail -25 "$RESULTS/$(basename "$program").log"
done
exit $failed
