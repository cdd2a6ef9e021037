#include "strata/sampler.h"

#include <algorithm>
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

void Sampler::sample(Sequence& seq, float* x, SampleResult& out) {
  const SamplingParams& p = seq.params;
  const double u = seq.rng.uniform();
  const bool raw_logprobs = p.logprobs >= 0 && !p.processed_logprobs;
  if (raw_logprobs) raw_.assign(x, x + vocab_size_);
  apply_penalties(seq, x);
  if (seq.num_output_tokens() < p.min_tokens) mask_stops(p, x);
  out.top.clear();

  const bool greedy = p.temperature < kGreedyTemperature;
  if (greedy && !(p.logprobs >= 0 && p.processed_logprobs)) {
    // Argmax straight over the logits; strict > keeps the lowest id on ties and skips NaN.
    int32_t best = -1;
    float best_logit = kNegInf;
    for (int32_t v = 0; v < vocab_size_; ++v) {
      if (x[v] > best_logit) {
        best_logit = x[v];
        best = v;
      }
    }
    out.token = best < 0 ? 0 : best;  // every token masked: only when all are stop ids under min_tokens
    out.logprob = 0.0f;
    if (raw_logprobs) fill_raw_logprobs(p.logprobs, out);
    return;
  }
  const float inv_t = greedy ? 1.0f : 1.0f / p.temperature;
  cand_.clear();
  for (int32_t v = 0; v < vocab_size_; ++v) {
    if (x[v] > kNegInf) {  // also drops NaN
      x[v] *= inv_t;
      cand_.push_back(v);
    } else {
      x[v] = kNegInf;
    }
  }
  if (cand_.empty()) {  // every token masked: only when all are stop ids under min_tokens
    out.token = 0;
    out.logprob = 0.0f;
    if (raw_logprobs) fill_raw_logprobs(p.logprobs, out);
    return;
  }
  auto better = [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };

  if (greedy) out.token = *std::min_element(cand_.begin(), cand_.end(), better);  // processed logprobs follow

  bool sorted = false;
  if (!greedy) {
    const int32_t k = p.top_k > 0 ? std::min<int32_t>(p.top_k, static_cast<int32_t>(cand_.size())) : 0;
    if (k > 0 && k < static_cast<int32_t>(cand_.size())) {
      std::nth_element(cand_.begin(), cand_.begin() + k, cand_.end(), better);
      cand_.resize(static_cast<size_t>(k));
    }
    if (k > 0 || p.top_p < 1.0f) {
      std::sort(cand_.begin(), cand_.end(), better);
      sorted = true;
    }
  }
  float m = kNegInf;
  for (int32_t c : cand_) m = std::max(m, x[c]);
  auto weigh = [&] {
    double z = 0.0;
    weight_.resize(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i) z += weight_[i] = std::exp(static_cast<double>(x[cand_[i]]) - m);
    return z;
  };
  double z = weigh();

  if (!greedy && p.top_p < 1.0f) {  // keep a token while the mass before it is < top_p
    const double limit = static_cast<double>(p.top_p) * z;
    double before = 0.0;
    size_t keep = 0;
    while (keep < cand_.size() && before < limit) before += weight_[keep++];
    cand_.resize(keep);
    z = weigh();
  }
  if (!greedy && p.min_p > 0.0f) {  // p / p_max >= min_p
    const double floor_w = static_cast<double>(p.min_p);
    size_t keep = 0;
    for (size_t i = 0; i < cand_.size(); ++i) {
      if (weight_[i] >= floor_w) cand_[keep++] = cand_[i];
    }
    cand_.resize(keep);
    z = weigh();
  }

  if (!greedy) {  // inverse CDF in candidate order (descending when sorted, else by id): deterministic
    const double target = u * z;
    double acc = 0.0;
    out.token = cand_.back();
    for (size_t i = 0; i < cand_.size(); ++i) {
      acc += weight_[i];
      if (acc > target) {
        out.token = cand_[i];
        break;
      }
    }
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
