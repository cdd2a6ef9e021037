// The x86 quantized kernels' body, compiled twice: quant_kernels_avx2.cpp (-mavx2 -mfma, 256-bit
// vectors, vpmaddubsw + vpmaddwd for the int8 dot products) and quant_kernels_avx512vnni.cpp
// (512-bit vectors and vpdpbusd, which does what the two do with the same exact integer sums).
// Before including it, a file defines STRATA_QUANT_KERNELS_FN (the accessor's name) and
// STRATA_QUANT_ISA (its isa string), and STRATA_QUANT_AVX512 for the AVX-512 build. Both are bit-identical to the portable kernels (quant_kernels.cpp), which spell
// out the same sums in the same order in scalar code.
#pragma once

#include <immintrin.h>

#include <algorithm>
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

// The vectors a tile works in: 256-bit (8 rows of a panel a vector; vpdpbusd in the AVX-512
// build, else vpmaddubsw + vpmaddwd) and, in the AVX-512 build, 512-bit (all 16 rows in one).
// Every one gives each row the same sums.
struct Ymm {
  using I = __m256i;
  using F = __m256;
  static constexpr int kLanes = 8;
#if defined(STRATA_QUANT_AVX512)
  static constexpr bool kVnni = true;
#else
  static constexpr bool kVnni = false;
#endif
  static I zero() { return _mm256_setzero_si256(); }
  static F fzero() { return _mm256_setzero_ps(); }
  static I load(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static I low_nibbles(I x) { return _mm256_and_si256(x, _mm256_set1_epi8(0x0F)); }
  static I high_nibbles(I x) { return _mm256_and_si256(_mm256_srli_epi16(x, 4), _mm256_set1_epi8(0x0F)); }
  // u (unsigned bytes) times s (signed bytes), 4 adjacent products summed into each int32 lane
  // of acc; exact (without VNNI, where the caller keeps |u * s| pairs within int16).
  static I dot_add(I acc, I u, I s) {
#if defined(STRATA_QUANT_AVX512)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
  }
  // Q8_0's stored bytes (value + 128) back to signed values, and their products with a through
  // the weights' signs (|w| <= 128 as unsigned, so pairs stay within int16).
  static I to_signed(I x) { return _mm256_xor_si256(x, _mm256_set1_epi8(static_cast<char>(0x80))); }
  static I dot_add_signed(I acc, I w, I a) { return dot_add(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)); }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static F halves(const uint8_t* p) { return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p))); }
  static F to_float(I x) { return _mm256_cvtepi32_ps(x); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
};

