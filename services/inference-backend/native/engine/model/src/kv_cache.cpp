#include "kv_cache.h"

#include <algorithm>
#include <cstring>

#include "strata/split_work.h"

namespace strata {

void KvCache::allocate(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_dim,
                       bool f16) {
  num_layers_ = num_layers;
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  num_kv_heads_ = num_kv_heads;
  head_dim_ = head_dim;
  f16_ = f16;
  block_elems_ = int64_t{num_kv_heads} * block_size * head_dim;
  // Zeroed (an unwritten slot must read as 0, not NaN) by threads of 64 MB or more: the pool is
  // a fraction of the machine's memory (4.9 GB for SmolLM2 on a 24 GB machine), and one thread
  // faulting its pages in took 1.8-5.7 s of a 2-core VM's load where the model took 0.1 s.
  // Every page is still touched here, so a pool the machine cannot hold fails at start.
  const int64_t bytes = int64_t{num_layers} * 2 * num_blocks * block_elems_ * element_bytes();
  storage_.clear();
  storage_.shrink_to_fit();
  storage_.resize(static_cast<size_t>(bytes));
  unsigned char* base = storage_.data();
  split_work(bytes, threads_for(bytes, int64_t{1} << 26), [base](int64_t first, int64_t last) {
    std::memset(base + first, 0, static_cast<size_t>(last - first));
  });
}

void KvCache::write(int32_t layer, int32_t block, int32_t slot, const float* k, const float* v, ToHalf to_half) {
  const int64_t kv_elems = int64_t{num_kv_heads_} * head_dim_;
  // K transposed per head, (head_dim, block_size): the attention kernel scores 16 keys per
  // vector pair. V rows as they are.
  const auto put = [&](auto* k_dst, auto* v_dst, const auto* k_src, const auto* v_src) {
    for (int32_t h = 0; h < num_kv_heads_; ++h) {
      const int64_t head = int64_t{h} * block_size_ * head_dim_;
      const auto* kh = k_src + int64_t{h} * head_dim_;
      for (int32_t d = 0; d < head_dim_; ++d) k_dst[head + int64_t{d} * block_size_ + slot] = kh[d];
      std::copy(v_src + int64_t{h} * head_dim_, v_src + int64_t{h + 1} * head_dim_, v_dst + head + int64_t{slot} * head_dim_);
    }
  };
  unsigned char* base = storage_.data();
  if (!f16_) {
    put(reinterpret_cast<float*>(base) + offset(layer, 0, block), reinterpret_cast<float*>(base) + offset(layer, 1, block),
        k, v);
    return;
  }
  thread_local std::vector<uint16_t> halves;
  halves.resize(static_cast<size_t>(2 * kv_elems));
  to_half(k, halves.data(), kv_elems);
  to_half(v, halves.data() + kv_elems, kv_elems);
  put(reinterpret_cast<uint16_t*>(base) + offset(layer, 0, block), reinterpret_cast<uint16_t*>(base) + offset(layer, 1, block),
      halves.data(), halves.data() + kv_elems);
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  const int64_t element = element_bytes();
  const size_t bytes = static_cast<size_t>(block_elems_ * element);
  for (int32_t layer = 0; layer < num_layers_; ++layer) {
    for (int kind = 0; kind < 2; ++kind) {
      std::memmove(storage_.data() + offset(layer, kind, dst) * element,
                   storage_.data() + offset(layer, kind, src) * element, bytes);
    }
  }
}

}  // namespace strata
