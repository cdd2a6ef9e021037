// Engine step loop on the PagedEchoBackend test fixture: stops, lengths, logprobs, aborts,
// admission errors, prefix caching, batch invariance under preemption, a 1,200-request
// randomized stress, and submit/abort from another thread.
#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "paged_echo_backend.h"
#include "strata/engine.h"
#include "test_util.h"

using namespace strata;
using Rule = PagedEchoBackend::Rule;

namespace {

constexpr int32_t kVocab = 64;

Request request(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, float temperature = 0.0f) {
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.params.max_tokens = max_tokens;
  r.params.temperature = temperature;
  return r;
}

std::vector<int32_t> range(int32_t from, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (from + i) % kVocab;
  return v;
}

// What greedy decoding must produce: next_token on the true context, until a stop or length.
std::vector<int32_t> reference(Rule rule, std::vector<int32_t> ctx, const SamplingParams& p,
                               const std::vector<int32_t>& eos = {}) {
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < p.max_tokens) {
    const int32_t t = PagedEchoBackend::next_token(rule, ctx.data(), static_cast<int32_t>(ctx.size()), kVocab);
    out.push_back(t);
    ctx.push_back(t);
    const bool is_eos = std::find(eos.begin(), eos.end(), t) != eos.end();
    if ((is_eos && !p.ignore_eos) || std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) != p.stop_token_ids.end()) break;
  }
  return out;
}

struct Collected {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  int finishes = 0;
  bool event_after_finish = false;
};

// Steps until idle, collecting every request's tokens and finishes.
struct Driver {
  explicit Driver(Engine& e) : engine(e) {}
  Engine& engine;
  std::map<uint64_t, Collected> by_id;
  int64_t steps = 0;

  void absorb(const StepOutput& out) {
    for (const TokenEvent& ev : out.tokens) {
      Collected& c = by_id[ev.request_id];
      if (c.finishes) c.event_after_finish = true;
      c.tokens.push_back(ev.token);
      if (ev.finish_reason != FinishReason::kNone) {
        c.reason = ev.finish_reason;
        ++c.finishes;
      }
    }
    for (const FinishedRequest& f : out.aborted) {
      Collected& c = by_id[f.request_id];
      if (c.finishes) c.event_after_finish = true;
      c.reason = f.reason;
      ++c.finishes;
    }
  }
  void run(int64_t max_steps = 1000000) {
    while (engine.has_unfinished() && steps < max_steps) {
      absorb(engine.step());
      ++steps;
    }
  }
  StepOutput step() {
    StepOutput out = engine.step();
    absorb(out);
    ++steps;
    return out;
  }
};

EngineConfig config(int32_t num_blocks, int32_t block_size = 16, int32_t max_model_len = 256) {
  EngineConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.max_model_len = max_model_len;
  c.max_num_batched_tokens = 256;
  c.max_num_seqs = 32;
  return c;
}

}  // namespace

TEST_CASE("step loop: one token per step after the prefill, finishing on max_tokens") {
  PagedEchoBackend backend(kVocab, Rule::kSuccessor);
  Engine engine(backend, config(32));
  CHECK_EQ(backend.allocations, 1);
  engine.submit(request(1, {5, 6, 7}, 4));
  std::vector<int32_t> tokens;
  for (int i = 0; i < 4; ++i) {
    StepOutput out = engine.step();
    CHECK((out.scheduled == (i == 0 ? std::vector<uint64_t>{1} : std::vector<uint64_t>{})));
    CHECK_EQ(out.tokens.size(), 1u);
    if (out.tokens.empty()) return;
    tokens.push_back(out.tokens[0].token);
    CHECK(out.tokens[0].finish_reason == (i == 3 ? FinishReason::kLength : FinishReason::kNone));
    CHECK(!out.tokens[0].has_logprob);
  }
  CHECK((tokens == std::vector<int32_t>{8, 9, 10, 11}));
  CHECK(!engine.has_unfinished());
  CHECK(engine.step().tokens.empty());
  const EngineStats s = engine.stats();
  CHECK_EQ(s.finished_length, 1);
  CHECK_EQ(s.kv_blocks_used, 0);
  CHECK_EQ(s.kv_blocks_free + s.kv_blocks_cached, 32);
  CHECK_EQ(s.num_steps, 5);
  CHECK(backend.error.empty());
}

