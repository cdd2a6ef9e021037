#include "strata/scheduler.h"

#include <algorithm>
#include <string>

#include "strata/errors.h"

namespace strata {
namespace {

bool more_urgent(const Sequence* a, const Sequence* b) {
  return a->priority != b->priority ? a->priority < b->priority : a->arrival < b->arrival;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks) : config_(config), blocks_(blocks) {
  if (config.max_num_batched_tokens < 1 || config.max_num_seqs < 1 || config.max_model_len < 2) {
    throw EngineError(errc::kInvalidConfig,
                      "scheduler needs max_num_batched_tokens >= 1, max_num_seqs >= 1, max_model_len >= 2");
  }
  running_.reserve(static_cast<size_t>(config.max_num_seqs));
}

void Scheduler::check_admissible(int32_t num_prompt_tokens, int32_t max_tokens) const {
  const int32_t limit = config_.max_model_len;
  if (num_prompt_tokens < 1) throw EngineError(errc::kInvalidParam, "prompt must contain at least one token");
  if (num_prompt_tokens >= limit) {
    throw EngineError(errc::kPromptTooLong, "prompt has " + std::to_string(num_prompt_tokens) +
                                                " tokens but max_model_len is " + std::to_string(limit) +
                                                "; the prompt must be shorter so at least one token can be generated");
  }
  if (static_cast<int64_t>(num_prompt_tokens) + max_tokens > limit) {
    throw EngineError(errc::kPromptTooLong,
                      "prompt (" + std::to_string(num_prompt_tokens) + " tokens) + max_tokens (" +
                          std::to_string(max_tokens) + ") = " +
                          std::to_string(static_cast<int64_t>(num_prompt_tokens) + max_tokens) +
                          " exceeds max_model_len " + std::to_string(limit) + "; max_tokens can be at most " +
                          std::to_string(limit - num_prompt_tokens));
  }
}

void Scheduler::add(Sequence& seq) {
  check_admissible(seq.num_prompt_tokens, seq.params.max_tokens);
  seq.status = SeqStatus::kWaiting;
  waiting_[seq.priority].push_back(&seq);
  ++num_waiting_;
}

const ScheduledStep& Scheduler::schedule() {
  ++step_id_;
  step_.batch.seqs.clear();
  step_.seqs.clear();
  step_.copies.clear();
  step_.num_tokens = step_.num_decodes = step_.num_logits = step_.num_preempted = 0;
  budget_ = config_.max_num_batched_tokens;

  // 1. Decodes. A victim is always at or after index i: everything before i is batched.
  for (size_t i = 0; i < running_.size() && budget_ > 0;) {
    Sequence& seq = *running_[i];
    if (seq.num_uncomputed_tokens() != 1) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!self_preempted && !blocks_.allocate_slots(seq, 1, step_.copies)) {
      const size_t victim = least_urgent_unscheduled();
      self_preempted = running_[victim] == &seq;
      preempt(victim);
    }
    if (self_preempted) continue;
    push_slice(seq, 1);
    ++i;
  }
  step_.num_decodes = static_cast<int32_t>(step_.seqs.size());

  // 2. Running prefills.
  for (size_t i = 0; i < running_.size() && budget_ > 0; ++i) {
    Sequence& seq = *running_[i];
    if (seq.scheduled_step == step_id_) continue;
    int32_t n = std::min(seq.num_uncomputed_tokens(), budget_);
    bool ok = blocks_.allocate_slots(seq, n, step_.copies);
    while (!ok) {
      const size_t victim = least_urgent_unscheduled();
      if (running_[victim] == &seq) break;
      preempt(victim);
      ok = blocks_.allocate_slots(seq, n, step_.copies);
    }
    if (!ok) {
      n = std::min(n, blocks_.max_new_tokens(seq));
      ok = n > 0 && blocks_.allocate_slots(seq, n, step_.copies);
    }
    if (ok) push_slice(seq, n);
  }

  // 3. Admissions.
  if (step_.num_preempted > 0) return step_;
  for (auto& [priority, queue] : waiting_) {
    while (!queue.empty()) {
      if (budget_ == 0 || num_running() >= config_.max_num_seqs) return step_;
      Sequence& seq = *queue.front();
      const int32_t n = blocks_.admit(seq, budget_, step_.copies);
      if (n == 0) return step_;
      queue.pop_front();
      --num_waiting_;
      seq.status = SeqStatus::kRunning;
      insert_running(seq);
      push_slice(seq, n);
    }
  }
  return step_;
}

void Scheduler::push_slice(Sequence& seq, int32_t n) {
  SeqSlice slice;
  slice.tokens = seq.tokens.data() + seq.num_computed_tokens;
  slice.n_tokens = n;
  slice.start_pos = seq.num_computed_tokens;
  slice.block_table = seq.block_table.data();
  slice.n_blocks = static_cast<int32_t>(seq.block_table.size());
  slice.want_logits = seq.num_computed_tokens + n == seq.num_tokens();
  step_.batch.seqs.push_back(slice);
  step_.seqs.push_back(&seq);
  step_.num_tokens += n;
  step_.num_logits += slice.want_logits;
  seq.scheduled_step = step_id_;
  budget_ -= n;
}

void Scheduler::on_forward_done() {
  for (size_t i = 0; i < step_.seqs.size(); ++i) {
    Sequence& seq = *step_.seqs[i];
    seq.num_computed_tokens += step_.batch.seqs[i].n_tokens;
    blocks_.commit_computed(seq);
  }
}

size_t Scheduler::least_urgent_unscheduled() const {
  size_t i = running_.size();
  while (i-- > 0) {
    if (running_[i]->scheduled_step != step_id_) return i;
  }
  return running_.size();  // unreachable: the caller itself is unscheduled
}

void Scheduler::preempt(size_t index) {
  Sequence& seq = *running_[index];
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  blocks_.free(seq);
  seq.num_computed_tokens = 0;
  seq.status = SeqStatus::kPreempted;
  waiting_[seq.priority].push_front(&seq);
  ++num_waiting_;
  ++num_preemptions_;
  ++step_.num_preempted;
}

void Scheduler::finish(Sequence& seq, FinishReason reason) {
  erase_running(seq);
  blocks_.free(seq);
  seq.status = SeqStatus::kFinished;
  seq.finish_reason = reason;
}

void Scheduler::abort(Sequence& seq, FinishReason reason) {
  switch (seq.status) {
    case SeqStatus::kWaiting:
    case SeqStatus::kPreempted: {
      auto& queue = waiting_[seq.priority];
      queue.erase(std::find(queue.begin(), queue.end(), &seq));
      --num_waiting_;
      break;
    }
    case SeqStatus::kRunning:
      erase_running(seq);
      blocks_.free(seq);
      break;
    case SeqStatus::kFinished:
      return;
  }
  seq.status = SeqStatus::kFinished;
  seq.finish_reason = reason;
}

void Scheduler::insert_running(Sequence& seq) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), &seq, more_urgent), &seq);
}

void Scheduler::erase_running(Sequence& seq) {
  const auto it = std::find(running_.begin(), running_.end(), &seq);
  if (it != running_.end()) running_.erase(it);
}

}  // namespace strata
