// IEEE half (f16) and bfloat16 <-> f32, bit-exact, for loading and writing weights.
#pragma once

#include <cstdint>
#include <cstring>

namespace strata {

inline float f32_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint32_t bits_from_f32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits = bits_from_f32(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return f32_from_bits(sign | 0x7F800000u | (mantissa << 13));  // inf / nan
  if (exponent != 0) return f32_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return f32_from_bits(sign);
  // Subnormal: value = mantissa * 2^-24.
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  mantissa &= 0x3FFu;
  return f32_from_bits(sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13));
}

// Round to nearest even, overflow to inf, subnormals kept.
inline uint16_t f32_to_f16(float f) {
  const uint32_t bits = bits_from_f32(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;                // nan
  if (abs >= 0x477FF000u) return sign | 0x7C00u;               // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                     // below 2^-14: subnormal or zero
    if (abs < 0x33000000u) return sign;                        // below 2^-25: rounds to zero
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);       // 14..24
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t result = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    if (rest > halfway || (rest == halfway && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>(((rounded >> 13) - (112u << 10)) & 0x7FFFu);
}

}  // namespace strata
