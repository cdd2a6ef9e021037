#include "strata/block_manager.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <stdexcept>

#include "strata/errors.h"
#include "strata/sequence.h"

namespace strata {
namespace {

uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Chain hash of one full block. Collisions are harmless: a hit also compares parent hash,
// salt and the block's tokens.
uint64_t hash_block(uint64_t parent, const int32_t* tokens, int32_t n, uint64_t salt) {
  uint64_t h = mix64(parent ^ mix64(salt + 0x9e3779b97f4a7c15ull));
  for (int32_t i = 0; i < n; ++i) h = mix64(h + static_cast<uint32_t>(tokens[i]));
  return h;
}

int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size), by_hash_(num_blocks > 0 ? num_blocks : 1) {
  if (num_blocks < 1 || block_size < 1) {
    throw EngineError(errc::kInvalidConfig, "BlockManager needs num_blocks >= 1 and block_size >= 1, got " +
                                                std::to_string(num_blocks) + " and " + std::to_string(block_size));
  }
  const size_t n = static_cast<size_t>(num_blocks);
  blocks_.resize(n);
  tokens_.assign(n * static_cast<size_t>(block_size), 0);
  free_.reserve(n);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockManager::admit(Sequence& seq, int32_t max_new_tokens, std::vector<CopyRequest>& copies) {
  assert(seq.block_table.empty());
  const int32_t bs = block_size_, len = seq.num_tokens();
  const int32_t* tokens = seq.tokens.data();
  match_.clear();
  uint64_t h = 0, parent_of_last = 0;
  for (int32_t i = 0; (i + 1) * bs <= len; ++i) {
    const uint64_t hi = hash_block(h, tokens + i * bs, bs, seq.tenant_salt);
    const int32_t b = lookup(hi, h, seq.tenant_salt, tokens + i * bs);
    if (b < 0) break;
    match_.push_back(b);
    parent_of_last = h;
    h = hi;
  }
  const int32_t hit = static_cast<int32_t>(match_.size());
  // tokens' capacity is prompt + max_tokens: the table never reallocates after this.
  seq.block_table.reserve(static_cast<size_t>(ceil_div(static_cast<int32_t>(seq.tokens.capacity()), bs)));
  const bool recompute_last = hit * bs == len && hit > 0;  // all cached: the last token still runs
  const int32_t computed = recompute_last ? len - 1 : hit * bs;
  const int32_t n = std::min(len - computed, max_new_tokens);
  if (n <= 0) return 0;

  int32_t from_cache = 0;  // hit blocks that leave the cached pool
  for (int32_t b : match_) from_cache += blocks_[b].state == State::kCached;
  const bool copy_last = recompute_last && blocks_[match_.back()].state == State::kUsed;
  const int32_t fresh = ceil_div(computed + n, bs) - hit;
  if (from_cache + copy_last + fresh > num_available()) return 0;

  for (int32_t b : match_) {
    acquire(b);
    seq.block_table.push_back(b);
  }
  seq.num_hashed_blocks = hit;
  seq.prefix_hash = h;
  if (recompute_last) {
    // Rewriting the last token's slot must not touch a block others read: copy it, or take
    // it out of the cache when this sequence is its only holder. Re-registered once computed.
    const int32_t b = match_.back();
    if (copy_last) {
      const int32_t c = take_block();
      copies.push_back({b, c});
      release(b);
      seq.block_table.back() = c;
    } else {
      unregister(b);
    }
    seq.num_hashed_blocks = hit - 1;
    seq.prefix_hash = parent_of_last;
  }
  for (int32_t k = 0; k < fresh; ++k) seq.block_table.push_back(take_block());
  seq.num_computed_tokens = computed;
  queries_ += len;
  hits_ += computed;
  return n;
}

int32_t BlockManager::blocks_needed(const Sequence& seq, int32_t num_new_tokens) const {
  const int32_t table = static_cast<int32_t>(seq.block_table.size());
  const int32_t end_block = ceil_div(seq.num_computed_tokens + num_new_tokens, block_size_);
  int32_t shared = 0;
  for (int32_t i = seq.num_computed_tokens / block_size_; i < std::min(table, end_block); ++i) {
    shared += blocks_[seq.block_table[i]].ref > 1;
  }
  return std::max(0, end_block - table) + shared;
}

bool BlockManager::can_allocate(const Sequence& seq, int32_t num_new_tokens) const {
  return blocks_needed(seq, num_new_tokens) <= num_available();
}

bool BlockManager::allocate_slots(Sequence& seq, int32_t num_new_tokens, std::vector<CopyRequest>& copies) {
  if (!can_allocate(seq, num_new_tokens)) return false;
  const int32_t table = static_cast<int32_t>(seq.block_table.size());
  const int32_t end_block = ceil_div(seq.num_computed_tokens + num_new_tokens, block_size_);
  for (int32_t i = seq.num_computed_tokens / block_size_; i < std::min(table, end_block); ++i) {
    const int32_t b = seq.block_table[i];
    if (blocks_[b].ref > 1) {
      const int32_t c = take_block();
      copies.push_back({b, c});
      release(b);
      seq.block_table[i] = c;
    }
  }
  for (int32_t i = table; i < end_block; ++i) seq.block_table.push_back(take_block());
  return true;
}

int32_t BlockManager::max_new_tokens(const Sequence& seq) const {
  const int32_t table = static_cast<int32_t>(seq.block_table.size());
  const int32_t first = seq.num_computed_tokens / block_size_;
  const int32_t copy = first < table && blocks_[seq.block_table[first]].ref > 1;
  if (num_available() < copy) return 0;
  const int32_t slack = table * block_size_ - seq.num_computed_tokens;
  return slack + (num_available() - copy) * block_size_;
}

void BlockManager::commit_computed(Sequence& seq) {
  const int32_t full = std::min(seq.num_computed_tokens / block_size_, static_cast<int32_t>(seq.block_table.size()));
  for (; seq.num_hashed_blocks < full; ++seq.num_hashed_blocks) {
    const int32_t* t = seq.tokens.data() + static_cast<size_t>(seq.num_hashed_blocks) * block_size_;
    const uint64_t h = hash_block(seq.prefix_hash, t, block_size_, seq.tenant_salt);
    const int32_t b = seq.block_table[seq.num_hashed_blocks];
    if (!blocks_[b].registered) register_block(b, h, seq.prefix_hash, seq.tenant_salt, t);
    seq.prefix_hash = h;
  }
}

void BlockManager::fork(const Sequence& parent, Sequence& child) {
  for (int32_t b : parent.block_table) acquire(b);
  child.block_table = parent.block_table;
  child.num_hashed_blocks = parent.num_hashed_blocks;
  child.prefix_hash = parent.prefix_hash;
  child.num_computed_tokens = parent.num_computed_tokens;
}

void BlockManager::free(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) release(*it);
  seq.block_table.clear();
  seq.num_hashed_blocks = 0;
  seq.prefix_hash = 0;
}

int32_t BlockManager::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    b = lru_head_;
    lru_remove(b);
    --num_cached_;
    unregister(b);
  } else {
    throw std::logic_error("BlockManager: take_block on an exhausted pool");
  }
  blocks_[b].state = State::kUsed;
  blocks_[b].ref = 1;
  ++num_used_;
  return b;
}

