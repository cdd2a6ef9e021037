// The AMX build of the GEMM on bf16 panels; this file alone is compiled with -mamx-tile
// -mamx-bf16 (and AVX-512F, AVX2, FMA, F16C) and only runs where amx_kernels_if_runnable()
// has checked the CPU and the kernel (Linux grants a process the AMX tile state on request).
//
// Not the same bits as the other sets: a tile multiply (TDPBF16PS) takes bf16 activations, sums
// each k pair's products in its own order and reads bf16 subnormals as zero. So the activations
// are rounded to bf16 (to nearest even) once per GEMM, into the tiles' layout, as a bf16 model
// runs on a GPU or in transformers. Every output still comes from one fixed sequence of tile
// operations over k, whatever the batch, tile or thread split, so the set is batch invariant;
// it multiplies one row as it multiplies 32 (16 tile rows, one used), so decode reads each
// panel once as the other sets do.
//
// Tiles (16 rows of 64 bytes each): A (16 activation rows x 32 k values in bf16), B (a panel's
// 16 k pairs: its PackedWeights layout in pairs, as it lies; 16 rows x 2 values a word), C
// (16 x 16 fp32). Eight tiles: 2 A, 2 B, 4 C, so one step multiplies 32 rows by 2 panels over
// 32 k.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "amx.h"
#include "cpu_kernels.h"

namespace {

constexpr int64_t kPanel = strata::PackedWeights::kPanel;
constexpr int64_t kChunk = 32;  // k values per tile multiply
constexpr int64_t kTileRows = 16;
constexpr int64_t kAhead = 2;  // chunks of a panel prefetched ahead of the tile loads

// fp32 -> bf16, rounded to nearest even (NaN kept a NaN), 16 at a time. (The zero-masked forms,
// all lanes on: the plain ones start from _mm512_undefined_*(), which GCC 12 reports as maybe
// used uninitialized.)
__m256i to_bf16(__m512 v) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_maskz_srli_epi32(kAll, u, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  __m512i r = _mm512_maskz_srli_epi32(kAll, _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
  return _mm512_maskz_cvtepi32_epi16(kAll, r);
}

// Rows [row_begin, row_end) of the activations as A tiles read them (GemmArgs::a_bf16): each
// of amx_k(k) bf16 values, zeros past k, and rows past m all zeros.
void round_activations(const strata::GemmArgs& g, int64_t row_begin, int64_t row_end, uint16_t* out) {
  const int64_t K = g.w->k, kp = strata::amx_k(K);
  for (int64_t r = row_begin; r < row_end; ++r) {
    uint16_t* dst = out + r * kp;
    if (r >= g.m) {
      std::memset(dst, 0, static_cast<size_t>(kp) * 2);
      continue;
    }
    const float* src = g.a + r * g.lda;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), to_bf16(_mm512_loadu_ps(src + k)));
    if (k < K) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (K - k)) - 1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), to_bf16(_mm512_maskz_loadu_ps(tail, src + k)));  // zeros past K
      k += 16;
    }
    if (k < kp) std::memset(dst + k, 0, static_cast<size_t>(kp - k) * 2);
  }
}

// C tile (16 x 16 fp32 at `sums`) into rows [m0, m0 + 16) and the panel's columns, as the other
// sets finish: bias added, then the old value if accumulating.
void store_tile(const strata::GemmArgs& g, const float* sums, int64_t m0, int64_t panel) {
  const int64_t n0 = panel * kPanel;
  const int64_t columns = std::min<int64_t>(kPanel, g.w->n - n0);
  const __mmask16 mask = static_cast<__mmask16>((1u << columns) - 1);
  const __m512 bias = g.bias != nullptr ? _mm512_maskz_loadu_ps(mask, g.bias + n0) : _mm512_setzero_ps();
  const int64_t rows = std::min<int64_t>(kTileRows, g.m - m0);
  for (int64_t i = 0; i < rows; ++i) {
    float* c = g.c + (m0 + i) * g.ldc + n0;
    __m512 sum = _mm512_loadu_ps(sums + i * kPanel);
    if (g.bias != nullptr) sum = _mm512_add_ps(sum, bias);
    if (g.accumulate) sum = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, c), sum);
    _mm512_mask_storeu_ps(c, mask, sum);
  }
}

