// The GPU sampler (strata/cuda_sampling.h) against the CPU Sampler on the same logits and the
// same uniform values: random parameter mixes (greedy, temperature, top-k, top-p, min-p,
// penalties over histories that grow step by step, min_tokens masking, raw and processed
// logprobs with n = 0..20) over vocab sizes from 40 to 151,936 and batches of 1 to 64.
//
// Tokens must agree exactly. The one exception is a draw the CPU itself makes within rounding of
// a boundary: the GPU sums the same double weights in another order, so a u within 1e-6 of the
// GPU token's CDF interval, or a top-p / min-p cut within 1e-9 of its limit, may fall either way;
// such rows are counted and shown, and skip the logprob comparison. Logprobs are
// compared by relative L2 error. Every case also runs twice (outputs bitwise identical, or there
// is a race) and checks that the logits were not written.
//
// The reference is core's strata::Sampler (strata_core).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "check_util.h"
#include "strata/cuda_sampling.h"
#include "strata/sampler.h"

namespace cpu = strata;
static_assert(cpu::kGreedyTemperature == strata::cuda::kSamplingGreedyTemperature,
              "the GPU sampler's greedy threshold is core's");

using namespace strata::cuda;
using namespace strata::cuda::checks;

namespace {

// One sequence's penalty entries, updated incrementally: uploaded once, then after each sampled
// token only the entry add_output() names (the engine rebuilds them each step instead).
class PenaltyHistory {
 public:
  void reset(std::span<const int32_t> prompt) {
    entries_.clear();
    index_.clear();
    for (int32_t t : prompt) find_or_add(t);
  }
  // Returns the index of the entry that changed (appended when the token is new).
  size_t add_output(int32_t token) {
    const size_t i = find_or_add(token);
    ++entries_[i].output_count;
    return i;
  }
  const std::vector<PenaltyEntry>& entries() const { return entries_; }

 private:
  size_t find_or_add(int32_t token) {
    auto [it, added] = index_.try_emplace(token, entries_.size());
    if (added) entries_.push_back({token, 0});
    return it->second;
  }
  std::vector<PenaltyEntry> entries_;
  std::unordered_map<int32_t, size_t> index_;
};

float uniform_float(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng()); }
bool coin(double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng()) < p; }

// What a case draws for each row.
struct Mix {
  double greedy = 0.0;         // temperature 0 (or just under kGreedyTemperature)
  double top_k = 0.0, top_p = 0.0, min_p = 0.0;
  double penalties = 0.0;      // repetition / frequency / presence
  double min_tokens = 0.0;     // masking active this step
  double logprobs = 0.3;       // logprobs >= 0
  double grammar = 0.0;        // a structured-output constraint's mask, new each step
};

struct Case {
  std::string name;
  int32_t vocab;
  int32_t batch;
  int steps;
  float sigma;        // logits ~ N(0, sigma)
  float quantum;      // > 0: logits rounded to multiples of it (many exact ties)
  Mix mix;
};

