// Engine steps split among the threads that submitted their requests. In the service each
// HTTP event loop (the main thread and any worker threads, STRATA_HTTP_WORKERS) is a consumer
// with a StepQueue of its own, so a step's tokens are handed to the loops that write them and
// each loop formats and writes only its own streams. Consumer 0 is the runner's owner (start());
// others attach and detach while the loop runs.
//
// Request ids are per consumer: consumer k's id n is the engine's id (k << 47) | n, so consumers
// cannot collide or touch each other's requests, and consumer 0's ids are the engine's own. The
// router translates both ways. A step goes to consumer 0 whenever the loop would have handed it
// over with one consumer (a forward pass, an abort, a failure), with the forward's counts; to
// any other consumer when it has something of that consumer's (tokens, aborts, first schedules)
// or failed. Pushing waits while a consumer's queue is full, so a stalled loop slows the engine
// for every consumer and never loses tokens, as with one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "strata/step_queue.h"

namespace strata {

class StepRouter {
 public:
  static constexpr int kMaxConsumers = 64;
  static constexpr int kIdBits = 47;
  // Ids a consumer may use: [0, kMaxLocalId]; engine ids stay below 2^53.
  static constexpr uint64_t kMaxLocalId = (uint64_t{1} << kIdBits) - 1;
  static uint64_t engine_id(int consumer, uint64_t local_id) {
    return (static_cast<uint64_t>(consumer) << kIdBits) | local_id;
  }
  static int consumer_of(uint64_t engine_id) { return static_cast<int>(engine_id >> kIdBits); }
  static uint64_t local_id(uint64_t engine_id) { return engine_id & kMaxLocalId; }

  // Called on the loop thread when a consumer should take its steps (StepQueue::Pushed::kNotify);
  // false: the consumer is gone.
  using Notify = std::function<bool()>;

  StepRouter();
  // Consumer 0's notify (the runner's start()).
  void set_primary(Notify notify);
  // Another consumer: its index in [1, kMaxConsumers). Throws CodedError STRATA_ENGINE_CLOSED
  // once closed, STRATA_INVALID_CONFIG when every index is taken.
  int attach(Notify notify);
  // Consumer k (k >= 1) is gone: its queue closes and it gets nothing more. Returns the engine
  // ids of its requests still live, for the caller to abort; its index is reused once the
  // engine has finished them all.
  std::vector<uint64_t> detach(int consumer) { return detach(consumer, nullptr); }
  // Consumer k's queue; nullptr when k is not attached.
  std::shared_ptr<StepQueue> queue(int consumer) const;
  // Before submitting engine id `id`: records it as its consumer's (for detach). kDuplicate
  // when that consumer has it live already (consumer 0's ids are the engine's to check).
  // unclaim() undoes a kClaimed when the submit fails.
  enum class Claim { kClaimed, kDetached, kDuplicate };
  Claim claim(uint64_t id);
  void unclaim(uint64_t id);
  // Loop thread: hands one step to its consumers. Returns false when consumer 0 is gone or
  // the router is closed (the loop ends). Engine ids of consumers found gone meanwhile (their
  // notify returned false) are appended to `orphans`, for the loop to abort.
  bool route(StepMessage message, std::vector<uint64_t>& orphans);
  // Every consumer other than 0 gets `farewell` (queued without waiting for room: the failure
  // their live requests end with) and every queue closes; a push waiting for room returns.
  void close(const CapturedError& farewell);
  bool closed() const;

 private:
  struct Consumer {
    std::shared_ptr<StepQueue> queue;
    Notify notify;
    std::unordered_set<uint64_t> live;  // engine ids submitted and not yet finished (k >= 1)
    bool attached = false;
  };
  // What route() pushes to one consumer, taken under mu_ and used after it is released.
  struct Target {
    int index;
    std::shared_ptr<StepQueue> queue;
    Notify notify;
  };

  // detach(consumer), only while its queue is still `queue` when that is given: the loop found
  // that queue gone, and its index may have been taken by a new consumer since.
  std::vector<uint64_t> detach(int consumer, const StepQueue* queue);

  mutable std::mutex mu_;
  std::vector<Consumer> consumers_;
  bool closed_ = false;
};

}  // namespace strata
