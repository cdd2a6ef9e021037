// Kernel bodies shared by the AVX2 and portable builds; included once by each, after it
// defines `struct Vec` (8 float lanes: zero, set1, load, load_tail, load_half, load_bf16_panel,
// store, store_half, fmadd, add, sub, mul, div, min, max, floor, pow2i, hsum). Everything here
// is TU-local, since the two builds use different compiler flags.
//
// Determinism: every output element is computed by one fixed sequence of operations whatever
// tile shape computes it, so a row's result does not depend on the other rows of the batch,
// the tile it lands in, or the thread that runs it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "cpu_kernels.h"
#include "strata/float_convert.h"

namespace {

// Cephes-style expf on 8 lanes: exp(x) = 2^n * p(r), r = x - n ln2, |r| <= ln2 / 2; about
// 1 ulp. Inputs are clamped to [-87, 88] so 2^n stays a normal float.
template <class V>
typename V::T exp_poly(typename V::T x) {
  using T = typename V::T;
  x = V::min(V::max(x, V::set1(-87.0f)), V::set1(88.0f));
  T n = V::floor(V::fmadd(x, V::set1(1.44269504088896341f), V::set1(0.5f)));
  x = V::fmadd(n, V::set1(-0.693359375f), x);
  x = V::fmadd(n, V::set1(2.12194440e-4f), x);
  T y = V::set1(1.9875691500e-4f);
  y = V::fmadd(y, x, V::set1(1.3981999507e-3f));
  y = V::fmadd(y, x, V::set1(8.3334519073e-3f));
  y = V::fmadd(y, x, V::set1(4.1665795894e-2f));
  y = V::fmadd(y, x, V::set1(1.6666665459e-1f));
  y = V::fmadd(y, x, V::set1(5.0000001201e-1f));
  y = V::fmadd(y, V::mul(x, x), x);
  y = V::add(y, V::set1(1.0f));
  return V::mul(y, V::pow2i(n));
}

// The panels' element types: each loads a k's 16 values as rows 0-7 and 8-15 in fp32 lanes,
// widened exactly.
struct PanelF32 {
  using E = float;
  static const E* data(const strata::PackedWeights& w) { return w.panels.data(); }
  static void load(const E* p, Vec::T& lo, Vec::T& hi) {
    lo = Vec::load(p);
    hi = Vec::load(p + 8);
  }
};
struct PanelBF16 {  // in slot order (PackedWeights::bf16_slot)
  using E = uint16_t;
  static const E* data(const strata::PackedWeights& w) { return w.halves.data(); }
  static void load(const E* p, Vec::T& lo, Vec::T& hi) { Vec::load_bf16_panel(p, lo, hi); }
};
struct PanelF16 {
  using E = uint16_t;
  static const E* data(const strata::PackedWeights& w) { return w.halves.data(); }
  static void load(const E* p, Vec::T& lo, Vec::T& hi) {
    lo = Vec::load_half(p);
    hi = Vec::load_half(p + 8);
  }
};

// MR activation rows x NP weight panels (16 columns each, two vectors). Each output element is
// one accumulator lane updated by fmadd for k = 0, 1, ..., K-1 in order, whatever the tile or
// the panels' element type (16-bit values are widened exactly as they are loaded).
template <int MR, int NP, class W>
void gemm_tile(const strata::GemmArgs& g, int64_t m0, int64_t panel0) {
  constexpr int64_t P = strata::PackedWeights::kPanel;
  const int64_t K = g.w->k;
  Vec::T acc[MR][2 * NP];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < 2 * NP; ++j) acc[i][j] = Vec::zero();
  const typename W::E* panel[NP];
  for (int p = 0; p < NP; ++p) panel[p] = W::data(*g.w) + (panel0 + p) * K * P;
  const float* a_row[MR];
  for (int i = 0; i < MR; ++i) a_row[i] = g.a + (m0 + i) * g.lda;

  for (int64_t k = 0; k < K; ++k) {
    Vec::T b[2 * NP];
    for (int p = 0; p < NP; ++p) {
      W::load(panel[p] + k * P, b[2 * p], b[2 * p + 1]);
    }
    for (int i = 0; i < MR; ++i) {
      const Vec::T a = Vec::set1(a_row[i][k]);
      for (int j = 0; j < 2 * NP; ++j) acc[i][j] = Vec::fmadd(a, b[j], acc[i][j]);
    }
  }

