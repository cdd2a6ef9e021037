// StepRouter: one engine's steps split among several consumers (the service's event loops), each
// getting only its own requests under its own ids, the forward's counts counted once, a consumer
// that is gone losing its requests to an abort, and close() failing what the others still run.
#include <string>
#include <vector>

#include "../../core/tests/test_util.h"
#include "strata/coded_error.h"
#include "strata/step_router.h"

using namespace strata;

namespace {

TokenEvent token(uint64_t id, int32_t t, FinishReason finish = FinishReason::kNone) {
  return TokenEvent{id, t, finish, false, 0.0f, 0, 0};
}

struct Told {
  int count = 0;
  bool answer = true;
  StepRouter::Notify fn() {
    return [this] {
      ++count;
      return answer;
    };
  }
};

std::string error_code(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const CodedError& e) {
    return e.code();
  }
  return "";
}

}  // namespace

TEST_CASE("ids: consumer k's id n is (k << 47) | n, and consumer 0's ids are the engine's own") {
  CHECK_EQ(StepRouter::engine_id(0, 42), uint64_t{42});
  const uint64_t id = StepRouter::engine_id(5, 42);
  CHECK_EQ(id, (uint64_t{5} << 47) | 42);
  CHECK_EQ(StepRouter::consumer_of(id), 5);
  CHECK_EQ(StepRouter::local_id(id), uint64_t{42});
  CHECK(StepRouter::engine_id(StepRouter::kMaxConsumers - 1, StepRouter::kMaxLocalId) < (uint64_t{1} << 53));
}

TEST_CASE("with one consumer a step goes to it whole, ids as they are") {
  StepRouter router;
  Told told;
  router.set_primary(told.fn());
  StepMessage m;
  m.output.tokens = {token(1, 10), token(2, 11)};
  m.output.num_batched_tokens = 2;
  std::vector<uint64_t> orphans;
  CHECK(router.route(std::move(m), orphans));
  CHECK_EQ(told.count, 1);
  std::vector<StepMessage> got = router.queue(0)->take();
  CHECK_EQ(got.size(), size_t{1});
  CHECK_EQ(got[0].output.tokens.size(), size_t{2});
  CHECK_EQ(got[0].output.tokens[1].request_id, uint64_t{2});
  CHECK_EQ(got[0].output.num_batched_tokens, 2);
  CHECK(orphans.empty());
}

TEST_CASE("each consumer gets its own tokens, aborts and schedules under its own ids; counts go to 0 only") {
  StepRouter router;
  Told t0, t1, t2, t3;
  router.set_primary(t0.fn());
  const int a = router.attach(t1.fn());
  const int b = router.attach(t2.fn());
  const int c = router.attach(t3.fn());
  CHECK_EQ(a, 1);
  CHECK_EQ(b, 2);
  CHECK_EQ(c, 3);
  StepMessage m;
  TokenEvent with_top = token(StepRouter::engine_id(b, 7), 30);
  with_top.has_logprob = true;
  with_top.logprob = -0.5f;
  with_top.top_offset = 2;
  with_top.top_count = 2;
  TokenEvent first_top = token(5, 20);
  first_top.top_offset = 0;
  first_top.top_count = 2;
  m.output.tokens = {first_top, token(StepRouter::engine_id(a, 5), 21, FinishReason::kLength), with_top};
  m.output.top_logprobs = {{100, -1.0f}, {101, -2.0f}, {200, -0.5f}, {201, -3.0f}};
  m.output.aborted = {{StepRouter::engine_id(a, 9), FinishReason::kTimeout}};
  m.output.scheduled = {StepRouter::engine_id(b, 7), 5};
  m.output.num_batched_tokens = 40;
  m.output.num_batched_seqs = 3;
  m.output.output_at = std::chrono::steady_clock::now();
  std::vector<uint64_t> orphans;
  CHECK(router.route(std::move(m), orphans));
  CHECK_EQ(t0.count, 1);
  CHECK_EQ(t1.count, 1);
  CHECK_EQ(t2.count, 1);
  CHECK_EQ(t3.count, 0);  // nothing of its own in this step
  CHECK(router.queue(c)->take().empty());

  std::vector<StepMessage> zero = router.queue(0)->take();
  CHECK_EQ(zero.size(), size_t{1});
  CHECK_EQ(zero[0].output.tokens.size(), size_t{1});
  CHECK_EQ(zero[0].output.tokens[0].request_id, uint64_t{5});
  CHECK_EQ(zero[0].output.tokens[0].top_offset, 0);
  CHECK_EQ(zero[0].output.top_logprobs.size(), size_t{2});
  CHECK_EQ(zero[0].output.scheduled.size(), size_t{1});
  CHECK_EQ(zero[0].output.num_batched_tokens, 40);
  CHECK_EQ(zero[0].output.num_batched_seqs, 3);

  std::vector<StepMessage> one = router.queue(a)->take();
  CHECK_EQ(one.size(), size_t{1});
  CHECK_EQ(one[0].output.tokens.size(), size_t{1});
  CHECK_EQ(one[0].output.tokens[0].request_id, uint64_t{5});
  CHECK(one[0].output.tokens[0].finish_reason == FinishReason::kLength);
  CHECK_EQ(one[0].output.aborted.size(), size_t{1});
  CHECK_EQ(one[0].output.aborted[0].request_id, uint64_t{9});
  CHECK(one[0].output.aborted[0].reason == FinishReason::kTimeout);
  CHECK_EQ(one[0].output.num_batched_tokens, 0);
  CHECK(one[0].output.scheduled.empty());

  std::vector<StepMessage> two = router.queue(b)->take();
  CHECK_EQ(two.size(), size_t{1});
  const TokenEvent& e = two[0].output.tokens.at(0);
  CHECK_EQ(e.request_id, uint64_t{7});
  CHECK_EQ(e.top_offset, 0);  // rebased onto its own top_logprobs
  CHECK_EQ(e.top_count, 2);
  CHECK_EQ(two[0].output.top_logprobs.size(), size_t{2});
  CHECK_EQ(two[0].output.top_logprobs[0].token, 200);
  CHECK_EQ(two[0].output.top_logprobs[1].token, 201);
  CHECK_EQ(two[0].output.scheduled.size(), size_t{1});
  CHECK_EQ(two[0].output.scheduled[0], uint64_t{7});
  CHECK(two[0].output.output_at == zero[0].output.output_at);
}

