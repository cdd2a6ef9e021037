// The CPU backend on dummy weights: agreement with a plain dense reference written here (double
// precision, no paging) for the variants tinystories-656k does not cover (q/k/v and o biases,
// llama3 rope scaling, explicit head_dim, tied embeddings); bit-identical results under any
// chunking, batching, block placement or thread count; copy-on-write; rejected batches.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "check.h"
#include "cpu_kernels.h"
#include "kv_cache.h"
#include "strata/cpu_backend.h"
#include "strata/float_convert.h"
#include "strata/model_config.h"
#include "strata/model_error.h"
#include "strata/model_weights.h"
#include "thread_pool.h"

using namespace strata;

namespace {

ModelConfig small_config(const std::string& architecture) {
  ModelConfig c;
  c.architecture = architecture;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 10000.0f;
  return c;
}

// Dense reference forward in double: returns the last-position logits of `tokens`.
std::vector<double> reference_logits(const ModelConfig& c, const ModelWeights& w, const std::vector<int32_t>& tokens) {
  const int64_t hidden = c.hidden_size, hd = c.head_dim, T = static_cast<int64_t>(tokens.size());
  const int64_t q_dim = int64_t{c.num_heads} * hd, kv_dim = int64_t{c.num_kv_heads} * hd;
  // inv_freq with Hugging Face's llama3 rule, in double.
  std::vector<double> inv_freq(hd / 2);
  for (int64_t i = 0; i < hd / 2; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / hd);
    if (c.rope_scaling_factor > 0) {
      const double wavelen = 2 * M_PI / f, low = c.rope_original_max_position / c.rope_low_freq_factor,
                   high = c.rope_original_max_position / c.rope_high_freq_factor;
      if (wavelen > low) {
        f /= c.rope_scaling_factor;
      } else if (wavelen >= high) {
        const double smooth = (c.rope_original_max_position / wavelen - c.rope_low_freq_factor) /
                              (c.rope_high_freq_factor - c.rope_low_freq_factor);
        f = (1 - smooth) * f / c.rope_scaling_factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
  const auto linear = [](const std::vector<double>& x, const std::vector<float>& m, const std::vector<float>& bias, int64_t out_n) {
    const int64_t in_n = static_cast<int64_t>(x.size());
    std::vector<double> y(out_n);
    for (int64_t o = 0; o < out_n; ++o) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int64_t i = 0; i < in_n; ++i) s += m[o * in_n + i] * x[i];
      y[o] = s;
    }
    return y;
  };
  const auto norm = [&](const std::vector<double>& x, const std::vector<float>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / x.size() + c.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = g[i] * x[i] * r;
    return y;
  };
  const auto rope = [&](std::vector<double>& v, int64_t heads, int64_t pos) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double a = v[h * hd + i], b = v[h * hd + i + hd / 2], angle = pos * inv_freq[i];
        v[h * hd + i] = a * std::cos(angle) - b * std::sin(angle);
        v[h * hd + i + hd / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  };
  std::vector<std::vector<double>> x(T, std::vector<double>(hidden));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < hidden; ++i) x[t][i] = w.embed_tokens[tokens[t] * hidden + i];
  for (const LayerWeights& l : w.layers) {
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> h = norm(x[t], l.input_norm);
      q[t] = linear(h, l.q_proj, l.q_bias, q_dim);
      k[t] = linear(h, l.k_proj, l.k_bias, kv_dim);
      v[t] = linear(h, l.v_proj, l.v_bias, kv_dim);
      rope(q[t], c.num_heads, t);
      rope(k[t], c.num_kv_heads, t);
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> attn(q_dim, 0.0);
      for (int64_t h = 0; h < c.num_heads; ++h) {
        const int64_t g = h / (c.num_heads / c.num_kv_heads);
        std::vector<double> p(t + 1);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double s = 0;
          for (int64_t d = 0; d < hd; ++d) s += q[t][h * hd + d] * k[j][g * hd + d];
          p[j] = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, p[j]);
        }
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < hd; ++d) attn[h * hd + d] += p[j] / sum * v[j][g * hd + d];
      }
      std::vector<double> o = linear(attn, l.o_proj, l.o_bias, hidden);
      for (int64_t i = 0; i < hidden; ++i) x[t][i] += o[i];
      std::vector<double> h = norm(x[t], l.post_attention_norm);
      std::vector<double> gate = linear(h, l.gate_proj, {}, c.intermediate_size), up = linear(h, l.up_proj, {}, c.intermediate_size);
      for (int64_t i = 0; i < c.intermediate_size; ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      std::vector<double> down = linear(gate, l.down_proj, {}, hidden);
      for (int64_t i = 0; i < hidden; ++i) x[t][i] += down[i];
    }
  }
  return linear(norm(x[T - 1], w.final_norm), w.output_projection(), {}, c.vocab_size);
}

std::vector<int32_t> test_tokens(int n, int seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = static_cast<int32_t>(rng() % vocab);
  return out;
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
};

// Runs `seqs` to completion, prefilling in chunks of `chunk` tokens, every sequence in the
// same forward calls; returns each sequence's last-position logits.
std::vector<std::vector<float>> run_prefill(CpuBackend& backend, const std::vector<Seq>& seqs, int chunk) {
  const int32_t vocab = backend.config().vocab_size;
  std::vector<std::vector<float>> out(seqs.size());
  std::vector<int32_t> done(seqs.size(), 0);
  for (bool more = true; more;) {
    more = false;
    StepBatch batch;
    std::vector<size_t> wants;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int32_t total = static_cast<int32_t>(seqs[s].tokens.size());
      if (done[s] == total) continue;
      const int32_t n = std::min(chunk, total - done[s]);
      const bool last = done[s] + n == total;
      batch.seqs.push_back({seqs[s].tokens.data() + done[s], n, done[s], seqs[s].table.data(),
                            static_cast<int32_t>(seqs[s].table.size()), last});
      if (last) wants.push_back(s);
      done[s] += n;
      more = true;
    }
    if (!more) break;
    std::vector<float> logits(wants.size() * vocab);
    backend.forward(batch, logits.data());
    for (size_t i = 0; i < wants.size(); ++i) out[wants[i]].assign(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
  }
  return out;
}

