#include "kv_cache.h"

#include <algorithm>

namespace strata {

void KvCache::allocate(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_dim) {
  num_layers_ = num_layers;
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  num_kv_heads_ = num_kv_heads;
  head_dim_ = head_dim;
  block_floats_ = int64_t{num_kv_heads} * block_size * head_dim;
  storage_.assign(static_cast<size_t>(int64_t{num_layers} * 2 * num_blocks * block_floats_), 0.0f);
}

void KvCache::write(int32_t layer, int32_t block, int32_t slot, const float* k, const float* v) {
  float* k_dst = keys(layer, block);
  float* v_dst = values(layer, block);
  for (int32_t h = 0; h < num_kv_heads_; ++h) {
    const int64_t head = int64_t{h} * block_size_ * head_dim_;
    // K transposed, (head_dim, block_size): the attention kernel scores 16 keys per vector pair.
    for (int32_t d = 0; d < head_dim_; ++d) k_dst[head + int64_t{d} * block_size_ + slot] = k[int64_t{h} * head_dim_ + d];
    std::copy(v + int64_t{h} * head_dim_, v + int64_t{h + 1} * head_dim_, v_dst + head + int64_t{slot} * head_dim_);
  }
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  for (int32_t layer = 0; layer < num_layers_; ++layer) {
    std::copy(keys(layer, src), keys(layer, src) + block_floats_, keys(layer, dst));
    std::copy(values(layer, src), values(layer, src) + block_floats_, values(layer, dst));
  }
}

}  // namespace strata
