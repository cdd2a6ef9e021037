// Matrix products with block-quantized weights (Q4_0, Q4_1, Q8_0), computed from the blocks.
//
// As llama.cpp's CPU backend does, the activations are first quantized per row into 32-value
// int8 blocks (Q8_1 for Q4_1 weights: with s = d * sum(q); Q8_0 for the others), and each block
// pair is an exact integer dot product scaled by d_w * d_a:
//   quantize: amax = max |x|, d = amax / 127, q = round-half-even(x * (127 / amax)), d (and s)
//             stored as fp16 (ggml's rule, step for step);
//   dot:      acc = 0; for each block in order: acc = fma(d_w * d_a, float(the block's exact
//             integer dot), acc), and for Q4_1 then acc = fma(m_w, s_a, acc); plus the bias.
// Each output element is computed by that one sequence whatever the batch, tile or thread
// split, in the AVX-512 VNNI, AVX2 and portable kernels (which are bit-identical), so results
// are batch invariant. (ggml sums 8 partial lanes per row instead, so logits differ from
// llama.cpp's in the last bits: greedy tokens part from its only at close calls.)
//
// The weights are repacked once at load into panels of 16 rows (QuantPanels below), so that
// one multiply-add does 4 values of 8 rows (256-bit) or all 16 (512-bit) at once, against 4
// activation values broadcast, and the rows' scales multiply as vectors: no per-row horizontal
// sums, no scalar scale arithmetic. A panel's bytes are read front to back, one stream for the
// hardware prefetcher.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "strata/quant.h"

namespace strata {

class ThreadPool;

// One quantized activation block: d and s already widened from their fp16 values.
struct ActBlock {
  float d;
  float s;      // Q8_1 only: fp16(d_fp32 * sum(qs)), widened
  int32_t sum;  // sum(qs), exactly (Q4_0's and Q8_0's offset corrections)
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(ActBlock) == 44);

// Weight rows per panel.
inline constexpr int64_t kPanelRows = 16;

// A quantized matrix as the kernels read it: rows in panels of 16 (the last padded with zero
// rows), a panel's blocks in order. One panel block is the 16 rows' fp16 scales d[16] (Q4_1:
// then m[16]), then their values in chunks of 64 bytes, 4 bytes a row, rows 0..15 in turn:
//   Q4_0, Q4_1: 4 chunks; chunk c holds bytes 4c..4c+3 of each row's qs (low nibbles: values
//               4c..4c+3 of the block, high nibbles: values 16+4c..16+4c+3);
//   Q8_0:       8 chunks; chunk c holds values 4c..4c+3 of each row, plus 128 (unsigned bytes).
// The same bytes as the file's blocks (18, 20 or 34 a row and block), rearranged.
struct QuantPanels {
  QuantType type = QuantType::Q8_0;
  int64_t rows = 0, cols = 0;
  std::shared_ptr<const uint8_t> data;  // 64-byte aligned, bytes()

  int64_t blocks() const { return cols / kQuantBlock; }
  int64_t panels() const { return (rows + kPanelRows - 1) / kPanelRows; }
  int64_t scale_bytes() const { return (type == QuantType::Q4_1 ? 4 : 2) * kPanelRows; }
  int64_t panel_block_bytes() const { return kPanelRows * quant_block_bytes(type); }
  int64_t panel_bytes() const { return blocks() * panel_block_bytes(); }
  const uint8_t* panel(int64_t p) const { return data.get() + p * panel_bytes(); }
  int64_t bytes() const { return panels() * panel_bytes(); }
};

// Rows of a quantized matrix where they lie (a QuantMatrix's bytes, a GGUF file's mapping):
// row r is the row's bytes at data + (order ? order[r] : r) * row_bytes.
struct QuantRowsRef {
  int64_t rows = 0;
  const uint8_t* data = nullptr;
  const int64_t* order = nullptr;  // (rows) or null
};

// The panels of the matrix whose rows are the parts' rows one after another (every part of
// `type`, `cols` columns, a multiple of 32), read where they lie: no copy of the rows first.
// Runs of panels are shared out among the pool's threads (null: the caller's thread).
QuantPanels pack_panels(QuantType type, int64_t cols, const std::vector<QuantRowsRef>& parts, ThreadPool* pool = nullptr);
// The panels of a row-major quantized matrix, on the caller's thread.
QuantPanels pack_panels(const QuantMatrix& m);

// out[0, cols) = row r's values, exactly as dequantize_row gives them from the file's blocks.
void dequantize_panel_row(const QuantPanels& m, int64_t r, float* out);

// c[i][j] = (accumulate ? c[i][j] : 0) + (sum_k a[i][k] * w[j][k] + bias[j]), j < w.rows,
// with the activations quantized as above.
struct QuantGemmArgs {
  int64_t m = 0;
  const float* a = nullptr;  // (m, w.cols), row stride lda
  int64_t lda = 0;
  const QuantPanels* w = nullptr;
  float* c = nullptr;  // (m, w.rows), row stride ldc
  int64_t ldc = 0;
  const float* bias = nullptr;  // (w.rows) or null
  bool accumulate = false;
};

// Whether weights of `type` pair with Q8_1 activations (Q4_1) rather than Q8_0.
inline bool uses_q8_1(QuantType type) { return type == QuantType::Q4_1; }

struct QuantKernels {
  const char* isa;  // "avx512vnni", "avx2+fma" or "portable"
  // Quantizes rows [row_begin, row_end) of a (k a multiple of 32) into acts + row * (k / 32).
  void (*quantize)(const float* a, int64_t lda, int64_t k, bool q8_1, int64_t row_begin, int64_t row_end, ActBlock* acts);
  // Output rows (weight rows) of panels [p_begin, p_end) of every activation row.
  void (*gemm)(const QuantGemmArgs& args, const ActBlock* acts, int64_t p_begin, int64_t p_end);
};

const QuantKernels& portable_quant_kernels();
#if defined(STRATA_HAVE_AVX2_KERNELS)
const QuantKernels& avx2_quant_kernels();
#endif
#if defined(STRATA_HAVE_AVX512VNNI_KERNELS)
const QuantKernels& avx512vnni_quant_kernels();
#endif
// The best this CPU runs: AVX-512 VNNI, AVX2 or portable; a name ("portable", "avx2": see
// cpu_kernels()) forces a lesser set. quant_kernels() follows STRATA_CPU_KERNELS, chosen once.
const QuantKernels& quant_kernels();
const QuantKernels& quant_kernels(std::string_view name);

// Every kernel set this build has and this CPU runs, portable first, the best last.
std::vector<const QuantKernels*> runnable_quant_kernels();

// Reusable buffer for one GEMM's quantized activations; one per backend (GEMMs run one at a time).
struct QuantScratch {
  std::vector<ActBlock> acts;
  int64_t bytes() const { return static_cast<int64_t>(acts.capacity() * sizeof(ActBlock)); }
};

// Quantizes the activations once, then splits the weight rows over the pool.
void parallel_quant_gemm(ThreadPool& pool, const QuantKernels& kernels, const QuantGemmArgs& args, QuantScratch& scratch);

}  // namespace strata
