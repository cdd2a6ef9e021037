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
//
// Gated (gemv_swiglu): a warp's two rows are row j of the gate and row j of the up projection of a
// fused (2n, k) gate/up weight, and it writes silu(gate) * up for output j, each product rounded
// to the dtype first: the bytes that gemv into gate/up and then silu_mul give, without writing
// and reading the 2n-wide intermediate or launching silu_mul.
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

// The products of kRows rows of w (rows[r], k long) with M rows of x, summed in k order per lane
// and then across the warp in a fixed butterfly: every lane gets every sum.
template <typename T, int M>
__device__ __forceinline__ void warp_dot_rows(const T* __restrict__ x, int64_t x_stride, const T* const (&rows)[kRows],
                                              int32_t k, int lane, float (&acc)[kRows][M]) {
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
}

// Under a programmatic launch (strata/cuda_kernels.h) the weights do not depend on the kernel
// before, so a warp asks for the lines of its rows' first round of loads into L2 before it waits
// for that kernel (kPdlPrefetch); then it lets the next kernel be scheduled (kPdlEarlyTrigger).
// Without one the wait returns at once.
template <typename T>
__device__ __forceinline__ void prefetch_then_wait(const T* const (&rows)[kRows], int32_t k, int lane, uint32_t pdl) {
  if ((pdl & kPdlPrefetch) && (lane & 7) == 0) {  // 8 lanes' 16-byte loads share a 128-byte line
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t col = lane * kVec + u * kSpan;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (col < k) prefetch_l2(rows[r] + col);
    }
  }
  grid_dependency_sync(pdl);
}

// n: rows of y's output; the weight has n rows, or 2n when Gated (gate rows, then up rows).
template <typename T, int M, bool Gated>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const T* __restrict__ x, int64_t x_stride,
                                                            const T* __restrict__ w, T* __restrict__ y,
                                                            int64_t y_stride, int32_t n, int32_t k, uint32_t pdl) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int32_t warp = static_cast<int32_t>(blockIdx.x) * kWarps + static_cast<int32_t>(threadIdx.x >> 5);
  const int32_t row0 = Gated ? warp : warp * kRows;  // the first output this warp writes
  if (row0 >= n) return;  // whole warps leave: no shuffle below waits for them
  const T* rows[kRows];
  if constexpr (Gated) {
    static_assert(kRows == 2, "a gated warp owns one gate row and its up row");
    rows[0] = w + static_cast<int64_t>(row0) * k;
    rows[1] = w + static_cast<int64_t>(n + row0) * k;
  } else {
#pragma unroll
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<int64_t>(min(row0 + r, n - 1)) * k;  // past n: not written
  }
  prefetch_then_wait(rows, k, lane, pdl);
  float acc[kRows][M];
  warp_dot_rows<T, M>(x, x_stride, rows, k, lane, acc);
  if constexpr (Gated) {
    // Lane t writes (row0, t).
#pragma unroll
    for (int t = 0; t < M; ++t)
      if (lane == t) y[t * y_stride + row0] = silu_times(from_float<T>(acc[0][t]), from_float<T>(acc[1][t]));
  } else {
    // Lane r * M + t writes (row0 + r, t): one store each, spread over the lanes.
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < M; ++t)
        if (lane == r * M + t && row0 + r < n) y[t * y_stride + row0 + r] = from_float<T>(acc[r][t]);
  }
}

// The q/k/v projection with RoPE and the K/V cache write (gemv_qkv_rope). The weight's rows are
// q's heads, then k's, then v's, head_dim each. The first (heads + kv_heads) * head_dim / 2 warps
// own a rotated pair: rows h*head_dim + i and h*head_dim + i + head_dim/2 of head h (q's heads,
// then k's: their rows follow on); the rest own two consecutive rows of v. Each output is
// rounded to the dtype and then rotated in fp32 and rounded again, as gemv and rope_write_kv do
// it in two kernels. y keeps what those leave: q rotated, k and v as projected.
template <typename T>
struct QkvRopeParams : RopeCacheParams<T> {
  T* y;
  int64_t y_stride;
};

template <typename T, int M>
__global__ void __launch_bounds__(kWarps * 32) gemv_qkv_rope_kernel(const T* __restrict__ x, int64_t x_stride,
                                                                     const T* __restrict__ w, QkvRopeParams<T> p,
                                                                     int32_t k, uint32_t pdl) {
  static_assert(kRows == 2, "a warp owns one rotated pair, or two rows of v");
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int32_t warp = static_cast<int32_t>(blockIdx.x) * kWarps + static_cast<int32_t>(threadIdx.x >> 5);
  const int32_t half = p.head_dim / 2;
  const int32_t pair_warps = (p.num_heads + p.num_kv_heads) * half;
  const int32_t v_row0 = (p.num_heads + p.num_kv_heads) * p.head_dim;  // v's first row
  const int32_t n = v_row0 + p.num_kv_heads * p.head_dim;
  const bool rotated = warp < pair_warps;
  const int32_t head = warp / half, i = warp % half;
  const int32_t row0 = rotated ? head * p.head_dim + i : v_row0 + (warp - pair_warps) * kRows;
  const int32_t row1 = rotated ? row0 + half : row0 + 1;
  if (row0 >= n) return;  // whole warps leave: no shuffle below waits for them
  const T* rows[kRows] = {w + static_cast<int64_t>(row0) * k, w + static_cast<int64_t>(row1) * k};
  prefetch_then_wait(rows, k, lane, pdl);
  float acc[kRows][M];
  warp_dot_rows<T, M>(x, x_stride, rows, k, lane, acc);

#pragma unroll
  for (int t = 0; t < M; ++t) {
    if (lane != t) continue;  // lane t writes token t's outputs
    store_qkv_pair<T>(p, p.y + t * p.y_stride, p.positions[t], p.slots[t], row0, row1, from_float<T>(acc[0][t]),
                      from_float<T>(acc[1][t]));
  }
}

