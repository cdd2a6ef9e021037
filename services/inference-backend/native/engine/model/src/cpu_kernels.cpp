#include "cpu_kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "strata/float_convert.h"
#include "thread_pool.h"

namespace strata {

#if defined(STRATA_HAVE_AVX2_KERNELS)
bool cpu_runs_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
#if defined(STRATA_HAVE_AVX512_KERNELS)
bool cpu_runs_avx512() { return cpu_runs_avx2() && __builtin_cpu_supports("avx512f"); }
#endif
#endif

const CpuKernels& cpu_kernels() {
  static const CpuKernels& chosen = cpu_kernels(kernels_env());
  return chosen;
}

const CpuKernels& cpu_kernels(std::string_view name) {
#if defined(STRATA_HAVE_AMX_KERNELS)
  if (name == "amx")
    if (const CpuKernels* amx = amx_kernels_if_runnable()) return *amx;
#endif
  return pick_kernels(runnable_cpu_kernels(), name);
}

std::vector<const CpuKernels*> runnable_cpu_kernels() {
  std::vector<const CpuKernels*> out = {&portable_kernels()};
#if defined(STRATA_HAVE_AVX2_KERNELS)
  if (cpu_runs_avx2()) out.push_back(&avx2_kernels());
#if defined(STRATA_HAVE_AVX512_KERNELS)
  if (cpu_runs_avx512()) out.push_back(&avx512_kernels());
#endif
#endif
  return out;
}

PackedWeights PackedWeights::pack(const std::vector<DenseMatrixRef>& parts, int64_t k, ThreadPool* pool, bool widen,
                                  bool bf16_pairs) {
  PackedWeights packed;
  packed.k = k;
  struct Row {
    const DenseMatrixRef* part;
    int64_t r;
  };
  std::vector<Row> rows;  // every row, in the fused order
  bool one_half_dtype = !parts.empty() && !widen;
  for (const DenseMatrixRef& part : parts) {
    packed.n += part.rows;
    for (int64_t r = 0; r < part.rows; ++r) rows.push_back({&part, r});
    one_half_dtype = one_half_dtype && part.dtype != DenseMatrixRef::Dtype::kF32 && part.dtype == parts[0].dtype;
  }
  if (one_half_dtype) packed.elem = parts[0].dtype == DenseMatrixRef::Dtype::kBF16 ? Elem::kBF16 : Elem::kF16;
  packed.pairs = bf16_pairs && packed.elem == Elem::kBF16;
  const int64_t k_stride = packed.k_stride();
  const size_t values = static_cast<size_t>(packed.num_panels() * k_stride * kPanel);
  // A panel in strips of 64 columns: the 16 rows' values (widened to fp32, or the 16-bit values
  // as they are) gathered into `strip`, then written out k-major, contiguous. Padding rows past
  // n are zeros, and so is the value past an odd k in pairs. Every value of the panels is
  // written.
  constexpr int64_t kStrip = 64;
  int64_t slots[kPanel];  // where row j lies among a k's values (not in pairs)
  for (int64_t j = 0; j < kPanel; ++j) slots[j] = packed.at(j, 0);
  const auto pack_panels = [&]<typename T>(T* base) {
    const auto pack_panel = [&](int64_t p) {
      T strip[kPanel][kStrip];
      T* panel = base + p * k_stride * kPanel;
      for (int64_t c0 = 0; c0 < k; c0 += kStrip) {
        const int64_t width = std::min(kStrip, k - c0);
        for (int64_t j = 0; j < kPanel; ++j) {
          const int64_t row = p * kPanel + j;
          if (row >= packed.n) {
            std::fill(strip[j], strip[j] + width, T{0});
          } else if constexpr (std::is_same_v<T, float>) {
            rows[static_cast<size_t>(row)].part->to_f32(rows[static_cast<size_t>(row)].r, c0, width, strip[j]);
          } else {
            const Row& from = rows[static_cast<size_t>(row)];
            std::memcpy(strip[j], from.part->row(from.r) + c0 * 2, static_cast<size_t>(width) * 2);
          }
        }
        if (packed.pairs) {
          for (int64_t c = 0; c < width; ++c)
            for (int64_t j = 0; j < kPanel; ++j) panel[packed.at(j, c0 + c)] = strip[j][c];
        } else {
          for (int64_t c = 0; c < width; ++c)
            for (int64_t j = 0; j < kPanel; ++j) panel[(c0 + c) * kPanel + slots[j]] = strip[j][c];
        }
      }
      for (int64_t kk = k; kk < k_stride; ++kk)
        for (int64_t j = 0; j < kPanel; ++j) panel[packed.at(j, kk)] = T{0};
    };
    // Runs of panels of about 256 KiB each.
    const int64_t per_run = (int64_t{256} << 10) / static_cast<int64_t>(sizeof(T)) / std::max<int64_t>(k_stride * kPanel, 1);
    for_each_run(pool, packed.num_panels(), per_run, [&](int64_t first, int64_t last) {
      for (int64_t p = first; p < last; ++p) pack_panel(p);
    });
  };
  if (packed.elem == Elem::kF32) {
    packed.panels.resize(values);
    pack_panels(packed.panels.data());
  } else {
    packed.halves.resize(values);
    pack_panels(packed.halves.data());
  }
  return packed;
}

void PackedWeights::row(int64_t r, float* out) const {
  const int64_t panel = (r / kPanel) * k_stride() * kPanel, j = r % kPanel;
  if (elem == Elem::kF32) {
    for (int64_t kk = 0; kk < k; ++kk) out[kk] = panels[static_cast<size_t>(panel + at(j, kk))];
    return;
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    const uint16_t h = halves[static_cast<size_t>(panel + at(j, kk))];
    out[kk] = elem == Elem::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

const char* elem_name(PackedWeights::Elem elem) {
  return elem == PackedWeights::Elem::kBF16 ? "bfloat16" : elem == PackedWeights::Elem::kF16 ? "float16" : "float32";
}

void parallel_gemm(ThreadPool& pool, const CpuKernels& kernels, const GemmArgs& args) {
  const int64_t panels = args.w->num_panels();
  if (args.m <= 0 || panels == 0) return;
  GemmArgs g = args;
  if (kernels.round_activations != nullptr && args.w->pairs && args.a_bf16 == nullptr) {
    // The AMX GEMM's bf16 activations, rounded once for every task, 16 rows a task.
    // (The caller's buffer: a pool thread naming `rounded` would get its own, empty one.)
    thread_local std::vector<uint16_t, UninitializedAllocator<uint16_t>> rounded;
    const int64_t rows = amx_rows(args.m);
    rounded.resize(static_cast<size_t>(rows * amx_k(args.w->k)));
    uint16_t* out = rounded.data();
    pool.parallel_for(rows / 16, [&](int64_t t) { kernels.round_activations(args, t * 16, t * 16 + 16, out); });
    g.a_bf16 = out;
  }
  // Below ~64k multiply-adds a split costs more in wake-ups than it saves.
  const int64_t work = args.m * args.w->n * args.w->k;
  int64_t tasks = work < (int64_t{1} << 16) ? 1 : std::min<int64_t>(panels, int64_t{pool.size()} * 4);
  // Panels per task in multiples of 3, the width of the one-row tiles.
  int64_t block = (panels + tasks - 1) / tasks;
  block = (block + 2) / 3 * 3;
  tasks = (panels + block - 1) / block;
  pool.parallel_for(tasks, [&](int64_t t) {
    const int64_t begin = t * block;
    kernels.gemm(g, begin, std::min(panels, begin + block));
  });
}

}  // namespace strata
