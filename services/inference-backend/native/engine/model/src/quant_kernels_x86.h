// The x86 quantized kernels' body, compiled twice: quant_kernels_avx2.cpp (-mavx2 -mfma) and
// quant_kernels_avx512vnni.cpp (adds -mavx512vl -mavx512vnni; one vpdpbusd does what
// vpmaddubsw + vpmaddwd do, with the same exact integer sums). Before including it, a file
// defines STRATA_QUANT_KERNELS_FN (the accessor's name) and STRATA_QUANT_ISA (its isa string),
// and STRATA_QUANT_VNNI for the VNNI build. Both are bit-identical to the portable kernels
// (quant_kernels.cpp), which spell out the same sums in the same order in scalar code.
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
      __m128i s4 = _mm_add_epi32(_mm256_extracti128_si256(sum, 1), _mm256_castsi256_si128(sum));
      s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
      if (q8_1) {
        out.s = fp16_round(d * static_cast<float>(_mm_cvtsi128_si32(s4)));
      } else {
        out.s = 0.0f;
      }
      out.sum = _mm_cvtsi128_si32(s4);
    }
  }
}

// u (unsigned bytes) times s (signed bytes), 4 adjacent products summed into each int32 lane
// of acc; exact (no int16 saturation where the caller keeps |u * s| pairs within int16).
inline __m256i dot_add(__m256i acc, __m256i u, __m256i s) {
#if defined(STRATA_QUANT_VNNI)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// 4 activation values (bytes 4c..4c+3 of a block) in every int32 lane.
inline __m256i broadcast4(const int8_t* qs) {
  int32_t v;
  std::memcpy(&v, qs, 4);
  return _mm256_set1_epi32(v);
}

// MR activation rows against one panel (16 rows, as two 8-row halves h), every block:
// isum[i][h] gathers the block's exact integer dot products of 8 weight rows at once, then one
// fma scales it by d_w (8 rows' scales, widened from fp16 together) * d_a into acc[i][h].
template <QuantType T, int MR>
void tile(const QuantGemmArgs& g, const ActBlock* acts, int64_t nb, int64_t i0, int64_t p0) {
  const QuantPanels& w = *g.w;
  constexpr int NH = 2;
  constexpr int64_t kScaleBytes = (T == QuantType::Q4_1 ? 4 : 2) * kPanelRows;
  constexpr int64_t kBlockBytes = T == QuantType::Q8_0 ? 34 * kPanelRows : T == QuantType::Q4_0 ? 18 * kPanelRows : 20 * kPanelRows;
  const uint8_t* base = w.panel(p0);
  const ActBlock* a0 = acts + i0 * nb;
  __m256 acc[MR][NH];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) acc[i][h] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i isum[MR][NH];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) isum[i][h] = _mm256_setzero_si256();
    if constexpr (T == QuantType::Q8_0) {
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        __m256i wq[NH];
#pragma GCC unroll 8
        for (int h = 0; h < NH; ++h) {
          const uint8_t* chunk = base + b * kBlockBytes + kScaleBytes + 64 * c + 32 * h;
          wq[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(chunk));
#if !defined(STRATA_QUANT_VNNI)
          wq[h] = _mm256_xor_si256(wq[h], _mm256_set1_epi8(static_cast<char>(0x80)));  // back to signed
#endif
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const __m256i av = broadcast4(a0[i * nb + b].qs + 4 * c);
#pragma GCC unroll 8
          for (int h = 0; h < NH; ++h) {
#if defined(STRATA_QUANT_VNNI)
            isum[i][h] = dot_add(isum[i][h], wq[h], av);  // (q + 128) * a: corrected below
#else
            isum[i][h] = dot_add(isum[i][h], _mm256_sign_epi8(wq[h], wq[h]), _mm256_sign_epi8(av, wq[h]));
#endif
          }
        }
      }
    } else {
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m256i lo[NH], hi[NH];
#pragma GCC unroll 8
        for (int h = 0; h < NH; ++h) {
          const uint8_t* chunk = base + b * kBlockBytes + kScaleBytes + 64 * c + 32 * h;
          const __m256i packed = _mm256_load_si256(reinterpret_cast<const __m256i*>(chunk));
          lo[h] = _mm256_and_si256(packed, low4);
          hi[h] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const int8_t* qs = a0[i * nb + b].qs;
          const __m256i alo = broadcast4(qs + 4 * c), ahi = broadcast4(qs + 16 + 4 * c);
#pragma GCC unroll 8
          for (int h = 0; h < NH; ++h) isum[i][h] = dot_add(dot_add(isum[i][h], lo[h], alo), hi[h], ahi);
        }
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const uint8_t* scales = base + b * kBlockBytes + 16 * h;
      const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(scales)));
      __m256 mw = _mm256_setzero_ps();
      if constexpr (T == QuantType::Q4_1) mw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(scales + 32)));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const ActBlock& a = a0[i * nb + b];
        __m256i dot = isum[i][h];
        // The products were of unsigned stand-ins: Q4_0's stored nibble is its value + 8, and (VNNI)
        // Q8_0's byte its value + 128; take away 8 (128) times the activations' sum, exactly.
        if constexpr (T == QuantType::Q4_0) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(8 * a.sum));
