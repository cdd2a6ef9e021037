#include "strata/step_queue.h"

namespace strata {

StepQueue::Pushed StepQueue::push(StepMessage message) {
  std::unique_lock lock(mu_);
  room_.wait(lock, [&] { return steps_.size() < max_undelivered_ || closed_; });
  if (closed_) return Pushed::kClosed;
  steps_.push_back(std::move(message));
  if (told_) return Pushed::kQueued;
  told_ = true;
  return Pushed::kNotify;
}

std::vector<StepMessage> StepQueue::take() {
  std::vector<StepMessage> out;
  {
    std::lock_guard lock(mu_);
    out.swap(steps_);
  }
  room_.notify_all();
  return out;
}

bool StepQueue::resume() {
  std::lock_guard lock(mu_);
  if (!steps_.empty()) return true;  // still told: the consumer delivers again itself
  told_ = false;
  return false;
}

void StepQueue::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  room_.notify_all();
}

bool StepQueue::close_with(StepMessage last) {
  bool tell = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    steps_.push_back(std::move(last));
    closed_ = true;
    tell = !told_;
    told_ = true;
  }
  room_.notify_all();
  return tell;
}

bool StepQueue::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

}  // namespace strata
