#include "quant_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cpu_kernels.h"
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
      out.sum = sum;
    }
  }
}

// Block b of panel row r: its 32 values as the integers the dot product multiplies (Q4_0:
// q - 8; Q4_1: q; Q8_0: q), its scale and its minimum (Q4_1; else 0).
void panel_block(const QuantPanels& w, const uint8_t* panel, int64_t b, int64_t r, int32_t* values, float* d, float* m) {
  const uint8_t* block = panel + b * w.panel_block_bytes();
  uint16_t h = 0;
  std::memcpy(&h, block + 2 * r, 2);
  *d = f16_to_f32(h);
  *m = 0.0f;
  if (w.type == QuantType::Q4_1) {
    std::memcpy(&h, block + 2 * (kPanelRows + r), 2);
    *m = f16_to_f32(h);
  }
  const uint8_t* chunks = block + w.scale_bytes();
  if (w.type == QuantType::Q8_0) {
    for (int c = 0; c < 8; ++c)
      for (int t = 0; t < 4; ++t) values[4 * c + t] = int32_t{chunks[64 * c + 4 * r + t]} - 128;
    return;
  }
  const int32_t offset = w.type == QuantType::Q4_0 ? 8 : 0;
  for (int c = 0; c < 4; ++c)
    for (int t = 0; t < 4; ++t) {
      const uint8_t byte = chunks[64 * c + 4 * r + t];
      values[4 * c + t] = (byte & 15) - offset;
      values[16 + 4 * c + t] = (byte >> 4) - offset;
    }
}

void gemm_portable(const QuantGemmArgs& g, const ActBlock* acts, int64_t p_begin, int64_t p_end) {
  const QuantPanels& w = *g.w;
  const int64_t nb = w.blocks();
  int32_t values[kQuantBlock];
  for (int64_t p = p_begin; p < p_end; ++p) {
    const uint8_t* panel = w.panel(p);
    for (int64_t r = 0; r < kPanelRows && p * kPanelRows + r < w.rows; ++r) {
      const int64_t j = p * kPanelRows + r;
      for (int64_t i = 0; i < g.m; ++i) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          float d, m;
          panel_block(w, panel, b, r, values, &d, &m);
          const ActBlock& a = acts[i * nb + b];
          int32_t dot = 0;
          for (int e = 0; e < kQuantBlock; ++e) dot += values[e] * a.qs[e];
          acc = std::fma(d * a.d, static_cast<float>(dot), acc);
          if (w.type == QuantType::Q4_1) acc = std::fma(m, a.s, acc);
        }
        float sum = acc;
        if (g.bias != nullptr) sum += g.bias[j];
        float* c = g.c + i * g.ldc + j;
        *c = g.accumulate ? *c + sum : sum;
      }
    }
  }
}

std::shared_ptr<uint8_t> aligned_bytes(int64_t bytes) {
  const size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, size));
  if (p == nullptr) throw std::bad_alloc();
  return std::shared_ptr<uint8_t>(p, [](uint8_t* q) { std::free(q); });
}

// Row `j` of the panels (panel j / 16, its row j % 16) from the row's blocks at `src`: per
// block, the scale (and Q4_1's minimum) into the panel block's scales, then its values 4 bytes
// at a time into the chunks (Q8_0's made unsigned by flipping each byte's top bit).
void pack_row(const QuantPanels& out, uint8_t* base, int64_t j, const uint8_t* src) {
  const int64_t r = j % kPanelRows, nb = out.blocks(), block_bytes = quant_block_bytes(out.type);
  uint8_t* dst = base + j / kPanelRows * out.panel_bytes() + 2 * r;
  const int64_t pb = out.panel_block_bytes(), scales = out.scale_bytes();
  if (out.type == QuantType::Q8_0) {
    for (int64_t b = 0; b < nb; ++b, src += block_bytes, dst += pb) {
      std::memcpy(dst, src, 2);  // d
      uint8_t* chunks = dst - 2 * r + scales + 4 * r;
      for (int64_t c = 0; c < 8; ++c) {
        uint32_t word;
        std::memcpy(&word, src + 2 + 4 * c, 4);
        word ^= 0x80808080u;
        std::memcpy(chunks + 64 * c, &word, 4);
      }
    }
    return;
  }
  const int64_t header = out.type == QuantType::Q4_1 ? 4 : 2;
  for (int64_t b = 0; b < nb; ++b, src += block_bytes, dst += pb) {
    std::memcpy(dst, src, 2);                                                           // d
    if (out.type == QuantType::Q4_1) std::memcpy(dst + 2 * kPanelRows, src + 2, 2);  // m
    uint8_t* chunks = dst - 2 * r + scales + 4 * r;
    for (int64_t c = 0; c < 4; ++c) std::memcpy(chunks + 64 * c, src + header + 4 * c, 4);
  }
}

}  // namespace