void BlockManager::acquire(int32_t b) {
  if (blocks_[b].state == State::kCached) {
    lru_remove(b);
    --num_cached_;
    blocks_[b].state = State::kUsed;
    ++num_used_;
  }
  ++blocks_[b].ref;
}

void BlockManager::release(int32_t b) {
  if (--blocks_[b].ref > 0) return;
  --num_used_;
  if (blocks_[b].registered) {
    blocks_[b].state = State::kCached;
    lru_push_back(b);
    ++num_cached_;
  } else {
    blocks_[b].state = State::kFree;
    free_.push_back(b);
  }
}

int32_t BlockManager::lookup(uint64_t hash, uint64_t parent, uint64_t salt, const int32_t* tokens) const {
  const int32_t b = by_hash_.find(hash);
  if (b < 0) return -1;
  const bool same = blocks_[b].parent_hash == parent && blocks_[b].salt == salt &&
                    std::memcmp(&tokens_[static_cast<size_t>(b) * block_size_], tokens,
                                sizeof(int32_t) * block_size_) == 0;
  return same ? b : -1;
}

void BlockManager::register_block(int32_t b, uint64_t hash, uint64_t parent, uint64_t salt, const int32_t* tokens) {
  if (!by_hash_.insert(hash, b)) return;  // same content already registered (a copy): stays private
  Block& block = blocks_[b];
  block.registered = true;
  block.hash = hash;
  block.parent_hash = parent;
  block.salt = salt;
  std::memcpy(&tokens_[static_cast<size_t>(b) * block_size_], tokens, sizeof(int32_t) * block_size_);
}