TEST_CASE("stop token ids, eos, ignore_eos and min_tokens decide the finish") {
  auto run_one = [](std::vector<int32_t> eos, std::function<void(SamplingParams&)> edit) {
    PagedEchoBackend backend(kVocab, Rule::kSuccessor, eos);
    Engine engine(backend, config(32));
    Request r = request(1, {5, 6, 7}, 6);
    edit(r.params);
    engine.submit(r);
    Driver d(engine);
    d.run();
    return d.by_id[1];
  };
  auto stop = run_one({}, [](auto& p) { p.stop_token_ids = {10}; });
  CHECK((stop.tokens == std::vector<int32_t>{8, 9, 10}));
  CHECK(stop.reason == FinishReason::kStop);
  auto eos = run_one({9}, [](auto&) {});
  CHECK((eos.tokens == std::vector<int32_t>{8, 9}));
  CHECK(eos.reason == FinishReason::kStop);
  auto ignore = run_one({9}, [](auto& p) { p.ignore_eos = true; });
  CHECK((ignore.tokens == std::vector<int32_t>{8, 9, 10, 11, 12, 13}));
  CHECK(ignore.reason == FinishReason::kLength);
  // eos 8 is the model's choice first; masked until one token exists, the runner-up (9) wins.
  auto min = run_one({8}, [](auto& p) { p.min_tokens = 1; });
  CHECK((min.tokens == std::vector<int32_t>{9, 10, 11, 12, 13, 14}));
  CHECK_EQ(min.finishes, 1);
}

// A constraint that allows, at each position, the tokens of its script (empty: none), and is
// complete after the last: the engine's side of structured output without a grammar engine
// (grammar/tests covers llguidance's).
class ScriptedConstraint final : public TokenConstraint {
 public:
  explicit ScriptedConstraint(std::vector<std::vector<int32_t>> script) : script_(std::move(script)) {}
  bool compute_mask(uint32_t* words, size_t n_words) override {
    std::fill(words, words + n_words, 0u);
    if (pos_ >= script_.size()) return false;
    for (int32_t t : script_[pos_]) words[static_cast<uint32_t>(t) >> 5] |= 1u << (static_cast<uint32_t>(t) & 31u);
    ++masks;
    return true;
  }
  bool commit(int32_t token) override {
    if (pos_ >= script_.size()) return false;
    const auto& allowed = script_[pos_];
    if (std::find(allowed.begin(), allowed.end(), token) == allowed.end()) return false;
    ++pos_;
    return true;
  }
  bool is_stopped() const override { return pos_ >= script_.size(); }
  std::string error() const override { return ""; }
  int masks = 0;

 private:
  std::vector<std::vector<int32_t>> script_;
  size_t pos_ = 0;
};

TEST_CASE("a constraint's mask decides each token, and its completion ends the request") {
  PagedEchoBackend backend(kVocab, Rule::kSuccessor, {9});
  Engine engine(backend, config(32));
  Request r = request(1, {5, 6, 7}, 10);  // the model alone would say 8, 9 (eos)
  auto script = std::make_shared<ScriptedConstraint>(std::vector<std::vector<int32_t>>{{20, 21}, {30}, {2, 40}});
  r.constraint = script;
  engine.submit(r);
  // min_tokens masks stop ids only while the grammar allows something else: here only eos.
  Request eos_only = request(2, {5, 6, 7}, 10);
  eos_only.params.min_tokens = 5;
  eos_only.constraint = std::make_shared<ScriptedConstraint>(std::vector<std::vector<int32_t>>{{9}});
  engine.submit(eos_only);
  // A mask that allows nothing ends the request (abort) and counts as a constraint error.
  Request empty = request(3, {5, 6, 7}, 10);
  empty.constraint = std::make_shared<ScriptedConstraint>(std::vector<std::vector<int32_t>>{{}});
  engine.submit(empty);
  Driver d(engine);
  d.run();
  const Collected& one = d.by_id[1];
  CHECK_EQ(one.tokens.size(), 3u);
  if (one.tokens.size() == 3) {
    CHECK(one.tokens[0] == 20 || one.tokens[0] == 21);
    CHECK_EQ(one.tokens[1], 30);
    CHECK(one.tokens[2] == 2 || one.tokens[2] == 40);
  }
  CHECK(one.reason == FinishReason::kStop);
  CHECK_EQ(script->masks, 3);
  CHECK((d.by_id[2].tokens == std::vector<int32_t>{9}));
  CHECK(d.by_id[2].reason == FinishReason::kStop);
  CHECK(d.by_id[3].tokens.empty());  // no token honours an empty mask: none is given
  CHECK(d.by_id[3].reason == FinishReason::kAbort);
  CHECK_EQ(d.by_id[3].finishes, 1);
  const EngineStats s = engine.stats();
  CHECK_EQ(s.constraint_masks, int64_t{5});
  CHECK_EQ(s.constraint_errors, int64_t{1});
  CHECK_EQ(s.kv_blocks_used, 0);
}