#if defined(STRATA_QUANT_VNNI)
        if constexpr (T == QuantType::Q8_0) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(128 * a.sum));
#endif
        acc[i][h] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a.d)), _mm256_cvtepi32_ps(dot), acc[i][h]);
        if constexpr (T == QuantType::Q4_1) acc[i][h] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.s), acc[i][h]);
      }
    }
  }
  // Row j0 + 8h + l of the output is lane l of acc[.][h]; a padded panel's last rows are not written.
  const int64_t j0 = p0 * kPanelRows;
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* c = g.c + (i0 + i) * g.ldc + j0;
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const int64_t first = 8 * h, valid = std::min<int64_t>(8, w.rows - j0 - first);
      if (valid <= 0) continue;
      __m256 v = acc[i][h];
      if (valid == 8) {
        if (g.bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(g.bias + j0 + first));
        if (g.accumulate) v = _mm256_add_ps(_mm256_loadu_ps(c + first), v);
        _mm256_storeu_ps(c + first, v);
      } else {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, v);
        for (int64_t l = 0; l < valid; ++l) {
          float sum = lanes[l];
          if (g.bias != nullptr) sum += g.bias[j0 + first + l];
          c[first + l] = g.accumulate ? c[first + l] + sum : sum;
        }
      }
    }
  }
}

// Panels [p_begin, p_end) in order, each against every activation row while it is in L1 (a
// Q4_1 panel of k = 1536 is 30 KB), the activations from L2, 4 rows at a time (AVX2's 16
// registers: 2). A decode step's one row makes the thread's reads one stream, front to back,
// which the hardware prefetcher follows at ~20 GB/s here: two panels a tile (two streams, the
// second restarting cold each tile) ran at ~11, and software prefetches did not help.
#if defined(STRATA_QUANT_VNNI)
constexpr int kMR = 4;
#else
constexpr int kMR = 2;
#endif

template <QuantType T>
void gemm_type(const QuantGemmArgs& g, const ActBlock* acts, int64_t p_begin, int64_t p_end) {
  const int64_t nb = g.w->blocks();
  const int64_t full = g.m / kMR * kMR;
  for (int64_t p = p_begin; p < p_end; ++p) {
    for (int64_t i = 0; i < full; i += kMR) tile<T, kMR>(g, acts, nb, i, p);
    switch (g.m - full) {
      case 1: tile<T, 1>(g, acts, nb, full, p); break;
      case 2: tile<T, 2>(g, acts, nb, full, p); break;
      case 3: tile<T, 3>(g, acts, nb, full, p); break;
      default: break;
    }
  }
}

void gemm_avx2(const QuantGemmArgs& g, const ActBlock* acts, int64_t p_begin, int64_t p_end) {
  switch (g.w->type) {
    case QuantType::Q4_0: gemm_type<QuantType::Q4_0>(g, acts, p_begin, p_end); break;
    case QuantType::Q4_1: gemm_type<QuantType::Q4_1>(g, acts, p_begin, p_end); break;
    case QuantType::Q8_0: gemm_type<QuantType::Q8_0>(g, acts, p_begin, p_end); break;
  }
}

}  // namespace

const QuantKernels& STRATA_QUANT_KERNELS_FN() {
  static const QuantKernels kernels{STRATA_QUANT_ISA, &quantize_avx2, &gemm_avx2};
  return kernels;
}

}  // namespace strata
