// Sampler: exact processing on hand-made logits, seeded reproducibility independent of the
// batch, logprob normalisation, and parameter validation.
#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "strata/sampler.h"
#include "test_util.h"

using namespace strata;

namespace {

std::unique_ptr<Sequence> make_seq(std::vector<int32_t> prompt, SamplingParams p, std::vector<int32_t> outputs = {}) {
  auto s = std::make_unique<Sequence>(1, std::move(prompt), std::move(p));
  for (int32_t t : outputs) s->append_token(t);
  return s;
}

SamplingParams params(std::function<void(SamplingParams&)> edit) {
  SamplingParams p;
  edit(p);
  return p;
}

// log of probabilities 0.5, 0.3, 0.15, 0.05
std::vector<float> four() { return {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)}; }

SampleResult run(Sampler& sampler, std::vector<float> logits, const SamplingParams& p) {
  auto s = make_seq({0}, p);
  SampleResult r;
  sampler.sample(*s, logits.data(), r);
  return r;
}

// The kept set, as the top-n logprobs list shows it (n = vocab).
std::vector<int32_t> kept(Sampler& sampler, const SamplingParams& base) {
  SamplingParams p = base;
  p.logprobs = 4;
  p.processed_logprobs = true;
  std::vector<int32_t> ids;
  for (auto t : run(sampler, four(), p).top) ids.push_back(t.token);
  return ids;
}

using Ids = std::vector<int32_t>;

}  // namespace

TEST_CASE("greedy is argmax, ties to the lowest id; top_k=1 is greedy at any temperature") {
  Sampler sampler(4, {});
  CHECK_EQ(run(sampler, {1, 3, 2, 3}, params([](auto& p) { p.temperature = 0; })).token, 1);
  CHECK_EQ(run(sampler, {-5, -1, -2, -7}, params([](auto& p) { p.temperature = 0; })).token, 1);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto p = params([&](auto& q) { q.top_k = 1; q.temperature = 1.5f; q.seed = seed; });
    auto s = make_seq({0}, p);
    std::vector<float> logits = four();
    SampleResult r;
    sampler.sample(*s, logits.data(), r);
    CHECK_EQ(r.token, 0);
  }
}

TEST_CASE("top_k, top_p and min_p keep exactly the hand-computed sets") {
  Sampler sampler(4, {});
  CHECK((kept(sampler, params([](auto& p) { p.top_k = 2; })) == Ids{0, 1}));
  CHECK((kept(sampler, params([](auto& p) { p.top_k = -1; })) == Ids{0, 1, 2, 3}));
  // top_p keeps a token while the mass before it is < top_p.
  CHECK((kept(sampler, params([](auto& p) { p.top_p = 0.45f; })) == Ids{0}));
  CHECK((kept(sampler, params([](auto& p) { p.top_p = 0.79f; })) == Ids{0, 1}));
  CHECK((kept(sampler, params([](auto& p) { p.top_p = 0.85f; })) == Ids{0, 1, 2}));
  CHECK((kept(sampler, params([](auto& p) { p.top_p = 0.96f; })) == Ids{0, 1, 2, 3}));
  // min_p keeps p >= min_p * 0.5.
  CHECK((kept(sampler, params([](auto& p) { p.min_p = 0.25f; })) == Ids{0, 1, 2}));
  CHECK((kept(sampler, params([](auto& p) { p.min_p = 0.5f; })) == Ids{0, 1}));
  CHECK((kept(sampler, params([](auto& p) { p.min_p = 0.7f; })) == Ids{0}));
  // top_p applies to the top-k renormalised mass: 0.5 / 0.8 = 0.625 >= 0.6 drops token 1.
  CHECK((kept(sampler, params([](auto& p) { p.top_k = 2; p.top_p = 0.6f; })) == Ids{0}));

  auto r = run(sampler, four(), params([](auto& p) { p.top_p = 0.85f; p.logprobs = 4; p.processed_logprobs = true; }));
  CHECK_EQ(r.top.size(), 3u);
  CHECK_NEAR(r.top[0].logprob, std::log(0.5 / 0.95), 1e-6);
  CHECK_NEAR(r.top[1].logprob, std::log(0.3 / 0.95), 1e-6);
  CHECK_NEAR(r.top[2].logprob, std::log(0.15 / 0.95), 1e-6);
}

