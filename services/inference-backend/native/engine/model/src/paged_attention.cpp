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
    thread_local std::vector<float> scratch;
    const Task& task = tasks[index];
    const AttentionSlice& slice = slices[task.slice];
    const int32_t last = std::min(slice.n_tokens, task.first_token + kQueryChunk);
    const int32_t tokens = last - task.first_token;
    const size_t need = static_cast<size_t>(
        attend_scratch_floats(int64_t{tokens} * group, shape.head_dim, int64_t{slice.start_pos} + last));
    if (scratch.size() < need) scratch.resize(need);

    AttendArgs args;
    args.group = group;
    args.head_dim = shape.head_dim;
    args.scale = shape.scale;
    // This kv head's slab inside a block, in bytes.
    const int64_t head_offset = int64_t{task.kv_head} * cache.block_size() * shape.head_dim * cache.element_bytes();
    args.keys = static_cast<const unsigned char*>(cache.keys(layer, 0)) + head_offset;
    args.values = static_cast<const unsigned char*>(cache.values(layer, 0)) + head_offset;
    args.kv_f16 = cache.f16();
    args.block_stride = block_stride;
    args.block_size = cache.block_size();
    args.block_table = slice.block_table;
    args.scratch = scratch.data();
    const int64_t row = slice.first_row + task.first_token;
    const int64_t first_head = int64_t{task.kv_head} * group;
    args.tokens = tokens;
    args.context = slice.start_pos + task.first_token + 1;  // causal: keys up to and including itself
    args.q = q + row * q_stride + first_head * shape.head_dim;
    args.q_stride = q_stride;
    args.out = out + row * out_stride + first_head * shape.head_dim;
    args.out_stride = out_stride;
    kernels.attend(args);
  });
}

}  // namespace strata