cpu::SamplingParams draw_params(const Case& cs) {
  const Mix& mx = cs.mix;
  cpu::SamplingParams p;
  p.seed = (static_cast<uint64_t>(random_int(0, 1 << 30)) << 20) ^ static_cast<uint64_t>(random_int(0, 1 << 20));
  p.max_tokens = 1024;  // Sequence reserves prompt + max_tokens
  if (coin(mx.greedy)) {
    p.temperature = coin(0.5) ? 0.0f : 0.9e-5f;
  } else {
    p.temperature = coin(0.2) ? 1.0f : uniform_float(0.2f, 2.0f);
  }
  if (coin(mx.top_k)) {
    const int32_t v = cs.vocab;
    const int32_t picks[] = {1, 2, random_int(1, 64), random_int(1, 2048), 2047, 2048, 2049, random_int(2049, 20000),
                             v - 1, v, v + 7, -1};
    p.top_k = std::max<int32_t>(picks[random_int(0, 11)], -1);
    if (p.top_k == 0) p.top_k = 1;
  }
  if (coin(mx.top_p)) {
    const float picks[] = {uniform_float(0.05f, 0.5f), uniform_float(0.5f, 0.95f), uniform_float(0.95f, 0.9999f), 0.9f};
    p.top_p = picks[random_int(0, 3)];
  }
  if (coin(mx.min_p)) {
    const float picks[] = {uniform_float(1e-4f, 0.01f), uniform_float(0.01f, 0.3f), uniform_float(0.3f, 1.0f)};
    p.min_p = picks[random_int(0, 2)];
  }
  if (coin(mx.penalties)) {
    if (coin(0.7)) p.repetition_penalty = coin(0.5) ? uniform_float(0.5f, 1.0f) : uniform_float(1.0f, 2.5f);
    if (coin(0.7)) p.frequency_penalty = uniform_float(-2.0f, 2.0f);
    if (coin(0.7)) p.presence_penalty = uniform_float(-2.0f, 2.0f);
  }
  if (coin(mx.min_tokens)) {
    p.min_tokens = 1000;  // not reached during the case (histories stay under 100)
    const int n_stop = random_int(0, 4);
    for (int i = 0; i < n_stop; ++i) p.stop_token_ids.push_back(random_int(0, cs.vocab - 1));
    p.ignore_eos = coin(0.3);
  } else if (coin(0.2)) {
    p.stop_token_ids.push_back(random_int(0, cs.vocab - 1));  // listed, but min_tokens already reached
  }
  if (coin(mx.logprobs)) {
    const int32_t picks[] = {0, 1, random_int(2, 19), 20};
    p.logprobs = picks[random_int(0, 3)];
    p.processed_logprobs = coin(0.5);
  }
  return p;
}

std::string describe(const cpu::SamplingParams& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "T=%g top_k=%d top_p=%.9g min_p=%.9g rep=%g freq=%g pres=%g min_tokens=%d logprobs=%d%s",
                p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty, p.frequency_penalty,
                p.presence_penalty, p.min_tokens, p.logprobs, p.processed_logprobs ? " processed" : "");
  return buf;
}

// Whether a GPU token that differs from the CPU's is explained by rounding: recomputes, in long
// double from the CPU's processed logits, the kept set and the CDF the CPU drew from. Tokens
// between the two with a total mass under 1e-6 of the total count as the boundary.
bool rounding_explains(const std::vector<float>& x, const cpu::SamplingParams& p, double u, int32_t cpu_token,
                       int32_t gpu_token, std::string& why) {
  if (p.temperature < cpu::kGreedyTemperature) return false;  // argmax: no sums involved
  std::vector<int32_t> c;
  for (int32_t v = 0; v < static_cast<int32_t>(x.size()); ++v) {
    if (x[v] > -std::numeric_limits<float>::infinity()) c.push_back(v);
  }
  if (c.empty()) return false;
  auto better = [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  const bool sorted = p.top_k > 0 || p.top_p < 1.0f;
  if (sorted) std::sort(c.begin(), c.end(), better);
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) c.resize(static_cast<size_t>(p.top_k));
  float m = -std::numeric_limits<float>::infinity();
  for (int32_t t : c) m = std::max(m, x[t]);
  std::vector<long double> w(c.size());
  long double z = 0;
  for (size_t i = 0; i < c.size(); ++i) z += w[i] = std::exp(static_cast<long double>(x[c[i]]) - m);
  bool cut_near = false;
  if (p.top_p < 1.0f) {
    const long double limit = static_cast<long double>(p.top_p) * z;
    long double before = 0;
    size_t keep = 0;
    while (keep < c.size() && before < limit) before += w[keep++];
    const long double prev = keep > 0 ? before - w[keep - 1] : 0;
    if (std::fabs(static_cast<double>(before - limit)) < 1e-9 * static_cast<double>(z) ||
        std::fabs(static_cast<double>(prev - limit)) < 1e-9 * static_cast<double>(z)) {
      cut_near = true;
    }
    c.resize(keep);
    w.resize(keep);
  }
  if (p.min_p > 0.0f) {
    size_t keep = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      if (std::fabs(static_cast<double>(w[i]) - p.min_p) < 1e-12) cut_near = true;
      if (w[i] >= p.min_p) {
        c[keep] = c[i];
        w[keep++] = w[i];
      }
    }
    c.resize(keep);
    w.resize(keep);
  }
  if (cut_near) {
    why = "a top-p/min-p cut within 1e-9 of its limit";
    return true;
  }
  z = 0;
  for (long double v : w) z += v;
  const auto pc = std::find(c.begin(), c.end(), cpu_token) - c.begin();
  const auto pg = std::find(c.begin(), c.end(), gpu_token) - c.begin();
  if (pc == static_cast<std::ptrdiff_t>(c.size()) || pg == static_cast<std::ptrdiff_t>(c.size())) return false;
  // The GPU token's CDF interval [lo, hi): within 1e-6 of u, only the summation order separates them.
  long double before = 0;
  for (std::ptrdiff_t i = 0; i < pg; ++i) before += w[static_cast<size_t>(i)];
  const double lo = static_cast<double>(before / z), hi = static_cast<double>((before + w[static_cast<size_t>(pg)]) / z);
  const double gap = u < lo ? lo - u : u >= hi ? u - hi : 0.0;
  char buf[160];
  std::snprintf(buf, sizeof buf, "u=%.17g, GPU token's CDF interval [%.17g, %.17g), gap %.3g", u, lo, hi, gap);
  why = buf;
  return gap < 1e-6;
}

