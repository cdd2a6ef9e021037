#include <cmath>
#include <cstdio>
#include <string>

#include "strata/errors.h"
#include "strata/sampling_params.h"

namespace strata {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

[[noreturn]] void invalid(const std::string& field, const std::string& range, const std::string& got) {
  throw EngineError(errc::kInvalidParam, field + " must be " + range + ", got " + got);
}

}  // namespace

// Comparisons are written so that NaN fails them.
void validate(const SamplingParams& p, int32_t vocab_size) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    invalid("temperature", ">= 0 (0 = greedy)", num(p.temperature));
  }
  if (p.top_k < -1) invalid("top_k", "-1 or 0 (off) or >= 1", std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) invalid("top_p", "in (0, 1]", num(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) invalid("min_p", "in [0, 1]", num(p.min_p));
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    invalid("repetition_penalty", "> 0 (1 = off)", num(p.repetition_penalty));
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    invalid("frequency_penalty", "in [-2, 2]", num(p.frequency_penalty));
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    invalid("presence_penalty", "in [-2, 2]", num(p.presence_penalty));
  }
  if (p.max_tokens < 1) invalid("max_tokens", ">= 1", std::to_string(p.max_tokens));
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens) {
    invalid("min_tokens", "in [0, max_tokens=" + std::to_string(p.max_tokens) + "]", std::to_string(p.min_tokens));
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    invalid("logprobs", "in [-1, " + std::to_string(kMaxLogprobs) + "] (-1 = off)", std::to_string(p.logprobs));
  }
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t t = p.stop_token_ids[i];
    if (t < 0 || t >= vocab_size) {
      invalid("stop_token_ids[" + std::to_string(i) + "]", "in [0, vocab_size=" + std::to_string(vocab_size) + ")",
              std::to_string(t));
    }
  }
}

}  // namespace strata
