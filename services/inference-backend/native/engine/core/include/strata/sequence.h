// One request's state as the scheduler, block manager and sampler see it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "strata/constraint.h"
#include "strata/rng.h"
#include "strata/sampling_params.h"

namespace strata {

// kPreempted: lost its KV to make room; waits at the front of its class to recompute
// prompt + outputs.
enum class SeqStatus : uint8_t { kWaiting, kRunning, kPreempted, kFinished };
// kTimeout is never decided by the engine: the caller aborts with it. The numeric values
// cross the N-API boundary as-is.
enum class FinishReason : uint8_t { kNone = 0, kStop = 1, kLength = 2, kAbort = 3, kTimeout = 4 };

inline const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kTimeout: return "timeout";
    case FinishReason::kNone: break;
  }
  return "";
}

struct Sequence {
  Sequence(uint64_t request_id, std::vector<int32_t> prompt, SamplingParams sampling)
      : request_id(request_id),
        params(std::move(sampling)),
        rng(params.seed.value_or(0)),
        tokens(std::move(prompt)),
        num_prompt_tokens(static_cast<int32_t>(tokens.size())) {
    // Slices point into `tokens` until the step's forward has run: never reallocate.
    tokens.reserve(tokens.size() + static_cast<size_t>(params.max_tokens > 0 ? params.max_tokens : 0));
  }

  uint64_t request_id;
  uint64_t tenant_salt = 0;  // prefix-cache namespace: blocks are shared only within one salt
  int32_t priority = 0;      // lower = more urgent; FCFS by `arrival` within a priority
  uint64_t arrival = 0;      // submit order
  SamplingParams params;
  Rng rng;

  std::vector<int32_t> tokens;  // prompt, then outputs
  int32_t num_prompt_tokens;
  SeqStatus status = SeqStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t num_computed_tokens = 0;  // tokens [0, n) have K/V in the pool

  // Owned by BlockManager.
  std::vector<int32_t> block_table;  // physical block of tokens [i*block_size, (i+1)*block_size)
  int32_t num_hashed_blocks = 0;     // leading full, computed blocks whose chain hash is known
  uint64_t prefix_hash = 0;          // chain hash of block num_hashed_blocks - 1 (0 before block 0)
  // Owned by Scheduler: the last step this sequence was batched in.
  uint64_t scheduled_step = 0;
  // Owned by Engine: set the first time a step batches this sequence (StepOutput::scheduled).
  bool ever_scheduled = false;
  // Structured output: the grammar's state (null when unconstrained), and the allowed set of the
  // next token as the mask thread last computed it (ceil(vocab / 32) words; mask_ok false when
  // that computation failed).
  std::shared_ptr<TokenConstraint> constraint;
  std::vector<uint32_t> allowed;
  bool mask_ok = false;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  int32_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
  std::span<const int32_t> prompt() const { return {tokens.data(), static_cast<size_t>(num_prompt_tokens)}; }
  std::span<const int32_t> output() const {
    return {tokens.data() + num_prompt_tokens, static_cast<size_t>(num_output_tokens())};
  }
  void append_token(int32_t token) { tokens.push_back(token); }
};

}  // namespace strata