TEST_CASE("logprobs ride in the step output") {
  PagedEchoBackend backend(kVocab, Rule::kSuccessor);
  Engine engine(backend, config(32));
  Request r = request(1, {5, 6, 7}, 1);
  r.params.logprobs = 2;
  engine.submit(r);
  StepOutput out = engine.step();
  CHECK_EQ(out.tokens.size(), 1u);
  if (out.tokens.empty()) return;
  const TokenEvent& ev = out.tokens[0];
  double z = 0.0;
  for (int32_t d = 0; d < kVocab; ++d) z += std::exp(d == 0 ? 3.0 : -0.05 * d);
  CHECK(ev.has_logprob);
  CHECK_NEAR(ev.logprob, 3.0 - std::log(z), 1e-5);
  CHECK(ev.top_offset == 0 && ev.top_count == 2 && out.top_logprobs.size() == 2u);
  CHECK(out.top_logprobs[0].token == 8 && out.top_logprobs[1].token == 9);
  CHECK_NEAR(out.top_logprobs[1].logprob, -0.05 - std::log(z), 1e-5);
}

TEST_CASE("submit rejects bad requests with stable codes; construction checks the pool") {
  PagedEchoBackend backend(kVocab, Rule::kSuccessor, {}, 512);
  Engine engine(backend, config(32, 16, 64));
  {
    Request bad = request(7, {1, 2}, 1);
    bad.priority = 101;
    auto pe = error_of([&] { engine.submit(bad); });
    CHECK(pe.first == "STRATA_INVALID_PARAM");
    CHECK(pe.second == "priority must be in [-100, 100], got 101");
  }
  auto e = error_of([&] { engine.submit(request(1, range(0, 64), 1)); });
  CHECK_STR_EQ(e.first, "STRATA_PROMPT_TOO_LONG");
  e = error_of([&] { engine.submit(request(1, range(0, 60), 5)); });
  CHECK_STR_EQ(e.second, "prompt (60 tokens) + max_tokens (5) = 65 exceeds max_model_len 64; max_tokens can be at most 4");
  e = error_of([&] { engine.submit(request(1, {1, 64}, 1)); });
  CHECK_STR_EQ(e.first, "STRATA_INVALID_PARAM");
  CHECK_STR_EQ(e.second, "prompt[1] must be in [0, vocab_size=64), got 64");
  e = error_of([&] { engine.submit(request(1, {1}, 1, -0.5f)); });
  CHECK_STR_EQ(e.second, "temperature must be >= 0 (0 = greedy), got -0.5");
  engine.submit(request(1, {1, 2}, 2));
  e = error_of([&] { engine.submit(request(1, {1, 2}, 2)); });
  CHECK_STR_EQ(e.first, "STRATA_DUPLICATE_REQUEST");
  Driver d(engine);
  d.run();
  CHECK(error_of([&] { engine.submit(request(1, {1, 2}, 2)); }).first.empty());  // finished ids may return

  e = error_of([&] { Engine small(backend, config(3, 16, 64)); });
  CHECK_STR_EQ(e.first, "STRATA_KV_CAPACITY");
  CHECK_STR_EQ(e.second, "max_model_len 64 needs 4 KV blocks of 16 tokens, but the pool has 3 blocks (48 tokens); "
                         "set max_model_len <= 48 or give the KV cache more memory");
  e = error_of([&] { Engine too_long(backend, config(100, 16, 1024)); });
  CHECK_STR_EQ(e.first, "STRATA_INVALID_CONFIG");
  CHECK_STR_EQ(e.second, "max_model_len 1024 exceeds the model's max_position_embeddings 512");
  EngineConfig defaulted = config(32, 16, 0);
  Engine from_model(backend, defaulted);
  CHECK_EQ(from_model.config().max_model_len, 512);
}