void BlockManager::unregister(int32_t b) {
  if (!blocks_[b].registered) return;
  by_hash_.erase(blocks_[b].hash);
  blocks_[b].registered = false;
}

void BlockManager::lru_push_back(int32_t b) {
  blocks_[b].lru_prev = lru_tail_;
  blocks_[b].lru_next = -1;
  if (lru_tail_ >= 0) blocks_[lru_tail_].lru_next = b; else lru_head_ = b;
  lru_tail_ = b;
}

void BlockManager::lru_remove(int32_t b) {
  const int32_t p = blocks_[b].lru_prev, n = blocks_[b].lru_next;
  if (p >= 0) blocks_[p].lru_next = n; else lru_head_ = n;
  if (n >= 0) blocks_[n].lru_prev = p; else lru_tail_ = p;
  blocks_[b].lru_prev = blocks_[b].lru_next = -1;
}

std::string BlockManager::check_invariants() const {
  auto fail = [](const std::string& what, int32_t b) { return what + " (block " + std::to_string(b) + ")"; };
  int32_t used = 0, cached = 0, free_count = 0;
  for (int32_t b = 0; b < num_blocks_; ++b) {
    switch (blocks_[b].state) {
      case State::kUsed:
        ++used;
        if (blocks_[b].ref <= 0) return fail("used block with ref_count <= 0", b);
        break;
      case State::kCached:
        ++cached;
        if (blocks_[b].ref != 0 || !blocks_[b].registered) return fail("cached block held or unregistered", b);
        break;
      case State::kFree:
        ++free_count;
        if (blocks_[b].ref != 0 || blocks_[b].registered) return fail("free block held or registered", b);
        break;
    }
    if (blocks_[b].registered) {
      if (by_hash_.find(blocks_[b].hash) != b) return fail("registered block missing from hash map", b);
    }
  }
  int32_t stray = -1;
  by_hash_.for_each([&](uint64_t h, int32_t b) {
    if (stray < 0 && (b >= num_blocks_ || !blocks_[b].registered || blocks_[b].hash != h)) stray = b;
  });
  if (stray >= 0) return fail("hash map entry for an unregistered block", stray);
  std::vector<uint8_t> seen(static_cast<size_t>(num_blocks_), 0);
  for (int32_t b : free_) {
    if (blocks_[b].state != State::kFree || seen[b]++) return fail("free list entry not free or repeated", b);
  }
  int32_t walked = 0;
  for (int32_t b = lru_head_, prev = -1; b >= 0; prev = b, b = blocks_[b].lru_next) {
    if (blocks_[b].state != State::kCached || blocks_[b].lru_prev != prev || ++walked > num_blocks_) {
      return fail("LRU list entry not cached or mislinked", b);
    }
  }
  if (used != num_used_ || cached != num_cached_ || walked != cached || free_count != num_free()) {
    return "counters disagree: used " + std::to_string(num_used_) + "/" + std::to_string(used) + ", cached " +
           std::to_string(num_cached_) + "/" + std::to_string(cached) + "/" + std::to_string(walked) + ", free " +
           std::to_string(num_free()) + "/" + std::to_string(free_count);
  }
  if (num_free() + num_used_ + num_cached_ != num_blocks_) return "free + used + cached != total";
  return "";
}

}  // namespace strata