TEST_CASE("temperature scales logits before the softmax") {
  Sampler sampler(3, {});
  auto r = run(sampler, {0, 1, 2}, params([](auto& p) { p.temperature = 0.5f; p.logprobs = 3; p.processed_logprobs = true; }));
  const double lse = std::log(std::exp(0.0) + std::exp(2.0) + std::exp(4.0));
  CHECK_EQ(r.top.size(), 3u);
  CHECK(r.top[0].token == 2 && r.top[1].token == 1 && r.top[2].token == 0);
  CHECK_NEAR(r.top[0].logprob, 4.0 - lse, 1e-6);
  CHECK_NEAR(r.top[2].logprob, 0.0 - lse, 1e-6);
}

TEST_CASE("repetition, frequency and presence penalties match hand-computed logits") {
  Sampler sampler(5, {});
  // prompt {0, 1}, outputs {1, 3, 3}. Repetition 2 on {0, 1, 3}: 2 -> 1, -1 -> -2, 1 -> 0.5.
  // Then over outputs: token 1 (count 1): -0.5 - 0.25; token 3 (count 2): -1.0 - 0.25.
  auto s = make_seq({0, 1}, params([](auto& p) {
                      p.repetition_penalty = 2.0f;
                      p.frequency_penalty = 0.5f;
                      p.presence_penalty = 0.25f;
                    }),
                    {1, 3, 3});
  std::vector<float> x = {2, -1, 0.5f, 1, -2};
  SampleResult r;
  sampler.sample(*s, x.data(), r);
  const std::vector<float> expected = {1.0f, -2.75f, 0.5f, -0.75f, -2.0f};
  for (size_t i = 0; i < 5; ++i) CHECK_NEAR(x[i], expected[i], 1e-6);

  auto g = make_seq({4}, params([](auto& p) { p.temperature = 0; p.repetition_penalty = 10.0f; }), {});
  std::vector<float> y = {1, 0, 0, 0, 3};  // 3 / 10 = 0.3 < 1: the penalty flips the argmax
  sampler.sample(*g, y.data(), r);
  CHECK_EQ(r.token, 0);
}

TEST_CASE("min_tokens masks eos and stop ids until reached; ignore_eos leaves eos alone") {
  Sampler sampler(4, {3});
  auto greedy_min2 = params([](auto& p) { p.temperature = 0; p.min_tokens = 2; });
  auto pick = [&](const SamplingParams& p, std::vector<int32_t> outputs) {
    auto s = make_seq({0}, p, std::move(outputs));
    std::vector<float> x = {0, 1, 2, 5};
    SampleResult r;
    sampler.sample(*s, x.data(), r);
    return r.token;
  };
  CHECK_EQ(pick(greedy_min2, {}), 2);
  CHECK_EQ(pick(greedy_min2, {1}), 2);
  CHECK_EQ(pick(greedy_min2, {1, 1}), 3);
  auto with_stop = greedy_min2;
  with_stop.stop_token_ids = {2};
  CHECK_EQ(pick(with_stop, {}), 1);
  auto ignore = greedy_min2;
  ignore.ignore_eos = true;
  CHECK_EQ(pick(ignore, {}), 3);
  CHECK(sampler.is_eos(3) && !sampler.is_eos(2));
}