TEST_CASE("abort frees blocks within the step, whether running, waiting or not yet drained") {
  PagedEchoBackend backend(kVocab, Rule::kSuccessor);
  EngineConfig c = config(32);
  c.max_num_seqs = 1;
  Engine engine(backend, c);
  engine.submit(request(1, range(0, 40), 50));
  engine.submit(request(2, range(0, 10), 50));
  Driver d(engine);
  d.step();
  CHECK_EQ(engine.stats().kv_blocks_used, 3);
  CHECK_EQ(engine.stats().num_running, 1);
  CHECK_EQ(engine.stats().num_waiting, 1);
  CHECK(engine.abort(1));
  CHECK(engine.abort(2, FinishReason::kTimeout));
  engine.submit(request(3, range(0, 10), 50));
  CHECK(engine.abort(3));
  StepOutput out = d.step();
  CHECK(out.tokens.empty());
  CHECK_EQ(out.aborted.size(), 3u);
  if (out.aborted.size() == 3u) {
    CHECK(out.aborted[0].request_id == 1 && out.aborted[0].reason == FinishReason::kAbort);
    CHECK(out.aborted[1].request_id == 2 && out.aborted[1].reason == FinishReason::kTimeout);
    CHECK(out.aborted[2].request_id == 3 && out.aborted[2].reason == FinishReason::kAbort);
  }
  const EngineStats s = engine.stats();
  CHECK_EQ(s.kv_blocks_used, 0);
  CHECK_EQ(s.num_running + s.num_waiting, 0);
  CHECK_EQ(s.finished_abort, 2);
  CHECK_EQ(s.finished_timeout, 1);
  CHECK(!engine.abort(1));
  CHECK(!engine.abort(99));
  CHECK(error_of([&] { engine.abort(1, FinishReason::kStop); }).first == "STRATA_INVALID_PARAM");
}

TEST_CASE("prefix caching: a repeated prompt hits with identical output; another tenant does not") {
  PagedEchoBackend backend(kVocab, Rule::kContextHash);
  Engine engine(backend, config(64));
  Driver d(engine);
  auto submit = [&](uint64_t id, uint64_t salt) {
    Request r = request(id, range(3, 40), 8);
    r.tenant_salt = salt;
    engine.submit(r);
    d.run();
  };
  submit(1, 0);
  CHECK_EQ(engine.stats().prefix_cache_hits, 0);
  submit(2, 0);
  CHECK_EQ(engine.stats().prefix_cache_hits, 32);  // two full blocks of the 40-token prompt
  submit(3, 7);
  CHECK_EQ(engine.stats().prefix_cache_hits, 32);
  submit(4, 7);
  CHECK_EQ(engine.stats().prefix_cache_hits, 64);
  SamplingParams p;
  p.max_tokens = 8;
  const auto expected = reference(Rule::kContextHash, range(3, 40), p);
  for (uint64_t id = 1; id <= 4; ++id) CHECK(d.by_id[id].tokens == expected);
  CHECK_EQ(engine.stats().prefix_cache_queries, 4 * 40);
  CHECK_EQ(backend.copies, 0);

  // A block-aligned prompt whose blocks are all cached and still in use by a running request:
  // the last token is recomputed in a copy of its block.
  Request a = request(10, range(5, 32), 8);
  engine.submit(a);
  d.step();
  Request b = a;
  b.id = 11;
  engine.submit(b);
  d.step();
  CHECK_EQ(engine.stats().prefix_cache_hits, 64 + 31);
  CHECK_EQ(backend.copies, 1);
  d.run();
  CHECK(d.by_id[10].tokens == d.by_id[11].tokens);
  CHECK(d.by_id[11].tokens == reference(Rule::kContextHash, range(5, 32), a.params));
  CHECK(backend.error.empty());
}

