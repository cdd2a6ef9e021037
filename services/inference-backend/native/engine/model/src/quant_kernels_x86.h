// The x86 quantized kernels' body, compiled twice: quant_kernels_avx2.cpp (-mavx2 -mfma) and
// quant_kernels_avx512vnni.cpp (adds -mavx512vl -mavx512vnni; one vpdpbusd does what
// vpmaddubsw + vpmaddwd do, with the same exact integer sums). Before including it, a file
// defines STRATA_QUANT_KERNELS_FN (the accessor's name) and STRATA_QUANT_ISA (its isa string),
// and STRATA_QUANT_VNNI for the VNNI build. Both are bit-identical to the portable kernels
// (quant_kernels.cpp), which spell out the same lane order in scalar code.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant_kernels.h"

namespace strata {

namespace {

// Rounded to fp16 (to nearest even) and back: F16C, exact as f32_to_f16 / f16_to_f32.
float fp16_round(float x) { return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)); }

void quantize_avx2(const float* a, int64_t lda, int64_t k, bool q8_1, int64_t row_begin, int64_t row_end, ActBlock* acts) {
  const int64_t nb = k / kQuantBlock;
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* x = a + r * lda + b * kQuantBlock;
      ActBlock& out = acts[r * nb + b];
      __m256 v[4];
      __m256 amax = _mm256_setzero_ps();
      for (int q = 0; q < 4; ++q) {
        v[q] = _mm256_loadu_ps(x + 8 * q);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[q]));
      }
      __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float max_abs = _mm_cvtss_f32(m4);
      const float d = max_abs / 127.0f;
      const __m256 id = _mm256_set1_ps(max_abs != 0.0f ? 127.0f / max_abs : 0.0f);
      __m256i sum = _mm256_setzero_si256();
      __m256i qi[4];
      for (int q = 0; q < 4; ++q) {
        qi[q] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[q], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        sum = _mm256_add_epi32(sum, qi[q]);
      }
      // int32 -> int8 in element order (packs interleave 128-bit halves: undo with a permute).
      const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
      const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
      __m256i bytes = _mm256_packs_epi16(p01, p23);
      bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs), bytes);
      out.d = fp16_round(d);
      if (q8_1) {
        __m128i s4 = _mm_add_epi32(_mm256_extracti128_si256(sum, 1), _mm256_castsi256_si128(sum));
        s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
        out.s = fp16_round(d * static_cast<float>(_mm_cvtsi128_si32(s4)));
      } else {
        out.s = 0.0f;
      }
    }
  }
}

// (l4 + l0 + l6 + l2) + (l5 + l1 + l7 + l3), in the order the portable kernel writes out.
inline float hsum(__m256 x) {
  __m128 t = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  return _mm_cvtss_f32(t);
}

// One weight block: 32 int8 lanes in element order (4-bit: low nibbles, then high nibbles), its
// scale d and (Q4_1) min m. F16C widens the fp16 values exactly, as f16_to_f32 does.
struct WeightBlock {
  __m256i q;
  float d;
  float m;
};

// The fp16 values at p (and p + 2, read together), widened in lanes 0 (and 1). Moved in with
// vmovd, which zeroes the rest of the register: _cvtsh_ss's vpinsrw merges into whatever
// register it picks, a false dependency that chained the blocks of a GEMV row together.
inline __m128 halves_to_floats(const uint8_t* p, int n) {
  uint32_t bits = 0;
  std::memcpy(&bits, p, static_cast<size_t>(2 * n));
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
}

inline float half_to_float(const uint8_t* p) { return _mm_cvtss_f32(halves_to_floats(p, 1)); }

// A weight block's lanes and scales. 4-bit: the 16 packed bytes in both halves, the upper half
// shifted right by 4 (one variable shift), then masked: low nibbles, then high nibbles. Q4_1's
// d and m are widened with one conversion.
template <QuantType T>
inline WeightBlock load_weights(const uint8_t* block) {
  if constexpr (T == QuantType::Q8_0) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2)), half_to_float(block), 0.0f};
  } else {
    constexpr int kHeader = T == QuantType::Q4_0 ? 2 : 4;
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kHeader)));
    const __m256i nibbles = _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
    if constexpr (T == QuantType::Q4_0) {
      return {_mm256_sub_epi8(nibbles, _mm256_set1_epi8(8)), half_to_float(block), 0.0f};
    } else {
      const __m128 dm = halves_to_floats(block, 2);  // d, then m
      return {nibbles, _mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm))};
    }
  }
}

// Sums of the products of 4 consecutive bytes, as 8 float lanes; exact (no int16 saturation:
// |w| <= 127 for signed weights, <= 15 unsigned, |a| <= 127).
template <QuantType T>
inline __m256 dot_lanes(__m256i w, __m256i a) {
  // Q4_1's weights are unsigned (0..15); the others go unsigned through their signs.
  const __m256i u = T == QuantType::Q4_1 ? w : _mm256_sign_epi8(w, w);
  const __m256i s = T == QuantType::Q4_1 ? a : _mm256_sign_epi8(a, w);
#if defined(STRATA_QUANT_VNNI)
  return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s));
