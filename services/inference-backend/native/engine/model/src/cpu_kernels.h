// The CPU backend's inner loops, compiled twice (AVX2+FMA, and portable) and picked once at
// run time from what the CPU supports. Each output element is computed by the same sequence
// of operations whatever the batch, tile or thread split, so results are batch invariant.
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

class ThreadPool;

// A weight matrix (n, k), as nn.Linear stores it, repacked once at load into panels of
// kPanel output rows stored k-major: panel p holds w[p * kPanel + j][kk] at (kk * kPanel + j),
// zero-padded past n. A GEMM step then streams each panel once, contiguously, while
// broadcasting activations, and needs no horizontal sums.
struct PackedWeights {
  static constexpr int64_t kPanel = 16;
  int64_t n = 0, k = 0;
  std::vector<float> panels;  // (ceil(n / kPanel), k, kPanel)

  static PackedWeights pack(const float* w, int64_t n, int64_t k);
  int64_t num_panels() const { return (n + kPanel - 1) / kPanel; }
};

// c[m][j] = (accumulate ? c[m][j] : 0) + (sum_k a[m][k] * w[j][k] + bias[j]), j < w.n.
struct GemmArgs {
  int64_t m = 0;
  const float* a = nullptr;     // (m, w.k), row stride lda
  int64_t lda = 0;
  const PackedWeights* w = nullptr;
  float* c = nullptr;           // (m, w.n), row stride ldc
  int64_t ldc = 0;
  const float* bias = nullptr;  // (w.n) or null
  bool accumulate = false;
};

// One token's attention for the query heads that share one KV head, over positions
// [0, context) of a paged cache.
struct AttendArgs {
  const float* q = nullptr;            // (group, head_dim) the token's queries
  float* out = nullptr;                // (group, head_dim) softmax(q K^T * scale) V
  int32_t group = 0;                   // query heads per kv head
  int32_t head_dim = 0;
  int32_t context = 0;                 // keys to attend to
  float scale = 0.0f;
  const float* keys = nullptr;         // the layer's K pool, offset to this kv head's rows
  const float* values = nullptr;       // the layer's V pool, likewise
  int64_t block_stride = 0;            // floats per block in the pool
  int32_t block_size = 0;
  const int32_t* block_table = nullptr;
  float* scores = nullptr;             // scratch (group, context)
};

struct CpuKernels {
  const char* isa;  // "avx2+fma" or "portable"
  // Output panels [panel_begin, panel_end) of a GEMM, all rows.
  void (*gemm)(const GemmArgs& args, int64_t panel_begin, int64_t panel_end);
  // out[i] = silu(gate[i]) * up[i]
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  void (*attend)(const AttendArgs& args);
};

const CpuKernels& portable_kernels();
#if defined(STRATA_HAVE_AVX2_KERNELS)
const CpuKernels& avx2_kernels();
#endif
// The best kernels this CPU runs.
const CpuKernels& cpu_kernels();

// A GEMM split over the pool by weight panels, so each weight is read once per step while the
// step's tokens stream past it.
void parallel_gemm(ThreadPool& pool, const CpuKernels& kernels, const GemmArgs& args);

}  // namespace strata