// A constraint for the CPU sampler's side: the sampler reads only Sequence::allowed, which the
// case draws each step (the engine's mask thread fills it from llguidance).
class DrawnMask final : public cpu::TokenConstraint {
 public:
  bool compute_mask(uint32_t*, size_t) override { return true; }
  bool commit(int32_t) override { return true; }
  bool is_stopped() const override { return false; }
  std::string error() const override { return ""; }
};

// An allowed-token mask as a grammar makes one: a few tokens (a JSON key, a digit), or most of
// the vocabulary (free text in a string), sometimes only stop ids; never empty.
std::vector<uint32_t> draw_mask(int32_t vocab, const std::vector<int32_t>& stops) {
  std::vector<uint32_t> words(static_cast<size_t>((vocab + 31) / 32), 0u);
  const auto allow = [&](int32_t t) { words[static_cast<size_t>(t) >> 5] |= 1u << (static_cast<uint32_t>(t) & 31u); };
  const int mode = random_int(0, 9);
  if (mode < 5) {
    for (int i = random_int(1, 64); i > 0; --i) allow(random_int(0, vocab - 1));
  } else if (mode < 9) {
    for (int32_t t = 0; t < vocab; ++t) {
      if (coin(0.7)) allow(t);
    }
  } else if (!stops.empty()) {
    for (int32_t t : stops) allow(t);  // the grammar is complete: only its end
  } else {
    allow(random_int(0, vocab - 1));
  }
  return words;
}

struct Row {
  std::unique_ptr<cpu::Sequence> seq;
  bool grammar = false;
  PenaltyHistory history;
  int32_t pen_offset = 0, pen_capacity = 0;
};

struct GpuOut {
  std::vector<int32_t> tokens, top_ids, top_counts;
  std::vector<float> logprobs, top_logprobs;
  bool operator==(const GpuOut& o) const {
    auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return tokens == o.tokens && top_ids == o.top_ids && top_counts == o.top_counts && same_bits(logprobs, o.logprobs) &&
           same_bits(top_logprobs, o.top_logprobs);
  }
};

// The sampler's outputs for up to B rows on the device. run() points the args at them, poisons
// them, samples and brings them back; the caller sets the inputs.
struct DeviceSampling {
  explicit DeviceSampling(int32_t B)
      : tokens(static_cast<size_t>(B)), top_ids(static_cast<size_t>(B) * kSamplingMaxTop),
        top_counts(static_cast<size_t>(B)), logprobs(static_cast<size_t>(B)),
        top_logprobs(static_cast<size_t>(B) * kSamplingMaxTop) {}

  GpuOut run(SamplingArgs a) {
    a.tokens = tokens.ptr;
    a.logprobs = logprobs.ptr;
    a.top_ids = top_ids.ptr;
    a.top_logprobs = top_logprobs.ptr;
    a.top_counts = top_counts.ptr;
    tokens.poison();
    logprobs.poison();
    top_ids.poison();
    top_logprobs.poison();
    top_counts.poison();
    sample(a, nullptr);
    STRATA_CK(cudaDeviceSynchronize());
    return GpuOut{tokens.download(), top_ids.download(), top_counts.download(), logprobs.download(),
                  top_logprobs.download()};
  }

  DeviceBuffer<int32_t> tokens, top_ids, top_counts;
  DeviceBuffer<float> logprobs, top_logprobs;
};

