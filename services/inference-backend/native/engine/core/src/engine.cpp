#include "strata/engine.h"

#include <algorithm>
#include <string>

#include "strata/errors.h"

namespace strata {
namespace {

EngineConfig checked(EngineConfig c, const ModelConfig& model) {
  auto bad = [](const std::string& what) { throw EngineError(errc::kInvalidConfig, what); };
  if (model.vocab_size < 1) bad("model vocab_size must be >= 1, got " + std::to_string(model.vocab_size));
  if (c.block_size < 1) bad("block_size must be >= 1, got " + std::to_string(c.block_size));
  if (c.num_blocks < 1) bad("num_blocks must be >= 1, got " + std::to_string(c.num_blocks));
  if (c.max_num_seqs < 1) bad("max_num_seqs must be >= 1, got " + std::to_string(c.max_num_seqs));
  if (c.max_num_batched_tokens < 1) {
    bad("max_num_batched_tokens must be >= 1, got " + std::to_string(c.max_num_batched_tokens));
  }
  if (c.max_model_len == 0) c.max_model_len = model.max_position_embeddings;
  if (c.max_model_len < 2) bad("max_model_len must be >= 2, got " + std::to_string(c.max_model_len));
  if (model.max_position_embeddings > 0 && c.max_model_len > model.max_position_embeddings) {
    bad("max_model_len " + std::to_string(c.max_model_len) + " exceeds the model's max_position_embeddings " +
        std::to_string(model.max_position_embeddings));
  }
  const int64_t needed = (static_cast<int64_t>(c.max_model_len) + c.block_size - 1) / c.block_size;
  if (needed > c.num_blocks) {
    const int64_t fits = static_cast<int64_t>(c.num_blocks) * c.block_size;
    throw EngineError(errc::kKvCapacity,
                      "max_model_len " + std::to_string(c.max_model_len) + " needs " + std::to_string(needed) +
                          " KV blocks of " + std::to_string(c.block_size) + " tokens, but the pool has " +
                          std::to_string(c.num_blocks) + " blocks (" + std::to_string(fits) +
                          " tokens); set max_model_len <= " + std::to_string(fits) +
                          " or give the KV cache more memory");
  }
  return c;
}

}  // namespace

Engine::Engine(ModelBackend& backend, const EngineConfig& config)
    : backend_(backend),
      config_(checked(config, backend.config())),
      vocab_size_(backend.config().vocab_size),
      blocks_(config_.num_blocks, config_.block_size),
      scheduler_({config_.max_num_batched_tokens, config_.max_num_seqs, config_.max_model_len}, blocks_),
      sampler_(vocab_size_, backend.config().eos_token_ids),
      device_sampling_(backend.samples_on_device()),
      mask_words_((static_cast<size_t>(backend.config().vocab_size) + 31) / 32),
      seed_source_(std::random_device{}()) {
  static_assert(kMaxLogprobs == kMaxSampledTop, "a device sampler returns up to kMaxLogprobs top entries");
  backend_.allocate_kv(config_.num_blocks, config_.block_size);
  publish(StepOutput{});
}

void Engine::submit(Request request) {
  validate(request.params, vocab_size_);
  // The scheduler keeps a queue per priority value it has seen, so the range stays small.
  if (request.priority < kMinPriority || request.priority > kMaxPriority) {
    throw EngineError(errc::kInvalidParam, "priority must be in [" + std::to_string(kMinPriority) + ", " +
                                               std::to_string(kMaxPriority) + "], got " + std::to_string(request.priority));
  }
  scheduler_.check_admissible(static_cast<int32_t>(request.prompt.size()), request.params.max_tokens);
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t t = request.prompt[i];
    if (t < 0 || t >= vocab_size_) {
      throw EngineError(errc::kInvalidParam, "prompt[" + std::to_string(i) + "] must be in [0, vocab_size=" +
                                                 std::to_string(vocab_size_) + "), got " + std::to_string(t));
    }
  }
  {
    std::lock_guard lock(mu_);
    if (!live_ids_.insert(request.id).second) {
      throw EngineError(errc::kDuplicateRequest, "request id " + std::to_string(request.id) + " is already running");
    }
    const uint64_t id = request.id;
    inbox_.push_back({false, std::move(request), id, FinishReason::kNone});
  }
  cv_.notify_one();
}

