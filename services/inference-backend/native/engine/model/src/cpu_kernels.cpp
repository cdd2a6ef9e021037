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

PackedWeights PackedWeights::pack(const std::vector<DenseMatrixRef>& parts, int64_t k, ThreadPool* pool) {
  PackedWeights packed;
  packed.k = k;
  struct Row {
    const DenseMatrixRef* part;
    int64_t r;
  };
  std::vector<Row> rows;  // every row, in the fused order
  for (const DenseMatrixRef& part : parts) {
    packed.n += part.rows;
    for (int64_t r = 0; r < part.rows; ++r) rows.push_back({&part, r});
  }
  packed.panels.resize(static_cast<size_t>(packed.num_panels() * k * kPanel));  // every value written below
  float* const base = packed.panels.data();
  // A panel in strips of 64 columns: the 16 rows' values widened into `strip`, then written
  // out k-major, 4 KB a strip, contiguous. Padding rows past n are zeros.
  constexpr int64_t kStrip = 64;
  const auto pack_panel = [&](int64_t p) {
    float strip[kPanel][kStrip];
    float* panel = base + p * k * kPanel;
    for (int64_t c0 = 0; c0 < k; c0 += kStrip) {
      const int64_t width = std::min(kStrip, k - c0);
      for (int64_t j = 0; j < kPanel; ++j) {
        const int64_t row = p * kPanel + j;
        if (row < packed.n) {
          rows[static_cast<size_t>(row)].part->to_f32(rows[static_cast<size_t>(row)].r, c0, width, strip[j]);
        } else {
          std::fill(strip[j], strip[j] + width, 0.0f);
        }
      }
      for (int64_t c = 0; c < width; ++c)
        for (int64_t j = 0; j < kPanel; ++j) panel[(c0 + c) * kPanel + j] = strip[j][c];
    }
  };
  // Runs of panels of about 256 KiB (64 Ki floats) each.
  for_each_run(pool, packed.num_panels(), (int64_t{1} << 16) / std::max<int64_t>(k * kPanel, 1), [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) pack_panel(p);
  });
  return packed;
}

void PackedWeights::row(int64_t r, float* out) const {
  const float* panel = panels.data() + (r / kPanel) * k * kPanel + r % kPanel;
  for (int64_t kk = 0; kk < k; ++kk) out[kk] = panel[kk * kPanel];
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
