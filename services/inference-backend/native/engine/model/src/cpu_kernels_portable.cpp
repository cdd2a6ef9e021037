// The portable build of the kernels: GCC/Clang vector extensions, which become SSE2 on any
// x86-64 and NEON on arm64. Built with -ffp-contract=off like the rest of the library, so
// a*b+c is two roundings everywhere and results do not depend on -march.
#include <cmath>

#include "cpu_kernels.h"
#include "strata/float_convert.h"

namespace {

struct Vec {
  using T = float __attribute__((vector_size(32)));
  using I = int32_t __attribute__((vector_size(32)));
  static T zero() { return T{}; }
  static T set1(float v) { return T{v, v, v, v, v, v, v, v}; }
  static T load(const float* p) {
    T v;
    __builtin_memcpy(&v, p, sizeof(v));
    return v;
  }
  static T load_tail(const float* p, int n) {
    T v{};
    for (int i = 0; i < n; ++i) v[i] = p[i];
    return v;
  }
  static T load_half(const uint16_t* p) {  // 8 IEEE halves, widened exactly
    T v;
    for (int i = 0; i < 8; ++i) v[i] = strata::f16_to_f32(p[i]);
    return v;
  }
  // 16 bfloat16 values in a bf16 panel's slot order, widened exactly: rows 0-7 into lo, 8-15 into hi.
  static void load_bf16_panel(const uint16_t* p, T& lo, T& hi) {
    for (int j = 0; j < 8; ++j) {
      lo[j] = strata::bf16_to_f32(p[strata::PackedWeights::bf16_slot(j)]);
      hi[j] = strata::bf16_to_f32(p[strata::PackedWeights::bf16_slot(j + 8)]);
    }
  }
  static void store(float* p, T v) { __builtin_memcpy(p, &v, sizeof(v)); }
  static void store_half(uint16_t* p, T v) {
    for (int i = 0; i < 8; ++i) p[i] = strata::f32_to_f16(v[i]);
  }
  static T fmadd(T a, T b, T c) { return a * b + c; }
  static T add(T a, T b) { return a + b; }
  static T sub(T a, T b) { return a - b; }
  static T mul(T a, T b) { return a * b; }
  static T div(T a, T b) { return a / b; }
  static T min(T a, T b) { return a < b ? a : b; }
  static T max(T a, T b) { return a > b ? a : b; }
  static T floor(T a) {
    T out;
    for (int i = 0; i < 8; ++i) out[i] = std::floor(a[i]);
    return out;
  }
  static T pow2i(T n) {
    I e = (__builtin_convertvector(n, I) + 127) << 23;
    T out;
    __builtin_memcpy(&out, &e, sizeof(out));
    return out;
  }
  static float hsum(T v) { return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7])); }
};

}  // namespace

#include "cpu_kernels_impl.h"

namespace strata {

const CpuKernels& portable_kernels() {
  static const CpuKernels kernels = {"portable", gemm_impl, silu_mul_impl, attend_impl, to_half_impl, from_half_impl};
  return kernels;
}

}  // namespace strata
