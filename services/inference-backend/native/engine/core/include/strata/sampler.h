// Turns one sequence's next-token logits into a token: penalties, a constraint's mask, min_tokens masking,
// temperature, top-k -> top-p -> min-p truncation, then one draw from the sequence's own Rng.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/model_backend.h"
#include "strata/sequence.h"

namespace strata {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// Logprobs are log-softmax of the raw logits by default (SamplingParams::processed_logprobs
// false). Processed ones are of the distribution the token was drawn from: after penalties,
// masking, temperature and truncation (truncated tokens are not listed); greedy decoding's
// distribution is then the penalised logits at temperature 1, untruncated.
struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;           // of `token`, when params.logprobs >= 0
  std::vector<TokenLogprob> top;  // n entries (raw), or min(n, kept tokens) (processed); most likely first
};

// A request's parameters as a device sampler's row (model_backend.h), with the uniform drawn
// for this token; the mask and the penalty and stop ranges are the caller's to fill.
SamplingRow sampling_row(const SamplingParams& params, double uniform);

class Sampler {
 public:
  Sampler(int32_t vocab_size, std::vector<int32_t> eos_token_ids);

  // logits: (vocab_size) fp32 of seq's next token; overwritten with the processed values.
  // Draws exactly one value from seq.rng whatever the parameters.
  void sample(Sequence& seq, float* logits, SampleResult& out);
  bool is_eos(int32_t token) const;
  int32_t vocab_size() const { return vocab_size_; }
  // Whether a constraint's mask allows a token that is not a stop id (nor eos, unless
  // ignore_eos): min_tokens may only mask stops while something else remains. The engine asks
  // it for a device sampler's rows too.
  bool allows_non_stop(const SamplingParams& params, const uint32_t* allowed);

 private:
  void apply_penalties(const Sequence& seq, float* logits);
  void mask_stops(const SamplingParams& params, float* logits) const;
  // Structured output: tokens the sequence's constraint disallows -> -inf.
  void apply_constraint(const uint32_t* allowed, float* logits) const;

  // The steps of sample(), in order. Candidates are cand_ (token ids) over `logits`.
  int32_t argmax(const float* logits) const;
  // Scales every finite logit by inv_temperature into cand_; false when every token is masked.
  bool collect_candidates(float* logits, float inv_temperature);
  // top_k (when > 0), then sorts the candidates when top_p will need them in order; true if sorted.
  bool keep_top_k(const float* logits, int32_t top_k, bool sort_for_top_p);
  // weight_ = exp(logit - max) of cand_; returns their sum.
  double weigh(const float* logits, float max_logit);
  double keep_top_p(const float* logits, float max_logit, float top_p, double z);
  double keep_min_p(const float* logits, float max_logit, float min_p);
  // Inverse CDF over the weights in candidate order: deterministic for a given uniform draw.
  int32_t draw(double uniform, double z) const;
  void fill_top(const float* logits, double log_z, int32_t n, bool sorted, SampleResult& out);
  void fill_raw_logprobs(int32_t n, SampleResult& out);
  uint32_t next_epoch();

  int32_t vocab_size_;
  std::vector<int32_t> eos_;
  // Scratch reused across calls: no allocation per token.
  std::vector<int32_t> cand_;     // candidate token ids
  std::vector<float> raw_;        // (vocab_size) logits before processing, for raw logprobs
  std::vector<int32_t> order_;    // token ids, partially sorted for the raw top n
  std::vector<double> weight_;    // exp(logit - max) of cand_
  std::vector<uint32_t> seen_;    // (vocab) epoch stamp: "token already penalised this pass"
  uint32_t epoch_ = 0;
};

}  // namespace strata
