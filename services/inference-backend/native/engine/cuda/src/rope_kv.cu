// RoPE on q and k, fused with writing k and v into the paged cache: one thread block per token
// reads its q, k and v once and writes q back and k, v into their slot.
#include <algorithm>
#include <string>

#include "device_common.cuh"

namespace strata::cuda {

namespace {

template <typename T>
struct RopeKvParams {
  T* q;
  int64_t q_stride;
  const T* k;
  int64_t k_stride;
  const T* v;
  int64_t v_stride;
  const int32_t* positions;
  const int32_t* slots;
  const float* inv_freq;
  T* k_cache;
  T* v_cache;
  int32_t num_heads, num_kv_heads, head_dim, block_size;
};

// a*c - b*s and b*c + a*s without FMA contraction: in fp32 mode the CPU backend computes the
// same products and sums rounded one by one (-ffp-contract=off), and greedy tokens are compared.
__device__ __forceinline__ float rotate_lo(float a, float b, float c, float s) {
  return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
__device__ __forceinline__ float rotate_hi(float a, float b, float c, float s) {
  return __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

template <typename T>
__global__ void rope_write_kv_kernel(RopeKvParams<T> p) {
  extern __shared__ float table[];  // cos (half), then sin (half)
  const int32_t half = p.head_dim / 2;
  const int64_t t = blockIdx.x;
  const int32_t position = p.positions[t];
  for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
    // As the CPU backend and transformers: the angle is a float product, its cosine and sine
    // are taken in double and rounded once.
    const float angle = static_cast<float>(position) * p.inv_freq[i];
    double s, c;
    sincos(static_cast<double>(angle), &s, &c);
    table[i] = static_cast<float>(c);
    table[half + i] = static_cast<float>(s);
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
  const int64_t block = slot / p.block_size, offset = slot % p.block_size;
  const int64_t head_stride = int64_t{p.block_size} * p.head_dim;
  T* k_dst = p.k_cache + block * p.num_kv_heads * head_stride + offset * p.head_dim;
  T* v_dst = p.v_cache + block * p.num_kv_heads * head_stride + offset * p.head_dim;
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
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.block_size <= 0 ||
      a.n_tokens < 0) {
    throw CudaError("rope_write_kv: needs an even head_dim > 0, heads > 0, block_size > 0 and n_tokens >= 0 (head_dim " +
                    std::to_string(a.head_dim) + ")");
  }
  if (a.n_tokens == 0) return;
  const size_t shared = sizeof(float) * a.head_dim;
  dispatch_dtype(a.dtype, [&]<typename T>() {
    RopeKvParams<T> p{static_cast<T*>(a.q), a.q_stride, static_cast<const T*>(a.k), a.k_stride,
                      static_cast<const T*>(a.v), a.v_stride, a.positions, a.slots, a.inv_freq,
                      static_cast<T*>(a.k_cache), static_cast<T*>(a.v_cache), a.num_heads, a.num_kv_heads,
                      a.head_dim, a.block_size};
    // A thread per rotated pair of q, up to 1024: a decode step's token is one block, and its
    // latency is the kernel's (128 threads looping over Llama-3-8B's 2048 pairs took 14 us).
    const int32_t pairs = a.num_heads * (a.head_dim / 2);
    const int threads = std::min(1024, (pairs + 31) / 32 * 32);
    rope_write_kv_kernel<T><<<a.n_tokens, threads, shared, stream>>>(p);
  });
  check_launch("rope_write_kv");
}

}  // namespace strata::cuda
