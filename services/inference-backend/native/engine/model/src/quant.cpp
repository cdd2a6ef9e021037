#include "strata/quant.h"

#include <cstring>

#include "strata/float_convert.h"
#include "strata/split_work.h"

namespace strata {

const char* quant_type_name(QuantType type) {
  switch (type) {
    case QuantType::Q4_0: return "Q4_0";
    case QuantType::Q4_1: return "Q4_1";
    case QuantType::Q8_0: return "Q8_0";
  }
  return "?";
}

int64_t quant_block_bytes(QuantType type) {
  switch (type) {
    case QuantType::Q4_0: return sizeof(BlockQ4_0);
    case QuantType::Q4_1: return sizeof(BlockQ4_1);
    case QuantType::Q8_0: return sizeof(BlockQ8_0);
  }
  return 0;
}

void dequantize_row(QuantType type, const uint8_t* blocks, int64_t cols, float* out) {
  const int64_t n = cols / kQuantBlock;
  for (int64_t b = 0; b < n; ++b, out += kQuantBlock) {
    if (type == QuantType::Q8_0) {
      BlockQ8_0 block;
      std::memcpy(&block, blocks + b * sizeof block, sizeof block);
      const float d = f16_to_f32(block.d);
      for (int j = 0; j < kQuantBlock; ++j) out[j] = d * static_cast<float>(block.qs[j]);
    } else if (type == QuantType::Q4_0) {
      BlockQ4_0 block;
      std::memcpy(&block, blocks + b * sizeof block, sizeof block);
      const float d = f16_to_f32(block.d);
      for (int j = 0; j < kQuantBlock / 2; ++j) {
        out[j] = d * static_cast<float>((block.qs[j] & 15) - 8);
        out[j + 16] = d * static_cast<float>((block.qs[j] >> 4) - 8);
      }
    } else {
      BlockQ4_1 block;
      std::memcpy(&block, blocks + b * sizeof block, sizeof block);
      const float d = f16_to_f32(block.d), m = f16_to_f32(block.m);
      for (int j = 0; j < kQuantBlock / 2; ++j) {
        out[j] = d * static_cast<float>(block.qs[j] & 15) + m;
        out[j + 16] = d * static_cast<float>(block.qs[j] >> 4) + m;
      }
    }
  }
}

std::vector<float> dequantize(const QuantMatrix& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  // Rows go to threads (a 128k-token embedding table is half a billion values), at least
  // 1M values a thread.
  split_work(m.rows, threads_for(m.rows * m.cols, int64_t{1} << 20), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) dequantize_row(m.type, m.row(r), m.cols, out.data() + r * m.cols);
  });
  return out;
}

}  // namespace strata