bool Engine::abort(uint64_t request_id, FinishReason reason) {
  if (reason != FinishReason::kAbort && reason != FinishReason::kTimeout) {
    throw EngineError(errc::kInvalidParam, "abort reason must be abort or timeout");
  }
  {
    std::lock_guard lock(mu_);
    if (!live_ids_.contains(request_id)) return false;
    inbox_.push_back({true, {}, request_id, reason});
  }
  cv_.notify_one();
  return true;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool Engine::has_unfinished() const {
  if (scheduler_.has_unfinished()) return true;
  std::lock_guard lock(mu_);
  return !inbox_.empty();
}

bool Engine::wait_for_work(std::chrono::milliseconds timeout) {
  if (scheduler_.has_unfinished()) return true;
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !inbox_.empty() || woken_; });
  woken_ = false;
  return !inbox_.empty();
}

void Engine::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

StepOutput Engine::step() {
  StepOutput out;
  drain_inbox(out);
  const ScheduledStep& step = scheduler_.schedule();
  if (!step.seqs.empty()) {
    out.scheduled_at = std::chrono::steady_clock::now();
    out.num_batched_tokens = step.num_tokens;
    out.num_batched_seqs = static_cast<int32_t>(step.seqs.size());
    for (Sequence* seq : step.seqs) {
      if (seq->ever_scheduled) continue;
      seq->ever_scheduled = true;
      out.scheduled.push_back(seq->request_id);
    }
    for (const CopyRequest& c : step.copies) backend_.copy_block(c.src, c.dst);
    // Constrained sequences' masks are computed on the mask thread while the forward runs; a
    // device sampler gets them through await_masks, which the backend calls once the forward
    // is queued.
    masked_.clear();
    for (size_t i = 0; i < step.seqs.size(); ++i) {
      if (step.batch.seqs[i].want_logits && step.seqs[i]->constraint) masked_.push_back(step.seqs[i]);
    }
    if (!masked_.empty()) mask_worker_.start(masked_, mask_words_);
    bool masks_awaited = masked_.empty();
    const auto await_masks = [&] {
      if (masks_awaited) return;
      masks_awaited = true;
      counters_.constraint_wait_seconds += static_cast<double>(mask_worker_.wait()) * 1e-9;
      counters_.constraint_masks = mask_worker_.masks();
      counters_.constraint_mask_seconds = static_cast<double>(mask_worker_.compute_ns()) * 1e-9;
    };
    try {
      if (device_sampling_) {
        fill_sampling(step);
        if (!masked_.empty()) {
          sampling_.await_masks = [&] {
            await_masks();
            add_sampling_masks(step);
          };
        }
        backend_.forward_sample(step.batch, sampling_, sampled_);
        sampling_.await_masks = nullptr;  // it refers to this step's locals
      } else {
        // Sampled as the logits come (a chunking backend never holds all rows at once); the
        // masks are awaited before the first row is sampled.
        logit_seqs_.clear();
        for (size_t i = 0; i < step.seqs.size(); ++i) {
          if (step.batch.seqs[i].want_logits) logit_seqs_.push_back(step.seqs[i]);
        }
        if (row_samples_.size() < logit_seqs_.size()) row_samples_.resize(logit_seqs_.size());
        const auto consume = [&](int32_t first, int32_t rows, float* logits) {
          await_masks();
          sample_rows(first, rows, logits);
        };
        if (backend_.chunks_logits()) {
          backend_.forward_chunked(step.batch, kLogitsChunkRows, consume);
        } else {
          const size_t rows = static_cast<size_t>(step.num_logits) * static_cast<size_t>(vocab_size_);
          if (logits_.size() < rows) logits_.resize(rows);
          backend_.forward(step.batch, logits_.data());
          consume(0, step.num_logits, logits_.data());
        }
      }
    } catch (...) {
      if (!masks_awaited) mask_worker_.wait();  // it reads the sequences: let it finish first
      throw;
    }
    await_masks();
    scheduler_.on_forward_done();
    postprocess(step, out);
    if (!out.tokens.empty()) out.output_at = std::chrono::steady_clock::now();
  }
  ++counters_.num_steps;
  publish(out);
  return out;
}