// One step with every sequence's whole prompt, each wanting its logits.
StepBatch whole_prompts(const std::vector<Seq>& seqs) {
  StepBatch batch;
  for (const Seq& seq : seqs) {
    batch.seqs.push_back({seq.tokens.data(), static_cast<int32_t>(seq.tokens.size()), 0, seq.table.data(),
                          static_cast<int32_t>(seq.table.size()), true});
  }
  return batch;
}

std::vector<int32_t> contiguous_table(int32_t first, int32_t n) {
  std::vector<int32_t> table(n);
  std::iota(table.begin(), table.end(), first);
  return table;
}

bool throws_input_error(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
  } catch (const ModelError& e) {
    const bool ok = e.code() == "STRATA_BACKEND_INPUT" && std::string(e.what()).find(part) != std::string::npos;
    if (!ok) std::printf("  %s: %s\n", e.code().c_str(), e.what());
    return ok;
  }
  return false;
}

void check_against_reference(const ModelConfig& config, const char* label, CpuKvDtype kv = CpuKvDtype::kAuto,
                             double tolerance = 2e-5) {
  ModelWeights weights = make_dummy_weights(config, 7);
  // Larger weights than the dummy default, so attention is far from uniform and errors show.
  for (LayerWeights& l : weights.layers)
    for (std::vector<float>* m : {&l.q_proj, &l.k_proj})
      for (float& v : *m) v *= 20.0f;
  ModelWeights copy = weights;
  CpuBackend backend(config, std::move(copy), CpuBackendOptions{2, kv});
  backend.allocate_kv(32, 4);
  std::vector<Seq> seqs = {{test_tokens(37, 1, config.vocab_size), contiguous_table(0, 10)},
                           {test_tokens(5, 2, config.vocab_size), contiguous_table(10, 2)}};
  std::vector<std::vector<float>> logits = run_prefill(backend, seqs, 64);
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::vector<double> expected = reference_logits(config, weights, seqs[s].tokens);
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(expected[i] - logits[s][i]));
      max_ref = std::max(max_ref, std::fabs(expected[i]));
    }
    std::printf("  %s seq %zu: max |logit - reference| = %.3g (largest |logit| %.3g)\n", label, s, max_diff, max_ref);
    CHECK(max_diff < tolerance);
  }
}

// A matrix of `rows` x `cols` values of `dtype` at `data`, in its own row order.
DenseMatrixRef dense_ref(int64_t rows, int64_t cols, const void* data, DenseMatrixRef::Dtype dtype) {
  DenseMatrixRef m;
  m.rows = rows;
  m.cols = cols;
  m.data = static_cast<const uint8_t*>(data);
  m.dtype = dtype;
  return m;
}

// c (m rows of w.n) = a (m rows of k) times w's rows, plus bias; with no bias, added to c.
GemmArgs gemm_args(const float* a, int64_t m, const PackedWeights& w, float* c, const float* bias) {
  GemmArgs g;
  g.m = m;
  g.a = a;
  g.lda = w.k;
  g.w = &w;
  g.c = c;
  g.ldc = w.n;
  g.bias = bias;
  g.accumulate = bias == nullptr;
  return g;
}

}  // namespace

TEST_CASE("cpu backend: matches a dense double reference (Llama, GQA)") {
  check_against_reference(small_config("LlamaForCausalLM"), "llama");
}

TEST_CASE("cpu backend: matches the reference with Qwen2 q/k/v biases") {
  ModelConfig c = small_config("Qwen2ForCausalLM");
  c.attention_bias = true;
  check_against_reference(c, "qwen2");
}

TEST_CASE("cpu backend: matches the reference with Llama biases, llama3 rope scaling, tied embeddings") {
  ModelConfig c = small_config("LlamaForCausalLM");
  c.attention_bias = true;  // Llama: q/k/v and o_proj
  c.tie_word_embeddings = true;
  c.head_dim = 16;          // explicit, not hidden / heads
  c.rope_scaling_factor = 8.0f;
  c.rope_low_freq_factor = 1.0f;
  c.rope_high_freq_factor = 4.0f;
  c.rope_original_max_position = 64;
  check_against_reference(c, "llama3-scaled");
}

TEST_CASE("cpu backend: an f16 KV cache: half the bytes, the reference within f16 rounding, its own kinds named") {
  ModelConfig c = small_config("LlamaForCausalLM");
  // K and V rounded to 11 significant bits (up to 2.4e-4 of each): here the logits (|x| < 0.31)
  // move by up to 7e-5, against 2e-7 with the fp32 cache.
  check_against_reference(c, "llama f16 kv", CpuKvDtype::kFloat16, 3e-4);
  CpuBackend f32(c, 3, CpuBackendOptions{1, CpuKvDtype::kFloat32}), f16(c, 3, CpuBackendOptions{1, CpuKvDtype::kFloat16});
  CpuBackend automatic(c, 3, CpuBackendOptions{1});  // fp32 weights: an fp32 cache
  CHECK(f32.kv_cache_dtype() == "float32");
  CHECK(f16.kv_cache_dtype() == "float16");
  CHECK(automatic.kv_cache_dtype() == "float32");
  CHECK_EQ(f16.kv_bytes_per_block(16) * 2, f32.kv_bytes_per_block(16));
}

TEST_CASE("cpu kernels: to_half rounds as f32_to_f16, bit for bit, in every kernel set") {
  // Ties, subnormals, overflow to inf, signed zeros and ordinary values, in runs that end off
  // a multiple of 8 so the scalar tail is used too.
  std::vector<float> src = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65520.0f, 1e9f, -1e9f,
                            5.9604645e-8f, 2.9802322e-8f, 6.1035156e-5f, 1.0009766f, 1.0004883f, 3.1415927f};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mag(-30.0f, 17.0f);
  for (int i = 0; i < 1000; ++i) src.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(mag(rng)));
  for (const CpuKernels* k : runnable_cpu_kernels()) {
    for (const size_t n : {src.size(), size_t{13}, size_t{8}, size_t{3}}) {
      std::vector<uint16_t> got(n, 0xFFFF);
      k->to_half(src.data(), got.data(), static_cast<int64_t>(n));
      size_t same = 0;
      for (size_t i = 0; i < n; ++i) same += got[i] == f32_to_f16(src[i]);
      if (same != n) std::printf("  %s: %zu of %zu differ\n", k->isa, n - same, n);
      CHECK_EQ(same, n);
    }
  }
}

