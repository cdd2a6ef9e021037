// The quantized GEMM (Q4_0, Q4_1, Q8_0 weights): block decoding, activation quantization by
// ggml's rule, products against a float64 reference, portable == AVX2 bit for bit, and batch
// and thread invariance.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "check.h"
#include "quant_kernels.h"
#include "strata/float_convert.h"
#include "strata/quant.h"
#include "thread_pool.h"

using namespace strata;

namespace {

constexpr QuantType kTypes[] = {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q8_0};

QuantMatrix random_matrix(QuantType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  QuantMatrix w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.data.resize(static_cast<size_t>(rows * w.row_bytes()));
  for (uint8_t& b : w.data) b = static_cast<uint8_t>(rng());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
      uint8_t* block = w.data.data() + r * w.row_bytes() + b * quant_block_bytes(type);
      const uint16_t d = f32_to_f16(0.002f * static_cast<float>(1 + rng() % 20));
      std::memcpy(block, &d, 2);
      if (type == QuantType::Q4_1) {
        const uint16_t m = f32_to_f16(-0.01f * static_cast<float>(rng() % 5));
        std::memcpy(block + 2, &m, 2);
      }
    }
  return w;
}

std::vector<float> random_acts(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(n));
  for (float& x : a) x = normal(rng);
  return a;
}

std::vector<float> gemm(const QuantKernels& kernels, int threads, const QuantMatrix& w, const std::vector<float>& a, int64_t m,
                        const float* bias = nullptr, std::vector<float> c = {}, bool accumulate = false) {
  ThreadPool pool(threads);
  QuantScratch scratch;
  const QuantPanels panels = pack_panels(w);
  if (c.empty()) c.assign(static_cast<size_t>(m * w.rows), 0.0f);
  QuantGemmArgs args;
  args.m = m;
  args.a = a.data();
  args.lda = w.cols;
  args.w = &panels;
  args.c = c.data();
  args.ldc = w.rows;
  args.bias = bias;
  args.accumulate = accumulate;
  parallel_quant_gemm(pool, kernels, args, scratch);
  return c;
}

std::vector<const QuantKernels*> all_kernels() {
  static bool told = false;
  std::vector<const QuantKernels*> out = runnable_quant_kernels();
  if (!told) {
    std::printf("  kernels under test:");
    for (const QuantKernels* k : out) std::printf(" %s", k->isa);
    std::printf("\n");
    told = true;
  }
  return out;
}

}  // namespace

TEST_CASE("quant: dequantize_row decodes each block format exactly") {
  uint8_t q4_0[18] = {}, q4_1[20] = {}, q8_0[34] = {};
  const uint16_t two = f32_to_f16(2.0f), half = f32_to_f16(0.5f);
  std::memcpy(q4_0, &two, 2);
  std::memcpy(q4_1, &two, 2);
  std::memcpy(q4_1 + 2, &half, 2);
  std::memcpy(q8_0, &two, 2);
  for (int j = 0; j < 16; ++j) q4_0[2 + j] = q4_1[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  for (int j = 0; j < 32; ++j) q8_0[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  float out[32];
  dequantize_row(QuantType::Q4_0, q4_0, 32, out);
  for (int j = 0; j < 16; ++j) {
    CHECK_EQ(out[j], 2.0f * static_cast<float>(j - 8));             // low nibbles: values 0..15
    CHECK_EQ(out[j + 16], 2.0f * static_cast<float>(15 - j - 8));   // high nibbles: values 16..31
  }
  dequantize_row(QuantType::Q4_1, q4_1, 32, out);
  for (int j = 0; j < 16; ++j) CHECK_EQ(out[j], 2.0f * static_cast<float>(j) + 0.5f);
  dequantize_row(QuantType::Q8_0, q8_0, 32, out);
  for (int j = 0; j < 32; ++j) CHECK_EQ(out[j], 2.0f * static_cast<float>(j - 16));
}

TEST_CASE("quant: dequantize gives every row as dequantize_row does, also where rows go to threads") {
  std::mt19937 rng(5);
  for (QuantType type : kTypes) {
    // 3 rows (one thread) and 2,053 rows of 1,024 (2.1M values: a thread a million where the
    // machine has the CPUs, so the rows split unevenly).
    for (int64_t rows : {3, 2053}) {
      const int64_t k = 1024;
      const QuantMatrix w = random_matrix(type, rows, k, rng);
      const std::vector<float> all = dequantize(w);
      CHECK_EQ(static_cast<int64_t>(all.size()), rows * k);
      std::vector<float> expect(static_cast<size_t>(k));
      bool same = true;
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(type, w.row(r), k, expect.data());
        same = same && std::equal(expect.begin(), expect.end(), all.begin() + r * k);
      }
      CHECK(same);
    }
  }
}

TEST_CASE("quant: panels hold every row's blocks; their rows dequantize as the file's do") {
  std::mt19937 rng(3);
  for (QuantType type : kTypes) {
    for (int64_t rows : {1, 16, 37}) {  // one padded panel, one full, three with a tail
      const int64_t k = 96;
      const QuantMatrix w = random_matrix(type, rows, k, rng);
      const QuantPanels p = pack_panels(w);
      CHECK_EQ(p.panels(), (rows + 15) / 16);
      CHECK_EQ(p.bytes(), p.panels() * 16 * w.row_bytes());  // the file's bytes, rows padded to 16
      std::vector<float> expect(static_cast<size_t>(k)), got(static_cast<size_t>(k));
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(type, w.row(r), k, expect.data());
        dequantize_panel_row(p, r, got.data());
        CHECK(got == expect);
      }
      // Padding rows are zero: scales and values.
      std::vector<float> zero(static_cast<size_t>(k), 0.0f);
      for (int64_t r = rows; r < p.panels() * 16; ++r) {
        dequantize_panel_row(p, r, got.data());
        for (float& v : got) v = std::fabs(v);  // Q4_0's zero-scale padding gives -0.0
        CHECK(got == zero);
      }
    }
  }
}