  for (int p = 0; p < NP; ++p) {
    const int64_t n0 = (panel0 + p) * P;
    const int64_t columns = std::min<int64_t>(P, g.w->n - n0);
    if (columns == P) {  // whole panel: the same adds as below, 8 lanes at a time
      for (int h = 0; h < 2; ++h) {
        const Vec::T bias = g.bias != nullptr ? Vec::load(g.bias + n0 + 8 * h) : Vec::zero();
        for (int i = 0; i < MR; ++i) {
          float* c = g.c + (m0 + i) * g.ldc + n0 + 8 * h;
          Vec::T sum = acc[i][2 * p + h];
          if (g.bias != nullptr) sum = Vec::add(sum, bias);
          Vec::store(c, g.accumulate ? Vec::add(Vec::load(c), sum) : sum);
        }
      }
      continue;
    }
    for (int i = 0; i < MR; ++i) {
      float sums[P];
      Vec::store(sums, acc[i][2 * p]);
      Vec::store(sums + 8, acc[i][2 * p + 1]);
      float* c_row = g.c + (m0 + i) * g.ldc + n0;
      for (int64_t j = 0; j < columns; ++j) {
        float sum = sums[j];
        if (g.bias != nullptr) sum += g.bias[n0 + j];
        c_row[j] = g.accumulate ? c_row[j] + sum : sum;
      }
    }
  }
}

using TileFn = void (*)(const strata::GemmArgs&, int64_t, int64_t);

// Register budget of 16 vectors: MR * 2 * NP accumulators + 2 * NP panel vectors + 1 broadcast.
// Many rows: 6 x 1 panel. One or two rows (decode): more panels at once, so enough independent
// accumulator chains hide the fmadd latency.
constexpr int kMR = 6;

// A GEMM over panels of one element type. With 16-bit panels, one or two rows (decode) read half
// the bytes, which is what bounds them; more rows widen each panel in every 6-row tile, which
// costs a compute-bound step (docs/benchmarks: cpu-forward-bf16.json).
template <class W>
void gemm_typed(const strata::GemmArgs& g, int64_t panel_begin, int64_t panel_end) {
  static constexpr std::array<TileFn, kMR> kRowTiles = {&gemm_tile<1, 1, W>, &gemm_tile<2, 1, W>, &gemm_tile<3, 1, W>,
                                                        &gemm_tile<4, 1, W>, &gemm_tile<5, 1, W>, &gemm_tile<6, 1, W>};
  if (g.m <= 2) {
    constexpr int kNP = 3;
    int64_t p = panel_begin;
    for (; p + kNP <= panel_end; p += kNP) (g.m == 1 ? gemm_tile<1, kNP, W> : gemm_tile<2, kNP, W>)(g, 0, p);
    for (; p < panel_end; ++p) (g.m == 1 ? gemm_tile<1, 1, W> : gemm_tile<2, 1, W>)(g, 0, p);
    return;
  }
  // Rows of A per pass: enough to reuse each panel from L1, few enough that A stays in L2.
  const int64_t m_block = std::max<int64_t>(kMR, ((192 * 1024) / (4 * std::max<int64_t>(g.w->k, 1))) / kMR * kMR);
  for (int64_t m_start = 0; m_start < g.m; m_start += m_block) {
    const int64_t m_end = std::min(g.m, m_start + m_block);
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      for (int64_t m = m_start; m < m_end; m += kMR) kRowTiles[std::min<int64_t>(kMR, m_end - m) - 1](g, m, p);
    }
  }
}

void gemm_impl(const strata::GemmArgs& g, int64_t panel_begin, int64_t panel_end) {
  switch (g.w->elem) {
    case strata::PackedWeights::Elem::kF32: gemm_typed<PanelF32>(g, panel_begin, panel_end); break;
    case strata::PackedWeights::Elem::kBF16: gemm_typed<PanelBF16>(g, panel_begin, panel_end); break;
    case strata::PackedWeights::Elem::kF16: gemm_typed<PanelF16>(g, panel_begin, panel_end); break;
  }
}

void silu_mul_impl(const float* gate, const float* up, float* out, int64_t n) {
  const Vec::T one = Vec::set1(1.0f), minus_one = Vec::set1(-1.0f);
  const auto block = [&](const float* g8, const float* u8, float* o8) {
    Vec::T g = Vec::load(g8);
    // silu(g) = g / (1 + exp(-g)), as torch computes it
    Vec::T silu = Vec::div(g, Vec::add(one, exp_poly<Vec>(Vec::mul(g, minus_one))));
    Vec::store(o8, Vec::mul(silu, Vec::load(u8)));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) block(gate + i, up + i, out + i);
  if (i < n) {
    float g8[8] = {}, u8[8] = {}, o8[8];
    std::copy(gate + i, gate + n, g8);
    std::copy(up + i, up + n, u8);
    block(g8, u8, o8);
    std::copy(o8, o8 + (n - i), out + i);
  }
}