TEST_CASE("cpu kernels: from_half widens every half as f16_to_f32, bit for bit, in every kernel set") {
  // All 65,536 halves (subnormals, infinities, both zeros), then runs that end off a multiple of
  // 8 so the scalar tail is used too. A NaN stays a NaN (F16C quiets a signalling one).
  std::vector<uint16_t> src(65536);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i);
  for (const CpuKernels* k : runnable_cpu_kernels()) {
    for (const size_t n : {src.size(), size_t{13}, size_t{8}, size_t{3}}) {
      std::vector<float> got(n, 42.0f);
      k->from_half(src.data() + 1, got.data(), static_cast<int64_t>(n - 1));
      size_t same = 0;
      for (size_t i = 0; i + 1 < n; ++i) {
        const float want = f16_to_f32(src[i + 1]);
        same += std::isnan(want) ? std::isnan(got[i]) : std::memcmp(&got[i], &want, 4) == 0;
      }
      if (same != n - 1) std::printf("  %s: %zu of %zu differ\n", k->isa, n - 1 - same, n - 1);
      CHECK_EQ(same, n - 1);
      CHECK(got[n - 1] == 42.0f);  // nothing written past n
    }
  }
}

TEST_CASE("cpu kernels: panels packed from F32, F16 and BF16 parts where they lie hold each value at its place") {
  // What the CPU backend's safetensors load does: q, k and v in the checkpoint's dtype, fused
  // as they are packed, runs of panels on a pool's threads. Panel p must hold row p * 16 + j's
  // value kk at (kk * 16 + slot(j)) (bf16: rows in the order 0-3, 8-11, 4-7, 12-15), or, packed
  // in pairs for the AMX set, bf16 at ((kk & ~1) * 16 + 2j + (kk & 1)): the row's own 16-bit
  // value for F16 and BF16 parts (the panels keep the dtype), its fp32 value for F32 parts;
  // zeros past n, and past an odd k in pairs.
  std::mt19937 rng(3);
  ThreadPool pool(3);
  for (const int64_t k : {150, 151}) {  // two 64-column strips and a partial one; an odd k
    const int64_t k_stride = (k + 1) / 2 * 2;
    const std::vector<int64_t> sizes = {7, 300, 40};  // 347 rows: 22 panels, the last padded
    for (const auto dtype : {DenseMatrixRef::Dtype::kF32, DenseMatrixRef::Dtype::kF16, DenseMatrixRef::Dtype::kBF16}) {
      std::vector<std::vector<uint8_t>> bytes;
      std::vector<DenseMatrixRef> parts;
      std::vector<float> expect;  // the fused matrix, widened, row-major
      for (int64_t rows : sizes) {
        DenseMatrixRef m;
        m.rows = rows;
        m.cols = k;
        m.dtype = dtype;
        bytes.emplace_back(static_cast<size_t>(rows * k * m.elem_bytes()));
        for (int64_t i = 0; i < rows * k; ++i) {
          const float v = std::ldexp(static_cast<float>(static_cast<int32_t>(rng() % 2001) - 1000), -9);
          if (dtype == DenseMatrixRef::Dtype::kF32) {
            std::memcpy(bytes.back().data() + 4 * i, &v, 4);
          } else {
            const uint16_t h = dtype == DenseMatrixRef::Dtype::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
            std::memcpy(bytes.back().data() + 2 * i, &h, 2);
            expect.push_back(dtype == DenseMatrixRef::Dtype::kF16 ? f16_to_f32(h) : bf16_to_f32(h));
            continue;
          }
          expect.push_back(v);
        }
        m.data = bytes.back().data();
        parts.push_back(m);
      }
      const int64_t n = static_cast<int64_t>(expect.size()) / k;
      const PackedWeights::Elem elem = dtype == DenseMatrixRef::Dtype::kF32    ? PackedWeights::Elem::kF32
                                       : dtype == DenseMatrixRef::Dtype::kBF16 ? PackedWeights::Elem::kBF16
                                                                               : PackedWeights::Elem::kF16;
      for (const bool bf16_pairs : {false, true})
      for (ThreadPool* on : {static_cast<ThreadPool*>(nullptr), &pool}) {
        const PackedWeights w = PackedWeights::pack(parts, k, on, false, bf16_pairs);
        CHECK_EQ(w.n, n);
        CHECK_EQ(w.k, k);
        CHECK(w.elem == elem);
        const bool pairs = bf16_pairs && elem == PackedWeights::Elem::kBF16;
        CHECK_EQ(w.pairs, pairs);
        const int64_t stride = pairs ? k_stride : k;
        CHECK_EQ(w.k_stride(), stride);
        const size_t values = static_cast<size_t>((n + 15) / 16 * 16 * stride);
        CHECK_EQ(elem == PackedWeights::Elem::kF32 ? w.panels.size() : w.halves.size(), values);
        CHECK_EQ(elem == PackedWeights::Elem::kF32 ? w.halves.size() : w.panels.size(), size_t{0});
        CHECK_EQ(w.bytes(), static_cast<int64_t>(values) * (elem == PackedWeights::Elem::kF32 ? 4 : 2));
        int64_t wrong = 0;
        for (int64_t row = 0; row < w.num_panels() * 16; ++row)
          for (int64_t kk = 0; kk < stride; ++kk) {
            const float want = row < n && kk < k ? expect[static_cast<size_t>(row * k + kk)] : 0.0f;
            const int64_t j = row % 16;
            const int64_t slot = elem == PackedWeights::Elem::kBF16 ? (j & 3) | ((j & 4) << 1) | ((j & 8) >> 1) : j;
            const int64_t in_panel = pairs ? (kk & ~int64_t{1}) * 16 + 2 * j + (kk & 1) : kk * 16 + slot;
            CHECK_EQ(w.at(j, kk), in_panel);
            const size_t at = static_cast<size_t>((row / 16) * stride * 16 + in_panel);
            const float got = elem == PackedWeights::Elem::kF32    ? w.panels[at]
                              : elem == PackedWeights::Elem::kBF16 ? bf16_to_f32(w.halves[at])
                                                                   : f16_to_f32(w.halves[at]);
            wrong += std::memcmp(&got, &want, 4) != 0;
          }
        CHECK_EQ(wrong, 0);
        std::vector<float> row(static_cast<size_t>(k));
        w.row(n - 1, row.data());  // what a tied table's token gather reads
        CHECK(std::equal(row.begin(), row.end(), expect.end() - k));
      }
    }
  }
}

