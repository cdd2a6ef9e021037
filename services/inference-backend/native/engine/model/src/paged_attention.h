// Causal attention of a step's queries against the paged KV cache. A slice's K/V for
// [0, start_pos + n_tokens) must already be in its blocks (earlier steps plus this one), so a
// prefill chunk sees the cached prefix and, causally, its own earlier tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu_kernels.h"
#include "kv_cache.h"
#include "thread_pool.h"

namespace strata {

struct AttentionSlice {
  int64_t first_row = 0;  // row of the slice's first token in the step's (tokens, ...) matrices
  int32_t n_tokens = 0;
  int32_t start_pos = 0;
  const int32_t* block_table = nullptr;
};

struct AttentionShape {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 0.0f;  // 1 / sqrt(head_dim)
};

// q: (tokens, num_heads, head_dim) with row stride q_stride floats; out: (tokens, num_heads *
// head_dim) with row stride out_stride. Parallel over (slice, query chunk, kv head).
void paged_attention(ThreadPool& pool, const CpuKernels& kernels, const KvCache& cache, int32_t layer,
                     const std::vector<AttentionSlice>& slices, const AttentionShape& shape, const float* q,
                     int64_t q_stride, float* out, int64_t out_stride);

}  // namespace strata