template <typename T, int M, bool Gated>
void launch(const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t n, int32_t k,
            Stream stream) {
  const int64_t outputs_per_block = int64_t{kWarps} * (Gated ? 1 : kRows);
  const auto blocks = static_cast<unsigned>((n + outputs_per_block - 1) / outputs_per_block);
  launch_programmatic(Gated ? "gemv_swiglu" : "gemv", gemv_kernel<T, M, Gated>, dim3(blocks), dim3(kWarps * 32), 0,
                      stream, static_cast<const T*>(x), x_stride, static_cast<const T*>(w), static_cast<T*>(y),
                      y_stride, n, k);
}

template <typename T, int M, bool Gated>
void launch_up_to(int32_t m, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t n,
                  int32_t k, Stream stream) {
  if constexpr (M > 1) {
    if (m < M) return launch_up_to<T, M - 1, Gated>(m, x, x_stride, w, y, y_stride, n, k, stream);
  }
  launch<T, M, Gated>(x, x_stride, w, y, y_stride, n, k, stream);
}

template <bool Gated>
void run(const char* name, DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride,
         int32_t m, int32_t n, int32_t k, Stream stream) {
  const std::string refusal = gemv_refusal(dtype, x, x_stride, w, m, n, k);
  if (!refusal.empty()) throw CudaError(std::string(name) + ": " + refusal);
  if (y_stride < n) {
    throw CudaError(std::string(name) + ": y's row stride " + std::to_string(y_stride) + " is under n " + std::to_string(n));
  }
  dispatch_dtype(dtype, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, float>)
      launch_up_to<T, kGemvMaxRows, Gated>(m, x, x_stride, w, y, y_stride, n, k, stream);
  });
}

template <typename T, int M>
void launch_qkv_rope(int32_t m, const T* x, int64_t x_stride, const T* w, const QkvRopeParams<T>& p, int32_t k,
                     unsigned blocks, Stream stream) {
  if constexpr (M > 1) {
    if (m < M) return launch_qkv_rope<T, M - 1>(m, x, x_stride, w, p, k, blocks, stream);
  }
  launch_programmatic("gemv_qkv_rope", gemv_qkv_rope_kernel<T, M>, dim3(blocks), dim3(kWarps * 32), 0, stream, x,
                      x_stride, w, p, k);
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
  run<false>("gemv", dtype, x, x_stride, w, y, y_stride, m, n, k, stream);
}

void gemv_swiglu(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t m,
               int32_t n, int32_t k, Stream stream) {
  run<true>("gemv_swiglu", dtype, x, x_stride, w, y, y_stride, m, n, k, stream);
}

void gemv_qkv_rope(const RopeKvArgs& rope, const void* x, int64_t x_stride, const void* w, int32_t k, Stream stream) {
  const int32_t m = rope.n_tokens, q_width = rope.num_heads * rope.head_dim, kv_width = rope.num_kv_heads * rope.head_dim;
  const int32_t n = q_width + 2 * kv_width;
  const std::string refusal = gemv_refusal(rope.dtype, x, x_stride, w, m, n, k);
  if (!refusal.empty()) throw CudaError("gemv_qkv_rope: " + refusal);
  const size_t esize = dtype_size(rope.dtype);
  const char* q = static_cast<const char*>(rope.q);
  if (rope.k != q + size_t(q_width) * esize || rope.v != q + size_t(q_width + kv_width) * esize ||
      rope.k_stride != rope.q_stride || rope.v_stride != rope.q_stride || rope.q_stride < n) {
    throw CudaError("gemv_qkv_rope: q, k and v must lie side by side in one (n_tokens, q + 2 kv) buffer");
  }
  dispatch_dtype(rope.dtype, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, float>) {
      const QkvRopeParams<T> p{rope_cache_params<T>(rope, "gemv_qkv_rope"), static_cast<T*>(rope.q), rope.q_stride};
      const unsigned blocks = static_cast<unsigned>((n / kRows + kWarps - 1) / kWarps);
      launch_qkv_rope<T, kGemvMaxRows>(m, static_cast<const T*>(x), x_stride, static_cast<const T*>(w), p, k, blocks,
                                       stream);
    }
  });
}

}  // namespace strata::cuda
