// strata::cuda::Gemm for the CPU emulation: the same contract as cublas_runtime.cpp (row-major
// y = x · wᵀ + beta·y, fp32 accumulation, the result rounded once to the dtype), computed by a
// plain loop in float64 so the backend's strides, offsets and fused weights are what is tested.
// cuBLAS itself is checked on the GPU (check_cuda_gemm).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <functional>
#include <string>
#include <vector>

#include "emu.h"
#include "strata/cuda_gemm.h"

namespace strata::cuda {

namespace {

double load(DType dtype, const void* base, int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF16: return __half2float(static_cast<const __half*>(base)[i]);
  }
  return 0.0;
}

void store(DType dtype, void* base, int64_t i, double v) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::kBF16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(static_cast<float>(v)); return;
    case DType::kF16: static_cast<__half*>(base)[i] = __float2half_rn(static_cast<float>(v)); return;
  }
}

}  // namespace

struct Gemm::Impl {
  size_t shapes = 0;
};

std::string cublas_library_info() { return "CPU emulation (no cuBLAS)"; }

Gemm::Gemm(const GemmOptions&) : impl_(std::make_unique<Impl>()) {}
Gemm::~Gemm() = default;

namespace {

void matmul_now(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t m,
                int32_t n, int32_t k, float beta) {
  std::vector<double> row(static_cast<size_t>(k));
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t c = 0; c < k; ++c) row[c] = load(dtype, x, int64_t{i} * x_stride + c);
    for (int32_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int32_t c = 0; c < k; ++c) acc += row[c] * load(dtype, w, int64_t{j} * k + c);
      const int64_t at = int64_t{i} * y_stride + j;
      store(dtype, y, at, static_cast<float>(acc) + (beta != 0.0f ? beta * load(dtype, y, at) : 0.0));
    }
  }
}

}  // namespace

// Stream-ordered like cuBLAS: under an open capture it becomes part of the graph.
void Gemm::matmul(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t m,
                  int32_t n, int32_t k, Stream, float beta) {
  if (m < 0 || n <= 0 || k <= 0 || x_stride < k || y_stride < n) {
    throw CudaError("matmul: needs m >= 0, n > 0, k > 0, x_stride >= k and y_stride >= n");
  }
  emu::submit([=] { matmul_now(dtype, x, x_stride, w, y, y_stride, m, n, k, beta); });
}

std::string Gemm::prepare(DType, const void*, int64_t, const void*, const void*, int64_t, int32_t, int32_t, int32_t) {
  ++impl_->shapes;
  return "emulated CPU GEMM";
}

size_t Gemm::cached_shapes() const { return impl_->shapes; }

}  // namespace strata::cuda