TEST_CASE("cpu kernels: a GEMM on bf16 or f16 panels is the GEMM on fp32 panels of the widened values, bit for bit") {
  // Every tile shape (1 to 13 rows: the AVX2 build's decode tiles of 1 and 2 rows over 3 panels
  // at a time, then 6-row tiles and their remainders; the AVX-512 build's tiles of up to 8 rows),
  // a partial last panel, bias and accumulate, in every kernel set this CPU runs. Values of all
  // magnitudes, subnormal halves included.
  std::mt19937 rng(17);
  ThreadPool pool(2);
  const int64_t n = 83, k = 71;  // 6 panels, the last of 3 rows; an odd k
  std::vector<float> a(static_cast<size_t>(13 * k)), bias(static_cast<size_t>(n));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : a) v = uniform(rng);
  for (float& v : bias) v = uniform(rng);
  for (const auto dtype : {DenseMatrixRef::Dtype::kBF16, DenseMatrixRef::Dtype::kF16}) {
    std::vector<uint16_t> halves(static_cast<size_t>(n * k));
    std::vector<float> widened(halves.size());
    for (size_t i = 0; i < halves.size(); ++i) {
      const float v = std::ldexp(uniform(rng), static_cast<int>(rng() % 40) - 30);
      halves[i] = dtype == DenseMatrixRef::Dtype::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      widened[i] = dtype == DenseMatrixRef::Dtype::kBF16 ? bf16_to_f32(halves[i]) : f16_to_f32(halves[i]);
    }
    const DenseMatrixRef half_ref = dense_ref(n, k, halves.data(), dtype);
    const DenseMatrixRef f32_ref = dense_ref(n, k, widened.data(), DenseMatrixRef::Dtype::kF32);
    const PackedWeights half = PackedWeights::pack({half_ref}, k, &pool), full = PackedWeights::pack({f32_ref}, k, &pool);
    CHECK(half.elem != PackedWeights::Elem::kF32 && full.elem == PackedWeights::Elem::kF32);
    CHECK_EQ(half.bytes() * 2, full.bytes());
    for (const CpuKernels* kernels : runnable_cpu_kernels()) {
      for (int64_t m = 1; m <= 13; ++m) {
        for (const bool accumulate : {false, true}) {
          std::vector<std::vector<float>> out;
          for (const PackedWeights* w : {&half, &full}) {
            out.emplace_back(static_cast<size_t>(m * n), 0.5f);
            parallel_gemm(pool, *kernels, gemm_args(a.data(), m, *w, out.back().data(), accumulate ? nullptr : bias.data()));
          }
          const bool same = std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4) == 0;
          if (!same) std::printf("  %s, %lld rows, accumulate %d: differ\n", kernels->isa, static_cast<long long>(m), accumulate);
          CHECK(same);
        }
      }
    }
    std::vector<float> row(static_cast<size_t>(k));
    half.row(n - 1, row.data());  // a tied table's token gather
    CHECK(std::memcmp(row.data(), widened.data() + (n - 1) * k, static_cast<size_t>(k) * 4) == 0);
  }
  // Parts of two dtypes (or an F32 one) are widened to fp32 panels.
  std::vector<uint16_t> ones(static_cast<size_t>(k), 0x3F80);  // bf16 1.0
  std::vector<uint16_t> halves_one(static_cast<size_t>(k), 0x3C00);  // f16 1.0
  const PackedWeights mixed = PackedWeights::pack(
      {dense_ref(1, k, ones.data(), DenseMatrixRef::Dtype::kBF16), dense_ref(1, k, halves_one.data(), DenseMatrixRef::Dtype::kF16)},
      k, nullptr);
  CHECK(mixed.elem == PackedWeights::Elem::kF32 && mixed.halves.empty());
  std::vector<float> row(static_cast<size_t>(k));
  mixed.row(1, row.data());
  CHECK(std::all_of(row.begin(), row.end(), [](float v) { return v == 1.0f; }));
}