TEST_CASE("quant: panels packed from parts where they lie (row orders, threads) equal the copied matrix's") {
  // What the CPU backend's GGUF load does: q, k and v (k's rows in another order, as
  // llama.cpp's permutation is undone) packed into one matrix's panels from the file's mapping,
  // runs of panels on a pool's threads. The bytes must be those of copying the rows out in
  // that order first and packing the copy on one thread.
  std::mt19937 rng(11);
  ThreadPool pool(3);
  for (QuantType type : kTypes) {
    const int64_t k = 1024;
    const std::vector<int64_t> sizes = {5, 611, 300};  // 916 rows: 58 panels, several runs of them
    std::vector<QuantMatrix> parts;
    for (int64_t rows : sizes) parts.push_back(random_matrix(type, rows, k, rng));
    std::vector<int64_t> order(static_cast<size_t>(sizes[1]));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::shuffle(order.begin(), order.end(), rng);

    QuantMatrix fused;  // the rows copied out in order
    fused.type = type;
    fused.cols = k;
    fused.rows = sizes[0] + sizes[1] + sizes[2];
    const int64_t rb = fused.row_bytes();
    for (size_t p = 0; p < parts.size(); ++p)
      for (int64_t r = 0; r < parts[p].rows; ++r) {
        const uint8_t* row = parts[p].row(p == 1 ? order[static_cast<size_t>(r)] : r);
        fused.data.insert(fused.data.end(), row, row + rb);
      }
    const QuantPanels expect = pack_panels(fused);
    const std::vector<QuantRowsRef> refs = {{sizes[0], parts[0].data.data(), nullptr},
                                            {sizes[1], parts[1].data.data(), order.data()},
                                            {sizes[2], parts[2].data.data(), nullptr}};
    for (ThreadPool* on : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const QuantPanels got = pack_panels(type, k, refs, on);
      CHECK_EQ(got.rows, fused.rows);
      CHECK_EQ(got.bytes(), expect.bytes());
      CHECK(std::memcmp(got.data.get(), expect.data.get(), static_cast<size_t>(expect.bytes())) == 0);
    }
  }
}

TEST_CASE("quant: activations quantize by ggml's rule (amax / 127, half to even, fp16 scales)") {
  for (const QuantKernels* k : all_kernels()) {
    float x[64] = {};
    x[0] = -127.0f;  // amax 127 (negative): d = 1, id = 1
    x[1] = 2.5f;     // tie: rounds to even 2
    x[2] = 3.5f;     // tie: rounds to even 4
    x[3] = -0.5f;    // tie: -0
    x[4] = 1.25f;
    // block 2 all zero: d = 0, q = 0
    ActBlock blocks[2];
    k->quantize(x, 64, 64, true, 0, 1, blocks);
    CHECK_EQ(blocks[0].d, 1.0f);
    CHECK_EQ(int{blocks[0].qs[0]}, -127);
    CHECK_EQ(int{blocks[0].qs[1]}, 2);
    CHECK_EQ(int{blocks[0].qs[2]}, 4);
    CHECK_EQ(int{blocks[0].qs[3]}, 0);
    CHECK_EQ(int{blocks[0].qs[4]}, 1);
    CHECK_EQ(blocks[0].s, -120.0f);  // d * (-127 + 2 + 4 + 0 + 1)
    CHECK_EQ(blocks[0].sum, -120);
    CHECK_EQ(blocks[1].d, 0.0f);
    CHECK_EQ(blocks[1].sum, 0);
    for (int j = 0; j < 32; ++j) CHECK_EQ(int{blocks[1].qs[j]}, 0);
    // A scale that is not an fp16 value is stored rounded to one.
    float y[32];
    for (int j = 0; j < 32; ++j) y[j] = 0.1f * static_cast<float>(j + 1);
    k->quantize(y, 32, 32, false, 0, 1, blocks);
    CHECK_EQ(blocks[0].d, f16_to_f32(f32_to_f16(3.2f / 127.0f)));
    CHECK_EQ(int{blocks[0].qs[31]}, 127);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += blocks[0].qs[j];
    CHECK_EQ(blocks[0].sum, sum);  // kept for Q4_0 and Q8_0 as well
  }
}