void Engine::drain_inbox(StepOutput& out) {
  {
    std::lock_guard lock(mu_);
    draining_.swap(inbox_);
  }
  for (Command& c : draining_) {
    if (c.is_abort) {
      const auto it = seqs_.find(c.id);
      if (it == seqs_.end()) continue;  // finished first, in an earlier step
      scheduler_.abort(*it->second, c.reason);
      out.aborted.push_back({c.id, c.reason});
      count_finished(c.reason);
      seqs_.erase(it);
      continue;
    }
    Request& r = c.request;
    auto seq = std::make_unique<Sequence>(r.id, std::move(r.prompt), std::move(r.params));
    if (!seq->params.seed) seq->rng = Rng(seed_source_());
    seq->priority = r.priority;
    seq->tenant_salt = r.tenant_salt;
    seq->constraint = std::move(r.constraint);
    seq->arrival = next_arrival_++;
    scheduler_.add(*seq);
    seqs_.emplace(r.id, std::move(seq));
  }
  draining_.clear();
}

void Engine::postprocess(const ScheduledStep& step, StepOutput& out) {
  int32_t row = 0;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    if (!step.batch.seqs[i].want_logits) continue;
    Sequence& seq = *step.seqs[i];
    if (seq.constraint && !seq.mask_ok) {
      // Its mask failed or allowed nothing: no token can honour the constraint, so none is
      // given; the request ends as aborted, and constraint_errors counts it.
      ++row;
      ++counters_.constraint_errors;
      scheduler_.abort(seq, FinishReason::kAbort);
      out.aborted.push_back({seq.request_id, FinishReason::kAbort});
      count_finished(FinishReason::kAbort);
      seqs_.erase(seq.request_id);
      continue;
    }
    const SampleResult* res = &sample_;
    if (device_sampling_) {
      const SampledRow& r = sampled_.rows[static_cast<size_t>(row)];
      sample_.token = r.token;
      sample_.logprob = r.logprob;
      sample_.top.clear();
      const size_t top = static_cast<size_t>(row) * kMaxSampledTop;
      for (size_t j = 0; j < static_cast<size_t>(r.top_count); ++j) {
        sample_.top.push_back({sampled_.top_ids[top + j], sampled_.top_logprobs[top + j]});
      }
    } else {
      res = &row_samples_[static_cast<size_t>(row)];
    }
    ++row;
    seq.append_token(res->token);
    FinishReason reason = stop_reason(seq, res->token);
    if (seq.constraint) reason = commit_constraint(seq, res->token, reason);

    TokenEvent ev{seq.request_id, res->token, reason, seq.params.logprobs >= 0, res->logprob,
                  static_cast<int32_t>(out.top_logprobs.size()), static_cast<int32_t>(res->top.size())};
    out.top_logprobs.insert(out.top_logprobs.end(), res->top.begin(), res->top.end());
    out.tokens.push_back(ev);
    if (reason != FinishReason::kNone) {
      scheduler_.finish(seq, reason);
      count_finished(reason);
      seqs_.erase(seq.request_id);  // step.seqs keeps a dangling pointer, unused until the next schedule()
    }
  }
}

void Engine::sample_rows(int32_t first, int32_t rows, float* logits) {
  for (int32_t r = 0; r < rows; ++r) {
    Sequence& seq = *logit_seqs_[static_cast<size_t>(first + r)];
    if (seq.constraint && !seq.mask_ok) continue;  // postprocess ends it without a token
    sampler_.sample(seq, logits + static_cast<size_t>(r) * static_cast<size_t>(vocab_size_),
                    row_samples_[static_cast<size_t>(first + r)]);
  }
}

// Each constrained row's mask into the sampling batch, and min_tokens' stop masking off for a
// row whose grammar allows nothing but stop ids (as Sampler::sample decides on the host).
void Engine::add_sampling_masks(const ScheduledStep& step) {
  sampling_.allowed_offset.assign(sampling_.rows.size(), -1);
  int32_t row = 0;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    if (!step.batch.seqs[i].want_logits) continue;
    Sequence& seq = *step.seqs[i];
    if (seq.constraint && seq.mask_ok) {
      sampling_.allowed_offset[static_cast<size_t>(row)] = static_cast<int32_t>(sampling_.allowed.size());
      sampling_.allowed.insert(sampling_.allowed.end(), seq.allowed.begin(), seq.allowed.end());
      SamplingRow& r = sampling_.rows[static_cast<size_t>(row)];
      if (r.mask_stop_ids != 0 && !sampler_.allows_non_stop(seq.params, seq.allowed.data())) r.mask_stop_ids = 0;
    }
    ++row;
  }
}

void Engine::fill_sampling(const ScheduledStep& step) {
  sampling_.clear();
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    if (step.batch.seqs[i].want_logits) add_sampling_row(*step.seqs[i]);
  }
}

