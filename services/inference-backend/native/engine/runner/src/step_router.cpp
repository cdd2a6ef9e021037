#include "strata/step_router.h"

#include <utility>

#include "strata/coded_error.h"

namespace strata {
namespace {

// Consumer k's share of a step, its ids made local. Only consumer 0 gets the forward's counts,
// so they are counted once however many consumers there are.
StepMessage part_for(const StepMessage& m, int k) {
  StepMessage part;
  part.fatal = m.fatal;
  const StepOutput& in = m.output;
  StepOutput& out = part.output;
  for (const TokenEvent& e : in.tokens) {
    if (StepRouter::consumer_of(e.request_id) != k) continue;
    TokenEvent local = e;
    local.request_id = StepRouter::local_id(e.request_id);
    if (e.top_count > 0) {
      local.top_offset = static_cast<int32_t>(out.top_logprobs.size());
      out.top_logprobs.insert(out.top_logprobs.end(), in.top_logprobs.begin() + e.top_offset,
                              in.top_logprobs.begin() + e.top_offset + e.top_count);
    }
    out.tokens.push_back(local);
  }
  for (const FinishedRequest& a : in.aborted) {
    if (StepRouter::consumer_of(a.request_id) == k) out.aborted.push_back({StepRouter::local_id(a.request_id), a.reason});
  }
  for (uint64_t id : in.scheduled) {
    if (StepRouter::consumer_of(id) == k) out.scheduled.push_back(StepRouter::local_id(id));
  }
  out.scheduled_at = in.scheduled_at;
  out.output_at = in.output_at;
  if (k == 0) {
    out.num_batched_tokens = in.num_batched_tokens;
    out.num_batched_seqs = in.num_batched_seqs;
  }
  return part;
}

bool has_any(const StepMessage& m) {
  return !m.fatal.code.empty() || !m.output.tokens.empty() || !m.output.aborted.empty() || !m.output.scheduled.empty();
}

}  // namespace

StepRouter::StepRouter() : consumers_(kMaxConsumers) {
  consumers_[0].queue = std::make_shared<StepQueue>();
  consumers_[0].attached = true;
}

void StepRouter::set_primary(Notify notify) {
  std::lock_guard lock(mu_);
  consumers_[0].notify = std::move(notify);
}

int StepRouter::attach(Notify notify) {
  std::lock_guard lock(mu_);
  if (closed_) throw CodedError("STRATA_ENGINE_CLOSED", "the engine is closed");
  for (int k = 1; k < kMaxConsumers; ++k) {
    Consumer& c = consumers_[k];
    if (c.attached || !c.live.empty()) continue;
    c.queue = std::make_shared<StepQueue>();
    c.notify = std::move(notify);
    c.attached = true;
    return k;
  }
  throw CodedError("STRATA_INVALID_CONFIG",
                   "the engine serves at most " + std::to_string(kMaxConsumers) + " event loops at once");
}

std::vector<uint64_t> StepRouter::detach(int consumer, const StepQueue* expected) {
  std::shared_ptr<StepQueue> queue;
  std::vector<uint64_t> live;
  {
    std::lock_guard lock(mu_);
    if (consumer < 1 || consumer >= kMaxConsumers || !consumers_[consumer].attached) return live;
    Consumer& c = consumers_[consumer];
    if (expected != nullptr && c.queue.get() != expected) return live;
    c.attached = false;
    c.notify = nullptr;
    queue = std::move(c.queue);
    live.assign(c.live.begin(), c.live.end());
  }
  queue->close();
  return live;
}

std::shared_ptr<StepQueue> StepRouter::queue(int consumer) const {
  std::lock_guard lock(mu_);
  if (consumer < 0 || consumer >= kMaxConsumers || !consumers_[consumer].attached) return nullptr;
  return consumers_[consumer].queue;
}

StepRouter::Claim StepRouter::claim(uint64_t id) {
  const int k = consumer_of(id);
  std::lock_guard lock(mu_);
  if (k >= kMaxConsumers || !consumers_[k].attached) return Claim::kDetached;
  if (k > 0 && !consumers_[k].live.insert(id).second) return Claim::kDuplicate;
  return Claim::kClaimed;
}

void StepRouter::unclaim(uint64_t id) {
  const int k = consumer_of(id);
  if (k < 1 || k >= kMaxConsumers) return;
  std::lock_guard lock(mu_);
  consumers_[k].live.erase(id);
}

bool StepRouter::route(StepMessage message, std::vector<uint64_t>& orphans) {
  std::vector<Target> targets;
  bool split = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    for (int k = 1; k < kMaxConsumers; ++k) {
      const Consumer& c = consumers_[k];
      if (c.attached || !c.live.empty()) split = true;
      if (c.attached) targets.push_back({k, c.queue, c.notify});
    }
    if (split) {
      // Requests that end in this step are no longer their consumer's to abort.
      const auto done = [&](uint64_t id) {
        const int k = consumer_of(id);
        if (k > 0 && k < kMaxConsumers) consumers_[k].live.erase(id);
      };
      for (const TokenEvent& e : message.output.tokens) {
        if (e.finish_reason != FinishReason::kNone) done(e.request_id);
      }
      for (const FinishedRequest& a : message.output.aborted) done(a.request_id);
    }
    targets.insert(targets.begin(), Target{0, consumers_[0].queue, consumers_[0].notify});
  }
  const auto push = [](const Target& t, StepMessage m) {
    const StepQueue::Pushed pushed = t.queue->push(std::move(m));
    if (pushed == StepQueue::Pushed::kClosed) return false;
    return pushed != StepQueue::Pushed::kNotify || !t.notify || t.notify();
  };
  if (!split) return push(targets.front(), std::move(message));
  for (const Target& t : targets) {
    StepMessage part = part_for(message, t.index);
    if (t.index == 0) {
      if (!push(t, std::move(part))) return false;
    } else if (has_any(part) && !push(t, std::move(part))) {
      std::vector<uint64_t> live = detach(t.index, t.queue.get());
      orphans.insert(orphans.end(), live.begin(), live.end());
    }
  }
  return true;
}

void StepRouter::close(const CapturedError& farewell) {
  std::vector<Target> others;
  std::shared_ptr<StepQueue> primary;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    primary = consumers_[0].queue;
    for (int k = 1; k < kMaxConsumers; ++k) {
      if (consumers_[k].attached) others.push_back({k, consumers_[k].queue, consumers_[k].notify});
    }
  }
  for (const Target& t : others) {
    StepMessage last;
    last.fatal = farewell;
    if (t.queue->close_with(std::move(last)) && t.notify) t.notify();
  }
  primary->close();
}

bool StepRouter::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

}  // namespace strata
