#!/usr/bin/env bash
# The CUDA backend on a Llama-3-8B shape, on the GPU machine, in one call (run after
# cuda-kernels.sh has passed): transformers writes a random-weight model and its bf16 logits
# (llama3_random.py); check_cuda_hf_logits loads it (safetensors throughput) and compares its
# logits; bench_cuda_forward times prefill 8 x 1,024 and decode at batch 1..128 with 1,024-token
# contexts against the measured ceilings; bench_cuda_e2e runs 256 requests of 1,024 + 128 tokens
# through the engine next to transformers' generate() (hf_generate.py). Logs and JSON are
# packed into $OUT/cuda-llama3.tgz; the tables are printed last. From the repository root:
#   bash scripts/device/cuda-llama3.sh [check forward e2e]   (default: all three)
set -uo pipefail
OUT=${OUT:-/tmp/strata-cuda-out}
RESULTS=/tmp/strata-llama3-results
MODEL=${STRATA_LLAMA3_DIR:-/tmp/llama3-random}
rm -rf "$RESULTS"
mkdir -p "$OUT" "$RESULTS"
trap 'tar czf "$OUT/cuda-llama3.tgz" -C "$RESULTS" .' EXIT
cd "$(dirname "$0")/../.." || exit 1

# shellcheck source=scripts/device/gpu-env.sh
source scripts/device/gpu-env.sh
find_gpu_toolkit || exit 1
build_gpu_targets check_cuda_hf_logits bench_cuda_forward bench_cuda_e2e || exit 1

if [ ! -f "$MODEL/logits.bin" ]; then
  PYTHONUNBUFFERED=1 python3 scripts/device/llama3_random.py "$MODEL" 2>&1 | tee "$RESULTS/llama3_random.log" || exit 1
fi
phases=${*:-check forward e2e}
status=0
for phase in $phases; do
  case $phase in
    check)
      STRATA_CHECK_JSON="$RESULTS/check_hf_logits.json" "$build/cuda/check_cuda_hf_logits" "$MODEL" 2>&1 |
        tee "$RESULTS/check_hf_logits.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
    forward)
      "$build/cuda/bench_cuda_forward" "$MODEL" "$RESULTS/cuda-forward.json" 2>&1 | tee "$RESULTS/bench_forward.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
    e2e)
      PYTHONUNBUFFERED=1 python3 scripts/device/hf_generate.py "$MODEL" "$RESULTS/hf_generate.json" 2>&1 |
        tee "$RESULTS/hf_generate.log"
      "$build/cuda/bench_cuda_e2e" "$MODEL" "$RESULTS/cuda-e2e.json" --hf "$RESULTS/hf_generate.json" 2>&1 |
        tee "$RESULTS/bench_e2e.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      # The same run with the CPU sampler, for the GPU sampler's share of the speed.
      "$build/cuda/bench_cuda_e2e" "$MODEL" "$RESULTS/cuda-e2e-cpu-sampling.json" --sampling cpu \
        --hf "$RESULTS/hf_generate.json" 2>&1 | tee "$RESULTS/bench_e2e_cpu_sampling.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
    *) echo "unknown phase $phase (check, forward, e2e)" >&2; exit 2 ;;
  esac
done
echo
[ -f "$RESULTS/check_hf_logits.log" ] && grep -E "^(ok|FAIL)|loaded" "$RESULTS/check_hf_logits.log"
[ -f "$RESULTS/bench_forward.log" ] && tail -10 "$RESULTS/bench_forward.log"
[ -f "$RESULTS/bench_e2e.log" ] && tail -4 "$RESULTS/bench_e2e.log"
[ -f "$RESULTS/bench_e2e_cpu_sampling.log" ] && tail -4 "$RESULTS/bench_e2e_cpu_sampling.log"
exit $status
