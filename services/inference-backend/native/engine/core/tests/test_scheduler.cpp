// Scheduler policy: budgets, chunked prefill, decode-first ordering, priority + FCFS,
// preemption by recompute, abort, admission limits. The "model" is a stand-in that makes the
// next token (last + 1) % 1000, so expected outputs are known exactly.
#include <algorithm>
#include <memory>
#include <random>

#include "strata/scheduler.h"
#include "test_util.h"

using namespace strata;

namespace {

struct SliceInfo {
  uint64_t id;
  int32_t start;
  int32_t n;
  bool logits;
};

struct Harness {
  BlockManager bm;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  int32_t last_num_decodes = 0;
  int32_t last_num_preempted = 0;

  Harness(int32_t num_blocks, int32_t block_size, SchedulerConfig cfg) : bm(num_blocks, block_size), sched(cfg, bm) {}

  Sequence& add(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, int32_t priority = 0) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    auto s = std::make_unique<Sequence>(id, std::move(prompt), p);
    s->priority = priority;
    s->arrival = id;
    sched.add(*s);
    seqs.push_back(std::move(s));
    return *seqs.back();
  }

  // schedule -> (stand-in forward) -> postprocess; checks slice shape on the way.
  std::vector<SliceInfo> step() {
    const ScheduledStep& st = sched.schedule();
    std::vector<SliceInfo> out;
    for (size_t i = 0; i < st.seqs.size(); ++i) {
      const SeqSlice& sl = st.batch.seqs[i];
      const Sequence& s = *st.seqs[i];
      CHECK_EQ(sl.start_pos, s.num_computed_tokens);
      CHECK(sl.tokens == s.tokens.data() + sl.start_pos);
      CHECK(static_cast<int64_t>(sl.n_blocks) * bm.block_size() >= sl.start_pos + sl.n_tokens);
      CHECK_EQ(sl.want_logits, sl.start_pos + sl.n_tokens == s.num_tokens());
      out.push_back({s.request_id, sl.start_pos, sl.n_tokens, sl.want_logits});
    }
    last_num_decodes = st.num_decodes;
    last_num_preempted = st.num_preempted;
    sched.on_forward_done();
    for (size_t i = 0; i < st.seqs.size(); ++i) {
      if (!st.batch.seqs[i].want_logits) continue;
      Sequence& s = *st.seqs[i];
      s.append_token((s.tokens.back() + 1) % 1000);
      if (s.num_output_tokens() == s.params.max_tokens) sched.finish(s, FinishReason::kLength);
    }
    const std::string err = bm.check_invariants();
    CHECK(err.empty());
    return out;
  }
};

