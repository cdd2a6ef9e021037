// Iteration-level continuous batching: each step() picks which sequences run and how many
// tokens each, under a token budget, a sequence cap and the KV pool.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "strata/block_manager.h"
#include "strata/model_backend.h"
#include "strata/sequence.h"

namespace strata {

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 2048;  // tokens per step, decodes + prefill chunks
  int32_t max_num_seqs = 256;             // sequences running (holding KV) at once
  int32_t max_model_len = 2048;           // prompt + output tokens of one sequence
};

// One step's plan. Slices point into sequence-owned tokens and block tables and stay valid
// until the next schedule(), provided tokens are appended only after the forward.
struct ScheduledStep {
  StepBatch batch;                  // decodes first, then prefill chunks
  std::vector<Sequence*> seqs;      // batch order, parallel to batch.seqs
  std::vector<CopyRequest> copies;  // copy-on-write, to run in order before the forward
  int32_t num_tokens = 0;
  int32_t num_decodes = 0;
  int32_t num_logits = 0;           // slices with want_logits: rows of the forward's logits
  int32_t num_preempted = 0;
};

// Policy, in order, each step:
//  1. running sequences with one token left to compute (decodes), most urgent first;
//  2. running sequences mid-prefill (chunked: as much as the budget leaves);
//  3. waiting sequences, priority classes ascending, FCFS inside a class, stopping at the
//     first that does not fit (no overtaking), and not at all in a step that preempted.
// Urgency = (priority ascending, arrival ascending). When a running sequence needs a block
// and none is left, the least urgent running sequence not yet batched this step is preempted
// by recompute: its blocks are freed, num_computed_tokens reset, and it waits at the front of
// its class. A mid-prefill sequence never preempts itself; it runs a smaller chunk or waits.
class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockManager& blocks);

  // Admission rule; reads only the config, so any thread may call it. Throws EngineError
  // STRATA_PROMPT_TOO_LONG naming the numbers, or STRATA_INVALID_PARAM for an empty prompt.
  void check_admissible(int32_t num_prompt_tokens, int32_t max_tokens) const;
  // Queues seq (checked as above). seq must outlive its time in the scheduler.
  void add(Sequence& seq);
  const ScheduledStep& schedule();
  // After the forward: advances num_computed_tokens of every batched sequence and registers
  // newly full blocks for prefix caching.
  void on_forward_done();
  // Running -> finished; frees its blocks.
  void finish(Sequence& seq, FinishReason reason);
  // Any state -> finished, blocks freed now. Not between schedule() and on_forward_done().
  void abort(Sequence& seq, FinishReason reason = FinishReason::kAbort);

  int32_t num_waiting() const { return num_waiting_; }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  bool has_unfinished() const { return num_waiting_ > 0 || !running_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const std::vector<Sequence*>& running() const { return running_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  void push_slice(Sequence& seq, int32_t num_tokens);
  size_t least_urgent_unscheduled() const;
  void preempt(size_t running_index);
  void insert_running(Sequence& seq);
  void erase_running(Sequence& seq);

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::vector<Sequence*> running_;  // sorted most urgent first
  std::map<int32_t, std::deque<Sequence*>> waiting_;  // by priority; empty queues are kept
  int32_t num_waiting_ = 0;
  int64_t num_preemptions_ = 0;
  uint64_t step_id_ = 0;
  int32_t budget_ = 0;
  ScheduledStep step_;
};

}  // namespace strata
