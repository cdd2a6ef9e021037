// Device discovery plus one tiny kernel, so that a build proves nvcc, the runtime and the
// driver line up: on a GPU machine the kernel runs and its output is checked.
#include <cuda_runtime.h>

#include "cuda_probe.h"

namespace strata {
namespace {

// out[i] = a * i + b over n elements.
__global__ void affine_fill(float* out, int n, float a, float b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * static_cast<float>(i) + b;
}

bool run_smoke_kernel() {
  constexpr int n = 1000;
  float* device_out = nullptr;
  if (cudaMalloc(&device_out, n * sizeof(float)) != cudaSuccess) return false;
  affine_fill<<<(n + 255) / 256, 256>>>(device_out, n, 2.0f, 1.0f);
  float host[n];
  bool ok = cudaMemcpy(host, device_out, sizeof(host), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(device_out);
  for (int i = 0; ok && i < n; ++i) ok = host[i] == 2.0f * i + 1.0f;
  return ok;
}

}  // namespace

CudaProbe probe_cuda() {
  CudaProbe probe;
  probe.compiled = true;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    probe.unavailable_reason = std::string("no CUDA device: ") + cudaGetErrorString(err);
    return probe;
  }
  if (count == 0) {
    probe.unavailable_reason = "no CUDA device: the driver reports 0 devices";
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    probe.devices.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem});
  }
  probe.smoke_kernel_ok = run_smoke_kernel();
  return probe;
}

}  // namespace strata