TEST_CASE("cpu kernels: the AVX-512 GEMM gives the AVX2 GEMM's bits; each row's result is its own, whatever the batch") {
  // Both x86 builds run each output's fmadd chain over k in order, so they must agree bit for
  // bit on every panel type, row count (every tile and remainder of both, and two row blocks
  // of the AVX-512 build at k = 4,100), odd and even k, panel range (a thread's share ends anywhere) and
  // epilogue. Within one set, row r's result with m rows is its result alone (batch invariance).
  std::vector<const CpuKernels*> x86;
  for (const CpuKernels* set : runnable_cpu_kernels())
    if (std::string(set->isa) != "portable") x86.push_back(set);
  if (x86.size() < 2) std::printf("  this CPU runs %zu x86 kernel set(s): AVX-512 not compared\n", x86.size());
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const int64_t k : {int64_t{71}, int64_t{4100}}) {
    const int64_t n = 107;  // 7 panels, the last of 11 rows
    const int64_t rows = k > 1000 ? 30 : 20;
    std::vector<float> a(static_cast<size_t>(rows * k)), bias(static_cast<size_t>(n)), dense(static_cast<size_t>(n * k));
    for (float& v : a) v = uniform(rng);
    for (float& v : bias) v = uniform(rng);
    for (float& v : dense) v = std::ldexp(uniform(rng), static_cast<int>(rng() % 12) - 6);
    std::vector<uint16_t> bf16(dense.size()), f16(dense.size());
    for (size_t i = 0; i < dense.size(); ++i) {
      bf16[i] = f32_to_bf16(dense[i]);
      f16[i] = f32_to_f16(dense[i]);
    }
    std::vector<PackedWeights> weights;
    weights.push_back(PackedWeights::pack({dense_ref(n, k, dense.data(), DenseMatrixRef::Dtype::kF32)}, k, nullptr));
    weights.push_back(PackedWeights::pack({dense_ref(n, k, bf16.data(), DenseMatrixRef::Dtype::kBF16)}, k, nullptr));
    weights.push_back(PackedWeights::pack({dense_ref(n, k, f16.data(), DenseMatrixRef::Dtype::kF16)}, k, nullptr));
    for (const PackedWeights& w : weights) {
      for (const bool accumulate : {false, true}) {
        // gemm over panels [0, 7) in two shares split at `split`, m rows from row r0; c starts
        // as the same values for a row wherever it runs.
        const auto run = [&](const CpuKernels& set, int64_t r0, int64_t m, int64_t split) {
          std::vector<float> c(static_cast<size_t>(m * n));
          for (size_t i = 0; i < c.size(); ++i) c[i] = 0.25f * static_cast<float>((r0 * n + static_cast<int64_t>(i)) % 7);
          const GemmArgs g = gemm_args(a.data() + r0 * k, m, w, c.data(), accumulate ? nullptr : bias.data());
          set.gemm(g, 0, split);
          set.gemm(g, split, w.num_panels());
          return c;
        };
        for (const CpuKernels* set : x86) {
          for (int64_t m = 1; m <= rows; ++m) {
            const std::vector<float> got = run(*set, 0, m, m % 7);
            const std::vector<float> base = run(*x86.front(), 0, m, 3);
            const bool same = std::memcmp(got.data(), base.data(), got.size() * 4) == 0;
            if (!same) std::printf("  %s vs %s: %s, k %lld, %lld rows, accumulate %d: differ\n", set->isa, x86.front()->isa,
                                   elem_name(w.elem), static_cast<long long>(k), static_cast<long long>(m), accumulate);
            CHECK(same);
          }
          const std::vector<float> all = run(*set, 0, rows, 3);
          bool invariant = true;
          for (int64_t r = 0; r < rows; ++r) {
            const std::vector<float> alone = run(*set, r, 1, w.num_panels());
            invariant = invariant && std::memcmp(alone.data(), all.data() + r * n, alone.size() * 4) == 0;
          }
          if (!invariant) std::printf("  %s: %s, k %lld: a row alone differs from the batch\n", set->isa, elem_name(w.elem), static_cast<long long>(k));
          CHECK(invariant);
        }
      }
    }
  }
}

