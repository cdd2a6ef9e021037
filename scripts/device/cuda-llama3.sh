#!/usr/bin/env bash
# The Llama-3-8B half of the GPU plan (gpu-plan.sh, which see): the random Llama-3-8B-shaped
# model (made once per machine), its logits against transformers, the forward benchmark, and
# the end-to-end run next to transformers' generate(). Phases as before: check, forward, e2e
# (default: all three). From the repository root:
#   bash scripts/device/cuda-llama3.sh [check] [forward] [e2e]
steps=()
for phase in "${@:-check forward e2e}"; do
  for p in $phase; do
    case $p in
      check) steps+=(hf_logits) ;;
      forward) steps+=(forward) ;;
      e2e) steps+=(hf_generate e2e e2e_cpu_sampling) ;;
      *) echo "unknown phase $p (check, forward, e2e)" >&2; exit 2 ;;
    esac
  done
done
exec bash "$(dirname "$0")/gpu-plan.sh" "${steps[@]}"
