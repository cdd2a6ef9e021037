// The engine loop: step() = schedule -> backend forward -> postprocess (sample, append, stop).
// A backend that samples on its device (ModelBackend::samples_on_device) gets each row's
// sampling inputs with the forward, and the core only appends and stops.
// step() runs on one engine thread; submit(), abort(), stats() and wake() may be called from
// any thread (Node's) while it runs: commands wait in an inbox that step() drains first, so
// an abort frees its blocks within one step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "strata/block_manager.h"
#include "strata/mask_worker.h"
#include "strata/model_backend.h"
#include "strata/sampler.h"
#include "strata/scheduler.h"
#include "strata/sequence.h"

namespace strata {

struct EngineConfig {
  int32_t num_blocks = 0;  // KV pool size; the caller derives it from free memory x utilisation
  int32_t block_size = 16;               // tokens per KV block
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  int32_t max_model_len = 0;             // 0 = the model's max_position_embeddings
};

inline constexpr int32_t kMinPriority = -100;
inline constexpr int32_t kMaxPriority = 100;

struct Request {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingParams params;
  int32_t priority = 0;      // lower = more urgent
  uint64_t tenant_salt = 0;  // requests share prefix-cache blocks only with an equal salt
  // Structured output: every sampled token must be one this allows (constraint.h); the request
  // finishes with kStop when the grammar is complete. Null: unconstrained. Never share one between
  // two live requests: it is the state of one output.
  std::shared_ptr<TokenConstraint> constraint;
};

struct TokenEvent {
  uint64_t request_id;
  int32_t token;
  FinishReason finish_reason;  // kNone while the request continues; the stop/eos token is included
  bool has_logprob;            // params.logprobs >= 0
  float logprob;
  int32_t top_offset;          // top-n logprobs: StepOutput::top_logprobs[top_offset, +top_count)
  int32_t top_count;
};

struct FinishedRequest {
  uint64_t request_id;
  FinishReason reason;  // kAbort or kTimeout
};

// Each request finishes exactly once: in a TokenEvent with a finish_reason, or in `aborted`.
struct StepOutput {
  std::vector<TokenEvent> tokens;
  std::vector<TokenLogprob> top_logprobs;
  std::vector<FinishedRequest> aborted;
  // Requests batched for the first time ever in this step (a preempted request is not listed
  // again), and when this step's schedule() returned: queue time ends there.
  std::vector<uint64_t> scheduled;
  std::chrono::steady_clock::time_point scheduled_at{};
  // When this step's tokens were sampled (set when `tokens` is not empty): the engine's own
  // moment for each token, before any delivery to a client.
  std::chrono::steady_clock::time_point output_at{};
  // The forward pass of this step: tokens computed (prefill chunks + decodes) and sequences.
  int32_t num_batched_tokens = 0;
  int32_t num_batched_seqs = 0;
};

struct EngineStats {
  int32_t num_waiting = 0;  // includes preempted, and submitted but not yet drained
  int32_t num_running = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_free = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_cached = 0;
  double kv_usage = 0.0;  // used / total
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  // tokens
  int64_t prefix_cache_hits = 0;     // tokens
  int64_t num_steps = 0;
  int64_t finished_stop = 0;
  int64_t finished_length = 0;
  int64_t finished_abort = 0;
  int64_t finished_timeout = 0;
  // Structured output: masks computed, the time computing them (on the mask thread, overlapped
  // with the forward pass), the time steps waited for them after the forward, and sequences
  // ended because their constraint failed (finished as kAbort; expected to stay 0).
  int64_t constraint_masks = 0;
  double constraint_mask_seconds = 0.0;
  double constraint_wait_seconds = 0.0;
  int64_t constraint_errors = 0;
};

class Engine {
 public:
  // Throws EngineError: STRATA_INVALID_CONFIG for a bad setting, STRATA_KV_CAPACITY when
  // one max_model_len sequence cannot fit in num_blocks (the message says what fits).
  // Calls backend.allocate_kv(num_blocks, block_size).
  Engine(ModelBackend& backend, const EngineConfig& config);