TEST_CASE("cpu kernels: the AMX GEMM on bf16 panels sums bf16-rounded activations in fp32; each row's result is its own") {
  // The AMX set rounds the activations to bf16 (to nearest, ties to even) and multiplies them in
  // tiles of 16 rows x 32 k: checked exactly where every product and sum is exact in fp32,
  // within fp32's rounding of K sums elsewhere, for every row count up to three tile rows, odd
  // k (a half-empty last pair) and k = 4,100 (a last chunk of 4), a partial last panel, bias
  // and accumulate, a thread's share ending anywhere; and row r alone gives its bits in the
  // batch. fp32 and fp16 panels go to the AVX-512 GEMM unchanged.
  const CpuKernels* amx = nullptr;
#if defined(STRATA_HAVE_AMX_KERNELS)
  amx = amx_kernels_if_runnable();
#endif
  if (amx == nullptr) {
    std::printf("  this CPU (or build) has no AMX: the AMX GEMM is not run\n");
    return;
  }
  CHECK(std::string(amx->isa) == "amx-bf16");
  ThreadPool pool(3);
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int64_t n = 107;  // 7 panels, the last of 11 rows
  for (const int64_t k : {int64_t{71}, int64_t{4100}}) {
    const int64_t rows = 40;
    for (const bool exact : {true, false}) {
      // exact: small integers times powers of two, so every product and sum is exact in fp32
      // and in bf16; else values of all signs and many magnitudes, activations not bf16 values.
      std::vector<float> a(static_cast<size_t>(rows * k)), bias(static_cast<size_t>(n)), dense(static_cast<size_t>(n * k));
      for (float& v : a) v = exact ? std::ldexp(static_cast<float>(static_cast<int>(rng() % 15) - 7), -3) : uniform(rng);
      for (float& v : bias) v = exact ? static_cast<float>(static_cast<int>(rng() % 9) - 4) : uniform(rng);
      std::vector<uint16_t> bf16(dense.size());
      for (size_t i = 0; i < dense.size(); ++i) {
        const float v = exact ? std::ldexp(static_cast<float>(static_cast<int>(rng() % 15) - 7), -2)
                              : std::ldexp(uniform(rng), static_cast<int>(rng() % 12) - 6);
        bf16[i] = f32_to_bf16(v);
        dense[i] = bf16_to_f32(bf16[i]);
      }
      const PackedWeights w = PackedWeights::pack({dense_ref(n, k, bf16.data(), DenseMatrixRef::Dtype::kBF16)}, k, nullptr, false, true);
      CHECK(w.elem == PackedWeights::Elem::kBF16 && w.pairs);
      for (const bool accumulate : {false, true}) {
        const auto start = [&](int64_t r0, int64_t m) {
          std::vector<float> c(static_cast<size_t>(m * n));
          for (size_t i = 0; i < c.size(); ++i) c[i] = 0.25f * static_cast<float>((r0 * n + static_cast<int64_t>(i)) % 7);
          return c;
        };
        const auto run = [&](int64_t r0, int64_t m, int64_t split) {
          std::vector<float> c = start(r0, m);
          const GemmArgs g = gemm_args(a.data() + r0 * k, m, w, c.data(), accumulate ? nullptr : bias.data());
          amx->gemm(g, 0, split);
          amx->gemm(g, split, w.num_panels());
          return c;
        };
        int64_t wrong = 0;
        double worst = 0.0;  // the largest error over its bound
        for (int64_t m = 1; m <= rows; ++m) {
          const std::vector<float> got = run(0, m, m % 7), before = start(0, m);
          for (int64_t r = 0; r < m; ++r)
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0.0, magnitude = 0.0;
              for (int64_t kk = 0; kk < k; ++kk) {
                const double term = static_cast<double>(bf16_to_f32(f32_to_bf16(a[static_cast<size_t>(r * k + kk)]))) *
                                    dense[static_cast<size_t>(j * k + kk)];
                sum += term;
                magnitude += std::fabs(term);
              }
              const size_t at = static_cast<size_t>(r * n + j);
              if (accumulate) {
                sum += before[at];
                magnitude += std::fabs(before[at]);
              } else {
                sum += bias[static_cast<size_t>(j)];
                magnitude += std::fabs(bias[static_cast<size_t>(j)]);
              }
              const double error = std::fabs(got[at] - sum);
              if (exact) {
                wrong += error != 0.0;
              } else {
                const double bound = static_cast<double>(k + 2) * std::ldexp(1.0, -24) * magnitude + 1e-30;
                worst = std::max(worst, error / bound);
                wrong += error > bound;
              }
            }
        }
        if (wrong != 0)
          std::printf("  k %lld, %s, accumulate %d: %lld outputs off (worst %.3g of the bound)\n", static_cast<long long>(k),
                      exact ? "exact" : "random", accumulate, static_cast<long long>(wrong), worst);
        CHECK_EQ(wrong, 0);
        const std::vector<float> all = run(0, rows, 3);
        bool invariant = true;
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<float> alone = run(r, 1, w.num_panels());
          invariant = invariant && std::memcmp(alone.data(), all.data() + r * n, alone.size() * 4) == 0;
        }
        if (!invariant) std::printf("  k %lld: a row alone differs from the batch\n", static_cast<long long>(k));
        CHECK(invariant);
        // Through parallel_gemm: the activations rounded once, 16 rows a task on the pool's
        // threads, the panels shared out; the same bits.
        std::vector<float> pooled = start(0, rows);
        parallel_gemm(pool, *amx, gemm_args(a.data(), rows, w, pooled.data(), accumulate ? nullptr : bias.data()));
        CHECK(std::memcmp(pooled.data(), all.data(), all.size() * 4) == 0);
      }
    }
  }
  // Activations are rounded to the nearest bf16, ties to even: 1 + 3/512 to 1 + 1/128 (not cut
  // to 1), 1 + 1/256 to 1, 1 + 3/256 to 1 + 1/64, and a NaN stays a NaN.
  {
    const int64_t k = 4;
    const std::vector<uint16_t> ones(static_cast<size_t>(4 * k), 0x3F80);  // 4 rows of bf16 1.0
    const PackedWeights w = PackedWeights::pack({dense_ref(4, k, ones.data(), DenseMatrixRef::Dtype::kBF16)}, k, nullptr, false, true);
    const float inputs[4] = {1.0f + 3.0f / 512, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, std::nanf("")};
    const float rounded[3] = {1.0f + 1.0f / 128, 1.0f, 1.0f + 1.0f / 64};
    for (int i = 0; i < 4; ++i) {
      std::vector<float> a(static_cast<size_t>(k), 0.0f), c(4, 0.0f);
      a[0] = inputs[i];
      GemmArgs g = gemm_args(a.data(), 1, w, c.data(), nullptr);
      g.accumulate = false;
      amx->gemm(g, 0, 1);
      if (i < 3) {
        CHECK_EQ(c[0], rounded[i]);
      } else {
        CHECK(std::isnan(c[0]));
      }
    }
  }
  // A panel's last chunk is read from a copy padded with zeros, never past the panel: an
  // infinity in the next panel's first values must not make 0 * inf = NaN in this one's sums.
  {
    const int64_t k = 40;  // one whole chunk of 32 and 8 values
    std::vector<uint16_t> values(static_cast<size_t>(32 * k), 0x3F80);  // 2 panels of bf16 1.0
    values[static_cast<size_t>(16 * k)] = 0x7F80;                        // row 16, k 0: +inf
    const PackedWeights w = PackedWeights::pack({dense_ref(32, k, values.data(), DenseMatrixRef::Dtype::kBF16)}, k, nullptr, false, true);
    std::vector<float> a(static_cast<size_t>(k), 1.0f), c(32, 0.0f);
    GemmArgs g = gemm_args(a.data(), 1, w, c.data(), nullptr);
    g.accumulate = false;
    amx->gemm(g, 0, 2);
    for (int64_t j = 0; j < 32; ++j) CHECK_EQ(c[static_cast<size_t>(j)], j == 16 ? INFINITY : 40.0f);
  }
  // fp32 and fp16 panels: the AVX-512 set's GEMM, its bits.
#if defined(STRATA_HAVE_AMX_KERNELS)
  {
    const int64_t k = 37, m = 11;
    std::vector<float> a(static_cast<size_t>(m * k)), dense(static_cast<size_t>(n * k));
    for (float& v : a) v = uniform(rng);
    for (float& v : dense) v = uniform(rng);
    std::vector<uint16_t> f16(dense.size());
    for (size_t i = 0; i < dense.size(); ++i) f16[i] = f32_to_f16(dense[i]);
    for (const PackedWeights& w : {PackedWeights::pack({dense_ref(n, k, dense.data(), DenseMatrixRef::Dtype::kF32)}, k, nullptr, false, true),
                                   PackedWeights::pack({dense_ref(n, k, f16.data(), DenseMatrixRef::Dtype::kF16)}, k, nullptr, false, true)}) {
      std::vector<float> ours(static_cast<size_t>(m * n)), theirs(ours.size());
      amx->gemm(gemm_args(a.data(), m, w, ours.data(), nullptr), 0, w.num_panels());
      avx512_kernels().gemm(gemm_args(a.data(), m, w, theirs.data(), nullptr), 0, w.num_panels());
      CHECK(std::memcmp(ours.data(), theirs.data(), ours.size() * 4) == 0);
    }
  }
