// The paged KV pool of the CPU backend, in fp32 or IEEE half (f16) elements. Per layer, V holds
// (num_blocks, num_kv_heads, block_size, head_dim) elements and K the same with each head's
// keys transposed, (num_blocks, num_kv_heads, head_dim, block_size); one block of one layer is
// a contiguous slab of num_kv_heads * block_size * head_dim elements either way. f16 halves the
// bytes attention reads per step and the memory per block; values are rounded to nearest on
// the way in (as llama.cpp's default f16 cache), widened exactly on the way out.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/quant.h"  // ByteBuffer

namespace strata {

class KvCache {
 public:
  void allocate(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_dim,
                bool f16);
  bool allocated() const { return !storage_.empty(); }
  bool f16() const { return f16_; }
  static int64_t element_bytes(bool f16) { return f16 ? 2 : 4; }
  int64_t element_bytes() const { return element_bytes(f16_); }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }

  // Slab of one block (floats, or halves when f16()): keys (num_kv_heads, head_dim, block_size),
  // values (num_kv_heads, block_size, head_dim).
  const void* keys(int32_t layer, int32_t block) const { return storage_.data() + offset(layer, 0, block) * element_bytes(); }
  const void* values(int32_t layer, int32_t block) const { return storage_.data() + offset(layer, 1, block) * element_bytes(); }

  // Stores one token's k and v, each (num_kv_heads, head_dim), at `slot` of `block`; an f16
  // pool converts them with `to_half` (CpuKernels::to_half: F16C where the CPU has it).
  using ToHalf = void (*)(const float* src, uint16_t* dst, int64_t n);
  void write(int32_t layer, int32_t block, int32_t slot, const float* k, const float* v, ToHalf to_half);
  void copy_block(int32_t src, int32_t dst);

  static int64_t bytes_per_block(int32_t num_layers, int32_t block_size, int32_t num_kv_heads, int32_t head_dim,
                                 bool f16) {
    return int64_t{2} * num_layers * num_kv_heads * block_size * head_dim * element_bytes(f16);
  }

 private:
  int64_t offset(int32_t layer, int kind, int32_t block) const {  // in elements
    return ((int64_t{layer} * 2 + kind) * num_blocks_ + block) * block_elems_;
  }

  ByteBuffer storage_;  // (num_layers, 2, num_blocks, num_kv_heads, block_size, head_dim) elements
  bool f16_ = false;
  int32_t num_layers_ = 0, num_blocks_ = 0, block_size_ = 0, num_kv_heads_ = 0, head_dim_ = 0;
  int64_t block_elems_ = 0;             // num_kv_heads * block_size * head_dim
};

}  // namespace strata
