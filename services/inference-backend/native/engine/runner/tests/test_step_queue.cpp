// StepQueue: the hand-over from the engine's loop thread to its consumer. One notification per
// delivery, everything accumulated taken at once, the loop held (never a step lost) while the
// consumer lags, and close() releasing a loop that waits.
#include <atomic>
#include <chrono>
#include <thread>

#include "../../tests/check.h"
#include "strata/step_queue.h"

using namespace strata;
using namespace std::chrono_literals;

namespace {

StepMessage step(int32_t tokens) {
  StepMessage m;
  m.output.num_batched_tokens = tokens;
  return m;
}

}  // namespace

TEST_CASE("the first push tells the consumer; later ones join that delivery until it resumes") {
  StepQueue q;
  CHECK(q.push(step(1)) == StepQueue::Pushed::kNotify);
  CHECK(q.push(step(2)) == StepQueue::Pushed::kQueued);
  CHECK(q.push(step(3)) == StepQueue::Pushed::kQueued);
  std::vector<StepMessage> got = q.take();
  CHECK_EQ(got.size(), size_t{3});
  CHECK_EQ(got[0].output.num_batched_tokens, 1);
  CHECK_EQ(got[2].output.num_batched_tokens, 3);
  // A step that arrived while the consumer delivered: resume says so, and the consumer stays told.
  CHECK(q.push(step(4)) == StepQueue::Pushed::kQueued);
  CHECK(q.resume());
  CHECK(q.push(step(5)) == StepQueue::Pushed::kQueued);
  CHECK_EQ(q.take().size(), size_t{2});
  // Nothing waits: resume arms the queue, and the next push notifies again.
  CHECK(!q.resume());
  CHECK(q.push(step(6)) == StepQueue::Pushed::kNotify);
}

TEST_CASE("a full queue holds the loop until the consumer takes, and loses nothing") {
  StepQueue q(4);
  for (int32_t i = 0; i < 4; ++i) q.push(step(i));
  std::atomic<bool> pushed{false};
  std::thread loop([&] {
    q.push(step(4));
    pushed = true;
  });
  std::this_thread::sleep_for(50ms);
  CHECK(!pushed.load());
  std::vector<StepMessage> first = q.take();
  loop.join();
  CHECK(pushed.load());
  std::vector<StepMessage> second = q.take();
  CHECK_EQ(first.size(), size_t{4});
  CHECK_EQ(second.size(), size_t{1});
  CHECK_EQ(second[0].output.num_batched_tokens, 4);
}

TEST_CASE("close releases a loop waiting for room, and every later push is refused") {
  StepQueue q(1);
  q.push(step(0));
  std::atomic<int> result{-1};
  std::thread loop([&] { result = static_cast<int>(q.push(step(1))); });
  std::this_thread::sleep_for(20ms);
  CHECK_EQ(result.load(), -1);
  q.close();
  loop.join();
  CHECK(result.load() == static_cast<int>(StepQueue::Pushed::kClosed));
  CHECK(q.closed());
  CHECK(q.push(step(2)) == StepQueue::Pushed::kClosed);
  CHECK_EQ(q.take().size(), size_t{1});  // what was queued before the close is still there
}

TEST_MAIN()