TEST_CASE("a request's output is the same alone and among 32 requests with chunking and preemption") {
  auto target_requests = [] {
    Request greedy = request(1000, range(9, 37), 24);
    Request seeded = request(1001, range(20, 21), 24, 0.8f);
    seeded.params.top_p = 0.9f;
    seeded.params.seed = 5;
    seeded.params.presence_penalty = 0.5f;
    return std::vector<Request>{greedy, seeded};
  };
  std::map<uint64_t, std::vector<int32_t>> alone;
  for (const Request& r : target_requests()) {
    PagedEchoBackend backend(kVocab, Rule::kContextHash);
    Engine engine(backend, config(64));
    engine.submit(r);
    Driver d(engine);
    d.run();
    alone[r.id] = d.by_id[r.id].tokens;
  }
  CHECK_EQ(alone[1000].size(), 24u);

  PagedEchoBackend backend(kVocab, Rule::kContextHash);
  EngineConfig c = config(20, 8, 96);  // 160 slots for 32 requests of up to ~90 tokens
  c.max_num_batched_tokens = 40;
  Engine engine(backend, c);
  std::mt19937 rng(17);
  for (uint64_t id = 0; id < 30; ++id) {
    const int32_t len = std::uniform_int_distribution<int32_t>(1, 60)(rng);
    Request r = request(id, range(static_cast<int32_t>(id), len), std::uniform_int_distribution<int32_t>(1, 30)(rng),
                        id % 3 ? 0.0f : 1.0f);
    engine.submit(r);
  }
  for (const Request& r : target_requests()) engine.submit(r);
  Driver d(engine);
  std::map<uint64_t, int> first_scheduled;  // listed once each, even when preempted
  while (engine.has_unfinished()) {
    for (uint64_t id : d.step().scheduled) ++first_scheduled[id];
  }
  CHECK_EQ(first_scheduled.size(), 32u);
  for (const auto& [id, times] : first_scheduled) CHECK_EQ(times, 1);
  CHECK(d.by_id[1000].tokens == alone[1000]);
  CHECK(d.by_id[1001].tokens == alone[1001]);
  CHECK(engine.stats().num_preemptions > 0);
  CHECK(backend.error.empty());
  CHECK_EQ(engine.stats().kv_blocks_used, 0);
}

