// Device-side helpers shared by the kernel files: dtype conversions, warp and block reductions,
// and the dispatch from the launchers' DType to a kernel's element type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "strata/cuda_kernels.h"

namespace strata::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `scratch` holds 32 floats of shared memory; the call has barriers, so all threads must make it.
__device__ __forceinline__ float block_sum(float x, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(x);
}

// N values of T, loaded and stored as one 16-byte access when they fill 16 bytes.
template <typename T, int N>
struct Pack {
  T v[N];
  __device__ __forceinline__ void load(const T* src) {
    if constexpr (N * sizeof(T) == 16) {
      union {
        uint4 raw;
        T v[N];
      } u;
      u.raw = *reinterpret_cast<const uint4*>(src);
#pragma unroll
      for (int n = 0; n < N; ++n) v[n] = u.v[n];
    } else {
#pragma unroll
      for (int n = 0; n < N; ++n) v[n] = src[n];
    }
  }
  __device__ __forceinline__ void store(T* dst) const {
    if constexpr (N * sizeof(T) == 16) {
      union {
        uint4 raw;
        T v[N];
      } u;
#pragma unroll
      for (int n = 0; n < N; ++n) u.v[n] = v[n];
      *reinterpret_cast<uint4*>(dst) = u.raw;
    } else {
#pragma unroll
      for (int n = 0; n < N; ++n) dst[n] = v[n];
    }
  }
};

// silu(gate) * up as transformers computes it: act_fn(gate) in the model's dtype, then times up
// in it too (silu_mul, and the GEMV's gated form).
template <typename T>
__device__ __forceinline__ T silu_times(T gate, T up) {
  const float g = to_float(gate);
  const float act = to_float(from_float<T>(g / (1.0f + __expf(-g))));
  return from_float<T>(act * to_float(up));
}

// RoPE's rotation of the pair (a, b) = (x[i], x[i + head_dim / 2]): a*c - b*s and b*c + a*s,
// without FMA contraction: in fp32 mode the CPU backend computes the same products and sums
// rounded one by one (-ffp-contract=off), and greedy tokens are compared.
__device__ __forceinline__ float rotate_lo(float a, float b, float c, float s) {
  return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
__device__ __forceinline__ float rotate_hi(float a, float b, float c, float s) {
  return __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// The cosine and sine of pair i at `position`, as the CPU backend and transformers take them:
// the angle a float product, its cosine and sine in double, each rounded once.
__device__ __forceinline__ void rope_cos_sin(int32_t position, float inv_freq, float& c, float& s) {
  const float angle = static_cast<float>(position) * inv_freq;
  double sd, cd;
  sincos(static_cast<double>(angle), &sd, &cd);
  c = static_cast<float>(cd);
  s = static_cast<float>(sd);
}

// What RoPE and the K/V cache write need besides the activations (rope_write_kv, gemv_qkv_rope).
template <typename T>
struct RopeCacheParams {
  const int32_t* positions;
  const int32_t* slots;
  const float* inv_freq;
  T* k_cache;
  T* v_cache;
  int32_t num_heads, num_kv_heads, head_dim, block_size;
};

// Those of `a`, checked: CudaError naming `what` unless head_dim is even and every count > 0.
template <typename T>
RopeCacheParams<T> rope_cache_params(const RopeKvArgs& a, const char* what) {
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.block_size <= 0 ||
      a.n_tokens < 0) {
    throw CudaError(std::string(what) + ": needs an even head_dim > 0, heads > 0, block_size > 0 and n_tokens >= 0 (head_dim " +
                    std::to_string(a.head_dim) + ")");
  }
  return {a.positions, a.slots, a.inv_freq, static_cast<T*>(a.k_cache), static_cast<T*>(a.v_cache), a.num_heads,
          a.num_kv_heads, a.head_dim, a.block_size};
}

// Where (slot, kv_head)'s head_dim values start in one layer's K or V cache.
template <typename T>
__device__ __forceinline__ T* cache_row(const RopeCacheParams<T>& p, T* cache, int32_t slot, int32_t kv_head) {
  const int64_t block = slot / p.block_size, offset = slot % p.block_size;
  return cache + ((block * p.num_kv_heads + kv_head) * p.block_size + offset) * p.head_dim;
}

// What a projection followed by rope_write_kv leaves for two outputs a and b (each rounded to T)
// of rows row0 and row1 of one token's fused q/k/v row y: rows of a q or k head come as a rotated
// pair (row1 = row0 + head_dim / 2): q rotated into y, k as projected into y and rotated into
// its cache slot; rows of v as any two, into y and the cache as they are. A negative slot is a
// padding row: nothing goes into the cache.
template <typename T>
__device__ __forceinline__ void store_qkv_pair(const RopeCacheParams<T>& p, T* y, int32_t position, int32_t slot,
                                               int32_t row0, int32_t row1, T a, T b) {
  const int32_t hd = p.head_dim, v_row0 = (p.num_heads + p.num_kv_heads) * hd;
  if (row0 < v_row0) {
    const int32_t head = row0 / hd, i = row0 % hd;
    float c, s;
    rope_cos_sin(position, p.inv_freq[i], c, s);
    const T lo = from_float<T>(rotate_lo(to_float(a), to_float(b), c, s));
    const T hi = from_float<T>(rotate_hi(to_float(a), to_float(b), c, s));
    if (head < p.num_heads) {
      y[row0] = lo;
      y[row1] = hi;
    } else {
      y[row0] = a;
      y[row1] = b;
      if (slot >= 0) {
        T* dst = cache_row<T>(p, p.k_cache, slot, head - p.num_heads);
        dst[i] = lo;
        dst[i + hd / 2] = hi;
      }
    }
  } else {
    y[row0] = a;
    y[row1] = b;
    if (slot >= 0) {
      const int32_t d0 = row0 - v_row0, d1 = row1 - v_row0;
      cache_row<T>(p, p.v_cache, slot, d0 / hd)[d0 % hd] = a;
      cache_row<T>(p, p.v_cache, slot, d1 / hd)[d1 % hd] = b;
    }
  }
}

// A global load past L1 (ld.global.cg): for data other blocks wrote during this kernel.
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
#ifdef STRATA_CUDA_EMULATION
  // A GPU faults on a load not aligned to its size (a float4's 16 bytes); so does the emulation.
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) {
    std::fprintf(stderr, "emulated kernel: misaligned %zu-byte load_cg at %p\n", sizeof(T), static_cast<const void*>(p));
    std::abort();
  }
  return *p;
