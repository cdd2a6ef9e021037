// Per-request sampling settings. validate() runs once at submit, at the edge; the sampler
// trusts them afterwards.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace strata {

inline constexpr int32_t kMaxLogprobs = 20;
inline constexpr float kGreedyTemperature = 1e-5f;  // temperatures below this decode greedily

struct SamplingParams {
  float temperature = 1.0f;         // >= 0; 0 = greedy
  int32_t top_k = 0;                // 0 or -1 = off, else keep the k most likely tokens
  float top_p = 1.0f;               // (0, 1]: keep the smallest top set with mass >= top_p
  float min_p = 0.0f;               // [0, 1]: drop tokens with p < min_p * p_max
  float repetition_penalty = 1.0f;  // > 0, HF semantics over prompt + output tokens; 1 = off
  float frequency_penalty = 0.0f;   // [-2, 2], OpenAI semantics over output tokens
  float presence_penalty = 0.0f;    // [-2, 2], OpenAI semantics over output tokens
  std::optional<uint64_t> seed;     // none = a random stream per request
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // >= 1 output tokens, stop token included. 16 serves C++ callers (tests, benchmarks); the
  // service always passes its own default (STRATA_DEFAULT_MAX_TOKENS, @strata/common).
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;           // [0, max_tokens]: eos and stop ids masked until reached
  int32_t logprobs = -1;            // -1 = none, 0 = sampled token's only, n = also the top n
  // false (vLLM's default "raw_logprobs"): log-softmax of the model's logits as they came out,
  // before penalties, temperature and truncation, so the top n always has n entries.
  // true ("processed_logprobs"): of the distribution the token was drawn from.
  bool processed_logprobs = false;
};

// Throws EngineError(STRATA_INVALID_PARAM) naming the field, its allowed range and the value.
void validate(const SamplingParams& params, int32_t vocab_size);

}  // namespace strata
