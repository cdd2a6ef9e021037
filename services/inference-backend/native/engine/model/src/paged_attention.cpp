#include "paged_attention.h"

#include <algorithm>

namespace strata {

namespace {

// Queries per task: small enough to balance causal prefill work, large enough to amortise.
constexpr int32_t kQueryChunk = 16;

struct Task {
  int32_t slice;
  int32_t first_token;  // within the slice
  int32_t kv_head;
};

}  // namespace

void paged_attention(ThreadPool& pool, const CpuKernels& kernels, const KvCache& cache, int32_t layer,
                     const std::vector<AttentionSlice>& slices, const AttentionShape& shape, const float* q,
                     int64_t q_stride, float* out, int64_t out_stride) {
  std::vector<Task> tasks;
  for (int32_t s = 0; s < static_cast<int32_t>(slices.size()); ++s) {
    for (int32_t t = 0; t < slices[s].n_tokens; t += kQueryChunk) {
      for (int32_t g = 0; g < shape.num_kv_heads; ++g) tasks.push_back({s, t, g});
    }
  }
  const int32_t group = shape.num_heads / shape.num_kv_heads;  // query heads per kv head
  const int64_t block_stride = int64_t{shape.num_kv_heads} * cache.block_size() * shape.head_dim;
  pool.parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t index) {
    thread_local std::vector<float> scores;
    const Task& task = tasks[index];
    const AttentionSlice& slice = slices[task.slice];
    const int32_t last = std::min(slice.n_tokens, task.first_token + kQueryChunk);
    scores.resize(static_cast<size_t>(group) * (slice.start_pos + last));

    AttendArgs args;
    args.group = group;
    args.head_dim = shape.head_dim;
    args.scale = shape.scale;
    const int64_t head_offset = int64_t{task.kv_head} * cache.block_size() * shape.head_dim;  // inside a block
    args.keys = cache.keys(layer, 0) + head_offset;
    args.values = cache.values(layer, 0) + head_offset;
    args.block_stride = block_stride;
    args.block_size = cache.block_size();
    args.block_table = slice.block_table;
    args.scores = scores.data();
    for (int32_t t = task.first_token; t < last; ++t) {
      const int64_t row = slice.first_row + t;
      const int64_t first_head = int64_t{task.kv_head} * group;
      args.context = slice.start_pos + t + 1;  // causal: keys up to and including itself
      args.q = q + row * q_stride + first_head * shape.head_dim;
      args.out = out + row * out_stride + first_head * shape.head_dim;
      kernels.attend(args);
    }
  });
}

}  // namespace strata
