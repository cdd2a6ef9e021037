// Paged KV bookkeeping: which physical blocks each sequence's tokens live in, which blocks are
// free, and which still hold a reusable prefix. The backend owns the memory; this owns the ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/hash_index.h"

namespace strata {

struct Sequence;

// Copy-on-write order: the backend copies block src's K/V (all layers) into dst before the
// step's forward. Requests are issued in order and must run in order.
struct CopyRequest {
  int32_t src;
  int32_t dst;
};

// Every block is in exactly one state, so free + used + cached == total:
//   free   — no owner, no reusable content;
//   used   — ref_count > 0 sequences hold it in their tables;
//   cached — no owner, but it is a full block whose chain hash (parent hash, its tokens,
//            tenant salt) is registered, so a later prompt can reuse it. Cached blocks are
//            evicted for reuse in LRU order once the free pool is empty.
// Only full blocks whose K/V has been computed are registered (commit_computed), so a hit
// never reads K/V that a forward has not written yet.
// Prefix cache counters are in tokens (as vLLM): queries = tokens looked up at admission,
// hits = tokens of those that were not recomputed.
class BlockManager {
 public:
  BlockManager(int32_t num_blocks, int32_t block_size);

  // Admits a sequence that holds no blocks: reuses the longest registered run of its full
  // blocks, at most num_tokens - 1 tokens (the last token always runs, for its logits),
  // then allocates for up to max_new_tokens more tokens. Sets num_computed_tokens to the
  // reused length and returns the tokens allocated for; 0 (and no change) if they do not fit.
  int32_t admit(Sequence& seq, int32_t max_new_tokens, std::vector<CopyRequest>& copies);
  // Grows a running sequence's table to cover num_computed_tokens + num_new_tokens; a block
  // about to be written that others also hold is copied first. False, and no change, when
  // the pool is short.
  bool allocate_slots(Sequence& seq, int32_t num_new_tokens, std::vector<CopyRequest>& copies);
  bool can_allocate(const Sequence& seq, int32_t num_new_tokens) const;
  bool can_append(const Sequence& seq) const { return can_allocate(seq, 1); }
  // The most new tokens allocate_slots can take for seq right now.
  int32_t max_new_tokens(const Sequence& seq) const;
  // After a forward advanced num_computed_tokens: registers blocks that became full.
  void commit_computed(Sequence& seq);
  // child (same tokens) shares every block of parent; the first write copies (parallel sampling).
  void fork(const Sequence& parent, Sequence& child);
  // Releases the table last block first, so a sequence's tail is evicted before its prefix.
  void free(Sequence& seq);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_used_; }
  int32_t num_cached() const { return num_cached_; }
  int32_t ref_count(int32_t block) const { return blocks_[block].ref; }
  bool is_cached(int32_t block) const { return blocks_[block].state == State::kCached; }
  int64_t prefix_cache_queries() const { return queries_; }
  int64_t prefix_cache_hits() const { return hits_; }
  // "" when the accounting is consistent, else the first violation found. O(num_blocks).
  std::string check_invariants() const;

 private:
  enum class State : uint8_t { kFree, kUsed, kCached };

  int32_t blocks_needed(const Sequence& seq, int32_t num_new_tokens) const;
  int32_t num_available() const { return num_free() + num_cached_; }
  int32_t take_block();         // a free block, else the LRU cached one; ref_count becomes 1
  void acquire(int32_t block);  // one more holder of a used or cached block
  void release(int32_t block);
  int32_t lookup(uint64_t hash, uint64_t parent, uint64_t salt, const int32_t* tokens) const;
  void register_block(int32_t block, uint64_t hash, uint64_t parent, uint64_t salt, const int32_t* tokens);
  void unregister(int32_t block);
  void lru_push_back(int32_t block);
  void lru_remove(int32_t block);

  // One cache line's worth per block: what a step touches when it allocates, frees or hashes.
  struct Block {
    int32_t ref = 0;
    int32_t lru_prev = -1;  // cached blocks form a list, head = least recently freed
    int32_t lru_next = -1;
    State state = State::kFree;
    bool registered = false;   // its hash is in by_hash_ (full, computed, reusable)
    uint64_t hash = 0;         // valid while registered
    uint64_t parent_hash = 0;  // checked on a hit, with salt and the block's tokens
    uint64_t salt = 0;
  };

  int32_t num_blocks_;
  int32_t block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> tokens_;  // (num_blocks, block_size) token ids of registered blocks
  HashIndex by_hash_;
  std::vector<int32_t> free_;    // stack; lowest ids on top at start
  int32_t lru_head_ = -1;
  int32_t lru_tail_ = -1;
  int32_t num_used_ = 0;
  int32_t num_cached_ = 0;
  int64_t queries_ = 0;
  int64_t hits_ = 0;
  std::vector<int32_t> match_;  // admit's scratch: hit blocks in order
};

}  // namespace strata
