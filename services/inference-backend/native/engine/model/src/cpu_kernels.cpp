#include "cpu_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "thread_pool.h"

namespace strata {

// STRATA_CPU_KERNELS=portable forces the portable build, to test it on an AVX2 machine.
const CpuKernels& cpu_kernels() {
#if defined(STRATA_HAVE_AVX2_KERNELS)
  static const bool use_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                               __builtin_cpu_supports("f16c") &&
                               std::string_view(std::getenv("STRATA_CPU_KERNELS") ? std::getenv("STRATA_CPU_KERNELS") : "") != "portable";
  if (use_avx2) return avx2_kernels();
#endif
  return portable_kernels();
}

PackedWeights PackedWeights::pack(const float* w, int64_t n, int64_t k) {
  PackedWeights packed;
  packed.n = n;
  packed.k = k;
  packed.panels.assign(static_cast<size_t>(packed.num_panels() * k * kPanel), 0.0f);
  for (int64_t row = 0; row < n; ++row) {
    float* panel = packed.panels.data() + (row / kPanel) * k * kPanel + row % kPanel;
    for (int64_t kk = 0; kk < k; ++kk) panel[kk * kPanel] = w[row * k + kk];
  }
  return packed;
}

void parallel_gemm(ThreadPool& pool, const CpuKernels& kernels, const GemmArgs& args) {
  const int64_t panels = args.w->num_panels();
  if (args.m <= 0 || panels == 0) return;
  // Below ~64k multiply-adds a split costs more in wake-ups than it saves.
  const int64_t work = args.m * args.w->n * args.w->k;
  int64_t tasks = work < (int64_t{1} << 16) ? 1 : std::min<int64_t>(panels, int64_t{pool.size()} * 4);
  // Panels per task in multiples of 3, the width of the one-row tiles.
  int64_t block = (panels + tasks - 1) / tasks;
  block = (block + 2) / 3 * 3;
  tasks = (panels + block - 1) / block;
  pool.parallel_for(tasks, [&](int64_t t) {
    const int64_t begin = t * block;
    kernels.gemm(args, begin, std::min(panels, begin + block));
  });
}

}  // namespace strata
