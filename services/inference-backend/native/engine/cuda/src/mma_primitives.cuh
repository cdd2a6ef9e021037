// Tensor-core and asynchronous-copy primitives shared by the kernel files (quant_gemm.cu,
// attention.cu): mma.sync m16n8k16, ldmatrix, cp.async. Inline PTX on the GPU; under
// STRATA_CUDA_EMULATION (emu.h has none of these instructions) C++ of the same effect, built
// on the emulation's warp-wide gather and the register layouts of the PTX ISA.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device_common.cuh"

namespace strata::cuda {

namespace {

#ifdef STRATA_CUDA_EMULATION
template <typename T>
inline float half_bits_to_float(uint32_t bits) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  else return __uint_as_float(bits << 16);
}
template <typename T>
inline uint32_t float_to_half_bits(float v) {
  if constexpr (std::is_same_v<T, __half>) return __half_as_ushort(__float2half_rn(v));
  else return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
#endif


// Two floats as a packed pair of T (bf16 or fp16; lo in the low half), each rounded to nearest:
// one cvt instruction on the GPU.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
#ifdef STRATA_CUDA_EMULATION
  return float_to_half_bits<T>(lo) | float_to_half_bits<T>(hi) << 16;
#else
  uint32_t d;
  if constexpr (std::is_same_v<T, __half>) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  }
  return d;
#endif
}

// d = A · B + c, one mma.sync.m16n8k16 with fp32 accumulators. Fragments as the PTX ISA lays
// them out for lane = 4g + t: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
// a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]; b[0] = B[2t, 2t+1][g],
// b[1] = B[2t+8, 2t+9][g]; c[0..1] = C[g][2t, 2t+1], c[2..3] = C[g+8][2t, 2t+1]. Every lane of
// the warp must make the call.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                         const float (&c)[4]) {
#ifdef STRATA_CUDA_EMULATION
  uint64_t a01[32], a23[32], bs[32];
  ::strata::emu::gather(uint64_t{a[0]} | uint64_t{a[1]} << 32, a01);
  ::strata::emu::gather(uint64_t{a[2]} | uint64_t{a[3]} << 32, a23);
  ::strata::emu::gather(uint64_t{b0} | uint64_t{b1} << 32, bs);
  const int lane = ::strata::emu::lane_id(), g = lane / 4, t = lane % 4;
  // A[r][k]: register (r >= 8) + 2 (k >= 8) of lane 4 (r % 8) + (k % 8) / 2, half k % 2.
  auto a_at = [&](int r, int k) {
    const uint64_t both = k >= 8 ? a23[4 * (r % 8) + (k % 8) / 2] : a01[4 * (r % 8) + (k % 8) / 2];
    const uint32_t reg = uint32_t(both >> (r >= 8 ? 32 : 0));
    return half_bits_to_float<T>(reg >> (16 * (k % 2)) & 0xffffu);
  };
  // B[k][n]: register (k >= 8) of lane 4n + (k % 8) / 2, half k % 2.
  auto b_at = [&](int k, int n) {
    const uint32_t reg = uint32_t(bs[4 * n + (k % 8) / 2] >> (k >= 8 ? 32 : 0));
    return half_bits_to_float<T>(reg >> (16 * (k % 2)) & 0xffffu);
  };
  float out[4];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      float acc = c[2 * i + j];
      for (int k = 0; k < 16; ++k) acc += a_at(g + 8 * i, k) * b_at(k, 2 * t + j);  // products exact in fp32
      out[2 * i + j] = acc;
    }
  }
  for (int e = 0; e < 4; ++e) d[e] = out[e];
#else
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  }
#endif
}

// 2^x on the SFU with subnormal results flushed to 0 (ex2.approx.ftz): exp2f's own accuracy
// without the scaling it wraps around each MUFU.EX2 for subnormal results (a compare and two
// predicated multiplies). For softmax weights, where a weight under 2^-126 adds nothing.
__device__ __forceinline__ float exp2_ftz(float x) {
#ifdef STRATA_CUDA_EMULATION
  const float y = std::exp2(x);
  return y < 0x1p-126f ? 0.0f : y;
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#ifdef STRATA_CUDA_EMULATION
  if (valid) std::memcpy(smem, gmem, 16);
  else std::memset(smem, 0, 16);
#else
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifndef STRATA_CUDA_EMULATION
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
#ifndef STRATA_CUDA_EMULATION
  asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory");
#endif
}


// Two 8x8 matrices of 16-bit values from shared memory, transposed, as mma.sync's B fragment:
// lanes 0-7 give the addresses of matrix 0's rows, lanes 8-15 those of matrix 1 (16-byte
// aligned, 8 values each; the other lanes' are not read). Lane 4g + t receives r0 = (M0[2t][g],
// M0[2t+1][g]) and r1 = (M1[2t][g], M1[2t+1][g]), the lower row in the low half. Every lane of
// the warp must make the call.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t& r0, uint32_t& r1, const void* row) {
#ifdef STRATA_CUDA_EMULATION
  uint64_t rows[32];
  ::strata::emu::gather(reinterpret_cast<uint64_t>(row), rows);
  const int lane = ::strata::emu::lane_id(), g = lane / 4, t = lane % 4;
  auto at = [&](int m, int r, int c) { return uint32_t{reinterpret_cast<const uint16_t*>(rows[8 * m + r])[c]}; };
  r0 = at(0, 2 * t, g) | at(0, 2 * t + 1, g) << 16;
  r1 = at(1, 2 * t, g) | at(1, 2 * t + 1, g) << 16;
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
#endif
}

// Four 8x8 matrices of 16-bit values from shared memory: lanes 8m .. 8m + 7 give the addresses of
// matrix m's rows (16-byte aligned, 8 values each). Lane 4g + t receives r[m] = (Mm[g][2t],
// Mm[g][2t+1]) as they are, or (Mm[2t][g], Mm[2t+1][g]) with kTrans, the first in the low half.
// For rows that are mma.sync B's columns (a key tile's rows, say), r[0], r[1] are one n8 tile's
// b0, b1 when matrices 0 and 1 hold its k = 0..7 and 8..15; with kTrans, for rows that are B's
// rows (a value tile's), when matrices 0 and 1 hold k = 0..7 and 8..15 of one 8-column group.
// Every lane of the warp must make the call.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#ifdef STRATA_CUDA_EMULATION
  uint64_t rows[32];
  ::strata::emu::gather(reinterpret_cast<uint64_t>(row), rows);
  const int lane = ::strata::emu::lane_id(), g = lane / 4, t = lane % 4;
  auto at = [&](int m, int r_, int c) { return uint32_t{reinterpret_cast<const uint16_t*>(rows[8 * m + r_])[c]}; };
  for (int m = 0; m < 4; ++m) r[m] = kTrans ? at(m, 2 * t, g) | at(m, 2 * t + 1, g) << 16 : at(m, g, 2 * t) | at(m, g, 2 * t + 1) << 16;
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  }
#endif
}

}  // namespace

}  // namespace strata::cuda
