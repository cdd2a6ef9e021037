// CPU-only build: the addon was compiled without nvcc, so there is no device code at all.
#include "cuda_probe.h"

namespace strata {

CudaProbe probe_cuda() {
  CudaProbe probe;
  probe.unavailable_reason = "no CUDA device: this build of the addon has no CUDA support (built without nvcc)";
  return probe;
}

}  // namespace strata