QuantPanels pack_panels(QuantType type, int64_t cols, const std::vector<QuantRowsRef>& parts, ThreadPool* pool) {
  QuantPanels out;
  out.type = type;
  out.cols = cols;
  for (const QuantRowsRef& part : parts) out.rows += part.rows;
  const int64_t row_bytes = cols / kQuantBlock * quant_block_bytes(type);
  std::vector<const uint8_t*> rows;  // every row's blocks, in the fused order
  rows.reserve(static_cast<size_t>(out.rows));
  for (const QuantRowsRef& part : parts)
    for (int64_t r = 0; r < part.rows; ++r) rows.push_back(part.data + (part.order ? part.order[r] : r) * row_bytes);
  std::shared_ptr<uint8_t> bytes = aligned_bytes(out.bytes());
  uint8_t* base = bytes.get();
  if (out.rows % kPanelRows != 0) {  // the last panel's padding rows: zero scales and values
    std::memset(base + (out.panels() - 1) * out.panel_bytes(), 0, static_cast<size_t>(out.panel_bytes()));
  }
  // Runs of panels of about 256 KiB each, so a thread's writes stay in its cache.
  const int64_t per_run = (int64_t{1} << 18) / std::max<int64_t>(out.panel_bytes(), 1);
  for_each_run(pool, out.panels(), per_run, [&](int64_t first, int64_t last) {
    for (int64_t j = first * kPanelRows; j < std::min(out.rows, last * kPanelRows); ++j) pack_row(out, base, j, rows[static_cast<size_t>(j)]);
  });
  out.data = std::move(bytes);
  return out;
}

QuantPanels pack_panels(const QuantMatrix& m) { return pack_panels(m.type, m.cols, {{m.rows, m.data.data(), nullptr}}); }

void dequantize_panel_row(const QuantPanels& m, int64_t r, float* out) {
  const uint8_t* panel = m.panel(r / kPanelRows);
  int32_t values[kQuantBlock];
  for (int64_t b = 0; b < m.blocks(); ++b) {
    float d, mn;
    panel_block(m, panel, b, r % kPanelRows, values, &d, &mn);
    // As dequantize_row: d * q (+ m) in fp32, Q4_0's q - 8 an exact integer.
    for (int e = 0; e < kQuantBlock; ++e) {
      const float v = d * static_cast<float>(values[e]);
      out[b * kQuantBlock + e] = m.type == QuantType::Q4_1 ? v + mn : v;
    }
  }
}

const QuantKernels& portable_quant_kernels() {
  static const QuantKernels kernels{"portable", &quantize_portable, &gemm_portable};
  return kernels;
}

#if defined(STRATA_HAVE_AVX2_KERNELS)
#if defined(STRATA_HAVE_AVX512VNNI_KERNELS)
static bool cpu_runs_avx512vnni() {
  return cpu_runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}
#endif
#endif

const QuantKernels& quant_kernels() {
  static const QuantKernels& chosen = quant_kernels(kernels_env());
  return chosen;
}

const QuantKernels& quant_kernels(std::string_view name) { return pick_kernels(runnable_quant_kernels(), name); }

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
  const QuantPanels& w = *args.w;
  if (args.m <= 0 || w.rows == 0) return;
  const int64_t nb = w.blocks();
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
  // Panels of 16 weight rows in runs. A decode GEMV (one or a few rows) gives each thread one
  // run, so each thread's reads are one stream (4 runs a thread measured ~20% slower); more
  // rows make it compute-bound, and 4 runs a thread balance a thread that lost its CPU.
  const int64_t panels = w.panels();
  const int64_t work = args.m * w.rows * w.cols;
  const int64_t runs_per_thread = args.m < 4 ? 1 : 4;
  int64_t tasks = work < (int64_t{1} << 16) ? 1 : std::min<int64_t>(panels, int64_t{pool.size()} * runs_per_thread);
  const int64_t per_task = (panels + tasks - 1) / tasks;
  tasks = (panels + per_task - 1) / per_task;
  pool.parallel_for(tasks, [&](int64_t t) { kernels.gemm(args, acts, t * per_task, std::min(panels, (t + 1) * per_task)); });
}

}  // namespace strata
