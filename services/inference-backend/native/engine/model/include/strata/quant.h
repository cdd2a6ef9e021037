// Block-quantized weight matrices, in the block formats GGUF files (ggml) store: Q4_0, Q4_1 and
// Q8_0, 32 values per block. A matrix keeps its blocks as the file has them, row by row, so a
// quantized model stays about its file size in memory; kernels compute from the blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace strata {

// A std::allocator whose value-initialisation is default-initialisation: resize() of a byte
// vector writes nothing, so a loader's copying threads are the first to touch (and fault in)
// the pages they fill, instead of one thread zeroing gigabytes first.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using ByteBuffer = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;

// Values per block, in every format here.
inline constexpr int64_t kQuantBlock = 32;

// Value j (0..31) of a 4-bit block is the low nibble of qs[j] for j < 16, the high nibble of
// qs[j - 16] for j >= 16. d and m are IEEE fp16 bit patterns.
struct BlockQ4_0 {  // value = d * (q - 8)
  uint16_t d;
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ4_1 {  // value = d * q + m
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ8_0 {  // value = d * q
  uint16_t d;
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34,
              "blocks are read from files byte for byte");

enum class QuantType : uint8_t { Q4_0, Q4_1, Q8_0 };

const char* quant_type_name(QuantType type);  // "Q4_0", "Q4_1", "Q8_0"
int64_t quant_block_bytes(QuantType type);    // 18, 20, 34

// A (rows, cols) matrix, row-major: row r is cols / kQuantBlock consecutive blocks. cols is a
// multiple of kQuantBlock. As nn.Linear: rows are output features, cols input features.
struct QuantMatrix {
  QuantType type = QuantType::Q8_0;
  int64_t rows = 0, cols = 0;
  ByteBuffer data;  // rows * row_bytes(); every byte written by whoever fills it

  int64_t row_bytes() const { return cols / kQuantBlock * quant_block_bytes(type); }
  const uint8_t* row(int64_t r) const { return data.data() + r * row_bytes(); }
};

// out[0, cols) = the values of one row's blocks, exactly (fp16 scales widened to fp32, then
// d * q (+ m) in fp32).
void dequantize_row(QuantType type, const uint8_t* blocks, int64_t cols, float* out);

// The whole matrix, row by row as dequantize_row: (rows, cols) fp32, row-major.
std::vector<float> dequantize(const QuantMatrix& m);

}  // namespace strata
