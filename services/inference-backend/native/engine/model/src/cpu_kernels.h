// The CPU backend's inner loops, compiled twice (AVX2+FMA, and portable) and picked once at
// run time from what the CPU supports. Each output element is computed by the same sequence
// of operations whatever the batch, tile or thread split, so results are batch invariant.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "strata/model_weights.h"
#include "strata/quant.h"

namespace strata {

class ThreadPool;

// A weight matrix (n, k), as nn.Linear stores it, repacked once at load into panels of
// kPanel output rows stored k-major: panel p holds w[p * kPanel + j][kk] at (kk * kPanel + j),
// zero-padded past n. A GEMM step then streams each panel once, contiguously, while
// broadcasting activations, and needs no horizontal sums. The values are fp32, or the
// checkpoint's own bf16 or fp16 values, which the GEMM widens exactly as it loads them: the
// same products and sums as fp32 panels of the widened values, from half the bytes. bf16
// panels hold each k's 16 values in the order of rows 0-3, 8-11, 4-7, 12-15 (slot()), so that
// interleaving one 32-byte load with zeros gives rows 0-7 and 8-15 as fp32 (the bf16 value is
// the fp32 value's high half) without a shift or a lane crossing. For the AMX set they hold k
// in pairs instead (`pairs`): for even kk, row j's values at kk and kk + 1 are the two halves
// of one 32-bit word at (kk * kPanel + 2j), k padded to even with a zero: the layout of an AMX
// bf16 tile multiply's second operand, 16 pairs of a panel being one tile.
struct PackedWeights {
  static constexpr int64_t kPanel = 16;
  enum class Elem { kF32, kBF16, kF16 };
  // Where row j of a panel lies among a k's 16 values (bf16, not in pairs).
  static constexpr int64_t bf16_slot(int64_t j) { return (j & 3) | ((j & 4) << 1) | ((j & 8) >> 1); }
  Elem elem = Elem::kF32;
  bool pairs = false;  // kBF16 only: k in pairs (the AMX set's layout)
  int64_t n = 0, k = 0;
  std::vector<float, UninitializedAllocator<float>> panels;       // kF32: (ceil(n / kPanel), k, kPanel)
  std::vector<uint16_t, UninitializedAllocator<uint16_t>> halves;  // kBF16, kF16: (ceil(n / kPanel), k_stride(), kPanel)

  // The k values a panel holds a row: k, or k rounded up to even in pairs.
  int64_t k_stride() const { return pairs ? (k + 1) / 2 * 2 : k; }
  // Where row j's value kk lies within its panel.
  int64_t at(int64_t j, int64_t kk) const {
    if (pairs) return (kk & ~int64_t{1}) * kPanel + 2 * j + (kk & 1);
    return kk * kPanel + (elem == Elem::kBF16 ? bf16_slot(j) : j);
  }

  // The matrix whose rows are the parts' rows one after another (each of k columns), packed
  // from where they lie (a safetensors file's mapping, say): no copy first. Parts all of one
  // 16-bit dtype keep their values (Elem kBF16 / kF16) unless `widen`; otherwise they are
  // widened to fp32. Runs of panels go to the pool's threads (null: the caller's thread). bf16
  // values go in pairs of k where `bf16_pairs` (CpuKernels::bf16_pairs).
  static PackedWeights pack(const std::vector<DenseMatrixRef>& parts, int64_t k, ThreadPool* pool, bool widen = false,
                            bool bf16_pairs = false);
  int64_t num_panels() const { return (n + kPanel - 1) / kPanel; }
  int64_t bytes() const { return num_panels() * k_stride() * kPanel * (elem == Elem::kF32 ? 4 : 2); }
  // out[0, k) = row r, widened to fp32.
  void row(int64_t r, float* out) const;
};

// "float32", "bfloat16" or "float16".
const char* elem_name(PackedWeights::Elem elem);

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
  // The AMX set's GEMM on bf16 panels: `a` already rounded to bf16 by round_activations (rows
  // padded to amx_rows(m), k to amx_k(k)), once for all of one parallel_gemm's tasks; null:
  // each call rounds its own.
  const uint16_t* a_bf16 = nullptr;
};

// The AMX GEMM's activation layout: rows padded to a multiple of 16 (a tile's rows), k to a
// multiple of 32 (a tile's bf16 values a row), both with zeros.
inline int64_t amx_rows(int64_t m) { return (m + 15) / 16 * 16; }
inline int64_t amx_k(int64_t k) { return (k + 31) / 32 * 32; }

// Causal attention of a run of consecutive tokens of one sequence, for the query heads that
// share one KV head, over a paged cache. Row r = t * group + h is token t's head h; token t
// attends to positions [0, context + t).
struct AttendArgs {
  const float* q = nullptr;            // token t's (group, head_dim) queries at q + t * q_stride
  int64_t q_stride = 0;
  float* out = nullptr;                // token t's (group, head_dim) outputs at out + t * out_stride
  int64_t out_stride = 0;
  int32_t tokens = 0;
  int32_t group = 0;                   // query heads per kv head
  int32_t head_dim = 0;
  int32_t context = 0;                 // keys the first token attends to
  float scale = 0.0f;
  const void* keys = nullptr;          // the layer's K pool, offset to this kv head's (head_dim, block_size) keys
  const void* values = nullptr;        // the layer's V pool, likewise
  bool kv_f16 = false;                 // the pool holds IEEE halves (else floats)
  int64_t block_stride = 0;            // elements per block in the pool
  int32_t block_size = 0;
  const int32_t* block_table = nullptr;
  float* scratch = nullptr;            // attend_scratch_floats(...) floats
};