#if defined(STRATA_QUANT_AVX512)
struct Zmm {
  using I = __m512i;
  using F = __m512;
  static constexpr int kLanes = 16;
  static constexpr bool kVnni = true;
  static I zero() { return _mm512_setzero_si512(); }
  static F fzero() { return _mm512_setzero_ps(); }
  static I load(const uint8_t* p) { return _mm512_loadu_si512(p); }  // Q4_0's, Q8_0's blocks: 32-byte aligned
  static I low_nibbles(I x) { return _mm512_and_si512(x, _mm512_set1_epi8(0x0F)); }
  static I high_nibbles(I x) { return _mm512_and_si512(_mm512_srli_epi16(x, 4), _mm512_set1_epi8(0x0F)); }
  static I dot_add(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  // The zero-masked forms, all lanes on: the plain ones start from _mm512_undefined_ps(), which
  // GCC 12 reports as maybe used uninitialized.
  static F halves(const uint8_t* p) {
    return _mm512_maskz_cvtph_ps(kAll, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F to_float(I x) { return _mm512_maskz_cvtepi32_ps(kAll, x); }
  static constexpr __mmask16 kAll = 0xFFFF;
  static F set1f(float v) { return _mm512_set1_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
};
#endif

// 4 activation values (bytes 4c..4c+3 of a block) in every int32 lane.
template <class Vec>
inline typename Vec::I broadcast4(const int8_t* qs) {
  int32_t v;
  std::memcpy(&v, qs, 4);
  return Vec::set1(v);
}

// MR activation rows against one panel (16 rows, in NH vectors of kLanes rows), every block:
// isum[i][h] gathers the block's exact integer dot products of kLanes weight rows at once, then
// one fma scales it by d_w (the rows' scales, widened from fp16 together) * d_a into acc[i][h].
template <class Vec, QuantType T, int MR>
void tile(const QuantGemmArgs& g, const ActBlock* acts, int64_t nb, int64_t i0, int64_t p0) {
  using I = typename Vec::I;
  using F = typename Vec::F;
  constexpr int NH = kPanelRows / Vec::kLanes;
  constexpr int64_t kRowBytes = 4 * Vec::kLanes;  // a vector's share of a 64-byte chunk
  constexpr int64_t kScaleBytes = (T == QuantType::Q4_1 ? 4 : 2) * kPanelRows;
  constexpr int64_t kBlockBytes = T == QuantType::Q8_0 ? 34 * kPanelRows : T == QuantType::Q4_0 ? 18 * kPanelRows : 20 * kPanelRows;
  const QuantPanels& w = *g.w;
  const uint8_t* base = w.panel(p0);
  const ActBlock* a0 = acts + i0 * nb;
  F acc[MR][NH];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) acc[i][h] = Vec::fzero();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* block = base + b * kBlockBytes;
    I isum[MR][NH];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) isum[i][h] = Vec::zero();
    if constexpr (T == QuantType::Q8_0) {
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        I wq[NH];
#pragma GCC unroll 8
        for (int h = 0; h < NH; ++h) {
          wq[h] = Vec::load(block + kScaleBytes + 64 * c + kRowBytes * h);
          if constexpr (!Vec::kVnni) wq[h] = Vec::to_signed(wq[h]);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const I av = broadcast4<Vec>(a0[i * nb + b].qs + 4 * c);
#pragma GCC unroll 8
          for (int h = 0; h < NH; ++h) {
            if constexpr (Vec::kVnni) isum[i][h] = Vec::dot_add(isum[i][h], wq[h], av);  // (q + 128) * a: corrected below
            else isum[i][h] = Vec::dot_add_signed(isum[i][h], wq[h], av);
          }
        }
      }
    } else {
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        I lo[NH], hi[NH];
#pragma GCC unroll 8
        for (int h = 0; h < NH; ++h) {
          const I packed = Vec::load(block + kScaleBytes + 64 * c + kRowBytes * h);
          lo[h] = Vec::low_nibbles(packed);
          hi[h] = Vec::high_nibbles(packed);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const int8_t* qs = a0[i * nb + b].qs;
          const I alo = broadcast4<Vec>(qs + 4 * c), ahi = broadcast4<Vec>(qs + 16 + 4 * c);
#pragma GCC unroll 8
          for (int h = 0; h < NH; ++h) isum[i][h] = Vec::dot_add(Vec::dot_add(isum[i][h], lo[h], alo), hi[h], ahi);
        }
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const F dw = Vec::halves(block + 2 * Vec::kLanes * h);
      F mw = Vec::fzero();
      if constexpr (T == QuantType::Q4_1) mw = Vec::halves(block + 2 * kPanelRows + 2 * Vec::kLanes * h);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const ActBlock& a = a0[i * nb + b];
        I dot = isum[i][h];
        // The products were of unsigned stand-ins: Q4_0's stored nibble is its value + 8, and
        // (VNNI) Q8_0's byte its value + 128; take away 8 (128) times the activations' sum,
        // exactly. (Without VNNI, Q8_0's signed values multiply through their signs:
        // vpmaddubsw's int16 pairs would saturate on 255 * 127.)
        if constexpr (T == QuantType::Q4_0) dot = Vec::sub(dot, Vec::set1(8 * a.sum));
        if constexpr (T == QuantType::Q8_0 && Vec::kVnni) dot = Vec::sub(dot, Vec::set1(128 * a.sum));
        acc[i][h] = Vec::fmadd(Vec::mul(dw, Vec::set1f(a.d)), Vec::to_float(dot), acc[i][h]);
        if constexpr (T == QuantType::Q4_1) acc[i][h] = Vec::fmadd(mw, Vec::set1f(a.s), acc[i][h]);
      }
    }
  }
  // Row j0 + kLanes * h + l of the output is lane l of acc[.][h]; a padded panel's last rows are
  // not written.
  const int64_t j0 = p0 * kPanelRows;
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* c = g.c + (i0 + i) * g.ldc + j0;
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const int64_t first = Vec::kLanes * h, valid = std::min<int64_t>(Vec::kLanes, w.rows - j0 - first);
      if (valid <= 0) continue;
      F v = acc[i][h];
      if (valid == Vec::kLanes) {
        if (g.bias != nullptr) v = Vec::add(v, Vec::loadu(g.bias + j0 + first));
        if (g.accumulate) v = Vec::add(Vec::loadu(c + first), v);
        Vec::storeu(c + first, v);
      } else {
        alignas(64) float lanes[Vec::kLanes];
        Vec::storeu(lanes, v);
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
// Q4_1 panel of k = 1536 is 15 KB), the activations from L2, kMR rows at a time: in AVX-512, 8
// rows of 512-bit vectors; in AVX2, 2 rows of 256-bit (its 16 registers). A decode step's one
// row makes the thread's reads one stream, front to back, which the hardware prefetcher follows
// at ~20 GB/s here (two panels a tile, two streams with one restarting cold each tile, ran at
// ~11; software prefetches did not help), and runs in 256-bit vectors, which measured faster
// there than 512-bit ones (the 512-bit GEMM is ~5% faster at 32 rows).
#if defined(STRATA_QUANT_AVX512)
using Wide = Zmm;
constexpr int kMR = 8;
#else
using Wide = Ymm;
constexpr int kMR = 2;
#endif

template <QuantType T>
void gemm_type(const QuantGemmArgs& g, const ActBlock* acts, int64_t p_begin, int64_t p_end) {
  const int64_t nb = g.w->blocks();
  if (g.m == 1) {
    for (int64_t p = p_begin; p < p_end; ++p) tile<Ymm, T, 1>(g, acts, nb, 0, p);
    return;
  }
  const int64_t full = g.m / kMR * kMR;
  for (int64_t p = p_begin; p < p_end; ++p) {
    for (int64_t i = 0; i < full; i += kMR) tile<Wide, T, kMR>(g, acts, nb, i, p);
    int64_t i = full;
    if constexpr (kMR > 4) {
      if (g.m - i >= 4) {
        tile<Wide, T, 4>(g, acts, nb, i, p);
        i += 4;
      }
    }
    switch (g.m - i) {
      case 1: tile<Wide, T, 1>(g, acts, nb, i, p); break;
      case 2: tile<Wide, T, 2>(g, acts, nb, i, p); break;
      case 3: tile<Wide, T, 3>(g, acts, nb, i, p); break;
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
