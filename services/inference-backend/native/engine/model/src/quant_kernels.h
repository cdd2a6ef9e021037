// Matrix products with block-quantized weights (Q4_0, Q4_1, Q8_0), computed from the blocks.
//
// As llama.cpp's CPU backend does, the activations are first quantized per row into 32-value
// int8 blocks (Q8_1 for Q4_1 weights: with s = d * sum(q); Q8_0 for the others), and each block
// pair is an exact integer dot product scaled by d_w * d_a. The numerics follow ggml's AVX2 path
// step for step, so greedy tokens match llama.cpp's on the same file:
//   quantize: amax = max |x|, d = amax / 127, q = round-half-even(x * (127 / amax)), d (and s)
//             stored as fp16;
//   dot:      8 float lanes, lane l accumulating fma(d_w * d_a, sum of the block's products
//             4l..4l+3, lane) over the blocks in order; then (l4+l0 + l6+l2) + (l5+l1 + l7+l3);
//             for Q4_1 plus the fma-accumulated sum over blocks of m_w * s_a.
// Each output element is computed by that one sequence whatever the batch, tile or thread
// split, in both the AVX2 and the portable kernels (which are bit-identical), so results are
// batch invariant.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/quant.h"

namespace strata {

class ThreadPool;

// One quantized activation block: d and s already widened from their fp16 values.
struct ActBlock {
  float d;
  float s;  // Q8_1 only: fp16(d_fp32 * sum(qs)), widened
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(ActBlock) == 40);

// c[i][j] = (accumulate ? c[i][j] : 0) + (sum_k a[i][k] * w[j][k] + bias[j]), j < w.rows,
// with the activations quantized as above.
struct QuantGemmArgs {
  int64_t m = 0;
  const float* a = nullptr;  // (m, w.cols), row stride lda
  int64_t lda = 0;
  const QuantMatrix* w = nullptr;
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
  // Output rows (weight rows) [n_begin, n_end) of every activation row.
  void (*gemm)(const QuantGemmArgs& args, const ActBlock* acts, int64_t n_begin, int64_t n_end);
};

const QuantKernels& portable_quant_kernels();
#if defined(STRATA_HAVE_AVX2_KERNELS)
const QuantKernels& avx2_quant_kernels();
#endif
#if defined(STRATA_HAVE_AVX512VNNI_KERNELS)
const QuantKernels& avx512vnni_quant_kernels();
#endif
// The best this CPU runs: AVX-512 VNNI, AVX2 or portable (STRATA_CPU_KERNELS=portable or avx2
// forces the portable or AVX2 ones).
const QuantKernels& quant_kernels();

// Every kernel set this build has and this CPU runs, portable first (for tests and benchmarks).
std::vector<const QuantKernels*> runnable_quant_kernels();

// Reusable buffer for one GEMM's quantized activations; one per backend (GEMMs run one at a time).
struct QuantScratch {
  std::vector<ActBlock> acts;
  int64_t bytes() const { return static_cast<int64_t>(acts.capacity() * sizeof(ActBlock)); }
};

// Quantizes the activations once, then splits the weight rows over the pool.
void parallel_quant_gemm(ThreadPool& pool, const QuantKernels& kernels, const QuantGemmArgs& args, QuantScratch& scratch);

}  // namespace strata
