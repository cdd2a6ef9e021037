# shellcheck shell=bash disable=SC2154  # toolchain_dir and log/die come from toolchain.sh, sourced first
# Sourced by scripts/strata: finds nvcc for the optional CUDA part of the native addon.
# STRATA_CUDA=off      build CPU-only, never look for nvcc
# STRATA_CUDA=auto     use an nvcc that is already there (CUDA_HOME, PATH, /usr/local/cuda, .toolchain)
# STRATA_CUDA=install  as auto, and if none is found install NVIDIA's CUDA 13 compiler wheels from PyPI
#                      into .toolchain/cuda (about 270 MB; needs python3 with pip)
STRATA_CUDA_WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)

find_nvcc() {
  local candidate
  for candidate in "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc \
    "$toolchain_dir/cuda/nvidia/cu13/bin/nvcc"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
      echo "$candidate"
      return
    fi
  done
}

# Stops, naming the values it takes, when STRATA_CUDA holds anything else.
check_cuda_mode() {
  case "${STRATA_CUDA:-auto}" in
    off | auto | install) ;;
    *) die "STRATA_CUDA=${STRATA_CUDA} is not a value it takes: off (a CPU-only build), auto (use an nvcc that is there; the default) or install (as auto, else fetch nvcc from PyPI)" ;;
  esac
}

# Prints the CUDA toolkit root to build against, or nothing for a CPU-only build.
resolve_cuda_home() {
  local mode="${STRATA_CUDA:-auto}" nvcc
  check_cuda_mode
  [ "$mode" = off ] && return
  nvcc=$(find_nvcc)
  if [ -z "$nvcc" ] && [ "$mode" = install ]; then
    ensure_pip "STRATA_CUDA=install (the CUDA compiler wheels)"
    install_step "CUDA 13 compiler" "compiling the CUDA backend (NVIDIA's nvcc wheels from PyPI into .toolchain/cuda; STRATA_CUDA=off skips it)" \
      "$toolchain_dir/cuda" pip_install_into "$toolchain_dir/cuda" "${STRATA_CUDA_WHEELS[@]}"
    nvcc=$(find_nvcc)
  fi
  [ -n "$nvcc" ] || { [ "$mode" = auto ] && return; die "no nvcc found (STRATA_CUDA=$mode)"; }
  dirname "$(dirname "$nvcc")"
}