TEST_CASE("quant: products match a float64 reference of the dequantized blocks") {
  std::mt19937 rng(11);
  for (QuantType type : kTypes) {
    for (int64_t m : {1, 3, 8}) {
      const int64_t n = 37, k = 96;  // n not a multiple of any tile; k three blocks
      const QuantMatrix w = random_matrix(type, n, k, rng);
      const std::vector<float> a = random_acts(m * k, rng);
      for (const QuantKernels* kernels : all_kernels()) {
        const std::vector<float> c = gemm(*kernels, 1, w, a, m);
        // The reference multiplies the dequantized weights by the dequantized activations.
        std::vector<ActBlock> acts(static_cast<size_t>(m * k / kQuantBlock));
        portable_quant_kernels().quantize(a.data(), k, k, type == QuantType::Q4_1, 0, m, acts.data());
        std::vector<float> wrow(static_cast<size_t>(k));
        double worst = 0.0, worst_raw = 0.0, norm = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          dequantize_row(type, w.row(j), k, wrow.data());
          for (int64_t i = 0; i < m; ++i) {
            double exact = 0.0, raw = 0.0;
            for (int64_t x = 0; x < k; ++x) {
              const ActBlock& b = acts[i * (k / kQuantBlock) + x / kQuantBlock];
              exact += static_cast<double>(wrow[x]) * (static_cast<double>(b.d) * b.qs[x % kQuantBlock]);
              raw += static_cast<double>(wrow[x]) * a[i * k + x];
            }
            if (type == QuantType::Q4_1) {  // ggml's Q4_1 min term uses s (fp16 of d * sum q), not sum(q) * d
              exact = 0.0;
              for (int64_t b = 0; b < k / kQuantBlock; ++b) {
                const ActBlock& ab = acts[i * (k / kQuantBlock) + b];
                uint16_t dm[2];
                std::memcpy(dm, w.row(j) + b * 20, 4);
                double qdot = 0.0;
                for (int e = 0; e < kQuantBlock; ++e) {
                  const uint8_t byte = w.row(j)[b * 20 + 4 + e % 16];
                  const int q = e < 16 ? byte & 15 : byte >> 4;
                  qdot += static_cast<double>(q) * ab.qs[e];
                }
                exact += static_cast<double>(f16_to_f32(dm[0])) * ab.d * qdot + static_cast<double>(f16_to_f32(dm[1])) * ab.s;
              }
            }
            worst = std::max(worst, std::fabs(c[i * n + j] - exact));
            worst_raw = std::max(worst_raw, std::fabs(c[i * n + j] - raw));
            norm = std::max(norm, std::fabs(exact));
          }
        }
        CHECK(worst <= 1e-5 * norm);      // only fp32 rounding of the scaled sums
        CHECK(worst_raw <= 3e-2 * norm);  // activation quantization error
        CHECK(worst_raw > 0.0);           // the activations really are quantized
      }
    }
  }
}

TEST_CASE("quant: portable and AVX2 agree bit for bit; rows are batch, split and thread invariant") {
  std::mt19937 rng(5);
  for (QuantType type : kTypes) {
    const int64_t n = 45, k = 160, m = 13;
    const QuantMatrix w = random_matrix(type, n, k, rng);
    const std::vector<float> a = random_acts(m * k, rng);
    const std::vector<float> bias = random_acts(n, rng);
    const std::vector<float> base = gemm(portable_quant_kernels(), 1, w, a, m, bias.data());
    for (const QuantKernels* kernels : all_kernels()) {
      for (int threads : {1, 2, 3}) CHECK(gemm(*kernels, threads, w, a, m, bias.data()) == base);
      for (int64_t rows = 1; rows <= m; ++rows) {  // the first `rows` rows alone
        const std::vector<float> part(a.begin(), a.begin() + rows * k);
        const std::vector<float> c = gemm(*kernels, 2, w, part, rows, bias.data());
        CHECK(std::equal(c.begin(), c.end(), base.begin()));
      }
      // accumulate adds the same sum to what is there
      std::vector<float> start(static_cast<size_t>(m * n), 1.5f);
      const std::vector<float> acc = gemm(*kernels, 2, w, a, m, bias.data(), start, true);
      for (size_t i = 0; i < acc.size(); ++i) CHECK_EQ(acc[i], 1.5f + base[i]);
    }
  }
}

TEST_MAIN()
