// Shared by the GPU benchmarks (bench_*.cu): seeded random fills on the device, event timing,
// the median, and the two ceilings: the copy bandwidth that the weight-streaming kernels are
// measured against and cuBLAS's bf16 GEMM rate.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "check_util.h"
#include "strata/cuda_gemm.h"
#include "strata/model_backend.h"

namespace strata::cuda::bench {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i's random bits, and a value uniform in [0, 1) from them.
__device__ __forceinline__ uint64_t random_bits(uint64_t seed, size_t i) { return mix64(seed ^ (i * 0xD1B54A32D192ED03ull)); }
__device__ __forceinline__ float random_unit(uint64_t seed, size_t i) {
  return float(random_bits(seed, i) >> 40) * (1.0f / 16777216.0f);
}

// Uniform in [-1, 1): like trained weights in sign and spread, never zero.
__global__ void fill_uniform_bf16(__nv_bfloat16* out, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(2.0f * random_unit(seed, i) - 1.0f);
  }
}

// One seed per run (printed nowhere: benchmarks do not check values).
inline uint64_t bench_seed() {
  static const uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  return seed;
}

inline void fill(__nv_bfloat16* p, size_t n, uint64_t salt) {
  fill_uniform_bf16<<<1024, 256>>>(p, n, bench_seed() ^ salt);
  STRATA_CK(cudaGetLastError());
}

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    STRATA_CK(cudaEventCreate(&start));
    STRATA_CK(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  float ms() const {
    STRATA_CK(cudaEventSynchronize(stop));
    float t = 0.0f;
    STRATA_CK(cudaEventElapsedTime(&t, start, stop));
    return t;
  }
};

inline double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t h = xs.size() / 2;
  return xs.size() % 2 ? xs[h] : 0.5 * (xs[h - 1] + xs[h]);
}

// A CUDA graph of n launches, launch(0) .. launch(n - 1) captured on `stream`, instantiated.
// A launch that throws ends the capture first.
inline cudaGraphExec_t capture_graph(const std::function<void(int)>& launch, int n, cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  STRATA_CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  try {
    for (int i = 0; i < n; ++i) launch(i);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  STRATA_CK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  STRATA_CK(cudaGraphInstantiate(&exec, graph, 0));
  STRATA_CK(cudaGraphDestroy(graph));
  return exec;
}

inline size_t round256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Bytes moved per second by a large device-to-device copy (read + write): the practical memory
// ceiling, measured in the same run as what is compared with it.
struct CopyResult {
  double median_ms = 0, min_ms = 0, gbps = 0;
};

inline CopyResult measure_copy(cudaStream_t stream, size_t bytes, int samples) {
  checks::DeviceBuffer<__nv_bfloat16> src(bytes / 2), dst(bytes / 2);
  fill(src.ptr, src.count, 1);
  STRATA_CK(cudaDeviceSynchronize());
  Events ev;
  for (int i = 0; i < 3; ++i) STRATA_CK(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, stream));
  std::vector<double> ms;
  for (int i = 0; i < samples; ++i) {
    STRATA_CK(cudaEventRecord(ev.start, stream));
    STRATA_CK(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, stream));
    STRATA_CK(cudaEventRecord(ev.stop, stream));
    ms.push_back(ev.ms());
  }
  CopyResult r;
  r.median_ms = median(ms);
  r.min_ms = *std::min_element(ms.begin(), ms.end());
  r.gbps = 2.0 * double(bytes) / (r.median_ms * 1e-3) / 1e9;
  return r;
}

// The weights of one Llama layer's GEMMs (q, k, v, o, gate, up, down): 2 FLOPs each a token.
inline double layer_gemm_params(const ModelConfig& c) {
  return double(c.hidden_size) * (double(c.num_heads + 2 * c.num_kv_heads) * c.head_dim +
                                  double(c.num_heads) * c.head_dim + 3.0 * c.intermediate_size);
}

// FLOP/s of cuBLAS's bf16 n³ GEMM on random data: `peak`, the median of 10 calls each waited
// for (after 3 warm-up calls); `sustained`, the median of the last quarter of `back_to_back` calls
// queued without a wait (each timed by events around it), where a board that holds its clocks
// only below its power limit has slowed, as in a long prefill step.
struct GemmRates {
  double peak = 0.0, sustained = 0.0;
};

inline GemmRates measure_gemm(int32_t n, int32_t back_to_back) {
  checks::DeviceBuffer<__nv_bfloat16> x(size_t(n) * n), w(size_t(n) * n), y(size_t(n) * n);
  fill(x.ptr, x.count, 2);
  fill(w.ptr, w.count, 3);
  Gemm gemm;
  std::vector<cudaEvent_t> events(size_t(std::max(back_to_back, 1)) + 1);
  for (cudaEvent_t& e : events) STRATA_CK(cudaEventCreate(&e));
  const double flop = 2.0 * n * double(n) * n;
  const auto elapsed = [&](size_t from) {
    float t = 0.0f;
    STRATA_CK(cudaEventElapsedTime(&t, events[from], events[from + 1]));
    return double(t);
  };
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    STRATA_CK(cudaEventRecord(events[0]));
    gemm.matmul(DType::kBF16, x.ptr, n, w.ptr, y.ptr, n, n, n, n, nullptr);
    STRATA_CK(cudaEventRecord(events[1]));
    STRATA_CK(cudaEventSynchronize(events[1]));
    if (i >= 3) ms.push_back(elapsed(0));
  }
  GemmRates rates;
  rates.peak = flop / (median(ms) / 1e3);
  STRATA_CK(cudaEventRecord(events[0]));
  for (int32_t i = 0; i < back_to_back; ++i) {
    gemm.matmul(DType::kBF16, x.ptr, n, w.ptr, y.ptr, n, n, n, n, nullptr);
    STRATA_CK(cudaEventRecord(events[size_t(i) + 1]));
  }
  STRATA_CK(cudaEventSynchronize(events.back()));
  ms.clear();
  for (int32_t i = back_to_back - std::max(back_to_back / 4, 1); i < back_to_back; ++i) ms.push_back(elapsed(size_t(i)));
  rates.sustained = flop / (median(ms) / 1e3);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  return rates;
}

}  // namespace strata::cuda::bench