void run_case(const Case& cs, Report& report) {
  const int32_t V = cs.vocab, B = cs.batch;
  const std::vector<int32_t> eos = {V - 1, std::min(2, V - 1)};
  cpu::Sampler sampler(V, eos);

  // Rows: a prompt and an output history, the penalty entries built from them.
  std::vector<Row> rows(static_cast<size_t>(B));
  std::vector<PenaltyEntry> pool;
  for (int32_t r = 0; r < B; ++r) {
    Row& row = rows[static_cast<size_t>(r)];
    const int prompt_len = random_int(1, coin(0.2) ? 3000 : 200);
    const int hot = random_int(8, V);  // a narrow id range makes repeats, as text does
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int32_t& t : prompt) t = random_int(0, hot - 1);
    row.seq = std::make_unique<cpu::Sequence>(static_cast<uint64_t>(r), prompt, draw_params(cs));
    row.grammar = coin(cs.mix.grammar);
    if (row.grammar) row.seq->constraint = std::make_shared<DrawnMask>();
    row.history.reset(prompt);
    const int outputs = random_int(0, 60);
    for (int i = 0; i < outputs; ++i) {
      const int32_t t = random_int(0, std::min(hot, 64) - 1);
      row.seq->append_token(t);
      row.history.add_output(t);
    }
    row.pen_offset = static_cast<int32_t>(pool.size());
    row.pen_capacity = static_cast<int32_t>(row.history.entries().size()) + cs.steps;
    pool.insert(pool.end(), row.history.entries().begin(), row.history.entries().end());
    pool.resize(static_cast<size_t>(row.pen_offset + row.pen_capacity), PenaltyEntry{-1, 0});
  }
  DeviceBuffer<PenaltyEntry> d_pool(pool.size());
  d_pool.upload(pool);

  const size_t n = static_cast<size_t>(B) * V;
  DeviceBuffer<float> d_logits(n);
  DeviceBuffer<SeqSamplingParams> d_params(static_cast<size_t>(B));
  DeviceSampling out(B);

  size_t exact = 0, explained = 0, wrong = 0, repeat_fail = 0, touched = 0;
  std::vector<double> lp_ref, top_ref;
  std::vector<float> lp_got, top_got;
  bool tops_ok = true;
  int shown = 0;

  for (int step = 0; step < cs.steps; ++step) {
    std::vector<float> logits = random_floats(n, cs.sigma);
    if (cs.quantum > 0.0f) {
      for (float& v : logits) v = std::round(v / cs.quantum) * cs.quantum;
    }
    // Stop and eos ids near the top, so that masking them changes the outcome.
    std::vector<SeqSamplingParams> params(static_cast<size_t>(B));
    std::vector<int32_t> stops;
    std::vector<uint32_t> allowed;
    std::vector<int32_t> allowed_offset(static_cast<size_t>(B), -1);
    for (int32_t r = 0; r < B; ++r) {
      Row& row = rows[static_cast<size_t>(r)];
      const cpu::SamplingParams& p = row.seq->params;
      float* x = logits.data() + static_cast<size_t>(r) * V;
      std::vector<int32_t> ids = p.stop_token_ids;
      if (!p.ignore_eos) ids.insert(ids.end(), eos.begin(), eos.end());
      if (p.min_tokens > 0) {
        for (int32_t t : ids) x[t] += 3.0f * cs.sigma;
      }
      SeqSamplingParams& g = params[static_cast<size_t>(r)];
      cpu::Rng draw = row.seq->rng;  // the draw the CPU sampler is about to make
      g = cpu::sampling_row(p, draw.uniform());
      g.mask_stop_ids = row.seq->num_output_tokens() < p.min_tokens ? 1 : 0;
      g.penalty_offset = row.pen_offset;
      g.penalty_count = static_cast<int32_t>(row.history.entries().size());
      g.stop_offset = static_cast<int32_t>(stops.size());
      g.stop_count = static_cast<int32_t>(ids.size());
      stops.insert(stops.end(), ids.begin(), ids.end());
      if (row.grammar) {  // what the engine does: the mask, and min_tokens off when only stops remain
        row.seq->allowed = draw_mask(V, ids);
        row.seq->mask_ok = true;
        allowed_offset[static_cast<size_t>(r)] = static_cast<int32_t>(allowed.size());
        allowed.insert(allowed.end(), row.seq->allowed.begin(), row.seq->allowed.end());
        if (g.mask_stop_ids != 0 && !sampler.allows_non_stop(p, row.seq->allowed.data())) g.mask_stop_ids = 0;
      }
    }
    d_logits.upload(logits);
    d_params.upload(params);
    DeviceBuffer<int32_t> d_stops(std::max<size_t>(stops.size(), 1));
    if (!stops.empty()) d_stops.upload(stops);

    SamplingArgs a;
    a.logits = d_logits.ptr;
    a.n_seqs = B;
    a.vocab = V;
    a.params = d_params.ptr;
    a.penalty_entries = d_pool.ptr;
    a.stop_ids = d_stops.ptr;
    DeviceBuffer<uint32_t> d_allowed(std::max<size_t>(allowed.size(), 1));
    DeviceBuffer<int32_t> d_allowed_offset(static_cast<size_t>(B));
    if (!allowed.empty()) {
      d_allowed.upload(allowed);
      d_allowed_offset.upload(allowed_offset);
      a.allowed = d_allowed.ptr;
      a.allowed_offset = d_allowed_offset.ptr;
    }
    const GpuOut got = out.run(a);
    if (!(out.run(a) == got)) ++repeat_fail;
    const std::vector<float> after = d_logits.download();
    if (std::memcmp(after.data(), logits.data(), n * sizeof(float)) != 0) ++touched;

    for (int32_t r = 0; r < B; ++r) {
      Row& row = rows[static_cast<size_t>(r)];
      const cpu::SamplingParams& p = row.seq->params;
      std::vector<float> x(logits.begin() + static_cast<std::ptrdiff_t>(r) * V,
                           logits.begin() + static_cast<std::ptrdiff_t>(r + 1) * V);
      const double u = params[static_cast<size_t>(r)].uniform;
      cpu::SampleResult res;
      sampler.sample(*row.seq, x.data(), res);
      const int32_t gtok = got.tokens[static_cast<size_t>(r)];
      bool compare_lp = true;
      if (gtok == res.token) {
        ++exact;
      } else {
        std::string why;
        if (rounding_explains(x, p, u, res.token, gtok, why)) {
          ++explained;
          compare_lp = false;
          std::printf("     %s step %d row %d: GPU %d, CPU %d, explained by rounding: %s\n", cs.name.c_str(), step, r,
                      gtok, res.token, why.c_str());
        } else {
          ++wrong;
          compare_lp = false;
          if (shown++ < 8) {
            std::printf("     %s step %d row %d: GPU token %d, CPU token %d, u=%.17g (%s) %s\n", cs.name.c_str(), step, r,
                        gtok, res.token, u, why.c_str(), describe(p).c_str());
          }
        }
      }
      if (compare_lp && p.logprobs >= 0) {
        lp_ref.push_back(res.logprob);
        lp_got.push_back(got.logprobs[static_cast<size_t>(r)]);
        const size_t base = static_cast<size_t>(r) * kSamplingMaxTop;
        const int32_t cnt = got.top_counts[static_cast<size_t>(r)];
        bool ok = cnt == static_cast<int32_t>(res.top.size());
        for (int32_t i = 0; ok && i < kSamplingMaxTop; ++i) {
          if (i < cnt) {
            ok = got.top_ids[base + static_cast<size_t>(i)] == res.top[static_cast<size_t>(i)].token;
            top_ref.push_back(res.top[static_cast<size_t>(i)].logprob);
            top_got.push_back(got.top_logprobs[base + static_cast<size_t>(i)]);
          } else {
            ok = got.top_ids[base + static_cast<size_t>(i)] == -1 &&
                 got.top_logprobs[base + static_cast<size_t>(i)] == -std::numeric_limits<float>::infinity();
          }
        }
        if (!ok) {
          if (tops_ok) {
            std::printf("     %s step %d row %d: top list differs (GPU %d entries, CPU %zu) %s\n", cs.name.c_str(), step,
                        r, cnt, res.top.size(), describe(p).c_str());
          }
          tops_ok = false;
        }
      }
      // Both sides continue from the CPU's token: the next step's penalties see the same history.
      row.seq->append_token(res.token);
      const size_t changed = row.history.add_output(res.token);
      if (changed >= static_cast<size_t>(row.pen_capacity)) {
        std::fprintf(stderr, "penalty capacity exceeded\n");
        std::exit(1);
      }
      STRATA_CK(cudaMemcpy(d_pool.ptr + row.pen_offset + changed, &row.history.entries()[changed], sizeof(PenaltyEntry),
                           cudaMemcpyHostToDevice));
    }
  }

  const std::string shape = "v=" + std::to_string(V) + " b=" + std::to_string(B) + " steps=" + std::to_string(cs.steps);
  std::printf("     %s: %zu exact, %zu explained by rounding, %zu wrong\n", cs.name.c_str(), exact, explained, wrong);
  report.add_exact(cs.name + " tokens", "f32", shape, wrong == 0);
  report.add_exact(cs.name + " repeatable", "f32", shape, repeat_fail == 0);
  report.add_exact(cs.name + " logits kept", "f32", shape, touched == 0);
  if (!lp_ref.empty()) report.add(cs.name + " logprob", "f32", shape, compare(lp_ref, lp_got), 1e-6);
  if (!top_ref.empty()) {
    report.add_exact(cs.name + " top ids", "f32", shape, tops_ok);
    report.add(cs.name + " top logprobs", "f32", shape, compare(top_ref, top_got), 1e-6);
  }
}

}  // namespace

