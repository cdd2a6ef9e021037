// The AVX-512 build of the fp32 GEMM for three or more activation rows; this file alone is
// compiled with -mavx512f (and AVX2, FMA, F16C) and only runs where cpu_kernels() has checked
// the CPU supports them. The rest of the set (the GEMM of one or two rows, SiLU, attention,
// half conversions) is the AVX2 build's.
//
// A weight panel's 16 rows are one 512-bit vector, so a tile of MR activation rows by NP panels
// keeps MR * NP accumulators in the 32 vector registers (8 x 3 = 24, against the AVX2 build's
// 6 x 2 halves), and each k costs NP panel loads and MR broadcasts (from memory, folded into
// the fmadds) for MR * NP fmadds of 16 lanes. Each output element is still one lane updated by
// fmadd for k = 0, 1, ..., K-1 in order from zero, then the bias added, then the old value if
// accumulating: the AVX2 build's operations exactly, so the two give the same bits.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "cpu_kernels.h"

namespace {

constexpr int64_t kPanel = strata::PackedWeights::kPanel;
// The zero-masked forms of the widening ops, all lanes on: the plain ones start from
// _mm512_undefined_*(), which GCC 12 reports as maybe used uninitialized.
constexpr __mmask16 kAll = 0xFFFF;

// The panels' element types, each loading a k's 16 values into one vector, widened exactly.
struct ZF32 {
  using E = float;
  static const E* data(const strata::PackedWeights& w) { return w.panels.data(); }
  static __m512 load(const E* p) { return _mm512_loadu_ps(p); }
  static constexpr bool kSlotOrder = false;
};
struct ZF16 {
  using E = uint16_t;
  static const E* data(const strata::PackedWeights& w) { return w.halves.data(); }
  static __m512 load(const E* p) { return _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static constexpr bool kSlotOrder = false;
};
// bf16 panels keep a k's values in slot order (PackedWeights::bf16_slot); zero-extending each
// to 32 bits and shifting it into the high half widens it exactly, with lane s holding slot s.
// The accumulators stay in slot order and are put back in row order once, at the store.
struct ZBF16 {
  using E = uint16_t;
  static const E* data(const strata::PackedWeights& w) { return w.halves.data(); }
  static __m512 load(const E* p) {
    const __m512i x = _mm512_maskz_cvtepu16_epi32(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, x, 16));
  }
  static constexpr bool kSlotOrder = true;
};

// The lane holding row j of a bf16 panel's k: its slot.
constexpr std::array<int32_t, kPanel> kRowSlots = [] {
  std::array<int32_t, kPanel> slots{};
  for (int64_t j = 0; j < kPanel; ++j) slots[static_cast<size_t>(j)] = static_cast<int32_t>(strata::PackedWeights::bf16_slot(j));
  return slots;
}();

// Lane j of the result is the lane holding row j.
template <class W>
__m512 to_row_order(__m512 v) {
  if constexpr (W::kSlotOrder) {
    return _mm512_maskz_permutexvar_ps(kAll, _mm512_loadu_si512(kRowSlots.data()), v);
  } else {
    return v;
  }
}

template <int MR, int NP, class W>
void gemm_tile(const strata::GemmArgs& g, int64_t m0, int64_t panel0) {
  const int64_t K = g.w->k;
  __m512 acc[MR][NP];
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
  const typename W::E* panel[NP];
  for (int p = 0; p < NP; ++p) panel[p] = W::data(*g.w) + (panel0 + p) * K * kPanel;
  const float* a_row[MR];
  for (int i = 0; i < MR; ++i) a_row[i] = g.a + (m0 + i) * g.lda;

  for (int64_t k = 0; k < K; ++k) {
    __m512 b[NP];
    for (int p = 0; p < NP; ++p) b[p] = W::load(panel[p] + k * kPanel);
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(a_row[i][k]);
      for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_fmadd_ps(a, b[p], acc[i][p]);
    }
  }

  for (int p = 0; p < NP; ++p) {
    const int64_t n0 = (panel0 + p) * kPanel;
    const int64_t columns = std::min<int64_t>(kPanel, g.w->n - n0);
    const __mmask16 mask = static_cast<__mmask16>((1u << columns) - 1);
    const __m512 bias = g.bias != nullptr ? _mm512_maskz_loadu_ps(mask, g.bias + n0) : _mm512_setzero_ps();
    for (int i = 0; i < MR; ++i) {
      float* c = g.c + (m0 + i) * g.ldc + n0;
      __m512 sum = to_row_order<W>(acc[i][p]);
      if (g.bias != nullptr) sum = _mm512_add_ps(sum, bias);
      if (g.accumulate) sum = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, c), sum);
      _mm512_mask_storeu_ps(c, mask, sum);
    }
  }
}

using TileFn = void (*)(const strata::GemmArgs&, int64_t, int64_t);

// 32 registers: 8 x 3 accumulators, 3 panel vectors, a broadcast. Three panels a tile is also
// parallel_gemm's unit of a thread's share.
constexpr int kMR = 8;
constexpr int kNP = 3;

template <class W, int NP, size_t... I>
constexpr std::array<TileFn, kMR> row_tiles(std::index_sequence<I...>) {
  return {&gemm_tile<static_cast<int>(I) + 1, NP, W>...};
}

template <class W>
void gemm_typed(const strata::GemmArgs& g, int64_t panel_begin, int64_t panel_end) {
  static constexpr std::array<TileFn, kMR> kWide = row_tiles<W, kNP>(std::make_index_sequence<kMR>());
  static constexpr std::array<TileFn, kMR> kOne = row_tiles<W, 1>(std::make_index_sequence<kMR>());
  // Rows of A per pass: enough to reuse each panel from L2, few enough that A stays in L2.
  const int64_t m_block = std::max<int64_t>(kMR, ((512 * 1024) / (4 * std::max<int64_t>(g.w->k, 1))) / kMR * kMR);
  for (int64_t m_start = 0; m_start < g.m; m_start += m_block) {
    const int64_t m_end = std::min(g.m, m_start + m_block);
    int64_t p = panel_begin;
    for (; p + kNP <= panel_end; p += kNP)
      for (int64_t m = m_start; m < m_end; m += kMR) kWide[std::min<int64_t>(kMR, m_end - m) - 1](g, m, p);
    for (; p < panel_end; ++p)
      for (int64_t m = m_start; m < m_end; m += kMR) kOne[std::min<int64_t>(kMR, m_end - m) - 1](g, m, p);
  }
}

void gemm_avx512(const strata::GemmArgs& g, int64_t panel_begin, int64_t panel_end) {
  // One or two rows (decode) are bound by reading the weights, which the AVX2 build's tiles
  // did 3-5% faster in the forward benchmark here; its bits are the same.
  if (g.m <= 2) return strata::avx2_kernels().gemm(g, panel_begin, panel_end);
  switch (g.w->elem) {
    case strata::PackedWeights::Elem::kF32: gemm_typed<ZF32>(g, panel_begin, panel_end); break;
    case strata::PackedWeights::Elem::kBF16: gemm_typed<ZBF16>(g, panel_begin, panel_end); break;
    case strata::PackedWeights::Elem::kF16: gemm_typed<ZF16>(g, panel_begin, panel_end); break;
  }
}

}  // namespace

namespace strata {

const CpuKernels& avx512_kernels() {
  static const CpuKernels kernels = [] {
    CpuKernels k = avx2_kernels();
    k.isa = "avx512f";
    k.gemm = gemm_avx512;
    return k;
  }();
  return kernels;
}

}  // namespace strata
