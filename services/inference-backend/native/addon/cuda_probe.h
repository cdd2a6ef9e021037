// What the addon knows about CUDA on this machine. Implemented by cuda_probe.cu when the
// addon is built with nvcc, and by cuda_probe_none.cpp in a CPU-only build.
#pragma once

#include <string>
#include <vector>

namespace strata {

struct CudaDevice {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  size_t total_memory_bytes = 0;
};

struct CudaProbe {
  bool compiled = false;          // the addon contains device code
  std::vector<CudaDevice> devices;
  std::string unavailable_reason; // empty when at least one device is usable
  // A kernel really ran on device 0 and its result was checked (false when no device).
  bool smoke_kernel_ok = false;
};

CudaProbe probe_cuda();

}  // namespace strata