  // Any thread. Validates now (throws EngineError); the request joins at the next step.
  void submit(Request request);
  // Any thread. reason is kAbort or kTimeout. False when the id is not live (unknown or
  // already reported finished); the request then finishes, or has finished, the other way.
  bool abort(uint64_t request_id, FinishReason reason = FinishReason::kAbort);
  // Any thread. Snapshot as of the end of the last step.
  EngineStats stats() const;
  // Engine thread: true at once when there is work, else sleeps until a submit, an abort,
  // wake() or the timeout; returns whether there is work now.
  bool wait_for_work(std::chrono::milliseconds timeout);
  // Any thread: ends a wait_for_work early (e.g. to shut the loop down).
  void wake();

  // Engine thread. An exception from the backend propagates and leaves the engine unusable
  // (blocks may be mid-copy): the caller fails every live request.
  StepOutput step();
  // Work left: running or waiting sequences, or commands not yet drained.
  bool has_unfinished() const;
  const EngineConfig& config() const { return config_; }
  const BlockManager& block_manager() const { return blocks_; }

 private:
  struct Command {
    bool is_abort;
    Request request;  // submit
    uint64_t id;      // abort
    FinishReason reason;
  };

  void drain_inbox(StepOutput& out);
  void postprocess(const ScheduledStep& step, StepOutput& out);
  // Samples rows [first, first + rows) of the step on the host from their logits (overwritten).
  void sample_rows(int32_t first, int32_t rows, float* logits);
  // The sampled token to the sequence's constraint; kStop once its grammar is complete, kAbort
  // (counted in constraint_errors) if the constraint fails.
  FinishReason commit_constraint(Sequence& seq, int32_t token, FinishReason reason);
  // One SamplingRow (plus penalty entries and stop ids) per slice with want_logits.
  void fill_sampling(const ScheduledStep& step);
  void add_sampling_masks(const ScheduledStep& step);
  void add_sampling_row(Sequence& seq);
  FinishReason stop_reason(const Sequence& seq, int32_t token) const;
  void count_finished(FinishReason reason);
  void publish(const StepOutput& out);

  ModelBackend& backend_;
  const EngineConfig config_;
  const int32_t vocab_size_;
  BlockManager blocks_;
  Scheduler scheduler_;
  Sampler sampler_;

  // Engine thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<Command> draining_;
  // Host sampling: the rows' logits come from the backend in chunks of kLogitsChunkRows (when it
  // chunks them; else logits_ holds every row) and are sampled as they come, into row_samples_.
  static constexpr int32_t kLogitsChunkRows = 32;
  std::vector<float> logits_;  // (rows, vocab_size), for a backend that does not chunk
  std::vector<Sequence*> logit_seqs_;      // this step's sequences that sample, in row order
  std::vector<SampleResult> row_samples_;  // host sampling's result per row
  SampleResult sample_;                    // a device-sampled row, as a SampleResult
  const bool device_sampling_;
  MaskWorker mask_worker_;
  std::vector<Sequence*> masked_;  // this step's constrained sequences that sample a token
  const size_t mask_words_;
  SamplingBatch sampling_;
  SampledBatch sampled_;
  std::vector<uint32_t> entry_stamp_;  // (vocab) penalty-entry scratch: the row that last saw each token
  std::vector<int32_t> entry_index_;   // (vocab) its entry's index in sampling_.penalty_entries
  uint32_t stamp_ = 0;
  std::mt19937_64 seed_source_;  // seeds requests that bring no seed
  uint64_t next_arrival_ = 0;
  EngineStats counters_;         // finished_* and num_steps accumulate here

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::vector<Command> inbox_;
  std::unordered_set<uint64_t> live_ids_;  // submitted and not yet reported finished
  bool woken_ = false;
  EngineStats stats_;
};

}  // namespace strata