// What Sampler::sample reads of a sequence, as data: the same one draw from its Rng, its
// distinct prompt + output tokens with their output counts when a penalty is on, and the ids
// min_tokens masks (stop ids, then eos unless ignore_eos) while it is not reached.
void Engine::add_sampling_row(Sequence& seq) {
  const SamplingParams& p = seq.params;
  SamplingRow r = sampling_row(p, seq.rng.uniform());
  if (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    if (entry_stamp_.empty()) {
      entry_stamp_.assign(static_cast<size_t>(vocab_size_), 0);
      entry_index_.assign(static_cast<size_t>(vocab_size_), 0);
    }
    if (++stamp_ == 0) {
      std::fill(entry_stamp_.begin(), entry_stamp_.end(), 0);
      stamp_ = 1;
    }
    std::vector<PenaltyEntry>& entries = sampling_.penalty_entries;
    r.penalty_offset = static_cast<int32_t>(entries.size());
    for (size_t k = 0; k < seq.tokens.size(); ++k) {
      const auto t = static_cast<size_t>(seq.tokens[k]);
      if (entry_stamp_[t] != stamp_) {
        entry_stamp_[t] = stamp_;
        entry_index_[t] = static_cast<int32_t>(entries.size());
        entries.push_back({seq.tokens[k], 0});
      }
      if (k >= static_cast<size_t>(seq.num_prompt_tokens)) ++entries[static_cast<size_t>(entry_index_[t])].output_count;
    }
    r.penalty_count = static_cast<int32_t>(entries.size()) - r.penalty_offset;
  }
  if (seq.num_output_tokens() < p.min_tokens) {
    std::vector<int32_t>& stops = sampling_.stop_ids;
    r.stop_offset = static_cast<int32_t>(stops.size());
    stops.insert(stops.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
    if (!p.ignore_eos) {
      for (int32_t t : backend_.config().eos_token_ids) {
        if (t >= 0 && t < vocab_size_) stops.push_back(t);
      }
    }
    r.stop_count = static_cast<int32_t>(stops.size()) - r.stop_offset;
    r.mask_stop_ids = r.stop_count > 0 ? 1 : 0;
  }
  sampling_.rows.push_back(r);
}

FinishReason Engine::commit_constraint(Sequence& seq, int32_t token, FinishReason reason) {
  // The sampler drew from the mask, so the constraint takes the token.
  if (!seq.constraint->commit(token)) {
    ++counters_.constraint_errors;
    return FinishReason::kAbort;
  }
  if (reason == FinishReason::kNone && seq.constraint->is_stopped()) return FinishReason::kStop;
  return reason;
}

// Order as vLLM: eos, then stop ids, then length. min_tokens needs no check here: the sampler
// masked eos and stop ids until it was reached.
FinishReason Engine::stop_reason(const Sequence& seq, int32_t token) const {
  const SamplingParams& p = seq.params;
  if (!p.ignore_eos && sampler_.is_eos(token)) return FinishReason::kStop;
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
    return FinishReason::kStop;
  }
  if (seq.num_output_tokens() >= p.max_tokens || seq.num_tokens() >= config_.max_model_len) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

void Engine::count_finished(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: ++counters_.finished_stop; break;
    case FinishReason::kLength: ++counters_.finished_length; break;
    case FinishReason::kAbort: ++counters_.finished_abort; break;
    case FinishReason::kTimeout: ++counters_.finished_timeout; break;
    case FinishReason::kNone: break;
  }
}

void Engine::publish(const StepOutput& out) {
  EngineStats s = counters_;
  s.num_running = scheduler_.num_running();
  s.kv_blocks_total = blocks_.num_blocks();
  s.kv_blocks_free = blocks_.num_free();
  s.kv_blocks_used = blocks_.num_used();
  s.kv_blocks_cached = blocks_.num_cached();
  s.kv_usage = static_cast<double>(blocks_.num_used()) / blocks_.num_blocks();
  s.num_preemptions = scheduler_.num_preemptions();
  s.prefix_cache_queries = blocks_.prefix_cache_queries();
  s.prefix_cache_hits = blocks_.prefix_cache_hits();
  std::lock_guard lock(mu_);
  for (const TokenEvent& ev : out.tokens) {
    if (ev.finish_reason != FinishReason::kNone) live_ids_.erase(ev.request_id);
  }
  for (const FinishedRequest& f : out.aborted) live_ids_.erase(f.request_id);
  int32_t pending = 0;
  for (const Command& c : inbox_) pending += !c.is_abort;
  s.num_waiting = scheduler_.num_waiting() + pending;
  stats_ = s;
}

}  // namespace strata