#endif
}

TEST_CASE("cpu backend: chunking, batching, block placement and threads do not change a bit") {
  for (const CpuKvDtype kv : {CpuKvDtype::kFloat32, CpuKvDtype::kFloat16}) {
  ModelConfig c = small_config("LlamaForCausalLM");
  CpuBackend two(c, 3, CpuBackendOptions{2, kv});
  CpuBackend one(c, 3, CpuBackendOptions{1, kv});
  two.allocate_kv(64, 4);
  one.allocate_kv(64, 4);
  std::vector<Seq> seqs;
  for (int s = 0; s < 5; ++s) seqs.push_back({test_tokens(3 + 11 * s, 10 + s, c.vocab_size), contiguous_table(12 * s, 12)});

  std::vector<std::vector<float>> alone;
  for (const Seq& seq : seqs) alone.push_back(run_prefill(two, {seq}, 1000)[0]);
  CHECK(run_prefill(two, seqs, 1000) == alone);  // all in one forward
  CHECK(run_prefill(two, seqs, 7) == alone);     // chunked prefill, mixed in steps
  CHECK(run_prefill(two, seqs, 1) == alone);     // token by token
  CHECK(run_prefill(one, seqs, 5) == alone);     // one thread

  std::vector<Seq> scattered = seqs;  // blocks in a shuffled order across the pool
  std::vector<int32_t> ids = contiguous_table(0, 64);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
  for (size_t s = 0; s < scattered.size(); ++s) scattered[s].table.assign(ids.begin() + 12 * s, ids.begin() + 12 * (s + 1));
  CHECK(run_prefill(two, scattered, 6) == alone);
  }
}

TEST_CASE("cpu backend: a step longer than one pass gives the same logits, and its buffers stay one pass long") {
  ModelConfig c = small_config("LlamaForCausalLM");
  c.max_position_embeddings = 1024;
  CpuBackend backend(c, 4, CpuBackendOptions{2});
  CHECK(backend.kernel_isa() == cpu_kernels().isa);  // fp32 weights: no quantized kernels named
  backend.allocate_kv(400, 4);
  // One long prompt cut over three passes (256 rows each), prompts that end inside a pass and on
  // its edge, and short ones: every sequence's logits as when each runs alone in small steps.
  const std::vector<int> lengths = {600, 3, 253, 1, 256, 40};
  std::vector<Seq> seqs;
  int32_t first_block = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int32_t blocks = (lengths[s] + 3) / 4;
    seqs.push_back({test_tokens(lengths[s], 20 + static_cast<int>(s), c.vocab_size), contiguous_table(first_block, blocks)});
    first_block += blocks;
  }
  std::vector<std::vector<float>> alone;
  for (const Seq& seq : seqs) alone.push_back(run_prefill(backend, {seq}, 100)[0]);
  CHECK(run_prefill(backend, seqs, 1000) == alone);  // one forward of 1153 tokens, 5 passes
  // What one 256-row pass holds (residual, normed, q/k/v, attention out, MLP gate/up and
  // activation, rope tables) and the wanted rows' final states: not the 1153 rows of the step.
  const int64_t q_dim = int64_t{c.num_heads} * c.head_dim, kv_dim = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t per_row = 2 * c.hidden_size + (q_dim + 2 * kv_dim) + q_dim + 3 * c.intermediate_size + c.head_dim;
  const int64_t bound = (256 * per_row + static_cast<int64_t>(seqs.size()) * c.hidden_size) * 4;
  std::printf("  step buffers %lld bytes, bound %lld\n", static_cast<long long>(backend.step_buffer_bytes()),
              static_cast<long long>(bound));
  CHECK(backend.step_buffer_bytes() <= bound);
  CHECK(4 * bound < 1153 * per_row * 4);  // under a quarter of the step's 1153 rows

  // The same step through forward_chunked: the rows in batch order, each forward()'s.
  CpuBackend fresh(c, 4, CpuBackendOptions{2});
  fresh.allocate_kv(400, 4);
  const StepBatch batch = whole_prompts(seqs);
  std::vector<std::vector<float>> got;
  fresh.forward_chunked(batch, 4, [&](int32_t, int32_t rows, float* logits) {
    for (int32_t r = 0; r < rows; ++r) got.emplace_back(logits + r * c.vocab_size, logits + (r + 1) * c.vocab_size);
  });
  CHECK(got == alone);
}

TEST_CASE("cpu backend: logits handed over in chunks are forward()'s, bit for bit, rows in order") {
  ModelConfig c = small_config("LlamaForCausalLM");
  CpuBackend backend(c, 5, CpuBackendOptions{2});
  backend.allocate_kv(64, 4);
  CHECK(backend.chunks_logits());
  std::vector<Seq> seqs;
  for (int s = 0; s < 7; ++s) seqs.push_back({test_tokens(2 + s, 3 + s, c.vocab_size), contiguous_table(8 * s, 8)});
  const std::vector<std::vector<float>> expected = run_prefill(backend, seqs, 1000);
  for (int32_t chunk : {1, 3, 7, 64}) {
    CpuBackend fresh(c, 5, CpuBackendOptions{2});
    fresh.allocate_kv(64, 4);
    const StepBatch batch = whole_prompts(seqs);
    std::vector<std::vector<float>> got;
    int32_t calls = 0, next = 0;
    fresh.forward_chunked(batch, chunk, [&](int32_t first, int32_t rows, float* logits) {
      ++calls;
      CHECK_EQ(first, next);
      CHECK(rows >= 1 && rows <= chunk);
      next = first + rows;
      for (int32_t r = 0; r < rows; ++r) got.emplace_back(logits + r * c.vocab_size, logits + (r + 1) * c.vocab_size);
    });
    CHECK_EQ(calls, (7 + chunk - 1) / chunk);
    CHECK(got == expected);
  }
  StepBatch none;
  CHECK(throws_input_error([&] { backend.forward_chunked(none, 0, [](int32_t, int32_t, float*) {}); }, "chunk_rows"));
}

