#include "rope.h"

#include <cmath>

namespace strata {

// Follows transformers' float32 computation (inv_freq, then the llama3 rescaling, then
// angle = float(position) * inv_freq rounded to float) so angles match it to the bit.
Rope::Rope(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  inv_freq_.resize(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv_freq_[i] = 1.0f / static_cast<float>(std::pow(static_cast<double>(c.rope_theta), static_cast<double>(exponent)));
  }
  if (c.rope_scaling_factor > 0.0f) {
    // Llama 3: long wavelengths are slowed by `factor`, short ones kept, the band between
    // blended; wavelengths are in positions.
    const float factor = c.rope_scaling_factor;
    const float old_context = static_cast<float>(c.rope_original_max_position);
    const float low_freq_wavelen = old_context / c.rope_low_freq_factor;
    const float high_freq_wavelen = old_context / c.rope_high_freq_factor;
    for (float& f : inv_freq_) {
      const float wavelen = static_cast<float>(2.0 * M_PI) / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (old_context / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
}

void Rope::tables(const int32_t* positions, int64_t n, float* cos, float* sin) const {
  const int half = half_dim();
  for (int64_t t = 0; t < n; ++t) {
    const float position = static_cast<float>(positions[t]);
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position * inv_freq_[i]);
      cos[t * half + i] = static_cast<float>(std::cos(angle));
      sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void Rope::apply(float* x, int n_heads, const float* cos, const float* sin) const {
  const int half = half_dim();
  for (int h = 0; h < n_heads; ++h) {
    float* lo = x + static_cast<int64_t>(h) * 2 * half;
    float* hi = lo + half;
    for (int i = 0; i < half; ++i) {
      const float a = lo[i], b = hi[i];
      lo[i] = a * cos[i] - b * sin[i];
      hi[i] = b * cos[i] + a * sin[i];
    }
  }
}

}  // namespace strata