int main() {
  require_device();
  run_seed();
  constexpr int32_t kLlama = 128256, kQwen = 151936;
  Mix mixed;
  mixed.greedy = 0.15;
  mixed.top_k = 0.4;
  mixed.top_p = 0.4;
  mixed.min_p = 0.25;
  mixed.penalties = 0.3;
  mixed.min_tokens = 0.15;
  mixed.logprobs = 0.5;
  auto only = [](auto edit) {
    Mix m;
    edit(m);
    return m;
  };
  const std::vector<Case> cases = {
      {"greedy", kLlama, 64, 1, 2.0f, 0.0f, only([](Mix& m) { m.greedy = 1.0; m.logprobs = 0.5; })},
      {"temperature", kLlama, 64, 1, 2.0f, 0.0f, only([](Mix&) {})},
      {"top_k", kLlama, 64, 1, 2.0f, 0.0f, only([](Mix& m) { m.top_k = 1.0; })},
      {"top_p", kLlama, 64, 1, 2.0f, 0.0f, only([](Mix& m) { m.top_p = 1.0; })},
      {"top_p flat", kLlama, 32, 1, 0.3f, 0.0f, only([](Mix& m) { m.top_p = 1.0; })},
      {"top_p peaked", kLlama, 32, 1, 6.0f, 0.0f, only([](Mix& m) { m.top_p = 1.0; m.logprobs = 0.8; })},
      {"min_p", kLlama, 64, 1, 2.0f, 0.0f, only([](Mix& m) { m.min_p = 1.0; })},
      {"all three", kLlama, 64, 1, 2.0f, 0.0f, only([](Mix& m) { m.top_k = 1.0; m.top_p = 1.0; m.min_p = 1.0; })},
      {"penalties", 32003, 16, 4, 2.0f, 0.0f, only([](Mix& m) { m.penalties = 1.0; m.top_p = 0.5; m.top_k = 0.3; })},
      {"min_tokens", 2048, 32, 3, 2.0f, 0.0f, only([](Mix& m) { m.min_tokens = 0.8; m.greedy = 0.3; m.top_k = 0.3; })},
      {"logprobs", kLlama, 64, 1, 2.0f, 0.0f,
       only([](Mix& m) { m.logprobs = 1.0; m.greedy = 0.2; m.top_k = 0.4; m.top_p = 0.4; m.min_p = 0.3; })},
      {"ties", kLlama, 32, 1, 2.0f, 0.5f, only([](Mix& m) { m.top_k = 0.5; m.top_p = 0.6; m.min_p = 0.3; m.logprobs = 0.6; })},
      {"ties dense", 20011, 16, 1, 0.4f, 0.25f, only([](Mix& m) { m.top_p = 0.8; m.logprobs = 0.6; })},
      {"mixed 2048", 2048, 64, 2, 2.0f, 0.0f, mixed},
      {"mixed odd", 50257, 7, 2, 2.0f, 0.0f, mixed},
      {"mixed qwen", kQwen, 8, 2, 3.0f, 0.0f, mixed},
      {"mixed batch 1", kLlama, 1, 12, 2.0f, 0.0f, mixed},
      {"mixed small", 1000, 1, 8, 2.0f, 0.0f, mixed},
      {"grammar", kLlama, 32, 2, 2.0f, 0.0f,
       only([](Mix& m) { m.grammar = 0.8; m.top_k = 0.3; m.top_p = 0.4; m.min_p = 0.2; m.logprobs = 0.6; })},
      {"grammar mixed", 49152, 16, 3, 2.0f, 0.0f,
       only([](Mix& m) { m.grammar = 0.6; m.penalties = 0.5; m.min_tokens = 0.4; m.greedy = 0.3; m.logprobs = 0.5; })},
      {"all masked", 40, 4, 1, 1.0f, 0.0f, only([](Mix& m) { m.logprobs = 0.7; })},
  };
  Report report;
  for (const Case& cs : cases) {
    if (cs.name == "all masked") {  // every id a stop id under min_tokens: the CPU's token 0 fallback
      cpu::Sampler sampler(cs.vocab, {});
      const int32_t V = cs.vocab;
      std::vector<int32_t> all(static_cast<size_t>(V));
      for (int32_t i = 0; i < V; ++i) all[static_cast<size_t>(i)] = i;
      std::vector<float> logits = random_floats(static_cast<size_t>(V) * cs.batch, cs.sigma);
      std::vector<SeqSamplingParams> params(static_cast<size_t>(cs.batch));
      std::vector<int32_t> stops;
      std::vector<cpu::SampleResult> ref(static_cast<size_t>(cs.batch));
      for (int32_t r = 0; r < cs.batch; ++r) {
        cpu::SamplingParams p = draw_params(cs);
        p.stop_token_ids = all;
        p.min_tokens = 4;
        p.logprobs = r % 2 ? 3 : 0;
        p.processed_logprobs = r >= 2;
        cpu::Sequence seq(0, {1}, p);
        SeqSamplingParams& g = params[static_cast<size_t>(r)];
        g = cpu::sampling_row(p, cpu::Rng(seq.rng).uniform());
        g.mask_stop_ids = 1;
        g.stop_offset = static_cast<int32_t>(stops.size());
        g.stop_count = V;
        stops.insert(stops.end(), all.begin(), all.end());
        std::vector<float> x(logits.begin() + static_cast<std::ptrdiff_t>(r) * V,
                             logits.begin() + static_cast<std::ptrdiff_t>(r + 1) * V);
        sampler.sample(seq, x.data(), ref[static_cast<size_t>(r)]);
      }
      DeviceBuffer<float> d_logits(logits.size());
      d_logits.upload(logits);
      DeviceBuffer<SeqSamplingParams> d_params(params.size());
      d_params.upload(params);
      DeviceBuffer<int32_t> d_stops(stops.size());
      d_stops.upload(stops);
      SamplingArgs a;
      a.logits = d_logits.ptr;
      a.n_seqs = cs.batch;
      a.vocab = V;
      a.params = d_params.ptr;
      a.stop_ids = d_stops.ptr;
      const GpuOut got = DeviceSampling(cs.batch).run(a);
      const auto& tokens = got.tokens;
      const auto& lps = got.logprobs;
      const auto& counts = got.top_counts;
      const auto& top_ids = got.top_ids;
      bool ok = true;
      std::vector<double> lp_ref;
      std::vector<float> lp_got;
      for (int32_t r = 0; r < cs.batch; ++r) {
        const cpu::SampleResult& want = ref[static_cast<size_t>(r)];
        ok = ok && tokens[static_cast<size_t>(r)] == want.token &&
             counts[static_cast<size_t>(r)] == static_cast<int32_t>(want.top.size());
        for (size_t i = 0; ok && i < want.top.size(); ++i) {
          ok = top_ids[static_cast<size_t>(r) * kSamplingMaxTop + i] == want.top[i].token;
        }
        lp_ref.push_back(want.logprob);
        lp_got.push_back(lps[static_cast<size_t>(r)]);
      }
      const std::string shape = "v=" + std::to_string(V) + " b=" + std::to_string(cs.batch);
      report.add_exact("all masked tokens", "f32", shape, ok);
      report.add("all masked logprob", "f32", shape, compare(lp_ref, lp_got), 1e-6);
      continue;
    }
    run_case(cs, report);
  }
  return report.finish("check_cuda_sampling");
}