std::vector<int32_t> range(int32_t from, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

bool successor_outputs(const Sequence& s) {
  for (int32_t i = s.num_prompt_tokens; i < s.num_tokens(); ++i) {
    if (s.tokens[static_cast<size_t>(i)] != (s.tokens[static_cast<size_t>(i - 1)] + 1) % 1000) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("token budget, max_num_seqs and decode-first order hold every step") {
  Harness h(64, 4, {.max_num_batched_tokens = 32, .max_num_seqs = 5, .max_model_len = 80});
  std::mt19937 rng(7);
  for (uint64_t id = 1; id <= 60; ++id) {
    const int32_t len = std::uniform_int_distribution<int32_t>(1, 50)(rng);
    h.add(id, range(static_cast<int32_t>(id * 10), len), std::uniform_int_distribution<int32_t>(1, 20)(rng));
  }
  bool saw_full_budget = false, saw_full_seqs = false;
  int steps = 0;
  while (h.sched.has_unfinished() && steps < 10000) {
    ++steps;
    const auto slices = h.step();
    int32_t tokens = 0;
    for (const auto& s : slices) tokens += s.n;
    CHECK(tokens <= 32);
    CHECK(slices.size() <= 5u);
    CHECK(h.sched.num_running() <= 5);
    for (int32_t i = 0; i < h.last_num_decodes; ++i) CHECK(slices[static_cast<size_t>(i)].n == 1);
    saw_full_budget |= tokens == 32;
    saw_full_seqs |= slices.size() == 5u;
  }
  CHECK(!h.sched.has_unfinished());
  CHECK(saw_full_budget);
  CHECK(saw_full_seqs);
  for (const auto& s : h.seqs) {
    CHECK_EQ(s->num_output_tokens(), s->params.max_tokens);
    CHECK(successor_outputs(*s));
    CHECK(s->status == SeqStatus::kFinished);
  }
  CHECK_EQ(h.bm.num_used(), 0);
}

TEST_CASE("chunked prefill splits a long prompt over steps, logits only at its end") {
  Harness h(64, 4, {.max_num_batched_tokens = 16, .max_num_seqs = 4, .max_model_len = 64});
  h.add(1, range(0, 40), 3);
  auto s1 = h.step();
  auto s2 = h.step();
  auto s3 = h.step();
  auto s4 = h.step();
  CHECK(s1.size() == 1 && s1[0].start == 0 && s1[0].n == 16 && !s1[0].logits);
  CHECK(s2.size() == 1 && s2[0].start == 16 && s2[0].n == 16 && !s2[0].logits);
  CHECK(s3.size() == 1 && s3[0].start == 32 && s3[0].n == 8 && s3[0].logits);
  CHECK(s4.size() == 1 && s4[0].start == 40 && s4[0].n == 1 && s4[0].logits);
  CHECK_EQ(h.seqs[0]->num_output_tokens(), 2);
}

TEST_CASE("decodes are batched before prefill chunks and get the budget first") {
  Harness h(64, 4, {.max_num_batched_tokens = 10, .max_num_seqs = 4, .max_model_len = 64});
  h.add(1, range(0, 4), 5);
  h.step();  // 1's prefill
  h.add(2, range(100, 30), 5);
  auto s = h.step();
  CHECK_EQ(s.size(), 2u);
  CHECK(s[0].id == 1 && s[0].start == 4 && s[0].n == 1);
  CHECK(s[1].id == 2 && s[1].start == 0 && s[1].n == 9);
  CHECK_EQ(h.last_num_decodes, 1);
  h.add(3, range(200, 30), 5);
  s = h.step();  // running prefill (2) before waiting (3), which gets nothing
  CHECK_EQ(s.size(), 2u);
  CHECK(s[0].id == 1 && s[1].id == 2 && s[1].start == 9 && s[1].n == 9);
}

TEST_CASE("waiting sequences are admitted by priority class, FCFS inside a class") {
  Harness h(64, 4, {.max_num_batched_tokens = 64, .max_num_seqs = 1, .max_model_len = 64});
  h.add(1, range(0, 3), 2, /*priority=*/2);
  h.add(2, range(10, 3), 2, 0);
  h.add(3, range(20, 3), 2, 1);
  h.add(4, range(30, 3), 2, 0);
  h.add(5, range(40, 3), 2, 1);
  std::vector<uint64_t> order;
  for (int i = 0; i < 20 && h.sched.has_unfinished(); ++i) {
    for (const auto& s : h.step()) {
      if (s.start == 0) order.push_back(s.id);
    }
  }
  CHECK((order == std::vector<uint64_t>{2, 4, 3, 5, 1}));
}

TEST_CASE("a tiny pool preempts the latest arrival, which recomputes and finishes correctly") {
  // 6 blocks of 4 = 24 slots; each sequence grows to 8 + 12 = 20 tokens (5 blocks).
  Harness h(6, 4, {.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_model_len = 24});
  Sequence& a = h.add(1, range(100, 8), 12);
  Sequence& b = h.add(2, range(200, 8), 12);
  std::vector<std::vector<SliceInfo>> steps;
  int preempt_step = -1;
  for (int i = 0; i < 100 && h.sched.has_unfinished(); ++i) {
    steps.push_back(h.step());
    if (h.last_num_preempted > 0 && preempt_step < 0) {
      preempt_step = i;
      CHECK(b.status == SeqStatus::kPreempted);
      CHECK_EQ(b.num_computed_tokens, 0);
      CHECK(b.block_table.empty());
      CHECK(a.status == SeqStatus::kRunning);
    }
  }
  CHECK_EQ(h.sched.num_preemptions(), 1);
  // Steps 1-4 decode positions 8-11 (3 blocks each = the whole pool); in step 5 a needs a
  // 4th block for position 12 and b, the later arrival, is preempted.
  CHECK_EQ(preempt_step, 5);
  CHECK(steps[5].size() == 1 && steps[5][0].id == 1 && steps[5][0].start == 12);
  // b comes back after a finishes and recomputes prompt + its 5 outputs (13 tokens). Its 3
  // full blocks were cached when freed; a's growth evicted the two tail ones, so the first
  // block is reused and the recompute starts at position 4.
  bool recomputed = false;
  for (size_t i = 6; i < steps.size(); ++i) {
    for (const auto& s : steps[i]) {
      if (s.id == 2 && s.n > 1) {
        recomputed = true;
        CHECK_EQ(s.start, 4);
        CHECK_EQ(s.n, 9);
        CHECK(s.logits);
      }
    }
  }
  CHECK(recomputed);
  CHECK_EQ(h.bm.prefix_cache_hits(), 4);
  CHECK(a.status == SeqStatus::kFinished && b.status == SeqStatus::kFinished);
  CHECK_EQ(a.num_output_tokens(), 12);
  CHECK_EQ(b.num_output_tokens(), 12);
  CHECK(successor_outputs(a));
  CHECK(successor_outputs(b));
  CHECK_EQ(h.bm.num_used(), 0);
}

TEST_CASE("the victim is the least urgent running sequence: priority before arrival") {
  Harness h(6, 4, {.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_model_len = 24});
  Sequence& a = h.add(1, range(100, 8), 12, /*priority=*/1);
  Sequence& b = h.add(2, range(200, 8), 12, /*priority=*/0);
  while (h.sched.num_preemptions() == 0 && h.sched.has_unfinished()) h.step();
  CHECK(a.status == SeqStatus::kPreempted);
  CHECK(b.status == SeqStatus::kRunning);
  while (h.sched.has_unfinished()) h.step();
  CHECK(successor_outputs(a) && successor_outputs(b));
  CHECK_EQ(a.num_output_tokens(), 12);
}

TEST_CASE("abort frees blocks at once, for running, waiting and preempted sequences") {
  Harness h(16, 4, {.max_num_batched_tokens = 64, .max_num_seqs = 1, .max_model_len = 32});
  Sequence& a = h.add(1, range(0, 10), 5);
  Sequence& b = h.add(2, range(50, 10), 5);
  h.step();
  CHECK(a.status == SeqStatus::kRunning);
  CHECK(b.status == SeqStatus::kWaiting);
  CHECK_EQ(h.bm.num_used(), 3);
  h.sched.abort(a);
  CHECK_EQ(h.bm.num_used(), 0);
  CHECK(a.status == SeqStatus::kFinished && a.finish_reason == FinishReason::kAbort);
  CHECK_EQ(h.sched.num_running(), 0);
  h.sched.abort(b, FinishReason::kTimeout);
  CHECK(b.finish_reason == FinishReason::kTimeout);
  CHECK_EQ(h.sched.num_waiting(), 0);
  CHECK(!h.sched.has_unfinished());
  CHECK(h.step().empty());
  h.sched.abort(a);  // already finished: no effect
  CHECK(a.finish_reason == FinishReason::kAbort);

  Harness p(6, 4, {.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_model_len = 24});
  p.add(1, range(100, 8), 12);
  Sequence& c = p.add(2, range(200, 8), 12);
  while (p.sched.num_preemptions() == 0) p.step();
  CHECK(c.status == SeqStatus::kPreempted);
  p.sched.abort(c);
  CHECK_EQ(p.sched.num_waiting(), 0);
  while (p.sched.has_unfinished()) p.step();
  CHECK_EQ(p.bm.num_used(), 0);
}

TEST_CASE("max_model_len is enforced at admission with the numbers in the message") {
  Harness h(16, 4, {.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_model_len = 32});
  auto e1 = error_of([&] { h.add(1, range(0, 32), 1); });
  CHECK_STR_EQ(e1.first, std::string("STRATA_PROMPT_TOO_LONG"));
  CHECK_STR_EQ(e1.second, std::string("prompt has 32 tokens but max_model_len is 32; the prompt must be shorter so at "
                                  "least one token can be generated"));
  auto e2 = error_of([&] { h.add(2, range(0, 20), 13); });
  CHECK_STR_EQ(e2.first, std::string("STRATA_PROMPT_TOO_LONG"));
  CHECK_STR_EQ(e2.second,
           std::string("prompt (20 tokens) + max_tokens (13) = 33 exceeds max_model_len 32; max_tokens can be at most 12"));
  auto e3 = error_of([&] { h.add(3, {}, 1); });
  CHECK_STR_EQ(e3.first, std::string("STRATA_INVALID_PARAM"));
  CHECK_EQ(h.sched.num_waiting(), 0);
  auto ok = error_of([&] { h.add(4, range(0, 20), 12); });
  CHECK(ok.first.empty());
  CHECK_EQ(h.sched.num_waiting(), 1);
}

TEST_CASE("randomized: tiny pool, priorities, aborts; every sequence ends and every block returns") {
  Harness h(20, 4, {.max_num_batched_tokens = 24, .max_num_seqs = 6, .max_model_len = 40});
  std::mt19937 rng(99);
  auto pick = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
  uint64_t next_id = 0;
  int64_t aborted = 0;
  for (int step = 0; step < 4000 && (next_id < 500 || h.sched.has_unfinished()); ++step) {
    for (int k = pick(0, 2); k > 0 && next_id < 500; --k) {
      const int32_t len = pick(1, 30);
      h.add(++next_id, range(pick(0, 3) * 100, len), pick(1, 40 - len), pick(0, 2));
    }
    if (pick(0, 9) == 0) {
      Sequence& s = *h.seqs[static_cast<size_t>(pick(0, static_cast<int32_t>(h.seqs.size()) - 1))];
      if (s.status != SeqStatus::kFinished) {
        h.sched.abort(s);
        ++aborted;
      }
    }
    h.step();
  }
  CHECK(!h.sched.has_unfinished());
  CHECK(h.sched.num_preemptions() > 0);
  CHECK(aborted > 0);
  for (const auto& s : h.seqs) {
    CHECK(s->status == SeqStatus::kFinished);
    CHECK(successor_outputs(*s));
    if (s->finish_reason == FinishReason::kLength) CHECK_EQ(s->num_output_tokens(), s->params.max_tokens);
  }
  CHECK_EQ(h.bm.num_used(), 0);
  CHECK_EQ(h.bm.num_free() + h.bm.num_cached(), 20);
}

TEST_MAIN()
