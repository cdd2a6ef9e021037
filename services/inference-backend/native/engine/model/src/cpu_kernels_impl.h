// Kernel bodies shared by the AVX2 and portable builds; included once by each, after it
// defines `struct Vec` (8 float lanes: zero, set1, load, load_tail, store, fmadd, add, sub,
// mul, div, min, max, floor, pow2i, hsum). Everything here is TU-local, since the two builds
// use different compiler flags.
//
// Determinism: every output element is computed by one fixed sequence of operations whatever
// tile shape computes it, so a row's result does not depend on the other rows of the batch,
// the tile it lands in, or the thread that runs it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "cpu_kernels.h"

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

// MR activation rows x NP weight panels (16 columns each, two vectors). Each output element is
// one accumulator lane updated by fmadd for k = 0, 1, ..., K-1 in order, whatever the tile.
template <int MR, int NP>
void gemm_tile(const strata::GemmArgs& g, int64_t m0, int64_t panel0) {
  constexpr int64_t P = strata::PackedWeights::kPanel;
  const int64_t K = g.w->k;
  Vec::T acc[MR][2 * NP];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < 2 * NP; ++j) acc[i][j] = Vec::zero();
  const float* panel[NP];
  for (int p = 0; p < NP; ++p) panel[p] = g.w->panels.data() + (panel0 + p) * K * P;
  const float* a_row[MR];
  for (int i = 0; i < MR; ++i) a_row[i] = g.a + (m0 + i) * g.lda;

  for (int64_t k = 0; k < K; ++k) {
    Vec::T b[2 * NP];
    for (int p = 0; p < NP; ++p) {
      b[2 * p] = Vec::load(panel[p] + k * P);
      b[2 * p + 1] = Vec::load(panel[p] + k * P + 8);
    }
    for (int i = 0; i < MR; ++i) {
      const Vec::T a = Vec::set1(a_row[i][k]);
      for (int j = 0; j < 2 * NP; ++j) acc[i][j] = Vec::fmadd(a, b[j], acc[i][j]);
    }
  }

  for (int p = 0; p < NP; ++p) {
    const int64_t n0 = (panel0 + p) * P;
    const int64_t columns = std::min<int64_t>(P, g.w->n - n0);
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
constexpr std::array<TileFn, kMR> kRowTiles = {&gemm_tile<1, 1>, &gemm_tile<2, 1>, &gemm_tile<3, 1>,
                                               &gemm_tile<4, 1>, &gemm_tile<5, 1>, &gemm_tile<6, 1>};

void gemm_impl(const strata::GemmArgs& g, int64_t panel_begin, int64_t panel_end) {
  if (g.m <= 2) {
    constexpr int kNP = 3;
    int64_t p = panel_begin;
    for (; p + kNP <= panel_end; p += kNP) (g.m == 1 ? gemm_tile<1, kNP> : gemm_tile<2, kNP>)(g, 0, p);
    for (; p < panel_end; ++p) (g.m == 1 ? gemm_tile<1, 1> : gemm_tile<2, 1>)(g, 0, p);
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

void axpy_impl(float alpha, const float* x, float* y, int64_t n) {
  const Vec::T va = Vec::set1(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Vec::store(y + i, Vec::fmadd(va, Vec::load(x + i), Vec::load(y + i)));
  for (; i < n; ++i) {
    // The tail goes through the same vector op so every element rounds alike.
    float xs[8] = {x[i]}, ys[8] = {y[i]};
    Vec::store(ys, Vec::fmadd(va, Vec::load(xs), Vec::load(ys)));
    y[i] = ys[0];
  }
}

float exp_shifted_sum_impl(float* x, int64_t n, float shift) {
  const Vec::T vs = Vec::set1(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Vec::store(x + i, exp_poly<Vec>(Vec::sub(Vec::load(x + i), vs)));
  if (i < n) {
    float tail[8] = {};
    const int rest = static_cast<int>(n - i);
    std::copy(x + i, x + n, tail);
    Vec::store(tail, exp_poly<Vec>(Vec::sub(Vec::load(tail), vs)));
    std::copy(tail, tail + rest, x + i);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += x[j];
  return sum;
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

// Keys and values are visited block by block in position order; each head's scores, softmax
// and weighted sum of values follow one fixed order, whatever else is in the step.
void attend_impl(const strata::AttendArgs& a) {
  const int32_t hd = a.head_dim, group = a.group;
  constexpr int kMaxGroup = 16;  // heads per kv head handled per pass
  for (int32_t h0 = 0; h0 < group; h0 += kMaxGroup) {
    const int32_t heads = std::min(kMaxGroup, group - h0);
    float max_score[kMaxGroup];
    for (int32_t h = 0; h < heads; ++h) max_score[h] = -3.4e38f;
    for (int32_t base = 0; base < a.context; base += a.block_size) {
      const float* block = a.keys + a.block_table[base / a.block_size] * a.block_stride;
      const int32_t in_block = std::min(a.block_size, a.context - base);
      for (int32_t s = 0; s < in_block; ++s) {
        const float* key = block + int64_t{s} * hd;
        for (int32_t h = 0; h < heads; ++h) {
          const float* q = a.q + int64_t{h0 + h} * hd;
          Vec::T acc = Vec::zero();
          int32_t d = 0;
          for (; d + 8 <= hd; d += 8) acc = Vec::fmadd(Vec::load(q + d), Vec::load(key + d), acc);
          if (d < hd) acc = Vec::fmadd(Vec::load_tail(q + d, hd - d), Vec::load_tail(key + d, hd - d), acc);
          const float score = Vec::hsum(acc) * a.scale;
          a.scores[int64_t{h} * a.context + base + s] = score;
          max_score[h] = std::max(max_score[h], score);
        }
      }
    }
    float inv_sum[kMaxGroup];
    for (int32_t h = 0; h < heads; ++h) {
      inv_sum[h] = 1.0f / exp_shifted_sum_impl(a.scores + int64_t{h} * a.context, a.context, max_score[h]);
      std::fill(a.out + int64_t{h0 + h} * hd, a.out + int64_t{h0 + h + 1} * hd, 0.0f);
    }
    for (int32_t base = 0; base < a.context; base += a.block_size) {
      const float* block = a.values + a.block_table[base / a.block_size] * a.block_stride;
      const int32_t in_block = std::min(a.block_size, a.context - base);
      for (int32_t s = 0; s < in_block; ++s) {
        const float* value = block + int64_t{s} * hd;
        for (int32_t h = 0; h < heads; ++h) {
          axpy_impl(a.scores[int64_t{h} * a.context + base + s] * inv_sum[h], value, a.out + int64_t{h0 + h} * hd, hd);
        }
      }
    }
  }
}

}  // namespace