TEST_CASE("detach hands back the live requests; the index is reused once the engine has finished them") {
  StepRouter router;
  Told t0, t1;
  router.set_primary(t0.fn());
  const int k = router.attach(t1.fn());
  using Claim = StepRouter::Claim;
  CHECK(router.claim(StepRouter::engine_id(k, 1)) == Claim::kClaimed);
  CHECK(router.claim(StepRouter::engine_id(k, 2)) == Claim::kClaimed);
  CHECK(router.claim(StepRouter::engine_id(k, 2)) == Claim::kDuplicate);
  CHECK(router.claim(StepRouter::engine_id(k, 3)) == Claim::kClaimed);
  router.unclaim(StepRouter::engine_id(k, 3));  // its submit failed
  StepMessage m;
  m.output.tokens = {token(StepRouter::engine_id(k, 1), 4, FinishReason::kStop)};
  m.output.num_batched_tokens = 1;
  std::vector<uint64_t> orphans;
  CHECK(router.route(std::move(m), orphans));
  std::vector<uint64_t> live = router.detach(k);
  CHECK_EQ(live.size(), size_t{1});
  CHECK_EQ(live.at(0), StepRouter::engine_id(k, 2));
  CHECK(router.queue(k) == nullptr);
  CHECK(router.claim(StepRouter::engine_id(k, 4)) == Claim::kDetached);  // nothing new
  CHECK(router.detach(k).empty());                     // twice is harmless
  // Request 2 is still in the engine: a new consumer gets another index meanwhile.
  Told t2;
  const int other = router.attach(t2.fn());
  CHECK(other != k);
  StepMessage aborted;
  aborted.output.aborted = {{StepRouter::engine_id(k, 2), FinishReason::kAbort}};
  CHECK(router.route(std::move(aborted), orphans));
  CHECK_EQ(t2.count, 0);  // not its request
  Told t3;
  CHECK_EQ(router.attach(t3.fn()), k);  // all of k's requests are done now
}

TEST_CASE("a consumer that is gone is detached and its live requests come back as orphans") {
  StepRouter router;
  Told t0, t1;
  router.set_primary(t0.fn());
  const int k = router.attach(t1.fn());
  router.claim(StepRouter::engine_id(k, 1));
  router.claim(StepRouter::engine_id(k, 2));
  t1.answer = false;
  StepMessage m;
  m.output.tokens = {token(StepRouter::engine_id(k, 1), 4)};
  m.output.num_batched_tokens = 1;
  std::vector<uint64_t> orphans;
  CHECK(router.route(std::move(m), orphans));  // consumer 0 is still there
  CHECK_EQ(orphans.size(), size_t{2});
  CHECK(router.queue(k) == nullptr);
  t0.answer = false;
  StepMessage n;
  n.output.num_batched_tokens = 1;
  router.queue(0)->take();
  CHECK(!router.queue(0)->resume());  // consumer 0 took everything: the next push tells it
  CHECK(!router.route(std::move(n), orphans));  // consumer 0 gone: the loop ends
}

TEST_CASE("close: every other consumer's last step fails with the reason; nothing attaches after") {
  StepRouter router;
  Told t0, t1;
  router.set_primary(t0.fn());
  const int k = router.attach(t1.fn());
  std::shared_ptr<StepQueue> queue = router.queue(k);
  router.close({"STRATA_ENGINE_CLOSED", "closed"});
  CHECK(router.closed());
  CHECK_EQ(t1.count, 1);
  std::vector<StepMessage> last = queue->take();
  CHECK_EQ(last.size(), size_t{1});
  CHECK_STR_EQ(last[0].fatal.code, "STRATA_ENGINE_CLOSED");
  CHECK(queue->closed());
  std::vector<uint64_t> orphans;
  CHECK(!router.route(StepMessage{}, orphans));
  CHECK_STR_EQ(error_code([&] { router.attach(t1.fn()); }), "STRATA_ENGINE_CLOSED");
}

TEST_CASE("at most 63 consumers attach beside consumer 0") {
  StepRouter router;
  Told told;
  for (int k = 1; k < StepRouter::kMaxConsumers; ++k) CHECK_EQ(router.attach(told.fn()), k);
  CHECK_STR_EQ(error_code([&] { router.attach(told.fn()); }), "STRATA_INVALID_CONFIG");
}

TEST_MAIN()