#else
  return __ldcg(p);
#endif
}

// 16 bytes of weights through the read-only path. kStream: read once per kernel (a GEMV), so
// not kept in L1, which holds x; otherwise kept (for other warps of the block on the same rows).
template <bool kStream>
__device__ __forceinline__ uint4 load_weights16(const void* p) {
#ifdef STRATA_CUDA_EMULATION
  return *static_cast<const uint4*>(p);
#else
  uint4 v;
  if constexpr (kStream) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  } else {
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  }
  return v;
#endif
}

// Programmatic dependent launch, the device side (strata/cuda_kernels.h, ProgrammaticLaunch):
// grid_dependency_wait() returns once the kernel before this one in the stream has completed
// and its writes are visible (at once when this kernel was launched without the attribute);
// grid_dependents_launch() lets the next kernel be scheduled once every block of this one has
// called it or exited. Both are no-ops before sm_90 and in the emulation, which runs kernels one
// after another.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The flags every kernel launch_programmatic launches gets as its last argument (this thread's
// ProgrammaticLaunch): kPdlPrefetch lets a GEMV ask for its first weights in L2 before it waits;
// kPdlEarlyTrigger lets each kernel's successor be scheduled once all its blocks have waited,
// where without it the successor is scheduled as the kernel completes (its launch still
// prepared while it runs). Both set by default; apart, they time the two effects one at a time.
inline constexpr uint32_t kPdlPrefetch = 1, kPdlEarlyTrigger = 2;
uint32_t programmatic_flags();

// grid_dependency_wait(), then the trigger when `pdl` asks for it early.
__device__ __forceinline__ void grid_dependency_sync(uint32_t pdl) {
  grid_dependency_wait();
  if (pdl & kPdlEarlyTrigger) grid_dependents_launch();
}

// A hint that p's 128-byte line will be read soon: into L2, not L1 (weights, before the wait).
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

// Launches kernel(args..., programmatic_flags()) on grid x block threads with `shared` bytes of
// dynamic shared memory on `stream`, with programmatic stream serialization when
// programmatic_launch() is on: only for kernels that call grid_dependency_sync() before they
// read or write anything an earlier kernel touches, and take the flags last.
template <typename... Params, typename... Args>
void launch_programmatic(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                         Stream stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic_launch() ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, args..., programmatic_flags()), name);
}

// Calls f.template operator()<T>() with T the element type of `dtype`.
template <typename F>
void dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f.template operator()<float>(); return;
    case DType::kBF16: f.template operator()<__nv_bfloat16>(); return;
    case DType::kF16: f.template operator()<__half>(); return;
  }
  throw CudaError("unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace strata::cuda
