#include "quant_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "strata/float_convert.h"
#include "thread_pool.h"

namespace strata {

namespace {

float fp16_round(float x) { return f16_to_f32(f32_to_f16(x)); }

void quantize_portable(const float* a, int64_t lda, int64_t k, bool q8_1, int64_t row_begin, int64_t row_end, ActBlock* acts) {
  const int64_t nb = k / kQuantBlock;
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* x = a + r * lda + b * kQuantBlock;
      ActBlock& out = acts[r * nb + b];
      float amax = 0.0f;
      for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float d = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int j = 0; j < kQuantBlock; ++j) {
        const int32_t q = static_cast<int32_t>(std::nearbyint(x[j] * id));  // half to even
        out.qs[j] = static_cast<int8_t>(q);
        sum += q;
      }
      out.d = fp16_round(d);
      out.s = q8_1 ? fp16_round(d * static_cast<float>(sum)) : 0.0f;
    }
  }
}

// The 32 weight values of block b of a row, as the integers the dot product multiplies
// (Q4_0: q - 8; Q4_1: q; Q8_0: q), and its scale and minimum.
void weight_block(QuantType type, const uint8_t* row, int64_t b, int32_t* w, float* d, float* m) {
  if (type == QuantType::Q8_0) {
    BlockQ8_0 block;
    std::memcpy(&block, row + b * sizeof block, sizeof block);
    for (int j = 0; j < kQuantBlock; ++j) w[j] = block.qs[j];
    *d = f16_to_f32(block.d);
    *m = 0.0f;
    return;
  }
  const int offset = type == QuantType::Q4_0 ? 8 : 0;
  uint16_t dm[2] = {0, 0};
  const uint8_t* qs;
  if (type == QuantType::Q4_0) {
    std::memcpy(dm, row + b * sizeof(BlockQ4_0), 2);
    qs = row + b * sizeof(BlockQ4_0) + 2;
  } else {
    std::memcpy(dm, row + b * sizeof(BlockQ4_1), 4);
    qs = row + b * sizeof(BlockQ4_1) + 4;
  }
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    w[j] = (qs[j] & 15) - offset;
    w[j + 16] = (qs[j] >> 4) - offset;
  }
  *d = f16_to_f32(dm[0]);
  *m = f16_to_f32(dm[1]);
}

void gemm_portable(const QuantGemmArgs& g, const ActBlock* acts, int64_t n_begin, int64_t n_end) {
  const QuantMatrix& w = *g.w;
  const int64_t nb = w.cols / kQuantBlock;
  const bool with_min = w.type == QuantType::Q4_1;
  int32_t values[kQuantBlock];
  for (int64_t j = n_begin; j < n_end; ++j) {
    const uint8_t* row = w.row(j);
    for (int64_t i = 0; i < g.m; ++i) {
      float lane[8] = {};
      float mins = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        float d, m;
        weight_block(w.type, row, b, values, &d, &m);
        const ActBlock& a = acts[i * nb + b];
        const float scale = d * a.d;
        for (int l = 0; l < 8; ++l) {
          int32_t sum = 0;
          for (int e = 4 * l; e < 4 * l + 4; ++e) sum += values[e] * a.qs[e];
          lane[l] = std::fma(scale, static_cast<float>(sum), lane[l]);
        }
        if (with_min) mins = std::fma(m, a.s, mins);
      }
      const float t0 = lane[4] + lane[0], t1 = lane[5] + lane[1], t2 = lane[6] + lane[2], t3 = lane[7] + lane[3];
      float sum = (t0 + t2) + (t1 + t3);
      if (with_min) sum = sum + mins;
      if (g.bias != nullptr) sum += g.bias[j];
      float* c = g.c + i * g.ldc + j;
      *c = g.accumulate ? *c + sum : sum;
    }
  }
}

}  // namespace

const QuantKernels& portable_quant_kernels() {
  static const QuantKernels kernels{"portable", &quantize_portable, &gemm_portable};
  return kernels;
}

#if defined(STRATA_HAVE_AVX2_KERNELS)
// What the x86 kernels need of the CPU (every AVX2 CPU has FMA and F16C, but a VM can hide them).
static bool cpu_runs_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
#if defined(STRATA_HAVE_AVX512VNNI_KERNELS)
static bool cpu_runs_avx512vnni() {
  return cpu_runs_avx2() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}
#endif
#endif

const QuantKernels& quant_kernels() {
  const std::string_view forced = std::getenv("STRATA_CPU_KERNELS") ? std::getenv("STRATA_CPU_KERNELS") : "";
  if (forced == "portable") return portable_quant_kernels();
#if defined(STRATA_HAVE_AVX2_KERNELS)
#if defined(STRATA_HAVE_AVX512VNNI_KERNELS)
  if (forced != "avx2" && cpu_runs_avx512vnni()) return avx512vnni_quant_kernels();
#endif
  if (cpu_runs_avx2()) return avx2_quant_kernels();
#endif
  return portable_quant_kernels();
}

std::vector<const QuantKernels*> runnable_quant_kernels() {
  std::vector<const QuantKernels*> out = {&portable_quant_kernels()};
#if defined(STRATA_HAVE_AVX2_KERNELS)
  if (cpu_runs_avx2()) out.push_back(&avx2_quant_kernels());
#if defined(STRATA_HAVE_AVX512VNNI_KERNELS)
  if (cpu_runs_avx512vnni()) out.push_back(&avx512vnni_quant_kernels());
#endif
#endif
  return out;
}

void parallel_quant_gemm(ThreadPool& pool, const QuantKernels& kernels, const QuantGemmArgs& args, QuantScratch& scratch) {
  const QuantMatrix& w = *args.w;
  if (args.m <= 0 || w.rows == 0) return;
  const int64_t nb = w.cols / kQuantBlock;
  const size_t needed = static_cast<size_t>(args.m * nb);
  if (scratch.acts.size() < needed) scratch.acts.resize(needed);
  ActBlock* acts = scratch.acts.data();
  const bool q8_1 = uses_q8_1(w.type);
  // Quantizing is ~1/n of the GEMM's work: split it only when there are many rows.
  if (args.m >= 16 && pool.size() > 1) {
    const int64_t tasks = std::min<int64_t>(pool.size(), args.m);
    const int64_t per = (args.m + tasks - 1) / tasks;
    pool.parallel_for(tasks, [&](int64_t t) {
      kernels.quantize(args.a, args.lda, w.cols, q8_1, t * per, std::min(args.m, (t + 1) * per), acts);
    });
  } else {
    kernels.quantize(args.a, args.lda, w.cols, q8_1, 0, args.m, acts);
  }
  // Weight rows in chunks of 8 (a multiple of every tile width), a few chunks per thread.
  constexpr int64_t kChunk = 8;
  const int64_t chunks = (w.rows + kChunk - 1) / kChunk;
  const int64_t work = args.m * w.rows * w.cols;
  int64_t tasks = work < (int64_t{1} << 16) ? 1 : std::min<int64_t>(chunks, int64_t{pool.size()} * 4);
  const int64_t per_task = (chunks + tasks - 1) / tasks;
  tasks = (chunks + per_task - 1) / per_task;
  pool.parallel_for(tasks, [&](int64_t t) {
    const int64_t begin = t * per_task * kChunk;
    kernels.gemm(args, acts, begin, std::min(w.rows, (t + 1) * per_task * kChunk));
  });
}

}  // namespace strata