// Rows [m0, m0 + 16 * MA) by panels [p0, p0 + NB) over all of k. A tiles are tiles 0-1, B tiles
// 2-3, C tile (a, b) is 4 + 2a + b. The last chunk of a panel whose k pairs end inside it is
// read from `tail`, a copy padded with zeros (zeros in A too: the padding adds nothing).
template <int MA, int NB>
void tile_block(const strata::GemmArgs& g, const uint16_t* a, int64_t kp, int64_t m0, int64_t p0) {
  const int64_t stride = g.w->k_stride();
  const uint16_t* panel[NB];
  for (int b = 0; b < NB; ++b) panel[b] = g.w->halves.data() + (p0 + b) * stride * kPanel;
  _tile_zero(4);
  if constexpr (NB > 1) _tile_zero(5);
  if constexpr (MA > 1) _tile_zero(6);
  if constexpr (MA > 1 && NB > 1) _tile_zero(7);
  const int64_t full = stride / kChunk * kChunk;  // k values every panel holds a whole chunk of
  alignas(64) uint16_t tail[NB][kChunk * kPanel];
  const int64_t lda = kp * 2;
  for (int64_t k = 0; k < kp; k += kChunk) {
    const uint16_t* b_at[NB];
    for (int b = 0; b < NB; ++b) {
      b_at[b] = panel[b] + k * kPanel;
      // Decode (one tile row) is bound by reading the panels: ask for the chunk after next ahead
      // of the tile loads (with none, one row ran 10-20% slower than the AVX2 tiles here).
      if (k + kAhead * kChunk < stride)
        for (int line = 0; line < 16; ++line) _mm_prefetch(reinterpret_cast<const char*>(b_at[b] + kAhead * kChunk * kPanel + 32 * line), _MM_HINT_T0);
      if (k >= full) {  // the pairs left: (stride - k) / 2 rows of the tile
        std::memset(tail[b], 0, sizeof(tail[b]));
        std::memcpy(tail[b], b_at[b], static_cast<size_t>((stride - k) * kPanel) * 2);
        b_at[b] = tail[b];
      }
    }
    _tile_loadd(0, a + m0 * kp + k, lda);
    if constexpr (MA > 1) _tile_loadd(1, a + (m0 + kTileRows) * kp + k, lda);
    _tile_loadd(2, b_at[0], 64);
    if constexpr (NB > 1) _tile_loadd(3, b_at[NB - 1], 64);
    _tile_dpbf16ps(4, 0, 2);
    if constexpr (NB > 1) _tile_dpbf16ps(5, 0, 3);
    if constexpr (MA > 1) _tile_dpbf16ps(6, 1, 2);
    if constexpr (MA > 1 && NB > 1) _tile_dpbf16ps(7, 1, 3);
  }
  alignas(64) float sums[kTileRows * kPanel];
  _tile_stored(4, sums, 64);
  store_tile(g, sums, m0, p0);
  if constexpr (NB > 1) {
    _tile_stored(5, sums, 64);
    store_tile(g, sums, m0, p0 + 1);
  }
  if constexpr (MA > 1) {
    _tile_stored(6, sums, 64);
    store_tile(g, sums, m0 + kTileRows, p0);
  }
  if constexpr (MA > 1 && NB > 1) {
    _tile_stored(7, sums, 64);
    store_tile(g, sums, m0 + kTileRows, p0 + 1);
  }
}

void gemm_amx(const strata::GemmArgs& g, int64_t panel_begin, int64_t panel_end) {
  if (!g.w->pairs) return strata::avx512_kernels().gemm(g, panel_begin, panel_end);  // fp32, fp16
  const int64_t rows = strata::amx_rows(g.m), kp = strata::amx_k(g.w->k);
  const uint16_t* a = g.a_bf16;
  if (a == nullptr) {
    thread_local std::vector<uint16_t> own;
    own.resize(static_cast<size_t>(rows * kp));
    round_activations(g, 0, rows, own.data());
    a = own.data();
  }
  const strata::AmxTileConfig config;
  _tile_loadconfig(&config);
  // Rows per pass: a multiple of 32 whose activations stay in L2 while each panel pair is
  // multiplied by all of them.
  const int64_t m_block = std::max<int64_t>(2 * kTileRows, (int64_t{1} << 20) / (2 * kp) / (2 * kTileRows) * (2 * kTileRows));
  for (int64_t m_start = 0; m_start < rows; m_start += m_block) {
    const int64_t m_end = std::min(rows, m_start + m_block);
    int64_t p = panel_begin;
    for (; p + 2 <= panel_end; p += 2) {
      int64_t m = m_start;
      for (; m + 2 * kTileRows <= m_end; m += 2 * kTileRows) tile_block<2, 2>(g, a, kp, m, p);
      if (m < m_end) tile_block<1, 2>(g, a, kp, m, p);
    }
    if (p < panel_end) {
      int64_t m = m_start;
      for (; m + 2 * kTileRows <= m_end; m += 2 * kTileRows) tile_block<2, 1>(g, a, kp, m, p);
      if (m < m_end) tile_block<1, 1>(g, a, kp, m, p);
    }
  }
  _tile_release();
}

}  // namespace

namespace strata {

const CpuKernels* amx_kernels_if_runnable() {
  static const bool runs = cpu_runs_avx512() && amx_bf16_usable();
  static const CpuKernels kernels = [] {
    CpuKernels k = avx512_kernels();
    k.isa = "amx-bf16";
    k.gemm = gemm_amx;
    k.round_activations = round_activations;
    k.bf16_pairs = true;
    return k;
  }();
  return runs ? &kernels : nullptr;
}

}  // namespace strata
