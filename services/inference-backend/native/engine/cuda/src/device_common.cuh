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

// silu(gate) * up as transformers computes it: act_fn(gate) in the model's dtype, then times up
// in it too (silu_mul, and the GEMV's gated form).
template <typename T>
__device__ __forceinline__ T silu_times(T gate, T up) {
  const float g = to_float(gate);
  const float act = to_float(from_float<T>(g / (1.0f + __expf(-g))));
  return from_float<T>(act * to_float(up));
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
