#!/usr/bin/env bash
# The kernel half of the GPU plan (gpu-plan.sh, which see): the build, every GPU check but the
# Llama-3 one, compute-sanitizer, and the kernel benchmarks, each under its own timeout. From
# the repository root, with any of gpu-plan.sh's options:
#   STRATA_MODELS_DIR=.device-models bash scripts/device/cuda-kernels.sh [--budget S] ...
exec bash "$(dirname "$0")/gpu-plan.sh" "$@" gemm kernels quant sampling backend memcheck \
  bench_gemm bench_quant bench_attention bench_sampling memcheck_sampling racecheck_sampling
