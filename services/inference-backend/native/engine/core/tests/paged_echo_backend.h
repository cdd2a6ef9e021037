// TEST FIXTURE, not a model. A ModelBackend whose "KV cache" holds the token id written at each
// slot, and whose logits are a fixed function of the context it reads back through the block
// table. Any paging bug (wrong table, missed copy-on-write, false prefix hit, reuse of a block
// still in use) changes the context it sees and so the tokens, which the tests compare with
// next_token() applied to the true context.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "strata/model_backend.h"

class PagedEchoBackend : public strata::ModelBackend {
 public:
  enum class Rule { kSuccessor, kContextHash };  // (last + 1) % vocab, or a hash of the whole context

  PagedEchoBackend(int32_t vocab, Rule rule, std::vector<int32_t> eos = {}, int32_t max_positions = 4096)
      : rule_(rule) {
    config_.architecture = "PagedEchoBackend";
    config_.vocab_size = vocab;
    config_.max_position_embeddings = max_positions;
    config_.eos_token_ids = std::move(eos);
  }

  static int32_t next_token(Rule rule, const int32_t* ctx, int32_t n, int32_t vocab) {
    if (rule == Rule::kSuccessor) return (ctx[n - 1] + 1) % vocab;
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; ++i) h = (h ^ static_cast<uint64_t>(ctx[i] + 1)) * 1099511628211ull;
    return static_cast<int32_t>((h >> 33) % static_cast<uint64_t>(vocab));
  }

  const strata::ModelConfig& config() const override { return config_; }
  int64_t kv_bytes_per_block(int32_t block_size) const override { return 4LL * block_size; }
  void allocate_kv(int32_t num_blocks, int32_t block_size) override {
    num_blocks_ = num_blocks;
    block_size_ = block_size;
    slots_.assign(static_cast<size_t>(num_blocks) * block_size, -1);
    ++allocations;
  }

  void forward(const strata::StepBatch& batch, float* logits) override {
    ++forwards;
    written_.clear();
    for (const auto& s : batch.seqs) {  // writes first, as the contract says
      if (s.n_tokens < 1 || s.start_pos < 0 || static_cast<int64_t>(s.n_blocks) * block_size_ < s.start_pos + s.n_tokens) {
        fail("slice does not fit its block table");
        return;
      }
      for (int32_t i = 0; i < s.n_tokens; ++i) {
        int32_t* slot = at(s, s.start_pos + i);
        if (!slot) return;
        if (!written_.insert(slot).second) fail("two slices wrote one slot in a step");
        *slot = s.tokens[i];
      }
    }
    const int32_t v = config_.vocab_size;
    for (const auto& s : batch.seqs) {
      if (!s.want_logits) continue;
      ctx_.resize(static_cast<size_t>(s.start_pos + s.n_tokens));
      for (int32_t p = 0; p < s.start_pos + s.n_tokens; ++p) {
        const int32_t* slot = at(s, p);
        if (!slot) return;
        if (*slot < 0) fail("read a slot no forward wrote");
        ctx_[static_cast<size_t>(p)] = *slot;
      }
      const int32_t target = next_token(rule_, ctx_.data(), static_cast<int32_t>(ctx_.size()), v);
      for (int32_t t = 0; t < v; ++t) logits[t] = t == target ? 3.0f : -0.05f * static_cast<float>((t - target + v) % v);
      logits += v;
    }
  }

  void copy_block(int32_t src, int32_t dst) override {
    ++copies;
    std::copy_n(&slots_[static_cast<size_t>(src) * block_size_], block_size_, &slots_[static_cast<size_t>(dst) * block_size_]);
  }

  int64_t forwards = 0;
  int64_t copies = 0;
  int64_t allocations = 0;
  std::string error;  // the first contract violation seen; "" if none

 private:
  int32_t* at(const strata::SeqSlice& s, int32_t pos) {
    const int32_t b = s.block_table[pos / block_size_];
    if (b < 0 || b >= num_blocks_) {
      fail("block id out of range");
      return nullptr;
    }
    return &slots_[static_cast<size_t>(b) * block_size_ + pos % block_size_];
  }
  void fail(const char* what) {
    if (error.empty()) error = what;
  }

  strata::ModelConfig config_;
  Rule rule_;
  int32_t num_blocks_ = 0;
  int32_t block_size_ = 0;
  std::vector<int32_t> slots_;
  std::set<int32_t*> written_;
  std::vector<int32_t> ctx_;
};
