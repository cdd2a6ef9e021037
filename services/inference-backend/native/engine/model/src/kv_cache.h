// The paged KV pool of the CPU backend, fp32. Per layer, V holds
// (num_blocks, num_kv_heads, block_size, head_dim) floats and K the same with each head's
// keys transposed, (num_blocks, num_kv_heads, head_dim, block_size); one block of one layer is
// a contiguous slab of num_kv_heads * block_size * head_dim floats either way.
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

class KvCache {
 public:
  void allocate(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_dim);
  bool allocated() const { return !storage_.empty(); }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }

  // Slab of one block: keys (num_kv_heads, head_dim, block_size), values (num_kv_heads, block_size, head_dim).
  float* keys(int32_t layer, int32_t block) { return storage_.data() + offset(layer, 0, block); }
  float* values(int32_t layer, int32_t block) { return storage_.data() + offset(layer, 1, block); }
  const float* keys(int32_t layer, int32_t block) const { return storage_.data() + offset(layer, 0, block); }
  const float* values(int32_t layer, int32_t block) const { return storage_.data() + offset(layer, 1, block); }

  // Stores one token's k and v, each (num_kv_heads, head_dim), at `slot` of `block`.
  void write(int32_t layer, int32_t block, int32_t slot, const float* k, const float* v);
  void copy_block(int32_t src, int32_t dst);

  static int64_t bytes_per_block(int32_t num_layers, int32_t block_size, int32_t num_kv_heads, int32_t head_dim) {
    return int64_t{2} * num_layers * num_kv_heads * block_size * head_dim * int64_t{sizeof(float)};
  }

 private:
  int64_t offset(int32_t layer, int kind, int32_t block) const {
    return ((int64_t{layer} * 2 + kind) * num_blocks_ + block) * block_floats_;
  }

  std::vector<float> storage_;  // (num_layers, 2, num_blocks, num_kv_heads, block_size, head_dim)
  int32_t num_layers_ = 0, num_blocks_ = 0, block_size_ = 0, num_kv_heads_ = 0, head_dim_ = 0;
  int64_t block_floats_ = 0;    // num_kv_heads * block_size * head_dim
};

}  // namespace strata
