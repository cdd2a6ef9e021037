// Rotary position embedding in Hugging Face's rotate-half convention: within a head, element i
// pairs with i + head_dim/2 and turns by position * inv_freq[i].
#pragma once

#include <cstdint>
#include <vector>

#include "strata/model_backend.h"

namespace strata {

class Rope {
 public:
  explicit Rope(const ModelConfig& config);

  int half_dim() const { return static_cast<int>(inv_freq_.size()); }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

  // cos and sin, each (n, head_dim / 2), for the given absolute positions.
  void tables(const int32_t* positions, int64_t n, float* cos, float* sin) const;

  // Rotates x (n_heads, head_dim) of one token in place with that token's cos/sin rows.
  void apply(float* x, int n_heads, const float* cos, const float* sin) const;

 private:
  std::vector<float> inv_freq_;  // (head_dim / 2) radians per position
};

}  // namespace strata
