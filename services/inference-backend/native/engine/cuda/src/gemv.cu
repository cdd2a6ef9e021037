// Dense GEMV for decode: y = x · wᵀ for a handful of rows of x, bf16/fp16 (strata/cuda_kernels.h).
//
// Why not cuBLAS: at batch 1 on an H100 (cuda-profile-h100.json) cuBLAS splits the K of the o
// and down projections (4,096 and 14,336) across blocks and then launches a split-K reduce, 64
// extra kernels a step (242 us of a 6.45 ms step), and the q/k/v projection reads its weights at
// 2.3 TB/s of the 3.0 the copy reaches. A step at batch 1 reads 15 GB of weights once; what
// reaches the bandwidth is many 16-byte loads in flight per SM, which does not need split-K when
// each row is a warp's own dot product.
//
// Layout: each warp owns kRows consecutive rows of w and walks their whole k, lane l taking
// elements 8l..8l+7 of every 256, kUnroll such 16-byte loads per row in flight (the weights by
// ld.global.nc with no L1 allocation: read once; x through L1, shared by the block's warps and
// every row). The products accumulate in fp32 per lane in k order, then across lanes in a fixed
// butterfly, so a row's result depends on its weights, its x row and k only: not on m, n, or
// where the row lies, and the same m = 1 step gives the same bits whatever else is batched.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "device_common.cuh"
#include "strata/cuda_kernels.h"

namespace strata::cuda {
namespace {

constexpr int kWarps = 4;    // a block of 128 threads
constexpr int kRows = 2;     // rows of w a warp owns
constexpr int kUnroll = 4;   // 16-byte loads per row a lane keeps in flight
constexpr int kVec = 8;      // bf16/fp16 elements in 16 bytes
constexpr int kSpan = 32 * kVec;  // elements of a row one warp-wide load covers

template <typename T>
union Pack16 {
  uint4 raw;
  T v[kVec];
};

template <typename T, int M>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const T* __restrict__ x, int64_t x_stride,
                                                            const T* __restrict__ w, T* __restrict__ y,
                                                            int64_t y_stride, int32_t n, int32_t k) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int32_t row0 = (static_cast<int32_t>(blockIdx.x) * kWarps + static_cast<int32_t>(threadIdx.x >> 5)) * kRows;
  if (row0 >= n) return;  // whole warps leave: no shuffle below waits for them
  const T* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<int64_t>(min(row0 + r, n - 1)) * k;  // past n: not written
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;

  for (int32_t base = lane * kVec; base < k; base += kSpan * kUnroll) {
    Pack16<T> wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t col = base + u * kSpan;
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[u][r].raw = col < k ? load_weights16<true>(rows[r] + col) : uint4{0, 0, 0, 0};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t col = base + u * kSpan;
      if (col >= k) break;
#pragma unroll
      for (int t = 0; t < M; ++t) {
        Pack16<T> xv;
        xv.raw = *reinterpret_cast<const uint4*>(x + t * x_stride + col);
        float xf[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) xf[e] = to_float(xv.v[e]);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[r][t] = fmaf(to_float(wv[u][r].v[e]), xf[e], acc[r][t]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) acc[r][t] = warp_sum(acc[r][t]);
  // Lane r * M + t writes (row0 + r, t): one store each, spread over the lanes.
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t)
      if (lane == r * M + t && row0 + r < n) y[t * y_stride + row0 + r] = from_float<T>(acc[r][t]);
}

template <typename T, int M>
void launch(const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t n, int32_t k,
            Stream stream) {
  const int64_t rows_per_block = int64_t{kWarps} * kRows;
  gemv_kernel<T, M><<<static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block), kWarps * 32, 0, stream>>>(
      static_cast<const T*>(x), x_stride, static_cast<const T*>(w), static_cast<T*>(y), y_stride, n, k);
}

template <typename T, int M>
void launch_up_to(int32_t m, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t n,
                  int32_t k, Stream stream) {
  if constexpr (M > 1) {
    if (m < M) return launch_up_to<T, M - 1>(m, x, x_stride, w, y, y_stride, n, k, stream);
  }
  launch<T, M>(x, x_stride, w, y, y_stride, n, k, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

std::string gemv_refusal(DType dtype, const void* x, int64_t x_stride, const void* w, int32_t m, int32_t n,
                         int32_t k) {
  if (dtype == DType::kF32) return "fp32 (the GEMM's pedantic fp32 path serves it)";
  if (m < 1 || m > kGemvMaxRows) return "m = " + std::to_string(m) + " outside 1.." + std::to_string(kGemvMaxRows);
  if (n < 1 || k < 1) return "n and k must be >= 1";
  if (k % kVec != 0 || x_stride % kVec != 0) return "k and x's row stride must be multiples of 8";
  if (!aligned16(x) || !aligned16(w)) return "x and w must be 16-byte aligned";
  return "";
}

void gemv(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t m, int32_t n,
          int32_t k, Stream stream) {
  const std::string refusal = gemv_refusal(dtype, x, x_stride, w, m, n, k);
  if (!refusal.empty()) throw CudaError("gemv: " + refusal);
  if (y_stride < n) throw CudaError("gemv: y's row stride " + std::to_string(y_stride) + " is under n " + std::to_string(n));
  dispatch_dtype(dtype, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, float>) launch_up_to<T, kGemvMaxRows>(m, x, x_stride, w, y, y_stride, n, k, stream);
  });
  check_launch("gemv");
}

}  // namespace strata::cuda
