#include "strata/mask_worker.h"

#include <chrono>

namespace strata {

MaskWorker::~MaskWorker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MaskWorker::start(const std::vector<Sequence*>& seqs, size_t n_words) {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  {
    std::lock_guard lock(mu_);
    jobs_ = seqs;
    n_words_ = n_words;
    pending_ = true;
  }
  cv_.notify_all();
}

int64_t MaskWorker::wait() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !pending_; });
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

void MaskWorker::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || pending_; });
    if (stop_) return;
    const std::vector<Sequence*> jobs = jobs_;
    const size_t n_words = n_words_;
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    for (Sequence* seq : jobs) {
      seq->allowed.resize(n_words);
      bool ok = seq->constraint->compute_mask(seq->allowed.data(), n_words);
      // A mask that allows nothing would leave the sampler no token: treated as a failed mask
      // (the engine ends the sequence without a token, counted in constraint_errors).
      bool any = false;
      for (size_t w = 0; ok && !any && w < n_words; ++w) any = seq->allowed[w] != 0;
      seq->mask_ok = ok && any;
    }
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    compute_ns_ += ns;
    masks_ += static_cast<int64_t>(jobs.size());
    pending_ = false;
    cv_.notify_all();
  }
}

}  // namespace strata
