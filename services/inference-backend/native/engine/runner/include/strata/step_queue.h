// Steps on their way from the engine's loop thread to the thread that consumes them (in the
// service: the JS thread). The loop pushes; the consumer is told once (notify) and then takes
// everything that accumulated in one go, so a busy consumer gets several steps per delivery
// instead of falling further behind. It is told again only after it calls resume(): told back
// to back, a JS consumer would run every delivery in one event-loop turn and starve its timers
// and sockets. The loop waits while max_undelivered steps wait, so a stalled consumer slows the
// engine and never loses tokens. Shared (std::shared_ptr) by the loop and by deliveries that
// may still be queued on the consumer's side when the engine is gone.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

#include "strata/captured_error.h"
#include "strata/engine.h"

namespace strata {

// What the loop hands over: a step's output, or the error that stopped the loop.
struct StepMessage {
  StepOutput output;
  CapturedError fatal;  // code empty: none
};

class StepQueue {
 public:
  explicit StepQueue(size_t max_undelivered = 64) : max_undelivered_(max_undelivered) {}

  enum class Pushed {
    kQueued,        // the consumer was told already and has not resumed: it takes this one too
    kNotify,        // tell the consumer now (nothing outstanding)
    kClosed,        // the queue is closed: the loop should end
  };
  // Loop thread: appends, first waiting while max_undelivered steps wait.
  Pushed push(StepMessage message);
  // Consumer: everything that accumulated (possibly nothing); wakes a push waiting for room.
  std::vector<StepMessage> take();
  // Consumer, after a delivery: true when steps already wait (deliver again, from a later turn);
  // false when none do, and the loop's next push returns kNotify.
  bool resume();
  // Any thread: a waiting push returns kClosed, and so does every later one.
  void close();
  // Any thread: appends `last` without waiting for room, then closes. True when the consumer
  // should be told now (it was not told already); false when it was, or the queue was closed.
  bool close_with(StepMessage last);
  bool closed() const;

 private:
  const size_t max_undelivered_;
  mutable std::mutex mu_;
  std::condition_variable room_;
  std::vector<StepMessage> steps_;
  bool told_ = false;  // the consumer was told and has not resumed
  bool closed_ = false;
};

}  // namespace strata
