// RoPE on q and k, fused with writing k and v into the paged cache: one thread block per token
// reads its q, k and v once and writes q back and k, v into their slot.
#include <algorithm>
#include <cstdint>
#include <string>

#include "device_common.cuh"

namespace strata::cuda {

namespace {

template <typename T>
struct RopeKvParams : RopeCacheParams<T> {
  T* q;
  int64_t q_stride;
  const T* k;
  int64_t k_stride;
  const T* v;
  int64_t v_stride;
};

// One block per token. Its cos and sin go to shared memory, then each thread takes kVec pairs of
// a q or k head (kVec = 16 bytes of T with `vec`, else 1) or kVec values of v: q is rotated in
// place, k rotated into its cache slot, v copied into its slot. With `vec` every access is 16
// bytes (rope_write_kv checks the alignment): a prefill step's 8,192 tokens took 151 us a layer on
// an H100 with a 2-byte access a thread and two blocks an SM, twice their bytes' time.
template <typename T, bool vec>
__global__ void rope_write_kv_kernel(RopeKvParams<T> p, uint32_t pdl) {
  constexpr int kVec = vec ? 16 / static_cast<int>(sizeof(T)) : 1;
  extern __shared__ float table[];  // cos (half), then sin (half)
  grid_dependency_sync(pdl);
  const int32_t half = p.head_dim / 2, groups = half / kVec, v_groups = p.head_dim / kVec;
  const int64_t t = blockIdx.x;
  const int32_t position = p.positions[t];
  for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
    rope_cos_sin(position, p.inv_freq[i], table[i], table[half + i]);
  }
  __syncthreads();

  const int32_t slot = p.slots[t];  // negative: a padding row (CUDA graph batches), no cache write
  const int32_t q_items = p.num_heads * groups, k_items = p.num_kv_heads * groups;
  const int32_t items = q_items + (slot < 0 ? 0 : k_items + p.num_kv_heads * v_groups);
  const int64_t head_stride = int64_t{p.block_size} * p.head_dim;
  T* const k_row = slot < 0 ? nullptr : cache_row<T>(p, p.k_cache, slot, 0);
  T* const v_row = slot < 0 ? nullptr : cache_row<T>(p, p.v_cache, slot, 0);
  for (int32_t j = threadIdx.x; j < items; j += blockDim.x) {
    if (j < q_items + k_items) {
      const bool is_q = j < q_items;
      const int32_t g = is_q ? j : j - q_items, h = g / groups, i0 = (g % groups) * kVec;
      T* const q_lo = p.q + t * p.q_stride + h * p.head_dim + i0;
      const T* const src = is_q ? q_lo : p.k + t * p.k_stride + h * p.head_dim + i0;
      T* const dst = is_q ? q_lo : k_row + h * head_stride + i0;
      Pack<T, kVec> lo, hi;
      lo.load(src);
      hi.load(src + half);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float a = to_float(lo.v[e]), b = to_float(hi.v[e]);
        const float c = table[i0 + e], s = table[half + i0 + e];
        lo.v[e] = from_float<T>(rotate_lo(a, b, c, s));
        hi.v[e] = from_float<T>(rotate_hi(a, b, c, s));
      }
      lo.store(dst);
      hi.store(dst + half);
    } else {
      const int32_t g = j - q_items - k_items, h = g / v_groups, d0 = (g % v_groups) * kVec;
      Pack<T, kVec> x;
      x.load(p.v + t * p.v_stride + h * p.head_dim + d0);
      x.store(v_row + h * head_stride + d0);
    }
  }
}

}  // namespace

void rope_write_kv(const RopeKvArgs& a, Stream stream) {
  const size_t shared = sizeof(float) * std::max(a.head_dim, 0);
  dispatch_dtype(a.dtype, [&]<typename T>() {
    const RopeKvParams<T> p{rope_cache_params<T>(a, "rope_write_kv"), static_cast<T*>(a.q), a.q_stride,
                            static_cast<const T*>(a.k), a.k_stride, static_cast<const T*>(a.v), a.v_stride};
    if (a.n_tokens == 0) return;
    // 16-byte accesses where every row and head half starts on 16 bytes.
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    const auto aligned = [](const void* ptr, int64_t stride) {
      return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && stride * int64_t{sizeof(T)} % 16 == 0;
    };
    const bool vec = (a.head_dim / 2) % kVec == 0 && aligned(a.q, a.q_stride) && aligned(a.k, a.k_stride) &&
                     aligned(a.v, a.v_stride) && aligned(a.k_cache, 0) && aligned(a.v_cache, 0);
    // A thread per item (kVec pairs of q or k, kVec values of v), up to 1024: a decode step's
    // token is one block, and its latency is the kernel's (128 threads looping over
    // Llama-3-8B's 2048 pairs of q took 14 us).
    const int32_t per = vec ? kVec : 1;
    const int32_t items = (a.num_heads + a.num_kv_heads) * (a.head_dim / 2 / per) + a.num_kv_heads * (a.head_dim / per);
    const int threads = std::min(1024, (items + 31) / 32 * 32);
    if (vec) {
      launch_programmatic("rope_write_kv", rope_write_kv_kernel<T, true>, dim3(a.n_tokens), dim3(threads), shared,
                          stream, p);
    } else {
      launch_programmatic("rope_write_kv", rope_write_kv_kernel<T, false>, dim3(a.n_tokens), dim3(threads), shared,
                          stream, p);
    }
  });
}

}  // namespace strata::cuda