// KV elements: floats, or IEEE halves (uint16_t) widened to floats as they are loaded (exactly:
// every half is a float), so the arithmetic after the load is the same for both.
inline Vec::T load_kv(const float* p) { return Vec::load(p); }
inline Vec::T load_kv(const uint16_t* p) { return Vec::load_half(p); }
inline Vec::T load_kv_tail(const float* p, int n) { return Vec::load_tail(p, n); }
inline Vec::T load_kv_tail(const uint16_t* p, int n) {
  uint16_t tail[8] = {};
  std::copy(p, p + n, tail);
  return Vec::load_half(tail);
}

// Attention, as small GEMMs. Scores of up to MR query rows against 16 keys at a time: each
// score is one accumulator lane updated by fmadd for d = 0, 1, ..., head_dim-1 in order, then
// scaled, whatever the tile or the block size. Keys are stored (head_dim, block_size) per block.
template <int MR, typename E>
void score_tile(const strata::AttendArgs& a, const float* const* q, int32_t context, float* const* scores) {
  const Vec::T vscale = Vec::set1(a.scale);
  const int32_t hd = a.head_dim, bs = a.block_size;
  const E* keys = static_cast<const E*>(a.keys);
  for (int32_t base = 0; base < context; base += bs) {
    const E* block = keys + a.block_table[base / bs] * a.block_stride;
    const int32_t in_block = std::min(bs, context - base);
    for (int32_t s = 0; s < in_block; s += 16) {
      const int cols = std::min(16, in_block - s);
      Vec::T acc[MR][2];
      for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = Vec::zero();
      const E* k = block + s;
      if (cols == 16) {
        for (int32_t d = 0; d < hd; ++d, k += bs) {
          const Vec::T k0 = load_kv(k), k1 = load_kv(k + 8);
          for (int i = 0; i < MR; ++i) {
            const Vec::T qd = Vec::set1(q[i][d]);
            acc[i][0] = Vec::fmadd(qd, k0, acc[i][0]);
            acc[i][1] = Vec::fmadd(qd, k1, acc[i][1]);
          }
        }
      } else {
        const int c0 = std::min(cols, 8), c1 = std::max(cols - 8, 0);
        for (int32_t d = 0; d < hd; ++d, k += bs) {
          const Vec::T k0 = load_kv_tail(k, c0), k1 = load_kv_tail(k + 8, c1);
          for (int i = 0; i < MR; ++i) {
            const Vec::T qd = Vec::set1(q[i][d]);
            acc[i][0] = Vec::fmadd(qd, k0, acc[i][0]);
            acc[i][1] = Vec::fmadd(qd, k1, acc[i][1]);
          }
        }
      }
      // Lanes past the block are stored too (as 0); the next block overwrites them and the
      // row has 16 floats of slack past its padded length.
      for (int i = 0; i < MR; ++i) {
        Vec::store(scores[i] + base + s, Vec::mul(acc[i][0], vscale));
        Vec::store(scores[i] + base + s + 8, Vec::mul(acc[i][1], vscale));
      }
    }
  }
}

// Scores [0, n) of one row -> softmax probabilities; [n, padded) -> 0. The sum runs in 8 lane
// partial sums in key order, then hsum: fixed for a given n.
void softmax_row(float* x, int64_t n, int64_t padded) {
  float max_score = -3.4e38f;
  for (int64_t i = 0; i < n; ++i) max_score = std::max(max_score, x[i]);
  const Vec::T vmax = Vec::set1(max_score);
  Vec::T sum = Vec::zero();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Vec::T e = exp_poly<Vec>(Vec::sub(Vec::load(x + i), vmax));
    Vec::store(x + i, e);
    sum = Vec::add(sum, e);
  }
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    float tail[8] = {};
    std::copy(x + i, x + n, tail);
    Vec::store(tail, exp_poly<Vec>(Vec::sub(Vec::load(tail), vmax)));
    std::copy(tail, tail + rest, x + i);
    sum = Vec::add(sum, Vec::load_tail(tail, rest));
  }
  const Vec::T inv = Vec::set1(1.0f / Vec::hsum(sum));
  // n <= padded and padded is a multiple of 16, so whole vectors stay inside the row.
  for (i = 0; i < n; i += 8) Vec::store(x + i, Vec::mul(Vec::load(x + i), inv));
  std::fill(x + n, x + padded, 0.0f);
}

