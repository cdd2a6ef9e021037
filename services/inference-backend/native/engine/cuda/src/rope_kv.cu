// RoPE on q and k, fused with writing k and v into the paged cache: one thread block per token
// reads its q, k and v once and writes q back and k, v into their slot.
#include <algorithm>
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

template <typename T>
__global__ void rope_write_kv_kernel(RopeKvParams<T> p, uint32_t pdl) {
  extern __shared__ float table[];  // cos (half), then sin (half)
  grid_dependency_sync(pdl);
  const int32_t half = p.head_dim / 2;
  const int64_t t = blockIdx.x;
  const int32_t position = p.positions[t];
  for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
    rope_cos_sin(position, p.inv_freq[i], table[i], table[half + i]);
  }
  __syncthreads();

  T* q = p.q + t * p.q_stride;
  for (int32_t j = threadIdx.x; j < p.num_heads * half; j += blockDim.x) {
    const int32_t h = j / half, i = j % half;
    T* lo = q + h * p.head_dim + i;
    const float a = to_float(lo[0]), b = to_float(lo[half]);
    lo[0] = from_float<T>(rotate_lo(a, b, table[i], table[half + i]));
    lo[half] = from_float<T>(rotate_hi(a, b, table[i], table[half + i]));
  }

  const int32_t slot = p.slots[t];
  if (slot < 0) return;  // a padding row (CUDA graph batches): nothing goes into the cache
  const int64_t head_stride = int64_t{p.block_size} * p.head_dim;
  T* k_dst = cache_row<T>(p, p.k_cache, slot, 0);
  T* v_dst = cache_row<T>(p, p.v_cache, slot, 0);
  const T* k = p.k + t * p.k_stride;
  for (int32_t j = threadIdx.x; j < p.num_kv_heads * half; j += blockDim.x) {
    const int32_t h = j / half, i = j % half;
    const float a = to_float(k[h * p.head_dim + i]), b = to_float(k[h * p.head_dim + half + i]);
    k_dst[h * head_stride + i] = from_float<T>(rotate_lo(a, b, table[i], table[half + i]));
    k_dst[h * head_stride + half + i] = from_float<T>(rotate_hi(a, b, table[i], table[half + i]));
  }
  const T* v = p.v + t * p.v_stride;
  for (int32_t j = threadIdx.x; j < p.num_kv_heads * p.head_dim; j += blockDim.x) {
    const int32_t h = j / p.head_dim, d = j % p.head_dim;
    v_dst[h * head_stride + d] = v[j];
  }
}

}  // namespace

void rope_write_kv(const RopeKvArgs& a, Stream stream) {
  const size_t shared = sizeof(float) * std::max(a.head_dim, 0);
  dispatch_dtype(a.dtype, [&]<typename T>() {
    const RopeKvParams<T> p{rope_cache_params<T>(a, "rope_write_kv"), static_cast<T*>(a.q), a.q_stride,
                            static_cast<const T*>(a.k), a.k_stride, static_cast<const T*>(a.v), a.v_stride};
    if (a.n_tokens == 0) return;
    // A thread per rotated pair of q, up to 1024: a decode step's token is one block, and its
    // latency is the kernel's (128 threads looping over Llama-3-8B's 2048 pairs took 14 us).
    const int32_t pairs = a.num_heads * (a.head_dim / 2);
    const int threads = std::min(1024, (pairs + 31) / 32 * 32);
    launch_programmatic("rope_write_kv", rope_write_kv_kernel<T>, dim3(a.n_tokens), dim3(threads), shared, stream, p);
  });
}

}  // namespace strata::cuda
