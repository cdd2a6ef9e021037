#include "strata/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace strata {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

Sampler::Sampler(int32_t vocab_size, std::vector<int32_t> eos_token_ids)
    : vocab_size_(vocab_size), eos_(std::move(eos_token_ids)), seen_(static_cast<size_t>(vocab_size), 0) {
  cand_.reserve(static_cast<size_t>(vocab_size));
  weight_.reserve(static_cast<size_t>(vocab_size));
}

SamplingRow sampling_row(const SamplingParams& p, double uniform) {
  SamplingRow r;
  r.uniform = uniform;
  r.temperature = p.temperature;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.repetition_penalty = p.repetition_penalty;
  r.frequency_penalty = p.frequency_penalty;
  r.presence_penalty = p.presence_penalty;
  r.top_k = p.top_k;
  r.logprobs = p.logprobs;
  r.processed_logprobs = p.processed_logprobs ? 1 : 0;
  return r;
}

bool Sampler::is_eos(int32_t token) const { return std::find(eos_.begin(), eos_.end(), token) != eos_.end(); }

uint32_t Sampler::next_epoch() {
  if (++epoch_ == 0) {
    std::fill(seen_.begin(), seen_.end(), 0);
    epoch_ = 1;
  }
  return epoch_;
}

void Sampler::apply_penalties(const Sequence& seq, float* x) {
  const SamplingParams& p = seq.params;
  if (p.repetition_penalty != 1.0f) {  // HF: once per distinct token of prompt + output
    const uint32_t e = next_epoch();
    const float r = p.repetition_penalty;
    for (int32_t t : seq.tokens) {
      if (seen_[t] == e) continue;
      seen_[t] = e;
      x[t] = x[t] > 0.0f ? x[t] / r : x[t] * r;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {  // OpenAI: output tokens only
    const uint32_t e = next_epoch();
    for (int32_t t : seq.output()) {
      x[t] -= p.frequency_penalty;
      if (seen_[t] != e) {
        seen_[t] = e;
        x[t] -= p.presence_penalty;
      }
    }
  }
}

void Sampler::mask_stops(const SamplingParams& p, float* x) const {
  for (int32_t t : p.stop_token_ids) x[t] = kNegInf;
  if (!p.ignore_eos) {
    for (int32_t t : eos_) {
      if (t >= 0 && t < vocab_size_) x[t] = kNegInf;
    }
  }
}

void Sampler::apply_constraint(const uint32_t* allowed, float* x) const {
  const int32_t words = (vocab_size_ + 31) / 32;
  for (int32_t w = 0; w < words; ++w) {
    const uint32_t bits = allowed[w];
    if (bits == ~0u) continue;
    const int32_t base = w * 32;
    const int32_t end = std::min(base + 32, vocab_size_);
    for (int32_t t = base; t < end; ++t) {
      if (((bits >> (t - base)) & 1u) == 0) x[t] = kNegInf;
    }
  }
}

bool Sampler::allows_non_stop(const SamplingParams& p, const uint32_t* allowed) {
  int64_t n = 0;
  const int32_t words = (vocab_size_ + 31) / 32;
  for (int32_t w = 0; w < words; ++w) n += std::popcount(allowed[w]);
  const uint32_t e = next_epoch();
  auto drop = [&](int32_t t) {
    if (t < 0 || t >= vocab_size_ || seen_[t] == e) return;
    seen_[t] = e;
    if (mask_allows(allowed, t)) --n;
  };
  for (int32_t t : p.stop_token_ids) drop(t);
  if (!p.ignore_eos) {
    for (int32_t t : eos_) drop(t);
  }
  return n > 0;
}

// Penalties, the constraint's mask and stop masks, then greedy or temperature, top_k, top_p, min_p and a draw; then
// the logprobs, raw (of the logits as they came) or processed (of the distribution drawn from).
void Sampler::sample(Sequence& seq, float* x, SampleResult& out) {
  const SamplingParams& p = seq.params;
  const double u = seq.rng.uniform();
  const bool raw_logprobs = p.logprobs >= 0 && !p.processed_logprobs;
  if (raw_logprobs) raw_.assign(x, x + vocab_size_);
  apply_penalties(seq, x);
  const uint32_t* allowed = seq.constraint && seq.mask_ok ? seq.allowed.data() : nullptr;
  if (allowed != nullptr) apply_constraint(allowed, x);
  if (seq.num_output_tokens() < p.min_tokens && (allowed == nullptr || allows_non_stop(p, allowed))) {
    mask_stops(p, x);
  }
  out.top.clear();

  const bool greedy = p.temperature < kGreedyTemperature;
  // Every token masked (only when all are stop ids under min_tokens, or a constraint's mask came
  // back empty, which its commit then reports) gives token 0.
  if ((greedy && !(p.logprobs >= 0 && p.processed_logprobs)) ||
      !collect_candidates(x, greedy ? 1.0f : 1.0f / p.temperature)) {
    out.token = greedy ? std::max(argmax(x), 0) : 0;
    out.logprob = 0.0f;
    if (raw_logprobs) fill_raw_logprobs(p.logprobs, out);
    return;
  }
  bool sorted = false;
  if (greedy) {
    out.token = *std::min_element(cand_.begin(), cand_.end(),
                                  [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  } else {
    sorted = keep_top_k(x, p.top_k, p.top_p < 1.0f);
  }
  float m = kNegInf;
  for (int32_t c : cand_) m = std::max(m, x[c]);
  double z = weigh(x, m);
  if (!greedy) {
    if (p.top_p < 1.0f) z = keep_top_p(x, m, p.top_p, z);
    if (p.min_p > 0.0f) z = keep_min_p(x, m, p.min_p);
    out.token = draw(u, z);
  }
  if (p.logprobs < 0) return;
  if (raw_logprobs) {
    fill_raw_logprobs(p.logprobs, out);
    return;
  }
  const double log_z = m + std::log(z);
  out.logprob = static_cast<float>(x[out.token] - log_z);
  if (p.logprobs > 0) fill_top(x, log_z, p.logprobs, sorted, out);
}

// Strict > keeps the lowest id on ties and skips NaN; -1 when every logit is -inf or NaN.
int32_t Sampler::argmax(const float* x) const {
  int32_t best = -1;
  float best_logit = kNegInf;
  for (int32_t v = 0; v < vocab_size_; ++v) {
    if (x[v] > best_logit) {
      best_logit = x[v];
      best = v;
    }
  }
  return best;
}

bool Sampler::collect_candidates(float* x, float inv_t) {
  cand_.clear();
  for (int32_t v = 0; v < vocab_size_; ++v) {
    if (x[v] > kNegInf) {  // also drops NaN
      x[v] *= inv_t;
      cand_.push_back(v);
    } else {
      x[v] = kNegInf;
    }
  }
  return !cand_.empty();
}

bool Sampler::keep_top_k(const float* x, int32_t top_k, bool sort_for_top_p) {
  auto better = [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  const int32_t k = top_k > 0 ? std::min<int32_t>(top_k, static_cast<int32_t>(cand_.size())) : 0;
  if (k > 0 && k < static_cast<int32_t>(cand_.size())) {
    std::nth_element(cand_.begin(), cand_.begin() + k, cand_.end(), better);
    cand_.resize(static_cast<size_t>(k));
  }
  if (k == 0 && !sort_for_top_p) return false;
  std::sort(cand_.begin(), cand_.end(), better);
  return true;
}

double Sampler::weigh(const float* x, float m) {
  double z = 0.0;
  weight_.resize(cand_.size());
  for (size_t i = 0; i < cand_.size(); ++i) z += weight_[i] = std::exp(static_cast<double>(x[cand_[i]]) - m);
  return z;
}

// Keeps a token while the mass before it is < top_p (candidates sorted, most likely first).
double Sampler::keep_top_p(const float* x, float m, float top_p, double z) {
  const double limit = static_cast<double>(top_p) * z;
  double before = 0.0;
  size_t keep = 0;
  while (keep < cand_.size() && before < limit) before += weight_[keep++];
  cand_.resize(keep);
  return weigh(x, m);
}

// Keeps p / p_max >= min_p: weight_ is exp(logit - max), so p / p_max is the weight itself.
double Sampler::keep_min_p(const float* x, float m, float min_p) {
  const double floor_w = static_cast<double>(min_p);
  size_t keep = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    if (weight_[i] >= floor_w) cand_[keep++] = cand_[i];
  }
  cand_.resize(keep);
  return weigh(x, m);
}

int32_t Sampler::draw(double u, double z) const {
  const double target = u * z;
  double acc = 0.0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    acc += weight_[i];
    if (acc > target) return cand_[i];
  }
  return cand_.back();
}

void Sampler::fill_top(const float* x, double log_z, int32_t n, bool sorted, SampleResult& out) {
  const size_t k = std::min(static_cast<size_t>(n), cand_.size());
  if (!sorted) {
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(),
                      [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  }
  for (size_t i = 0; i < k; ++i) out.top.push_back({cand_[i], static_cast<float>(x[cand_[i]] - log_z)});
}

void Sampler::fill_raw_logprobs(int32_t n, SampleResult& out) {
  float m = kNegInf;
  for (float v : raw_) m = std::max(m, v);
  double z = 0.0;
  for (float v : raw_) z += std::exp(static_cast<double>(v) - m);
  const double log_z = m + std::log(z);
  out.logprob = static_cast<float>(raw_[out.token] - log_z);
  if (n <= 0) return;
  order_.resize(raw_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int32_t>(i);
  const auto k = static_cast<std::ptrdiff_t>(std::min(static_cast<size_t>(n), order_.size()));
  const float* r = raw_.data();
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                    [r](int32_t a, int32_t b) { return r[a] > r[b] || (r[a] == r[b] && a < b); });
  for (std::ptrdiff_t i = 0; i < k; ++i) out.top.push_back({order_[i], static_cast<float>(r[order_[i]] - log_z)});
}

}  // namespace strata