// 1,200 requests with random parameters, priorities, tenants and shared prefixes, random
// aborts and timeouts, through a pool small enough to preempt. Every request must finish
// exactly once, greedy ones must match the reference, and every block must come back.
TEST_CASE("randomized stress: 1,200 requests end exactly once and free every block") {
  PagedEchoBackend backend(kVocab, Rule::kContextHash, {0});
  EngineConfig c = config(48, 8, 128);
  c.max_num_batched_tokens = 96;
  c.max_num_seqs = 24;
  Engine engine(backend, c);
  std::mt19937 rng(2024);
  auto pick = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  const std::vector<int32_t> prefixes[3] = {range(1, 24), range(30, 17), range(50, 40)};
  std::map<uint64_t, Request> submitted;
  std::vector<uint64_t> live;
  std::set<uint64_t> aborted_by_us;
  Driver d(engine);
  uint64_t next_id = 1;
  constexpr uint64_t kRequests = 1200;

  while (next_id <= kRequests || engine.has_unfinished()) {
    for (int k = pick(0, 4); k > 0 && next_id <= kRequests; --k) {
      Request r;
      r.id = next_id++;
      if (chance(0.6)) r.prompt = prefixes[pick(0, 2)];
      for (int32_t n = pick(1, 30); n > 0; --n) r.prompt.push_back(pick(1, kVocab - 1));
      SamplingParams& p = r.params;
      p.max_tokens = pick(1, std::min(40, 128 - static_cast<int32_t>(r.prompt.size())));
      const bool greedy = chance(0.4);
      p.temperature = greedy ? 0.0f : static_cast<float>(pick(1, 20)) / 10.0f;
      if (!greedy) {
        if (chance(0.3)) p.top_k = pick(1, 10);
        if (chance(0.3)) p.top_p = static_cast<float>(pick(1, 10)) / 10.0f;
        if (chance(0.3)) p.min_p = static_cast<float>(pick(0, 5)) / 10.0f;
        if (chance(0.3)) p.repetition_penalty = static_cast<float>(pick(5, 20)) / 10.0f;
        if (chance(0.3)) p.frequency_penalty = static_cast<float>(pick(-20, 20)) / 10.0f;
        if (chance(0.3)) p.presence_penalty = static_cast<float>(pick(-20, 20)) / 10.0f;
        if (chance(0.5)) p.seed = static_cast<uint64_t>(pick(0, 1000));
      }
      if (chance(0.2)) p.stop_token_ids = {pick(1, kVocab - 1), pick(1, kVocab - 1)};
      if (chance(0.2)) p.ignore_eos = true;
      if (chance(0.2)) p.min_tokens = pick(0, p.max_tokens);
      if (chance(0.2)) p.logprobs = pick(0, 5);
      r.priority = pick(0, 2);
      r.tenant_salt = static_cast<uint64_t>(pick(0, 2));
      submitted[r.id] = r;
      live.push_back(r.id);
      engine.submit(r);
    }
    if (!live.empty() && chance(0.15)) {
      const size_t i = static_cast<size_t>(pick(0, static_cast<int32_t>(live.size()) - 1));
      if (engine.abort(live[i], chance(0.5) ? FinishReason::kAbort : FinishReason::kTimeout)) {
        aborted_by_us.insert(live[i]);
      }
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    d.step();
    CHECK(engine.block_manager().check_invariants().empty());
    if (d.steps > 200000) break;
  }

  CHECK_EQ(d.by_id.size(), kRequests);
  int64_t greedy_checked = 0;
  for (const auto& [id, c] : d.by_id) {
    CHECK_EQ(c.finishes, 1);
    CHECK(!c.event_after_finish);
    const Request& r = submitted[id];
    CHECK(static_cast<int32_t>(c.tokens.size()) <= r.params.max_tokens);
    if (c.reason == FinishReason::kLength) CHECK_EQ(static_cast<int32_t>(c.tokens.size()), r.params.max_tokens);
    if (c.reason == FinishReason::kAbort || c.reason == FinishReason::kTimeout) CHECK(aborted_by_us.contains(id));
    const auto& p = r.params;
    if (p.temperature == 0.0f && p.min_tokens == 0 && c.reason != FinishReason::kAbort && c.reason != FinishReason::kTimeout) {
      CHECK(c.tokens == reference(Rule::kContextHash, r.prompt, p, {0}));
      ++greedy_checked;
    }
  }
  const EngineStats s = engine.stats();
  CHECK_EQ(s.finished_stop + s.finished_length + s.finished_abort + s.finished_timeout, static_cast<int64_t>(kRequests));
  CHECK_EQ(s.kv_blocks_used, 0);
  CHECK_EQ(s.kv_blocks_free + s.kv_blocks_cached, 48);
  CHECK_EQ(s.num_running + s.num_waiting, 0);
  CHECK(s.num_preemptions > 0);
  CHECK(s.prefix_cache_hits > 0);
  CHECK(s.finished_stop > 0 && s.finished_abort > 0 && s.finished_timeout > 0);
  CHECK(greedy_checked > 200);
  CHECK(backend.error.empty());
  std::printf("  %lld steps, %lld preemptions, prefix hits %lld/%lld tokens, %lld COW copies, %lld greedy checked\n",
              static_cast<long long>(s.num_steps), static_cast<long long>(s.num_preemptions),
              static_cast<long long>(s.prefix_cache_hits), static_cast<long long>(s.prefix_cache_queries),
              static_cast<long long>(backend.copies), static_cast<long long>(greedy_checked));
}

TEST_CASE("submit and abort from another thread while the engine thread steps") {
  PagedEchoBackend backend(kVocab, Rule::kContextHash);
  EngineConfig c = config(40, 8, 128);
  Engine engine(backend, c);
  constexpr uint64_t kRequests = 400;
  std::atomic<bool> producer_done{false};
  std::thread producer([&] {
    std::mt19937 rng(8);
    for (uint64_t id = 1; id <= kRequests; ++id) {
      engine.submit(request(id, range(static_cast<int32_t>(id), 1 + static_cast<int32_t>(rng() % 40)), 1 + rng() % 30,
                            static_cast<float>(rng() % 2)));
      if (rng() % 4 == 0) engine.abort(1 + rng() % id);
      if (rng() % 8 == 0) std::this_thread::yield();
    }
    producer_done = true;
    engine.wake();
  });
  Driver d(engine);
  while (!producer_done || engine.has_unfinished() || engine.stats().num_waiting > 0) {
    if (engine.wait_for_work(std::chrono::milliseconds(5))) d.step();
  }
  producer.join();
  while (engine.has_unfinished() || engine.wait_for_work(std::chrono::milliseconds(0))) d.step();
  CHECK_EQ(d.by_id.size(), kRequests);
  for (const auto& [id, col] : d.by_id) CHECK_EQ(col.finishes, 1);
  CHECK_EQ(engine.stats().kv_blocks_used, 0);
  CHECK(backend.error.empty());
}

TEST_MAIN()