TEST_CASE("logprobs are a normalised log-softmax of the processed distribution") {
  Sampler sampler(8, {});
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> x(8);
    for (auto& v : x) v = normal(rng);
    auto p = params([&](auto& q) {
      q.temperature = 0.7f;
      q.logprobs = 8;
      q.processed_logprobs = true;
      q.seed = static_cast<uint64_t>(trial);
      if (trial % 2) q.min_p = 0.1f;
    });
    auto r = run(sampler, x, p);
    double mass = 0.0;
    bool found = false;
    for (size_t i = 0; i < r.top.size(); ++i) {
      mass += std::exp(static_cast<double>(r.top[i].logprob));
      if (i > 0) CHECK(r.top[i - 1].logprob >= r.top[i].logprob);
      if (r.top[i].token == r.token) {
        found = true;
        CHECK_NEAR(r.top[i].logprob, r.logprob, 1e-6);
      }
    }
    CHECK(found);
    CHECK_NEAR(mass, 1.0, 1e-5);
    if (trial % 2 == 0) CHECK_EQ(r.top.size(), 8u);
  }
  auto g = run(sampler, {1, 2, 3, -1e30f, 0, 0, 0, 0}, params([](auto& p) { p.temperature = 0; p.logprobs = 2; p.processed_logprobs = true; }));
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + 4.0);
  CHECK_EQ(g.token, 2);
  CHECK_NEAR(g.logprob, 3.0 - lse, 1e-6);
  CHECK(g.top.size() == 2u && g.top[0].token == 2 && g.top[1].token == 1);
  CHECK_EQ(run(sampler, {1, 2, 3, 0, 0, 0, 0, 0}, SamplingParams{}).top.size(), 0u);
}

TEST_CASE("draws follow the processed distribution") {
  Sampler sampler(4, {});
  auto s = make_seq({0}, params([](auto& p) { p.seed = 11; }));
  int counts[4] = {0, 0, 0, 0};
  SampleResult r;
  constexpr int kDraws = 40000;
  for (int i = 0; i < kDraws; ++i) {
    auto x = four();
    sampler.sample(*s, x.data(), r);
    ++counts[r.token];
  }
  const double expected[4] = {0.5, 0.3, 0.15, 0.05};
  for (int t = 0; t < 4; ++t) CHECK_NEAR(counts[t] / static_cast<double>(kDraws), expected[t], 0.01);
}

namespace {

// Logits that depend on the sequence's history, as a model's would.
void history_logits(const Sequence& s, std::vector<float>& x) {
  for (size_t v = 0; v < x.size(); ++v) {
    x[v] = 2.0f * std::sin(0.37f * static_cast<float>(v) + 0.11f * static_cast<float>(s.tokens.back()) +
                           static_cast<float>(s.num_tokens()));
  }
}

std::vector<int32_t> generate(Sampler& sampler, Sequence& s, int n, std::mt19937* noise, std::vector<std::unique_ptr<Sequence>>* others) {
  std::vector<float> x(static_cast<size_t>(sampler.vocab_size()));
  SampleResult r;
  for (int i = 0; i < n; ++i) {
    if (noise) {  // a varying batch around s: before and after it, random parameters
      const int before = std::uniform_int_distribution<int>(0, 3)(*noise);
      const int after = std::uniform_int_distribution<int>(0, 3)(*noise);
      auto other = [&] {
        auto& o = *(*others)[std::uniform_int_distribution<size_t>(0, others->size() - 1)(*noise)];
        history_logits(o, x);
        sampler.sample(o, x.data(), r);
        o.append_token(r.token);
      };
      for (int k = 0; k < before; ++k) other();
      history_logits(s, x);
      sampler.sample(s, x.data(), r);
      s.append_token(r.token);
      for (int k = 0; k < after; ++k) other();
    } else {
      history_logits(s, x);
      sampler.sample(s, x.data(), r);
      s.append_token(r.token);
    }
  }
  return {s.output().begin(), s.output().end()};
}

}  // namespace