#else
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// How far ahead of its reads a one-row tile asks for each weight row's bytes. A decode step
// streams every weight once, each tile's rows from memory as it reaches them: the hardware
// prefetcher alone kept one core at ~8 GB/s of the ~20 it can read, and the blocks' loads were
// where the GEMV waited. 4 KB ahead (a few tiles) took SmolLM2's decode step from ~14.5 to
// ~9 ms here; 512 B was too close and 32 KB too far.
constexpr int64_t kPrefetchAhead = 4096;

// MR activation rows x NR weight rows, every block of k.
template <QuantType T, int MR, int NR>
void tile(const QuantGemmArgs& g, const ActBlock* acts, int64_t nb, int64_t i0, int64_t j0) {
  constexpr int64_t kBlockBytes = T == QuantType::Q8_0 ? 34 : T == QuantType::Q4_0 ? 18 : 20;
  __m256 acc[MR][NR];
  float mins[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = _mm256_setzero_ps();
      mins[i][j] = 0.0f;
    }
  const uint8_t* w0 = g.w->row(j0);
  const int64_t row_bytes = nb * kBlockBytes;
  const ActBlock* a0 = acts + i0 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    WeightBlock w[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      if constexpr (MR == 1) {
        _mm_prefetch(reinterpret_cast<const char*>(w0 + j * row_bytes + b * kBlockBytes) + kPrefetchAhead, _MM_HINT_T0);
      }
      w[j] = load_weights<T>(w0 + j * row_bytes + b * kBlockBytes);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const ActBlock& a = a0[i * nb + b];
      const __m256i aq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(w[j].d * a.d), dot_lanes<T>(w[j].q, aq), acc[i][j]);
        if constexpr (T == QuantType::Q4_1) mins[i][j] = std::fma(w[j].m, a.s, mins[i][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* c = g.c + (i0 + i) * g.ldc + j0;
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      float sum = hsum(acc[i][j]);
      if constexpr (T == QuantType::Q4_1) sum = sum + mins[i][j];
      if (g.bias != nullptr) sum += g.bias[j0 + j];
      c[j] = g.accumulate ? c[j] + sum : sum;
    }
  }
}

// One activation row (decode) takes 4 weight rows at a time, for independent chains; more rows
// take 2. The 256-bit AVX-512 build has 32 vector registers, room for 4 x 4 tiles.
#if defined(STRATA_QUANT_VNNI)
constexpr int kWideNR = 4;
#else
constexpr int kWideNR = 2;
#endif

// Weight rows [n_begin, n_end) against activation rows [i_begin, i_end) in MR-row tiles.
template <QuantType T, int MR>
void row_tiles(const QuantGemmArgs& g, const ActBlock* acts, int64_t nb, int64_t i_begin, int64_t i_end, int64_t n_begin,
               int64_t n_end) {
  constexpr int NR = MR == 1 ? 4 : kWideNR;
  int64_t j = n_begin;
  for (; j + NR <= n_end; j += NR) {
    int64_t i = i_begin;
    for (; i + MR <= i_end; i += MR) tile<T, MR, NR>(g, acts, nb, i, j);
  }
  for (; j < n_end; ++j)
    for (int64_t i = i_begin; i + MR <= i_end; i += MR) tile<T, MR, 1>(g, acts, nb, i, j);
}

// Weight rows in panels of kPanel, each panel against every activation row while it is in L1
// (a panel of Q4_1 rows of k = 1536 is 15 KB), the activations (m x k/32 blocks) from L2.
template <QuantType T>
void gemm_type(const QuantGemmArgs& g, const ActBlock* acts, int64_t n_begin, int64_t n_end) {
  const int64_t nb = g.w->cols / kQuantBlock;
  constexpr int kMR = 4;
  constexpr int64_t kPanel = 16;
  const int64_t full = g.m / kMR * kMR;
  for (int64_t p = n_begin; p < n_end; p += kPanel) {
    const int64_t p_end = std::min(n_end, p + kPanel);
    if (full > 0) row_tiles<T, kMR>(g, acts, nb, 0, full, p, p_end);
    switch (g.m - full) {
      case 1: row_tiles<T, 1>(g, acts, nb, full, g.m, p, p_end); break;
      case 2: row_tiles<T, 2>(g, acts, nb, full, g.m, p, p_end); break;
      case 3: row_tiles<T, 3>(g, acts, nb, full, g.m, p, p_end); break;
      default: break;
    }
  }
}

void gemm_avx2(const QuantGemmArgs& g, const ActBlock* acts, int64_t n_begin, int64_t n_end) {
  switch (g.w->type) {
    case QuantType::Q4_0: gemm_type<QuantType::Q4_0>(g, acts, n_begin, n_end); break;
    case QuantType::Q4_1: gemm_type<QuantType::Q4_1>(g, acts, n_begin, n_end); break;
    case QuantType::Q8_0: gemm_type<QuantType::Q8_0>(g, acts, n_begin, n_end); break;
  }
}

}  // namespace

const QuantKernels& STRATA_QUANT_KERNELS_FN() {
  static const QuantKernels kernels{STRATA_QUANT_ISA, &quantize_avx2, &gemm_avx2};
  return kernels;
}

}  // namespace strata
