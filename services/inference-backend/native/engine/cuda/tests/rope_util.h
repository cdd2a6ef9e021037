// Shared by the kernel and quantized-GEMM checks: the heads' shape of a paged KV cache, RoPE's
// inverse frequencies, positions and slots, and RopeKvArgs over a fused q/k/v buffer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "check_util.h"

namespace strata::cuda::checks {

inline std::string shape_text(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (const auto& [name, value] : dims) s += (s.empty() ? "" : " ") + std::string(name) + "=" + std::to_string(value);
  return s;
}

struct KvShape {
  int32_t num_heads, num_kv_heads, head_dim, block_size, num_blocks;
};

// Element index of (block, kv head, offset, d) in one layer's K or V.
inline size_t kv_index(const KvShape& s, int64_t block, int32_t head, int32_t offset, int32_t d) {
  return ((size_t(block) * s.num_kv_heads + head) * s.block_size + offset) * s.head_dim + d;
}

// inv_freq as transformers computes it (float32), with Llama-3 scaling when factor > 0.
inline std::vector<float> inv_freq_for(int32_t head_dim, double theta, float factor) {
  std::vector<float> f(head_dim / 2);
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    f[i] = float(1.0 / std::pow(theta, double(2 * i) / head_dim));
    if (factor > 0.0f) {
      const double wavelen = 2.0 * M_PI / f[i], low = 8192.0 / 1.0, high = 8192.0 / 4.0;
      if (wavelen > low) f[i] = float(f[i] / factor);
      else if (wavelen >= high) {
        const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
        f[i] = float((1.0 - smooth) * f[i] / factor + smooth * f[i]);
      }
    }
  }
  return f;
}

// RopeKvArgs over a fused (n_tokens, q + 2 kv) buffer of row stride `stride`.
template <typename T>
RopeKvArgs qkv_rope_args(const KvShape& s, T* qkv, int64_t stride, int32_t n_tokens, const int32_t* positions,
                         const int32_t* slots, const float* inv_freq, T* k_cache, T* v_cache) {
  const int32_t q_width = s.num_heads * s.head_dim, kv_width = s.num_kv_heads * s.head_dim;
  RopeKvArgs a;
  a.dtype = dtype_of<T>();
  a.q = qkv;
  a.q_stride = stride;
  a.k = qkv + q_width;
  a.k_stride = stride;
  a.v = qkv + q_width + kv_width;
  a.v_stride = stride;
  a.positions = positions;
  a.slots = slots;
  a.inv_freq = inv_freq;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  a.n_tokens = n_tokens;
  a.num_heads = s.num_heads;
  a.num_kv_heads = s.num_kv_heads;
  a.head_dim = s.head_dim;
  a.block_size = s.block_size;
  return a;
}

// Positions (token 0 at 0 when zero_first, the rest random up to 131,071) and distinct random
// cache slots, token 1 a padding row (slot -1) whose K and V may reach no slot.
inline void rope_positions_slots(const KvShape& s, int32_t n_tokens, bool zero_first, std::vector<int32_t>& positions,
                          std::vector<int32_t>& slots) {
  positions.assign(size_t(n_tokens), 0);
  slots.assign(size_t(n_tokens), 0);
  std::vector<int32_t> free_slots(size_t(s.num_blocks) * s.block_size);
  std::iota(free_slots.begin(), free_slots.end(), 0);
  std::shuffle(free_slots.begin(), free_slots.end(), rng());
  for (int32_t t = 0; t < n_tokens; ++t) {
    positions[t] = t == 0 && zero_first ? 0 : random_int(0, 131071);
    slots[t] = t == 1 ? -1 : free_slots[t];
  }
}

// A fused q/k/v projection with RoPE against its two kernels, for m tokens of s's heads: token
// positions, cache slots (token 1, when there is one, a padding row) and inv_freq go to the
// device, then launch(rope, fused) runs twice, the reference (fused false: the projection into
// rope.q's buffer, then rope_write_kv) and the fused kernel, each into a poisoned (m, y_stride)
// buffer and poisoned caches. Says whether the buffers (padding columns included) are the same
// bytes, and whether both caches are, with the reference having written every real token's K.
struct QkvRopeComparison {
  bool buffer_same = false, caches_same = false;
};
template <typename T, typename F>
QkvRopeComparison compare_qkv_rope(const KvShape& s, int32_t m, int64_t y_stride, F&& launch) {
  std::vector<int32_t> positions, slots;
  rope_positions_slots(s, m, false, positions, slots);
  const std::vector<float> inv_freq = inv_freq_for(s.head_dim, 500000.0, 8.0f);
  const size_t cache_elems = size_t(s.num_blocks) * s.num_kv_heads * s.block_size * s.head_dim;
  DeviceBuffer<int32_t> d_pos{size_t(m)}, d_slots{size_t(m)};
  DeviceBuffer<float> d_freq(inv_freq.size());
  d_pos.upload(positions);
  d_slots.upload(slots);
  d_freq.upload(inv_freq);
  DeviceBuffer<T> ref_qkv(size_t(m) * y_stride), ref_k(cache_elems), ref_v(cache_elems);
  DeviceBuffer<T> got_qkv(size_t(m) * y_stride), got_k(cache_elems), got_v(cache_elems);
  auto run = [&](bool fused, DeviceBuffer<T>& qkv, DeviceBuffer<T>& k_cache, DeviceBuffer<T>& v_cache) {
    qkv.poison();
    k_cache.poison();
    v_cache.poison();
    launch(qkv_rope_args<T>(s, qkv.ptr, y_stride, m, d_pos.ptr, d_slots.ptr, d_freq.ptr, k_cache.ptr, v_cache.ptr),
           fused);
    STRATA_CK(cudaDeviceSynchronize());
  };
  run(false, ref_qkv, ref_k, ref_v);
  run(true, got_qkv, got_k, got_v);
  const auto same = [](const DeviceBuffer<T>& a, const DeviceBuffer<T>& b) {
    const std::vector<T> x = a.download(), y = b.download();
    return std::memcmp(x.data(), y.data(), sizeof(T) * x.size()) == 0;
  };
  size_t cached = 0;  // slots the reference wrote: the check must not pass on two untouched caches
  for (const T& e : ref_k.download()) cached += !is_poison(e);
  const size_t kv_width = size_t(s.num_kv_heads) * s.head_dim;
  return {same(ref_qkv, got_qkv),
          cached == size_t(m > 1 ? m - 1 : m) * kv_width && same(ref_k, got_k) && same(ref_v, got_v)};
}

}  // namespace strata::cuda::checks