TEST_CASE("a seeded request samples the same tokens whatever else is sampled around it") {
  const auto seeded = params([](auto& p) {
    p.seed = 42;
    p.top_p = 0.95f;
    p.frequency_penalty = 0.3f;
    p.max_tokens = 64;
  });
  Sampler a(50, {}), b(50, {});
  auto alone = make_seq({1, 2, 3}, seeded);
  const auto expected = generate(a, *alone, 60, nullptr, nullptr);

  std::mt19937 noise(5);
  std::vector<std::unique_ptr<Sequence>> others;
  for (int i = 0; i < 6; ++i) {
    others.push_back(make_seq({i}, params([&](auto& p) {
                                p.seed = static_cast<uint64_t>(100 + i);
                                p.temperature = 0.3f * static_cast<float>(i);
                                p.top_k = i;
                                p.repetition_penalty = 1.0f + 0.1f * static_cast<float>(i);
                                p.max_tokens = 1000;
                              })));
  }
  auto crowded = make_seq({1, 2, 3}, seeded);
  CHECK((generate(b, *crowded, 60, &noise, &others) == expected));

  auto other_seed = make_seq({1, 2, 3}, params([](auto& p) { p.seed = 43; p.top_p = 0.95f; p.max_tokens = 64; }));
  CHECK(generate(a, *other_seed, 60, nullptr, nullptr) != expected);
}

TEST_CASE("invalid parameters throw STRATA_INVALID_PARAM naming the field and range") {
  struct Case {
    std::function<void(SamplingParams&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {[](auto& p) { p.temperature = -1; }, "temperature must be >= 0 (0 = greedy), got -1"},
      {[](auto& p) { p.temperature = NAN; }, "temperature must be >= 0 (0 = greedy), got nan"},
      {[](auto& p) { p.top_k = -2; }, "top_k must be -1 or 0 (off) or >= 1, got -2"},
      {[](auto& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5"},
      {[](auto& p) { p.top_p = 0; }, "top_p must be in (0, 1], got 0"},
      {[](auto& p) { p.min_p = 1.5f; }, "min_p must be in [0, 1], got 1.5"},
      {[](auto& p) { p.repetition_penalty = 0; }, "repetition_penalty must be > 0 (1 = off), got 0"},
      {[](auto& p) { p.frequency_penalty = 2.5f; }, "frequency_penalty must be in [-2, 2], got 2.5"},
      {[](auto& p) { p.presence_penalty = -3; }, "presence_penalty must be in [-2, 2], got -3"},
      {[](auto& p) { p.max_tokens = 0; }, "max_tokens must be >= 1, got 0"},
      {[](auto& p) { p.min_tokens = 20; }, "min_tokens must be in [0, max_tokens=16], got 20"},
      {[](auto& p) { p.logprobs = 21; }, "logprobs must be in [-1, 20] (-1 = off), got 21"},
      {[](auto& p) { p.stop_token_ids = {1, 100}; }, "stop_token_ids[1] must be in [0, vocab_size=50), got 100"},
  };
  for (const Case& c : cases) {
    const auto e = error_of([&] { validate(params(c.edit), 50); });
    CHECK_STR_EQ(e.first, "STRATA_INVALID_PARAM");
    CHECK_STR_EQ(e.second, c.message);
  }
  CHECK(error_of([] { validate(SamplingParams{}, 50); }).first.empty());
  CHECK(error_of([] { validate(params([](auto& p) { p.top_k = -1; p.logprobs = 20; p.min_tokens = 16; }), 50); })
            .first.empty());
}

TEST_CASE("raw logprobs (the default) ignore penalties, temperature and truncation and list n entries") {
  Sampler sampler(8, {});
  const std::vector<float> logits = {1, 2, 3, -1e30f, 0, 0.5f, 0, 0};
  auto r = run(sampler, logits, params([](auto& p) {
    p.temperature = 0.3f;
    p.top_p = 0.5f;
    p.top_k = 2;
    p.repetition_penalty = 1.7f;
    p.logprobs = 5;
  }));
  double z = 0.0;
  for (float v : logits) z += std::exp(static_cast<double>(v) - 3.0);
  const double lse = 3.0 + std::log(z);
  CHECK_EQ(r.top.size(), 5u);
  const int32_t expected_ids[] = {2, 1, 0, 5, 4};  // by raw logit, ties by lower id
  for (size_t i = 0; i < 5; ++i) {
    CHECK_EQ(r.top[i].token, expected_ids[i]);
    CHECK_NEAR(r.top[i].logprob, logits[static_cast<size_t>(expected_ids[i])] - lse, 1e-6);
  }
  CHECK_NEAR(r.logprob, logits[static_cast<size_t>(r.token)] - lse, 1e-6);
}

TEST_MAIN()