// out rows = p rows * V over keys [0, context): each output element is one accumulator lane
// updated by fmadd for keys 0, 1, ..., in order. Probabilities past a row's own context are 0,
// and fmadd(0, v, acc) == acc exactly, so a row's result does not depend on its tile mates.
template <int MR, bool kFull, typename E>
void pv_tile(const strata::AttendArgs& a, const float* const* p, int32_t context, float* const* out) {
  const int32_t hd = a.head_dim;
  const E* values = static_cast<const E*>(a.values);
  for (int32_t j0 = 0; j0 < hd; j0 += 16) {
    const int cols = std::min(16, hd - j0);
    const int c0 = std::min(cols, 8), c1 = std::max(cols - 8, 0);
    Vec::T acc[MR][2];
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = Vec::zero();
    for (int32_t base = 0; base < context; base += a.block_size) {
      const E* v = values + a.block_table[base / a.block_size] * a.block_stride + j0;
      const int32_t in_block = std::min(a.block_size, context - base);
      for (int32_t s = 0; s < in_block; ++s, v += hd) {
        const Vec::T v0 = kFull ? load_kv(v) : load_kv_tail(v, c0);
        const Vec::T v1 = kFull ? load_kv(v + 8) : load_kv_tail(v + 8, c1);
        for (int i = 0; i < MR; ++i) {
          const Vec::T w = Vec::set1(p[i][base + s]);
          acc[i][0] = Vec::fmadd(w, v0, acc[i][0]);
          acc[i][1] = Vec::fmadd(w, v1, acc[i][1]);
        }
      }
    }
    for (int i = 0; i < MR; ++i) {
      if (kFull) {
        Vec::store(out[i] + j0, acc[i][0]);
        Vec::store(out[i] + j0 + 8, acc[i][1]);
      } else {
        float tmp[16];
        Vec::store(tmp, acc[i][0]);
        Vec::store(tmp + 8, acc[i][1]);
        std::copy(tmp, tmp + cols, out[i] + j0);
      }
    }
  }
}

template <int MR, typename E>
void attend_rows(const strata::AttendArgs& a, int64_t ld, float* probs, int32_t r0) {
  const int32_t hd = a.head_dim;
  const float* q[MR];
  float* out[MR];
  float* p[MR];
  for (int i = 0; i < MR; ++i) {
    const int32_t t = (r0 + i) / a.group, h = (r0 + i) % a.group;
    q[i] = a.q + t * a.q_stride + int64_t{h} * hd;
    out[i] = a.out + t * a.out_stride + int64_t{h} * hd;
    p[i] = probs + int64_t{r0 + i} * ld;
  }
  const int32_t last_context = a.context + (r0 + MR - 1) / a.group;
  score_tile<MR, E>(a, q, last_context, p);
  for (int i = 0; i < MR; ++i) softmax_row(p[i], a.context + (r0 + i) / a.group, strata::attend_padded(last_context));
  if (hd % 16 == 0) pv_tile<MR, true, E>(a, p, last_context, out);
  else pv_tile<MR, false, E>(a, p, last_context, out);
}

// Keys and values are visited block by block in position order; each head's scores, softmax
// and weighted sum of values follow one fixed order, whatever else is in the step.
template <typename E>
void attend_typed(const strata::AttendArgs& a) {
  const int32_t rows = a.tokens * a.group;
  const int64_t ld = strata::attend_padded(a.context + a.tokens - 1) + 16;
  float* probs = a.scratch;  // (rows, ld)
  constexpr int kAttMR = 4;
  int32_t r = 0;
  for (; r + kAttMR <= rows; r += kAttMR) attend_rows<kAttMR, E>(a, ld, probs, r);
  switch (rows - r) {
    case 1: attend_rows<1, E>(a, ld, probs, r); break;
    case 2: attend_rows<2, E>(a, ld, probs, r); break;
    case 3: attend_rows<3, E>(a, ld, probs, r); break;
    default: break;
  }
}

void to_half_impl(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Vec::store_half(dst + i, Vec::load(src + i));
  for (; i < n; ++i) dst[i] = strata::f32_to_f16(src[i]);
}

void from_half_impl(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Vec::store(dst + i, Vec::load_half(src + i));
  for (; i < n; ++i) dst[i] = strata::f16_to_f32(src[i]);
}

void attend_impl(const strata::AttendArgs& a) {
  if (a.kv_f16) attend_typed<uint16_t>(a);
  else attend_typed<float>(a);
}

}  // namespace
