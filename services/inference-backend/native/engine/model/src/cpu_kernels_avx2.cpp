// The AVX2 + FMA build of the kernels; this file alone is compiled with -mavx2 -mfma -mf16c and
// only runs where cpu_kernels() has checked the CPU supports all three.
#include <immintrin.h>

#include "cpu_kernels.h"

namespace {

struct Vec {
  using T = __m256;
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float v) { return _mm256_set1_ps(v); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T load_tail(const float* p, int n) {  // lanes >= n read as 0, never touched in memory
    static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_maskload_ps(p, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n)));
  }
  static T load_half(const uint16_t* p) {  // 8 IEEE halves, widened exactly (F16C)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // 16 bfloat16 values in a bf16 panel's slot order (rows 0-3, 8-11, 4-7, 12-15), widened
  // exactly: each value becomes the high half of its fp32 lane, interleaved with zeros within
  // the 128-bit lanes, so lo holds rows 0-7 and hi rows 8-15.
  static void load_bf16_panel(const uint16_t* p, T& lo, T& hi) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), zero = _mm256_setzero_si256();
    lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x));
    hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x));
  }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static void store_half(uint16_t* p, T v) {  // rounded to nearest even, as f32_to_f16
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T div(T a, T b) { return _mm256_div_ps(a, b); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T floor(T a) { return _mm256_floor_ps(a); }
  static T pow2i(T n) {  // 2^n for integral n in [-126, 127]
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  // ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7))
  static float hsum(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace

#include "cpu_kernels_impl.h"

namespace strata {

const CpuKernels& avx2_kernels() {
  static const CpuKernels kernels = {"avx2+fma", gemm_impl, silu_mul_impl, attend_impl, to_half_impl, from_half_impl};
  return kernels;
}

}  // namespace strata