// Padded key count the attention kernel works in: multiples of 16 keys.
inline int64_t attend_padded(int64_t context) { return (context + 15) / 16 * 16; }
// Scratch for AttendArgs with `rows` = tokens * group rows and the last token's context.
inline int64_t attend_scratch_floats(int64_t rows, int64_t head_dim, int64_t last_context) {
  (void)head_dim;
  return rows * (attend_padded(last_context) + 16);
}

struct CpuKernels {
  // "amx-bf16" (its GEMM on bf16 panels; the rest is the AVX-512 set's), "avx512f" (its GEMM; the
  // rest is the AVX2 build's), "avx2+fma" or "portable"
  const char* isa;
  // Output panels [panel_begin, panel_end) of a GEMM, all rows.
  void (*gemm)(const GemmArgs& args, int64_t panel_begin, int64_t panel_end);
  // out[i] = silu(gate[i]) * up[i]
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  void (*attend)(const AttendArgs& args);
  // dst[i] = src[i] as an IEEE half, rounded to nearest even (f32_to_f16's result, 8 at a time
  // with F16C): the f16 KV cache's writes.
  void (*to_half)(const float* src, uint16_t* dst, int64_t n);
  // dst[i] = src[i], an IEEE half widened exactly (f16_to_f32's result, 8 at a time with F16C):
  // a checkpoint's F16 matrices, as they are packed.
  void (*from_half)(const uint16_t* src, float* dst, int64_t n);
  // The AMX set only (else null): rows [row_begin, row_end) of `args.a` rounded to bf16 (to
  // nearest even) into `out` in the layout GemmArgs::a_bf16 names.
  void (*round_activations)(const GemmArgs& args, int64_t row_begin, int64_t row_end, uint16_t* out) = nullptr;
  // Its GEMM takes bf16 panels packed in pairs of k (PackedWeights::pairs): the AMX set.
  bool bf16_pairs = false;
};

const CpuKernels& portable_kernels();
#if defined(STRATA_HAVE_AVX2_KERNELS)
const CpuKernels& avx2_kernels();
// What the x86 builds (these and the quantized ones) need of the CPU: AVX2, FMA and F16C
// (every AVX2 CPU has all three, but a VM can hide some).
bool cpu_runs_avx2();
#endif
#if defined(STRATA_HAVE_AVX512_KERNELS) || defined(STRATA_HAVE_AMX_KERNELS)  // (AMX is built only with AVX-512)
const CpuKernels& avx512_kernels();
bool cpu_runs_avx512();  // AVX-512F, besides AVX2
#endif
#if defined(STRATA_HAVE_AMX_KERNELS)
// The AMX set ("amx-bf16": AMX tile multiplies for bf16 panels, the AVX-512 set for the rest),
// or null where the CPU or the kernel does not offer AMX. Not among runnable_cpu_kernels(): its
// bits differ from the others' (activations rounded to bf16), so it runs only when asked for.
const CpuKernels* amx_kernels_if_runnable();
#endif
// The kernel set a name asks for: "portable"; "avx2" where the CPU runs it; "amx" (the AMX set)
// where the CPU and the kernel offer AMX; anything else ("auto", "", or a set this CPU lacks)
// the best exact set this CPU runs. cpu_kernels() is the set STRATA_CPU_KERNELS names, chosen
// once; a CpuBackend takes CpuBackendOptions::kernels where that is set.
const CpuKernels& cpu_kernels();
const CpuKernels& cpu_kernels(std::string_view name);
// Every exact set this CPU runs, portable first, the best last.
std::vector<const CpuKernels*> runnable_cpu_kernels();

// STRATA_CPU_KERNELS, or "" where it is unset.
inline std::string_view kernels_env() {
  const char* env = std::getenv("STRATA_CPU_KERNELS");
  return env != nullptr ? env : "";
}

// The set `name` asks for among `sets` (a runnable list: portable first, the best last; each
// with an `isa`): "portable" the portable set, "avx2" the AVX2 one where the CPU runs it,
// anything else the best. Both the fp32 and the quantized kernels choose by it, to test and
// compare the lesser sets on a machine that runs more.
template <class Set>
const Set& pick_kernels(const std::vector<const Set*>& sets, std::string_view name) {
  if (name == "portable") return *sets.front();
  if (name == "avx2")
    for (const Set* set : sets)
      if (std::string_view(set->isa) == "avx2+fma") return *set;
  return *sets.back();
}

// A GEMM split over the pool by weight panels, so each weight is read once per step while the
// step's tokens stream past it.
void parallel_gemm(ThreadPool& pool, const CpuKernels& kernels, const GemmArgs& args);

}  // namespace strata