TEST_CASE("cpu backend: copy_block duplicates a block's K and V in every layer") {
  for (const CpuKvDtype kv : {CpuKvDtype::kFloat32, CpuKvDtype::kFloat16}) {
  ModelConfig c = small_config("LlamaForCausalLM");
  CpuBackend backend(c, 3, CpuBackendOptions{2, kv});
  backend.allocate_kv(16, 4);
  std::vector<int32_t> tokens = test_tokens(8, 4, c.vocab_size), next = {5};
  run_prefill(backend, {{tokens, {0, 1}}}, 8);  // positions 0..7 in blocks 0 and 1
  backend.copy_block(1, 9);
  const auto decode = [&](std::vector<int32_t> table) {
    table.push_back(2);
    StepBatch batch;
    batch.seqs.push_back({next.data(), 1, 8, table.data(), 3, true});
    std::vector<float> logits(c.vocab_size);
    backend.forward(batch, logits.data());
    return logits;
  };
  CHECK(decode({0, 9}) == decode({0, 1}));
  }
}

TEST_CASE("kv cache: a pool reads as zeros when allocated, and again when allocated anew") {
  // 2 layers x 2 (K, V) x 600 blocks of 2 heads x 16 slots x 64 = 9.8 MB in fp32: zeroed by more
  // than one thread where the machine has the CPUs (64 MB each at least: one here), then a
  // larger pool (fp32, 7,000 blocks: 115 MB, two threads on two CPUs) over a written one.
  const auto all_zero = [](const KvCache& cache, int32_t layers) {
    const size_t slab = size_t(2) * 16 * 64 * size_t(cache.element_bytes());
    for (int32_t layer = 0; layer < layers; ++layer) {
      for (int32_t block = 0; block < cache.num_blocks(); ++block) {
        for (const void* p : {cache.keys(layer, block), cache.values(layer, block)}) {
          const auto* bytes = static_cast<const unsigned char*>(p);
          if (std::any_of(bytes, bytes + slab, [](unsigned char b) { return b != 0; })) return false;
        }
      }
    }
    return true;
  };
  KvCache cache;
  cache.allocate(2, 600, 16, 2, 64, false);
  CHECK(cache.allocated() && all_zero(cache, 2));
  std::vector<float> k(2 * 64, 1.5f), v(2 * 64, -2.0f);
  cache.write(1, 599, 15, k.data(), v.data(), nullptr);
  CHECK(!all_zero(cache, 2));
  cache.allocate(2, 7000, 16, 2, 64, false);
  CHECK(cache.num_blocks() == 7000 && all_zero(cache, 2));
  // A small pool (64 KB in f16) comes from the heap, where freed memory is handed out again as
  // it was left: written all over, then allocated anew, it must read as zeros still.
  cache.allocate(1, 8, 16, 2, 64, true);
  CHECK(cache.f16() && all_zero(cache, 1));
  const CpuKernels& kernels = cpu_kernels();
  for (int32_t block = 0; block < 8; ++block) {
    for (int32_t slot = 0; slot < 16; ++slot) cache.write(0, block, slot, k.data(), v.data(), kernels.to_half);
  }
  CHECK(!all_zero(cache, 1));
  cache.allocate(1, 8, 16, 2, 64, true);
  CHECK(all_zero(cache, 1));
}

TEST_CASE("cpu backend: dummy weights are deterministic in the seed") {
  ModelConfig c = preset_model_config("tinystories-656k");
  CpuBackend a(c, 42), b(c, 42), other(c, 43);
  std::vector<Seq> seqs = {{test_tokens(20, 1, c.vocab_size), contiguous_table(0, 2)}};
  for (CpuBackend* backend : {&a, &b, &other}) backend->allocate_kv(2, 16);
  std::vector<float> la = run_prefill(a, seqs, 20)[0];
  CHECK(la == run_prefill(b, seqs, 20)[0]);
  CHECK(la != run_prefill(other, seqs, 20)[0]);
  CHECK(std::all_of(la.begin(), la.end(), [](float v) { return std::isfinite(v); }));
  CHECK_EQ(a.kv_bytes_per_block(16), int64_t{2 * 2 * 4 * 16 * 16 * 4});
}

TEST_CASE("cpu backend: batches it cannot run are rejected, not run") {
  ModelConfig c = small_config("LlamaForCausalLM");
  CpuBackend backend(c, 3, CpuBackendOptions{1});
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5}, table = {0, 1};
  std::vector<float> logits(c.vocab_size);
  const auto run = [&](SeqSlice slice) {
    StepBatch batch;
    batch.seqs.push_back(slice);
    backend.forward(batch, logits.data());
  };
  CHECK(throws_input_error([&] { run({tokens.data(), 5, 0, table.data(), 2, true}); }, "allocate_kv"));
  backend.allocate_kv(4, 4);
  run({tokens.data(), 5, 0, table.data(), 2, true});  // fine
  std::vector<int32_t> bad_token = {1, 97};
  CHECK(throws_input_error([&] { run({bad_token.data(), 2, 0, table.data(), 2, true}); }, "token id 97"));
  CHECK(throws_input_error([&] { run({tokens.data(), 5, 4, table.data(), 2, true}); }, "block table has 2 blocks"));
  std::vector<int32_t> bad_table = {0, 4};
  CHECK(throws_input_error([&] { run({tokens.data(), 5, 0, bad_table.data(), 2, true}); }, "block id 4"));
  CHECK(throws_input_error([&] { run({tokens.data(), 0, 0, table.data(), 2, true}); }, "no tokens"));
  CHECK(throws_input_error([&] { backend.copy_block(0, 4); }, "outside the KV pool"));
  StepBatch empty;
  backend.forward(empty, nullptr);  // nothing to do
  try {
    backend.allocate_kv(1 << 30, 1 << 20);  // ~10^17 bytes
    CHECK(false);
  } catch (const ModelError& e) {
    CHECK(e.code() == "STRATA_OUT_OF_MEMORY");
  }
}

TEST_MAIN()
